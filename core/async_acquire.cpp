// The asynchronous driver of an acquisition (acquisition.hpp): a state
// machine on the provider's workers (async_engine) that waits without a
// thread. It queues in the name's gate as a ticket, subscribes to the
// backend's release events (lock_handle::watch_releases), then runs the
// acquisition's one-attempt steps, each when a release is announced, a
// backoff timer fires (retry_min..retry_max, or a slower safety poll while
// subscribed: a crashed holder's lease ends without an event), or the
// deadline comes. Between steps it holds no thread.
//
// Every step runs with the op's own mutex released around the backend's
// calls; lock order: op -> gate -> engine (neither of the last two calls back
// under its lock).
#include <algorithm>
#include <utility>

#include "acquisition.hpp"
#include "boundary.hpp"
#include "mutex_impl.hpp"

namespace distlock::detail {

namespace {
// While subscribed to release events, the core still polls, this often: for
// a holder that crashed (its lease or session ends with no release event)
// and for an event the backend missed. Between the request's retry_max and 2 s.
std::chrono::milliseconds safety_poll(const spi::lock_request& r) {
    return std::max(r.retry_max, std::min<std::chrono::milliseconds>(r.lease / 4, std::chrono::seconds{2}));
}

// Queues the handler of an acquisition with its outcome on a worker; the
// handler keeps the provider (and so the workers) alive until it has run.
void post_outcome(const std::shared_ptr<provider_state>& provider, acquire_handler handler, std::exception_ptr error,
                  bool granted) {
    if (!handler) return;
    // The error is moved into the call: the step must not keep a copy that it
    // drops while the handler's thread still reads the exception.
    provider->engine().post([provider, handler = std::move(handler), error = std::move(error), granted]() mutable {
        handler(std::move(error), granted);
    });
}
}  // namespace

class mutex_impl::async_op : public std::enable_shared_from_this<async_op> {
public:
    async_op(mutex_impl& m, spi::deadline until, acquire_handler handler, std::function<void(bool)> settle)
        : m_(m),
          provider_(m.provider_),
          acq_(m, until, false),
          handler_(std::move(handler)),
          settle_(std::move(settle)) {}

    // On the caller's thread: into the gate (or straight to the first step),
    // then the cancellation hook (which may run at once, inline).
    void start(const std::stop_token& stop) {
        auto self = shared_from_this();
        {
            std::lock_guard lk(mutex_);
            if (m_.gate_) {
                // Weak: the ticket is the op's own (the op is alive while queued: its mutex lists it).
                ticket_.on_turn = [weak = weak_from_this()] {
                    if (auto op = weak.lock()) op->provider_->engine().post([op] { op->turn(); });
                };
                if (m_.gate_->enter_async(ticket_, &m_)) {
                    in_gate_ = true;
                    acq_.entered_gate(false);
                    provider_->engine().post([self] { self->attempt(); });
                } else {
                    queued_ = true;
                    if (acq_.until() != spi::deadline::max())
                        timer_ = provider_->engine().at(acq_.until(), [self] { self->gate_timeout(); });
                }
            } else {
                provider_->engine().post([self] { self->attempt(); });
            }
        }
        if (!stop.stop_possible()) return;
        // Made outside the lock (it runs cancel() at once when stop was
        // requested already), kept unless the acquisition ended meanwhile.
        auto hook = std::make_unique<stop_hook>(stop, std::function<void()>([weak = weak_from_this()] {
                                                    if (auto op = weak.lock()) op->cancel();
                                                }));
        std::unique_lock lk(mutex_);
        if (phase_ == phase::done) return;  // `hook` goes after the lock
        on_stop_ = std::move(hook);
    }

    // A stop request or the mutex's destructor: ends the wait as soon as no
    // step is under way (then inline; else the step ends it).
    void cancel() {
        std::unique_lock lk(mutex_);
        if (phase_ == phase::done) return;
        acq_.cancel();
        bool now = false;
        if (phase_ == phase::queued && !in_gate_) now = m_.gate_ && m_.gate_->withdraw(ticket_);
        else if (phase_ == phase::parked) now = provider_->engine().cancel(timer_);
        if (!now) return;  // the step already queued sees the cancellation
        if (timer_ != 0) provider_->engine().cancel(timer_);
        lk.unlock();
        acq_.end_cancelled();
        finish(cancelled(), false, true);
    }

    // The backend's wake_sink: a release was announced.
    void wake() {
        std::lock_guard lk(mutex_);
        if (phase_ == phase::attempting) woken_ = true;  // one more attempt when this one fails
        else if (phase_ == phase::parked && provider_->engine().cancel(timer_)) {
            phase_ = phase::attempting;
            provider_->engine().post([self = shared_from_this()] { self->attempt(); });
        }
    }

private:
    enum class phase { queued, attempting, parked, done };
    using stop_hook = std::stop_callback<std::function<void()>>;
    using outcome = acquisition::outcome;

