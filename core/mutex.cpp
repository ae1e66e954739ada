#include "distlock/mutex.hpp"

#include <algorithm>
#include <optional>
#include <utility>

#include "acquisition.hpp"
#include "boundary.hpp"
#include "mutex_impl.hpp"
#include "text.hpp"

namespace distlock::detail {

std::shared_ptr<gate> provider_state::gate_for(const std::string& name) {
    std::lock_guard lk(gates_mutex_);
    auto& slot = gates_[name];
    auto g = slot.lock();
    if (!g) {
        g = std::make_shared<gate>();
        slot = g;
    }
    if (gates_.size() > gates_sweep_at_) {  // forget names nobody uses any more
        gates_swept_ += gates_.size();
        for (auto it = gates_.begin(); it != gates_.end();)
            it = it->second.expired() ? gates_.erase(it) : std::next(it);
        // With every name in use (100,000 held locks), sweeping at each new
        // name made taking them quadratic: the next sweep waits for as many
        // new names as the map holds now.
        gates_sweep_at_ = std::max<std::size_t>(1024, 2 * gates_.size());
    }
    return g;
}

void check_name(std::string_view name, const std::string& backend) {
    if (name.empty()) throw_error(errc::invalid_argument, backend, "lock name is empty");
    if (name.size() > max_name_length)
        throw_error(errc::invalid_argument, backend,
                    "lock name is " + std::to_string(name.size()) + " bytes; at most " +
                        std::to_string(max_name_length) + " are allowed");
}

namespace {

// The feature a grant of `kind` needs beyond a mutex, with its primitive's
// name for messages; none for the mutex and an election's leader (the
// backend's mutex where it has no election of its own).
std::optional<std::pair<feature, const char*>> feature_of(spi::lock_kind kind) {
    switch (kind) {
        case spi::lock_kind::exclusive:
        case spi::lock_kind::leader: return std::nullopt;
        case spi::lock_kind::read:
        case spi::lock_kind::write: return std::pair{feature::read_write, "read-write locks"};
        case spi::lock_kind::permit: return std::pair{feature::semaphore, "semaphores"};
    }
    return std::nullopt;
}

}  // namespace

std::unique_ptr<mutex_impl> make_mutex_impl(const std::shared_ptr<provider_state>& provider, std::string_view name,
                                            lock_options options, spi::lock_kind kind, std::uint32_t permits,
                                            std::string holder) {
    auto& backend = provider->backend();
    const std::string who(backend.name());
    provider->check_process();
    check_name(name, who);
    if (options.lease.count() < 0) throw_error(errc::invalid_argument, who, "negative lease");
    if (options.retry_min.count() < 0 || options.retry_max < options.retry_min)
        throw_error(errc::invalid_argument, who, "retry_min/retry_max out of order");
    if (const auto needs = feature_of(kind); needs && !provider->caps().supports(needs->first))
        throw_error(
            errc::unsupported, who,
            std::string(needs->second) + " are not supported: " + std::string(provider->caps().why_not(needs->first)));
    spi::lock_request request;
    request.name = std::string(name);
    request.kind = kind == spi::lock_kind::leader ? leader_kind(*provider) : kind;
    request.permits = permits;
    request.lease = options.lease.count() > 0 ? options.lease : provider->default_lease();
    request.auto_renew = options.auto_renew;
    request.renew_interval = spi::renewal_period(request.lease);
    request.retry_min = options.retry_min;
    request.retry_max = options.retry_max;
    request.holder = holder.empty() ? provider->holder() : std::move(holder);
    auto handle = backend.make_lock(request);
    if (!handle) throw_error(errc::unsupported, who, "the backend made no lock handle");
    return std::make_unique<mutex_impl>(provider, std::move(request), std::move(options), std::move(handle),
                                        grant_kind_of(kind));
}

namespace {
// Threads of one provider that want the same mutex, or the write side of the
// same read-write lock, queue in-process; readers and permits each hold a grant
// of their own and do not.
std::shared_ptr<gate> gate_of(provider_state& provider, const spi::lock_request& request) {
    switch (request.kind) {
        case spi::lock_kind::exclusive: return provider.gate_for(std::string(1, 'm') + request.name);
        case spi::lock_kind::leader: return provider.gate_for(std::string(1, 'l') + request.name);
        case spi::lock_kind::write: return provider.gate_for(std::string(1, 'w') + request.name);
        case spi::lock_kind::read:
        case spi::lock_kind::permit: break;
    }
    return nullptr;
}

// A loss's reason as on_lost, the log hook and their readers get it: it may
// quote a server (an error, a key's value), so its secrets are scrubbed first
// (whole, before a cut or an escape could split them), then its control bytes
// are escaped and its length bounded (text.hpp).
std::string loss_reason(std::string reason, std::span<const std::string> secrets) {
    return printable(scrub(std::move(reason), secrets));
}
}  // namespace

mutex_impl::mutex_impl(std::shared_ptr<provider_state> provider, spi::lock_request request, lock_options options,
                       std::unique_ptr<spi::lock_handle> handle, grant_kind observed)
    : provider_(std::move(provider)),
      request_(std::move(request)),
      observed_kind_(observed),
      options_(std::move(options)),
      handle_(std::move(handle)),
      gate_(gate_of(*provider_, request_)),
      sink_target_(std::make_shared<sink_target>()),
      pending_(std::make_shared<pending_callbacks>()) {
    sink_target_->impl = this;
}

mutex_impl::~mutex_impl() {
    // In a forked child: nothing to the server, no lock the parent's threads may
    // have held at fork time, and the handle abandoned (its destructor may close
    // a connection or session that is the parent's too: process.hpp).
    if (provider_->forked()) {
        abandon(std::shared_ptr<spi::lock_handle>(std::move(handle_)));
        return;
    }
    cancel_async_work();  // nothing of this object may run on a worker after it is gone
    {
        std::lock_guard lk(state_mutex_);
        if (depth_ > 1) depth_ = 1;
    }
    unlock();
    {
        std::lock_guard lk(sink_target_->mutex);  // waits for a sink call under way
        sink_target_->impl = nullptr;
    }
    wait_for_callbacks();  // what they use may go with the mutex
    // From the callback thread, those still queued run later: they tell the
    // observer, not the user, whose callbacks never run after this returns.
    std::lock_guard lk(pending_->mutex);
    pending_->mutex_gone = true;
}

// Until the callbacks queued for this mutex have run; at once on the callback
// thread itself (a callback that unlocks or destroys its mutex: the thread that
// would run them is this one).
void mutex_impl::wait_for_callbacks() noexcept {
    {
        std::lock_guard lk(pending_->mutex);
        if (pending_->count == 0) return;  // the common case: nothing queued
    }
    if (provider_->callbacks().on_this_thread()) return;
    std::unique_lock lk(pending_->mutex);
    pending_->done.wait(lk, [&] { return pending_->count == 0; });
}

spi::loss_sink mutex_impl::sink_for(std::uint64_t generation) {
    return spi::loss_sink([target = sink_target_, generation](std::string reason) {
        std::lock_guard lk(target->mutex);
        if (target->impl != nullptr) target->impl->mark_lost(generation, std::move(reason));
    });
}

// The blocking driver of an acquisition: the calling thread waits in the
// gate, then makes one step up to the caller's deadline, the backend waiting
// inside it as it can (its queue node, its subscription, its poll). A step
// that ends early without a grant (a backend that does not wait, an error
// ridden out) is followed by another after a backoff, until the deadline.
bool mutex_impl::lock_until(spi::deadline until) {
    provider_->check_process();
    if (reentered()) return true;
    acquisition acq(*this, until, true);
    if (gate_) {
        bool queued = false;  // behind another thread of this provider
        try {
            if (!gate_->enter(until, this, provider_->backend().name(), request_.name, queued)) {
                acq.gate_timed_out();
                return false;
            }
        } catch (...) {
            acq.gate_failed();
            throw;
        }
        acq.entered_gate(queued);
    }
    for (;;) {
        switch (acq.step(until)) {
            case acquisition::outcome::granted: return true;
            case acquisition::outcome::failed: std::rethrow_exception(acq.error());
            case acquisition::outcome::cancelled: return false;  // nothing cancels a blocking wait
            case acquisition::outcome::busy:
            case acquisition::outcome::again: break;
        }
        if (spi::clock::now() >= until) {
            if (auto error = acq.at_deadline()) std::rethrow_exception(error);
            return false;
        }
        std::this_thread::sleep_for(acq.backoff_delay());
    }
}

bool mutex_impl::reentered() {
    std::lock_guard lk(state_mutex_);
    if (depth_ == 0 || owner_ != std::this_thread::get_id()) return false;
    auto& backend = provider_->backend();
    if (!backend.caps().reentrant)
        throw_error(errc::would_deadlock, std::string(backend.name()),
                    "lock '" + request_.name + "' is already held by this thread (this backend is not reentrant)");
    ++depth_;
    return true;
}

// How long a grant (and each confirmed renewal) is valid from when its request
// was sent: the lease, or the session's for a lock held by an expiring
// session; 0 = until a check says otherwise (a database session, the kernel).
std::chrono::milliseconds mutex_impl::grant_validity() const {
    return provider_->backend().caps().supports(feature::lease_expiry) ? request_.lease : handle_->validity();
}

void mutex_impl::end_acquire() {
    std::lock_guard lk(state_mutex_);
    acquiring_ = false;
    early_loss_.reset();
}

std::optional<spi::grant> mutex_impl::acquire_within(spi::deadline until, std::chrono::milliseconds validity,
                                                     std::uint64_t& generation) {
    for (;;) {
        {
            std::lock_guard lk(state_mutex_);
            generation = ++generation_;
            acquiring_ = true;
            early_loss_.reset();
        }
        auto granted = handle_->acquire(until, sink_for(generation));
        // A lease runs from when its request was sent at the latest: a reply
        // that comes after that lease has run out is not a grant (someone else
        // may hold the lock by now). Give it back and try again.
        if (!granted || validity.count() == 0 || spi::clock::now() < granted->sent + validity) return granted;
        try {
            handle_->release();
        } catch (...) {  // not ours any more, most likely: nothing to give back
        }
        if (spi::clock::now() >= until) return std::nullopt;
    }
}

void mutex_impl::hold(const spi::grant& granted, std::uint64_t generation, std::chrono::milliseconds validity,
                      bool thread_bound) {
    const bool leased = provider_->backend().caps().supports(feature::lease_expiry);
    const bool expires = validity.count() > 0;
    // Renewed (a lease with auto_renew) or checked (a lock without a lease that
    // asks for it) every `interval`; a grant that ends with time and is not
    // renewed (a lease without auto_renew, or a handle with a validity of its
    // own and no checks) is only watched, to report its loss once it has passed.
    const auto interval = leased ? (request_.auto_renew ? request_.renew_interval : std::chrono::milliseconds{0})
                                 : handle_->check_interval();
    const bool watched = interval.count() > 0 || expires;
    // Only a lease (or an expiring session) ends with time: a lock held by a
    // database session or the kernel stays held() however long this process was
    // paused, until a check says otherwise.
    const auto since = expires ? granted.sent : spi::clock::now();
    const auto horizon = expires ? validity : request_.lease;  // failed renewals for this long = lost
    bool lost_already;
    {
        std::lock_guard lk(state_mutex_);
        acquiring_ = false;
        depth_ = 1;
        owner_ = thread_bound ? std::this_thread::get_id() : std::thread::id{};
        token_ = granted.token;
        granted_at_ = spi::clock::now();
        valid_until_ = expires ? (since + validity).time_since_epoch().count() : 0;
        lost_already = early_loss_.has_value();
        held_ = !lost_already;
        if (lost_already) post_lost(granted.token, std::move(*early_loss_));
        early_loss_.reset();
    }
    if (!watched || lost_already) return;
    auto lost = [this, generation](std::string why) { mark_lost(generation, std::move(why)); };
    auto failed = [this, generation, tok = granted.token](const std::string& why) {
        std::lock_guard lk(state_mutex_);
        if (generation != generation_ || !held_) return;
        post_error(tok, unavailable_error(errc::unavailable, std::string(provider_->backend().name()),
                                          "renewal of '" + request_.name + "' failed: " + why));
    };
    try {
        const bool renew = interval.count() > 0;
        auto id = provider_->scheduler().add({.handle = handle_.get(),
                                              .interval = renew ? interval : horizon,
                                              .lease = horizon,
                                              .renew = renew,
                                              .since = since,
                                              .lost = lost,
                                              .failed = failed,
                                              .valid_until = expires ? &valid_until_ : nullptr});
        std::lock_guard lk(state_mutex_);
        entry_ = id;
    } catch (...) {  // no renewal possible (out of memory, no thread): do not keep the grant
        unlock();
        throw;
    }
}

void mutex_impl::unlock() noexcept {
    // A forked child never releases its parent's grant, and takes no lock that
    // a thread of the parent may have held at fork time (process.hpp).
    if (provider_->forked()) return;
    bool was_held;
    std::uint64_t token;
    scheduler::entry_id entry;
    spi::clock::time_point granted_at;
    {
        std::lock_guard lk(state_mutex_);
        if (depth_ == 0) return;
        if (--depth_ > 0) return;
        was_held = held_.exchange(false);
        token = token_.exchange(0);
        valid_until_ = 0;
        entry = std::exchange(entry_, 0);
        owner_ = {};
        granted_at = granted_at_;
    }
    if (entry != 0) provider_->scheduler().remove(entry);
    bool clean = was_held;
    struct tell_release {  // on every way out
        mutex_impl* self;
        spi::clock::time_point granted_at;
        bool* clean;
        ~tell_release() {
            self->provider_->observe([&](observer& o) {
                o.released(release_event{self->provider_->scheme(), self->request_.name, self->observed_kind_,
                                         spi::clock::now() - granted_at, *clean});
            });
        }
    } told{this, granted_at, &clean};
    try {
        handle_->release();
    } catch (const error& e) {
        clean = false;
        // The server says the grant was gone before this release: that is a loss,
        // reported through on_lost like every other (once: not if already reported).
        const bool gone = e.code_value() == errc::not_owner || e.code_value() == errc::lock_lost;
        if (was_held && gone) post_lost(token, e.what());
        else if (was_held) post_error(token, e);
    } catch (const std::exception& e) {
        clean = false;
        if (was_held)
            post_error(token, in_doubt_error(errc::in_doubt, std::string(provider_->backend().name()),
                                             "release failed: " + foreign_exception_text(e)));
    } catch (...) {
        clean = false;
    }
    if (gate_) gate_->leave();
    // A loss or failure that the release found is told before unlock()
    // returns, as before the callbacks had a thread of their own: on_lost /
    // on_error run there, and this thread waits for them.
    wait_for_callbacks();
}

void mutex_impl::mark_lost(std::uint64_t generation, std::string reason) noexcept {
    std::lock_guard lk(state_mutex_);
    if (generation != generation_) return;
    if (acquiring_) {
        if (!early_loss_) early_loss_ = std::move(reason);
        return;
    }
    if (depth_ == 0 || !held_.exchange(false)) return;
    post_lost(token_.load(), std::move(reason));
}

void mutex_impl::post(std::function<void(bool mutex_alive)> callback) noexcept {
    {
        std::lock_guard lk(pending_->mutex);
        ++pending_->count;
    }
    try {
        provider_->callbacks().post([pending = pending_, callback = std::move(callback)] {
            bool alive;
            {
                std::lock_guard lk(pending->mutex);
                alive = !pending->mutex_gone;
            }
            try {
                callback(alive);
            } catch (...) {}
            std::lock_guard lk(pending->mutex);
            if (--pending->count == 0) pending->done.notify_all();
        });
    } catch (...) {  // out of memory: the loss shows in held() all the same
        std::lock_guard lk(pending_->mutex);
        --pending_->count;
    }
}

// Losses and errors reach the observer, the log hook and on_lost / on_error on
// the provider's callback thread, in order: never on a backend's thread or
// under the mutex's state lock, where they are found. Each queued callback
// owns what it uses (the provider's state included: an on_lost may destroy the
// provider and every mutex while other callbacks of theirs are still queued).
void mutex_impl::post_lost(std::uint64_t token, std::string reason) noexcept {
    if (!options_.on_lost && !provider_->observed(log_level::warning)) return;
    try {
        post([provider = provider_, kind = observed_kind_, callback = options_.on_lost,
              event = lock_event{request_.name, token, loss_reason(std::move(reason), provider_->secrets())}](
                 bool mutex_alive) {
            provider->observe([&](observer& o) { o.lost(loss_event{provider->scheme(), event.name, kind}); });
            if (provider->logs(log_level::warning))
                provider->log(log_level::warning, event.name,
                              "lock lost (token " + std::to_string(event.token) + "): " + event.reason);
            if (callback && mutex_alive) callback(event);
        });
    } catch (...) {}
}

void mutex_impl::post_error(std::uint64_t token, const error& e) noexcept {
    if (!options_.on_error && !provider_->observed(log_level::warning)) return;
    try {
        // The error is made again on the callback thread, of the same subclass
        // (throw_error picks it by code), so that the callback can catch it by type.
        post([provider = provider_, callback = options_.on_error, name = request_.name, token, code = e.code_value(),
              backend = e.backend(), reason = scrub(e.reason(), provider_->secrets()), native = e.native_code(),
              native_message = scrub(e.native_message(), provider_->secrets())](bool mutex_alive) {
            try {
                throw_error(code, backend, reason, native, native_message);
            } catch (const error& err) {
                provider->observe([&](observer& o) { o.failed(error_event{provider->scheme(), name, code}); });
                provider->log(log_level::warning, name, err.what());
                if (callback && mutex_alive) callback(lock_event{name, token, err.what()}, err);
            }
        });
    } catch (...) {}
}

}  // namespace distlock::detail

