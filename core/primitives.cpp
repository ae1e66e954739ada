// The read-write lock and the semaphore: each is made of the mutex's grant
// machinery (mutex_impl: one backend handle, its renewal, its loss reports),
// one grant per reader (thread or asynchronous acquisition) or per permit.
#include <algorithm>
#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "boundary.hpp"
#include "distlock/provider.hpp"
#include "distlock/semaphore.hpp"
#include "distlock/shared_mutex.hpp"
#include "mutex_impl.hpp"

namespace distlock::detail {

// Grants of one kind and name that come and go: a grant is taken by a thread
// with a handle of its own, from the idle ones or a new one, and its handle
// goes back to the idle ones when it is released (or the taking failed).
class grant_pool {
public:
    grant_pool(std::shared_ptr<provider_state> provider, std::string name, lock_options options, spi::lock_kind kind,
               std::uint32_t permits)
        : provider_(std::move(provider)),
          name_(std::move(name)),
          options_(std::move(options)),
          kind_(kind),
          permits_(permits),
          first_(make_mutex_impl(provider_, name_, options_, kind_, permits_)) {}

    // Every grant still held is released by its mutex_impl's destructor; the
    // asynchronous acquisitions and releases under way are cancelled and
    // waited for first (each settles its object back into the pool).
    ~grant_pool() {
        if (provider_->forked()) return;
        std::vector<mutex_impl*> busy;
        {
            std::lock_guard lk(mutex_);
            for (auto& impl : pending_) busy.push_back(impl.get());
        }
        for (auto* impl : busy) impl->cancel_async_work();
        std::unique_lock lk(mutex_);
        settled_.wait(lk, [&] { return pending_.empty(); });
    }

    bool take(spi::deadline until) {
        provider_->check_process();  // before the pool's mutex (process.hpp)
        auto impl = next_impl();
        bool ok = false;
        try {
            ok = impl->lock_until(until);
        } catch (...) {
            give_back(std::move(impl));
            throw;
        }
        if (!ok) {
            give_back(std::move(impl));
            return false;
        }
        std::lock_guard lk(mutex_);
        held_.push_back({std::this_thread::get_id(), std::move(impl)});
        return true;
    }

    // take(), without a thread: the grant, once given, belongs to no thread.
    void take_async(spi::deadline until, acquire_handler handler, std::stop_token stop) {
        provider_->check_process();
        auto impl = next_impl();
        auto* raw = impl.get();
        {
            std::lock_guard lk(mutex_);
            pending_.push_back(std::move(impl));
        }
        try {
            raw->async_lock_until(until, std::move(handler), std::move(stop),
                                  [this, raw](bool granted) { settle(raw, granted); });
        } catch (...) {
            settle(raw, false);
            throw;
        }
    }

    // release(), on a worker: the last grant taken asynchronously, else (with
    // `any_thread`) the one taken last; `handler` when it is over (at once,
    // on a worker, when there was none).
    void release_async(bool any_thread, release_handler handler) {
        provider_->check_process();
        mutex_impl* raw = nullptr;
        {
            std::lock_guard lk(mutex_);
            auto it = std::find_if(held_.rbegin(), held_.rend(),
                                   [](const held_grant& g) { return g.thread == std::thread::id{}; });
            if (it == held_.rend() && any_thread && !held_.empty()) it = held_.rbegin();
            if (it != held_.rend()) {
                raw = it->impl.get();
                pending_.push_back(std::move(it->impl));
                held_.erase(std::next(it).base());
            }
        }
        if (!raw) {
            provider_->engine().post([provider = provider_, handler = std::move(handler)] {
                if (handler) handler();
            });
            return;
        }
        raw->async_unlock([this, raw, handler = std::move(handler)] {
            settle(raw, false);
            if (handler) handler();
        });
    }

    // Releases the grant the calling thread took last; with `any_thread`, else
    // the one taken last. false when there was none. In a forked child,
    // nothing: the grants are the parent's, and the pool's mutex may have been
    // held by a thread of the parent at fork time (process.hpp).
    bool release(bool any_thread) noexcept {
        if (provider_->forked()) return false;
        std::unique_ptr<mutex_impl> impl;
        {
            std::lock_guard lk(mutex_);
            auto it = mine();
            if (it == held_.rend() && any_thread && !held_.empty()) it = held_.rbegin();
            if (it == held_.rend()) return false;
            impl = std::move(it->impl);
            held_.erase(std::next(it).base());
        }
        impl->unlock();
        give_back(std::move(impl));
        return true;
    }