    // The gate is this acquisition's now.
    void turn() {
        {
            std::lock_guard lk(mutex_);
            if (phase_ == phase::done) return;
            in_gate_ = true;
            acq_.entered_gate(queued_);
            if (timer_ != 0) provider_->engine().cancel(std::exchange(timer_, 0));
        }
        attempt();
    }

    // The deadline came while queued in the gate.
    void gate_timeout() {
        {
            std::lock_guard lk(mutex_);
            if (phase_ == phase::done || in_gate_) return;
            timer_ = 0;
            if (!m_.gate_->withdraw(ticket_)) return;  // handed the gate meanwhile: turn() runs next
        }
        acq_.gate_timed_out();
        finish(nullptr, false);
    }

    void timer_fired() {
        bool timed_out;
        {
            std::lock_guard lk(mutex_);
            if (phase_ != phase::parked) return;
            timer_ = 0;
            phase_ = phase::attempting;  // cancel() leaves the end to this step
            timed_out = spi::clock::now() >= acq_.until();
        }
        if (timed_out) {
            end_at_deadline();
            return;
        }
        attempt();
    }

    // One step of the acquisition: a one-attempt request to the server (on a
    // worker, holding the gate if there is one).
    void attempt() {
        {
            std::lock_guard lk(mutex_);
            if (phase_ == phase::done) return;
            phase_ = phase::attempting;
            woken_ = false;
        }
        // Handed the gate by a waiter of this process that left it, most often
        // on its release: the lock is likely free, so the first attempt comes
        // before the subscription (a round trip to the server, for most), as a
        // blocked thread's would. When busy, the subscription follows, then an
        // attempt at once (a release in between had no one to wake).
        if (!subscribed_ && queued_ && !first_tried_) {
            first_tried_ = true;
            const auto first = acq_.step(spi::clock::now());
            if (first != outcome::busy) {
                conclude(first);
                return;
            }
        }
        if (!subscribed_ && !acq_.cancel_requested()) {
            subscribed_ = true;
            try {
                subscription_ = m_.handle_->watch_releases(spi::wake_sink([weak = weak_from_this()] {
                    if (auto op = weak.lock()) op->wake();
                }));
            } catch (...) {
                acq_.end_failed(std::current_exception());
                finish(boundary_error(acq_.error()), false);
                return;
            }
        }
        conclude(acq_.step(spi::clock::now()));
    }

    // What a step came to.
    void conclude(outcome o) {
        switch (o) {
            case outcome::granted: finish(nullptr, true); return;
            case outcome::failed: finish(boundary_error(acq_.error()), false); return;
            case outcome::cancelled: finish(cancelled(), false); return;
            case outcome::busy: park(false); return;
            case outcome::again: park(true); return;  // not answered this once: try again, as a blocking wait would
        }
    }

    // Not granted (or `after_error`: not answered): wait for a wake-up, a
    // timer (the backoff after an error, else the poll) or the deadline.
    void park(bool after_error) {
        bool again = false, timed_out = false, stop = false;
        {
            std::lock_guard lk(mutex_);
            const auto now = spi::clock::now();
            if (acq_.cancel_requested()) stop = true;
            else if (now >= acq_.until()) timed_out = true;
            else if (woken_) again = true;  // a release came during the attempt
            else {
                const auto delay = subscription_ && !after_error ? std::chrono::nanoseconds(safety_poll(m_.request_))
                                                                 : acq_.backoff_delay();
                const auto when = std::min(acq_.until(), now + delay);
                phase_ = phase::parked;
                timer_ = provider_->engine().at(when, [self = shared_from_this()] { self->timer_fired(); });
            }
        }
        if (stop) {
            acq_.end_cancelled();
            finish(cancelled(), false);
        } else if (timed_out) {
            end_at_deadline();
        } else if (again) {
            provider_->engine().post([self = shared_from_this()] { self->attempt(); });
        }
    }

    // The deadline came while parked: a timeout, or the error of the attempts
    // when the server had stopped answering them.
    void end_at_deadline() {
        auto error = acq_.at_deadline();
        finish(error ? boundary_error(error) : nullptr, false);
    }

    std::exception_ptr cancelled() const {
        return std::make_exception_ptr(cancelled_error(errc::cancelled, std::string(provider_->backend().name()),
                                                       "the acquisition of '" + m_.request_.name + "' was cancelled"));
    }

