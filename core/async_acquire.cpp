// Asynchronous acquisitions of a mutex_impl: a state machine on the provider's
// workers (async_engine) that waits without a thread. It queues in the name's
// gate as a ticket, subscribes to the backend's release events
// (lock_handle::watch_releases), then makes one-attempt requests, each when a
// release is announced, a backoff timer fires (retry_min..retry_max, or a
// slower safety poll while subscribed: a crashed holder's lease ends without
// an event), or the deadline comes. Between steps it holds no thread.
//
// Every step runs with the op's own mutex released around the backend's
// calls; lock order: op -> gate -> engine (neither of the last two calls back
// under its lock).
#include <algorithm>
#include <utility>

#include "acquire_report.hpp"
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
// How long a waiting acquisition rides out its attempts' unavailable_errors
// (the server restarting, a request timed out under load) before the wait ends
// with the error; the first attempt's error ends it at once.
constexpr std::chrono::seconds transient_errors{3};

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
          until_(until),
          handler_(std::move(handler)),
          settle_(std::move(settle)),
          report_(m),
          backoff_(m.request_.retry_min, m.request_.retry_max) {}

    // On the caller's thread: into the gate (or straight to the first attempt),
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
                    provider_->engine().post([self] { self->attempt(); });
                } else {
                    queued_ = true;
                    if (until_ != spi::deadline::max())
                        timer_ = provider_->engine().at(until_, [self] { self->gate_timeout(); });
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
    // request is under way (then inline; else the attempt ends it).
    void cancel() {
        std::unique_lock lk(mutex_);
        if (phase_ == phase::done) return;
        cancelled_ = true;
        bool now = false;
        if (phase_ == phase::queued && !in_gate_) now = m_.gate_ && m_.gate_->withdraw(ticket_);
        else if (phase_ == phase::parked) now = provider_->engine().cancel(timer_);
        if (!now) return;  // the step already queued sees cancelled_
        if (timer_ != 0) provider_->engine().cancel(timer_);
        lk.unlock();
        report_.failed(errc::cancelled);
        finish(cancelled(), false);
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

    // The gate is this acquisition's now.
    void turn() {
        {
            std::lock_guard lk(mutex_);
            if (phase_ == phase::done) return;
            in_gate_ = true;
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
        report_.timed_out();
        finish(nullptr, false);
    }

    void timer_fired() {
        bool timed_out;
        {
            std::lock_guard lk(mutex_);
            if (phase_ != phase::parked) return;
            timer_ = 0;
            phase_ = phase::attempting;  // cancel() leaves the end to this step
            timed_out = spi::clock::now() >= until_;
        }
        if (timed_out) {
            end_at_deadline();
            return;
        }
        attempt();
    }

    // One request to the server (on a worker, holding the gate if there is one).
    void attempt() {
        {
            std::lock_guard lk(mutex_);
            if (phase_ == phase::done) return;
            phase_ = phase::attempting;
            woken_ = false;
        }
        if (cancelled_now()) {
            report_.failed(errc::cancelled);
            finish(cancelled(), false);
            return;
        }
        const auto validity = m_.grant_validity();
        std::uint64_t generation = 0;
        std::optional<spi::grant> granted;
        try {
            if (!subscribed_) {
                subscribed_ = true;
                subscription_ = m_.handle_->watch_releases(spi::wake_sink([weak = weak_from_this()] {
                    if (auto op = weak.lock()) op->wake();
                }));
            }
            granted = m_.acquire_within(spi::clock::now(), validity, generation);
        } catch (...) {
            m_.end_acquire();
            auto error = boundary_error();
            if (transient(error)) {  // the server did not answer this once: try again, as a blocking wait would
                park(true);
                return;
            }
            report_.failed();
            finish(std::move(error), false);
            return;
        }
        {
            std::lock_guard lk(mutex_);
            failing_since_.reset();  // answered
            attempted_ = true;
        }
        if (granted) {
            if (cancelled_now()) {  // cancelled while the grant was on its way: give it back
                try {
                    m_.handle_->release();
                } catch (...) {}
                m_.end_acquire();
                report_.failed(errc::cancelled);
                finish(cancelled(), false);
                return;
            }
            report_.granted(queued_, *granted);
            try {
                m_.hold(*granted, generation, validity, false);
            } catch (...) {  // hold() gave the grant back
                finish(boundary_error(), false, true);
                return;
            }
            finish(nullptr, true);
            return;
        }
        m_.end_acquire();
        park();
    }

    // Not granted (or `after_error`: not answered): wait for a wake-up, a
    // timer (the backoff after an error, else the poll) or the deadline.
    void park(bool after_error = false) {
        bool again = false, timed_out = false, stop = false;
        {
            std::lock_guard lk(mutex_);
            const auto now = spi::clock::now();
            if (cancelled_) stop = true;
            else if (now >= until_) timed_out = true;
            else if (woken_) again = true;  // a release came during the attempt
            else {
                const auto delay = subscription_ && !after_error ? std::chrono::nanoseconds(safety_poll(m_.request_))
                                                                 : backoff_.next(until_);
                const auto when = std::min(until_, now + delay);
                phase_ = phase::parked;
                timer_ = provider_->engine().at(when, [self = shared_from_this()] { self->timer_fired(); });
            }
        }
        if (stop) {
            report_.failed(errc::cancelled);
            finish(cancelled(), false);
        } else if (timed_out) {
            end_at_deadline();
        } else if (again) {
            provider_->engine().post([self = shared_from_this()] { self->attempt(); });
        }
    }

    // An unavailable_error of an attempt made while waiting, within
    // transient_errors of the first of a run of them and before the
    // deadline: the attempt is made again after a backoff instead of ending
    // the wait (a blocking wait rides out such errors inside its backend).
    bool transient(const std::exception_ptr& error) {
        if (acquire_report::code_of(error) != errc::unavailable) return false;
        std::lock_guard lk(mutex_);
        const auto now = spi::clock::now();
        if (!failing_since_) failing_since_ = now;
        last_error_ = error;
        return attempted_ && now < until_ && now - *failing_since_ < transient_errors;
    }

    // The deadline came while parked: a timeout, or the error of the attempts
    // when the server had stopped answering them.
    void end_at_deadline() {
        std::exception_ptr error;
        {
            std::lock_guard lk(mutex_);
            if (failing_since_) error = last_error_;
        }
        if (error) report_.failed(errc::unavailable);
        else report_.timed_out();
        finish(std::move(error), false);
    }

    bool cancelled_now() {
        std::lock_guard lk(mutex_);
        return cancelled_;
    }

    std::exception_ptr cancelled() const {
        return std::make_exception_ptr(cancelled_error(errc::cancelled, std::string(provider_->backend().name()),
                                                       "the acquisition of '" + m_.request_.name + "' was cancelled"));
    }

    // The error being handled, as the blocking API would have thrown it
    // (distlock::error, secrets scrubbed).
    std::exception_ptr boundary_error() const {
        try {
            rethrow_as_error(provider_->backend().name(), provider_->secrets(), "async_lock");
        } catch (...) {
            return std::current_exception();
        }
    }

    // The end: leaves the gate unless granted (or `gate_left` by hold()),
    // unsubscribes, forgets the op on its mutex and queues the handler.
    void finish(std::exception_ptr error, bool granted, bool gate_left = false) {
        std::unique_ptr<spi::wake_subscription> subscription;
        std::unique_ptr<stop_hook> on_stop;
        bool leave;
        {
            std::lock_guard lk(mutex_);
            if (phase_ == phase::done) return;
            phase_ = phase::done;
            leave = in_gate_ && !granted && !gate_left;
            subscription = std::move(subscription_);
            on_stop = std::move(on_stop_);
        }
        subscription.reset();
        if (leave) m_.gate_->leave();
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
        post_outcome(provider_, std::move(handler), std::move(error), granted);
    }

    mutex_impl& m_;  // alive until finish(): its destructor cancels and waits
    std::shared_ptr<provider_state> provider_;
    const spi::deadline until_;
    acquire_handler handler_;
    std::function<void(bool)> settle_;
    const acquire_report report_;
    spi::backoff backoff_;  // under mutex_
    gate::ticket ticket_;

    std::mutex mutex_;  // guards what follows (and backoff_)
    phase phase_ = phase::queued;
    bool in_gate_ = false, queued_ = false, cancelled_ = false, woken_ = false;
    async_engine::timer_id timer_ = 0;
    std::unique_ptr<stop_hook> on_stop_;
    bool attempted_ = false;                               // an attempt was answered (busy or not)
    std::optional<spi::clock::time_point> failing_since_;  // the first of a run of transient errors
    std::exception_ptr last_error_;                        // of that run
    // Touched by the attempt steps only (one at a time).
    bool subscribed_ = false;
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
    try {
        provider_->engine().post([this, provider = provider_, handler = std::move(handler)] {
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