    // The calling thread's last grant: held (not lost) and its token. None in
    // a forked child (as release()).
    bool mine_held() const noexcept {
        if (provider_->forked()) return false;
        std::lock_guard lk(mutex_);
        auto it = mine();
        return it != held_.rend() && it->impl->held();
    }
    bool mine_taken() const noexcept {
        if (provider_->forked()) return false;
        std::lock_guard lk(mutex_);
        return mine() != held_.rend();
    }
    std::uint64_t mine_token() const noexcept {
        if (provider_->forked()) return 0;
        std::lock_guard lk(mutex_);
        auto it = mine();
        return it == held_.rend() ? 0 : it->impl->token();
    }
    std::size_t count_held() const noexcept {
        if (provider_->forked()) return 0;
        std::lock_guard lk(mutex_);
        return static_cast<std::size_t>(
            std::count_if(held_.begin(), held_.end(), [](const held_grant& g) { return g.impl->held(); }));
    }
    const std::string& name() const noexcept { return name_; }
    std::uint32_t permits() const noexcept { return permits_; }
    const std::shared_ptr<provider_state>& provider() const noexcept { return provider_; }

private:
    struct held_grant {
        std::thread::id thread;
        std::unique_ptr<mutex_impl> impl;
    };
    // The calling thread's last grant; for a thread that holds none of its
    // own, the last one taken asynchronously (which belongs to no thread).
    template <class Grants>
    static auto mine_in(Grants& held) noexcept {
        const auto self = std::this_thread::get_id();
        auto it = std::find_if(held.rbegin(), held.rend(), [&](const held_grant& g) { return g.thread == self; });
        if (it != held.rend()) return it;
        return std::find_if(held.rbegin(), held.rend(),
                            [](const held_grant& g) { return g.thread == std::thread::id{}; });
    }
    std::vector<held_grant>::const_reverse_iterator mine() const noexcept { return mine_in(held_); }
    std::vector<held_grant>::reverse_iterator mine() noexcept { return mine_in(held_); }
    // An idle object (the constructor's first, else one given back), else a new one.
    std::unique_ptr<mutex_impl> next_impl() {
        std::unique_ptr<mutex_impl> impl;
        {
            std::lock_guard lk(mutex_);
            if (first_) impl = std::move(first_);
            else if (!idle_.empty()) {
                impl = std::move(idle_.back());
                idle_.pop_back();
            }
        }
        if (!impl) impl = make_mutex_impl(provider_, name_, options_, kind_, permits_);
        return impl;
    }
    // An asynchronous acquisition or release of `raw` is over: it is held
    // (by no thread) or idle again.
    void settle(mutex_impl* raw, bool granted) noexcept {
        std::lock_guard lk(mutex_);
        const auto it = std::find_if(pending_.begin(), pending_.end(), [&](const auto& p) { return p.get() == raw; });
        if (it == pending_.end()) return;
        try {
            if (granted) held_.push_back({std::thread::id{}, std::move(*it)});
            else idle_.push_back(std::move(*it));
        } catch (...) {  // out of memory: the object goes (its destructor releases the grant)
        }
        pending_.erase(it);
        settled_.notify_all();  // under the lock: the pool may go as soon as it is free
    }
    void give_back(std::unique_ptr<mutex_impl> impl) noexcept {
        try {
            std::lock_guard lk(mutex_);
            idle_.push_back(std::move(impl));
        } catch (...) {  // out of memory: the handle goes (it holds nothing)
        }
    }

    std::shared_ptr<provider_state> provider_;
    std::string name_;
    lock_options options_;
    spi::lock_kind kind_;
    std::uint32_t permits_;
    mutable std::mutex mutex_;
    std::unique_ptr<mutex_impl> first_;  // made by the constructor: a bad name or option throws there
    std::vector<std::unique_ptr<mutex_impl>> idle_;
    std::vector<held_grant> held_;  // in the order taken
    // Objects of asynchronous acquisitions and releases under way.
    std::vector<std::unique_ptr<mutex_impl>> pending_;
    std::condition_variable settled_;  // pending_ shrank
};

class shared_mutex_impl {
public:
    shared_mutex_impl(const std::shared_ptr<provider_state>& provider, std::string_view name,
                      const lock_options& options)
        : writer_(make_mutex_impl(provider, name, options, spi::lock_kind::write, 0)),
          readers_(provider, std::string(name), options, spi::lock_kind::read, 0) {}