namespace distlock {

mutex::mutex(std::unique_ptr<detail::mutex_impl> impl) noexcept : impl_(std::move(impl)) {}
mutex::mutex(mutex&&) noexcept = default;
mutex& mutex::operator=(mutex&&) noexcept = default;
mutex::~mutex() = default;

void mutex::lock() { (void)lock_until_steady(std::chrono::steady_clock::time_point::max()); }
bool mutex::try_lock() { return lock_until_steady(std::chrono::steady_clock::now()); }
bool mutex::lock_until_steady(std::chrono::steady_clock::time_point deadline) {
    if (!impl_) throw_error(errc::invalid_argument, "", "use of a moved-from distlock::mutex");
    return detail::guarded(impl_->provider().backend().name(), impl_->provider().secrets(), "lock",
                           [&] { return impl_->lock_until(deadline); });
}
void mutex::async_lock_steady(std::chrono::steady_clock::time_point deadline, acquire_handler handler,
                              std::stop_token stop) {
    if (!impl_) throw_error(errc::invalid_argument, "", "use of a moved-from distlock::mutex");
    detail::guarded(impl_->provider().backend().name(), impl_->provider().secrets(), "async_lock",
                    [&] { impl_->async_lock_until(deadline, std::move(handler), std::move(stop)); });
}
void mutex::async_unlock(release_handler handler) {
    if (!impl_) throw_error(errc::invalid_argument, "", "use of a moved-from distlock::mutex");
    detail::guarded(impl_->provider().backend().name(), impl_->provider().secrets(), "async_unlock",
                    [&] { impl_->async_unlock(std::move(handler)); });
}
void mutex::unlock() noexcept {
    if (impl_) impl_->unlock();
}
bool mutex::held() const noexcept { return impl_ && impl_->held(); }
std::uint64_t mutex::token() const noexcept { return impl_ ? impl_->token() : 0; }
std::optional<std::chrono::steady_clock::time_point> mutex::valid_until() const noexcept {
    return impl_ ? impl_->valid_until() : std::nullopt;
}
const std::string& mutex::name() const noexcept {
    static const std::string empty;
    return impl_ ? impl_->name() : empty;
}

}  // namespace distlock