    // `e` as the blocking API would have thrown it (distlock::error, secrets scrubbed).
    std::exception_ptr boundary_error(const std::exception_ptr& e) const {
        try {
            guarded(provider_->backend().name(), provider_->secrets(), "async_lock",
                    [&] { std::rethrow_exception(e); });
        } catch (...) {
            return std::current_exception();
        }
        return e;
    }

    // The end (the acquisition has left the gate unless granted):
    // unsubscribes, forgets the op on its mutex, then calls the handler: on
    // this worker, at the end of the step that ended the acquisition (one
    // thread hop less per hand-off), or, from a thread that is not a worker's
    // step (`queued`: a cancellation), queued on a worker.
    void finish(std::exception_ptr error, bool granted, bool queued = false) {
        std::unique_ptr<spi::wake_subscription> subscription;
        std::unique_ptr<stop_hook> on_stop;
        {
            std::lock_guard lk(mutex_);
            if (phase_ == phase::done) return;
            phase_ = phase::done;
            subscription = std::move(subscription_);
            on_stop = std::move(on_stop_);
        }
        subscription.reset();
        on_stop.reset();  // never waits: from its own callback (cancel()) the standard lets it go at once
        auto handler = std::move(handler_);
        auto self = shared_from_this();
        {
            std::lock_guard lk(m_.state_mutex_);
            auto& ops = m_.async_.ops;
            ops.erase(std::remove(ops.begin(), ops.end(), self), ops.end());
            m_.async_idle_.notify_all();  // under the lock: m_ may be gone as soon as it is free
        }
        if (settle_) settle_(granted);
        if (queued) {
            post_outcome(provider_, std::move(handler), std::move(error), granted);
        } else if (handler) {
            try {
                handler(std::move(error), granted);
            } catch (...) {  // as the engine does with a step that throws
            }
        }
    }

    mutex_impl& m_;  // alive until finish(): its destructor cancels and waits
    std::shared_ptr<provider_state> provider_;
    acquisition acq_;
    acquire_handler handler_;
    std::function<void(bool)> settle_;
    gate::ticket ticket_;

    std::mutex mutex_;  // guards what follows
    phase phase_ = phase::queued;
    bool in_gate_ = false, queued_ = false, woken_ = false;
    async_engine::timer_id timer_ = 0;
    std::unique_ptr<stop_hook> on_stop_;
    // Touched by the steps only (one at a time).
    bool subscribed_ = false, first_tried_ = false;
    std::unique_ptr<spi::wake_subscription> subscription_;
};

void mutex_impl::async_lock_until(spi::deadline until, acquire_handler handler, std::stop_token stop,
                                  std::function<void(bool)> settle) {
    provider_->check_process();
    auto op = std::make_shared<async_op>(*this, until, std::move(handler), std::move(settle));
    {
        std::lock_guard lk(state_mutex_);
        if (!gate_ && (acquiring_ || depth_ > 0 || !async_.ops.empty()))
            throw_error(errc::would_deadlock, std::string(provider_->backend().name()),
                        "this grant of '" + request_.name + "' is held or being acquired already");
        async_.ops.push_back(op);
    }
    op->start(stop);
}

void mutex_impl::async_unlock(release_handler handler) {
    {
        std::lock_guard lk(state_mutex_);
        ++async_.releases;
    }
    // The release may be over, and this object and the provider gone with it
    // (the last owner being the job), before post() has returned: it holds
    // the provider, and so the engine, until then.
    const auto provider = provider_;
    if (provider->engine().on_worker()) {
        // From a handler on a worker (an acquisition's, or a coroutine resumed
        // there): that worker releases now, where a queued release would wake
        // another first; the handler is still queued, never run inline.
        unlock();
        release_done();  // *this may be gone from here on
        if (handler) provider->engine().post([provider, handler = std::move(handler)] { handler(); });
        return;
    }
    try {
        provider->engine().post([this, provider, handler = std::move(handler)] {
            unlock();
            release_done();  // *this may be gone from here on
            if (handler) handler();
        });
    } catch (...) {
        release_done();
        throw;
    }
}

void mutex_impl::complete(acquire_handler handler, std::exception_ptr error, bool granted) {
    post_outcome(provider_, std::move(handler), std::move(error), granted);
}

void mutex_impl::release_done() noexcept {
    std::lock_guard lk(state_mutex_);
    --async_.releases;
    async_idle_.notify_all();  // under the lock: *this may be gone as soon as it is free
}

void mutex_impl::cancel_async_work() noexcept {
    std::vector<std::shared_ptr<async_op>> ops;
    {
        std::lock_guard lk(state_mutex_);
        if (async_.empty()) return;
        ops = async_.ops;
    }
    for (auto& op : ops) op->cancel();
    std::unique_lock lk(state_mutex_);
    async_idle_.wait(lk, [&] { return async_.empty(); });
}

}  // namespace distlock::detail