    bool lock_until(bool shared, spi::deadline until) {
        readers_.provider()->check_process();  // before any mutex (process.hpp)
        if (writer_->owned_by_this_thread() || readers_.mine_taken())
            throw_error(errc::would_deadlock, std::string(readers_.provider()->backend().name()),
                        "this thread already holds read-write lock '" + readers_.name() +
                            "' through this object; asking for it again would wait for itself");
        return shared ? readers_.take(until) : writer_->lock_until(until);
    }
    void async_lock(bool shared, spi::deadline until, acquire_handler handler, std::stop_token stop) {
        if (shared) readers_.take_async(until, std::move(handler), std::move(stop));
        else writer_->async_lock_until(until, std::move(handler), std::move(stop));
    }
    void async_release(bool shared, release_handler handler) {
        if (shared) readers_.release_async(false, std::move(handler));
        else writer_->async_unlock(std::move(handler));
    }
    void unlock() noexcept { writer_->unlock(); }
    void unlock_shared() noexcept { (void)readers_.release(false); }
    bool held() const noexcept { return writer_->held(); }
    bool held_shared() const noexcept { return readers_.mine_held(); }
    std::uint64_t token() const noexcept { return writer_->token(); }
    std::uint64_t shared_token() const noexcept { return readers_.mine_token(); }
    const std::string& name() const noexcept { return readers_.name(); }
    std::string_view backend_name() const noexcept { return readers_.provider()->backend().name(); }
    provider_state& provider() const noexcept { return *readers_.provider(); }

private:
    std::unique_ptr<mutex_impl> writer_;
    grant_pool readers_;
};

class semaphore_impl {
public:
    semaphore_impl(const std::shared_ptr<provider_state>& provider, std::string_view name, std::uint32_t permits,
                   const lock_options& options)
        : permits_(provider, std::string(name), options, spi::lock_kind::permit, permits) {}
    bool acquire_until(spi::deadline until) { return permits_.take(until); }
    void async_acquire(spi::deadline until, acquire_handler handler, std::stop_token stop) {
        permits_.take_async(until, std::move(handler), std::move(stop));
    }
    void async_release(release_handler handler) { permits_.release_async(true, std::move(handler)); }
    void release() noexcept { (void)permits_.release(true); }
    std::size_t held() const noexcept { return permits_.count_held(); }
    std::uint64_t token() const noexcept { return permits_.mine_token(); }
    std::uint32_t permits() const noexcept { return permits_.permits(); }
    const std::string& name() const noexcept { return permits_.name(); }
    std::string_view backend_name() const noexcept { return permits_.provider()->backend().name(); }
    provider_state& provider() const noexcept { return *permits_.provider(); }

private:
    grant_pool permits_;
};

}  // namespace distlock::detail

namespace distlock {
namespace detail {
void moved_from(const char* what) {
    throw_error(errc::invalid_argument, "", std::string("use of a moved-from distlock::") + what);
}
}  // namespace detail
using detail::moved_from;

distlock::shared_mutex provider::shared_mutex(std::string_view name, lock_options options) const {
    return detail::guarded(state_->backend().name(), state_->secrets(), "shared_mutex()", [&] {
        return distlock::shared_mutex(std::make_unique<detail::shared_mutex_impl>(state_, name, options));
    });
}

distlock::semaphore provider::semaphore(std::string_view name, std::uint32_t permits, lock_options options) const {
    if (permits == 0)
        throw_error(errc::invalid_argument, std::string(state_->backend().name()),
                    "a semaphore needs at least 1 permit");
    return detail::guarded(state_->backend().name(), state_->secrets(), "semaphore()", [&] {
        return distlock::semaphore(std::make_unique<detail::semaphore_impl>(state_, name, permits, options));
    });
}

shared_mutex::shared_mutex(std::unique_ptr<detail::shared_mutex_impl> impl) noexcept : impl_(std::move(impl)) {}
shared_mutex::shared_mutex(shared_mutex&&) noexcept = default;
shared_mutex& shared_mutex::operator=(shared_mutex&&) noexcept = default;
shared_mutex::~shared_mutex() = default;
void shared_mutex::lock() { (void)lock_until_steady(false, std::chrono::steady_clock::time_point::max()); }
bool shared_mutex::try_lock() { return lock_until_steady(false, std::chrono::steady_clock::now()); }
void shared_mutex::lock_shared() { (void)lock_until_steady(true, std::chrono::steady_clock::time_point::max()); }
bool shared_mutex::try_lock_shared() { return lock_until_steady(true, std::chrono::steady_clock::now()); }
bool shared_mutex::lock_until_steady(bool shared, std::chrono::steady_clock::time_point deadline) {
    if (!impl_) moved_from("shared_mutex");
    return detail::guarded(impl_->backend_name(), impl_->provider().secrets(), shared ? "lock_shared" : "lock",
                           [&] { return impl_->lock_until(shared, deadline); });
}
void shared_mutex::async_lock_steady(bool shared, std::chrono::steady_clock::time_point deadline,
                                     acquire_handler handler, std::stop_token stop) {
    if (!impl_) moved_from("shared_mutex");
    detail::guarded(impl_->backend_name(), impl_->provider().secrets(), shared ? "async_lock_shared" : "async_lock",
                    [&] { impl_->async_lock(shared, deadline, std::move(handler), std::move(stop)); });
}
void shared_mutex::async_release(bool shared, release_handler handler) {
    if (!impl_) moved_from("shared_mutex");
    detail::guarded(impl_->backend_name(), impl_->provider().secrets(), shared ? "async_unlock_shared" : "async_unlock",
                    [&] { impl_->async_release(shared, std::move(handler)); });
}
void shared_mutex::unlock() noexcept {
    if (impl_) impl_->unlock();
}
void shared_mutex::unlock_shared() noexcept {
    if (impl_) impl_->unlock_shared();
}
bool shared_mutex::held() const noexcept { return impl_ && impl_->held(); }
bool shared_mutex::held_shared() const noexcept { return impl_ && impl_->held_shared(); }
std::uint64_t shared_mutex::token() const noexcept { return impl_ ? impl_->token() : 0; }
std::uint64_t shared_mutex::shared_token() const noexcept { return impl_ ? impl_->shared_token() : 0; }
const std::string& shared_mutex::name() const noexcept {
    static const std::string empty;
    return impl_ ? impl_->name() : empty;
}

semaphore::semaphore(std::unique_ptr<detail::semaphore_impl> impl) noexcept : impl_(std::move(impl)) {}
semaphore::semaphore(semaphore&&) noexcept = default;
semaphore& semaphore::operator=(semaphore&&) noexcept = default;
semaphore::~semaphore() = default;
void semaphore::acquire() { (void)acquire_until_steady(std::chrono::steady_clock::time_point::max()); }
bool semaphore::try_acquire() { return acquire_until_steady(std::chrono::steady_clock::now()); }
bool semaphore::acquire_until_steady(std::chrono::steady_clock::time_point deadline) {
    if (!impl_) moved_from("semaphore");
    return detail::guarded(impl_->backend_name(), impl_->provider().secrets(), "acquire",
                           [&] { return impl_->acquire_until(deadline); });
}
void semaphore::async_acquire_steady(std::chrono::steady_clock::time_point deadline, acquire_handler handler,
                                     std::stop_token stop) {
    if (!impl_) moved_from("semaphore");
    detail::guarded(impl_->backend_name(), impl_->provider().secrets(), "async_acquire",
                    [&] { impl_->async_acquire(deadline, std::move(handler), std::move(stop)); });
}
void semaphore::async_release(release_handler handler) {
    if (!impl_) moved_from("semaphore");
    detail::guarded(impl_->backend_name(), impl_->provider().secrets(), "async_release",
                    [&] { impl_->async_release(std::move(handler)); });
}
void semaphore::release() noexcept {
    if (impl_) impl_->release();
}
std::size_t semaphore::held() const noexcept { return impl_ ? impl_->held() : 0; }
std::uint64_t semaphore::token() const noexcept { return impl_ ? impl_->token() : 0; }
std::uint32_t semaphore::permits() const noexcept { return impl_ ? impl_->permits() : 0; }
const std::string& semaphore::name() const noexcept {
    static const std::string empty;
    return impl_ ? impl_->name() : empty;
}

}  // namespace distlock
