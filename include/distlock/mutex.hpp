// distlock: the distributed mutex.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "distlock/async.hpp"
#include "distlock/detail/deadline.hpp"
#include "distlock/export.hpp"
#include "distlock/options.hpp"

namespace distlock {

namespace detail {
class mutex_impl;
}

// A named lock shared by every process that uses the same backend URL.
//
// Meets the standard TimedLockable requirements, so std::unique_lock,
// std::scoped_lock and std::lock_guard work as with std::timed_mutex. One object
// may be shared by the threads of a process: threads wait for each other
// in-process (local queueing) and only the thread at the head talks to the
// server. Movable, not copyable.
//
// lock() and try_lock*() throw distlock::error subclasses when the backend
// fails (unavailable_error, access_denied_error, ...); a timeout is not an error
// (try_lock_for returns false). unlock() and the destructor never throw: a
// failed release is reported through lock_options::on_error, and the server-side
// lease (or connection drop) remains the safety net. In a forked child, unlock()
// and the destructor do nothing: the grant stays the parent's (provider.hpp).
class DISTLOCK_API mutex {
public:
    explicit mutex(std::unique_ptr<detail::mutex_impl> impl) noexcept;
    mutex(mutex&&) noexcept;
    mutex& operator=(mutex&&) noexcept;
    mutex(const mutex&) = delete;
    mutex& operator=(const mutex&) = delete;
    ~mutex();  // releases the lock if held; never throws

    // Waits without a bound.
    void lock();
    // One attempt, no waiting.
    [[nodiscard]] bool try_lock();

    template <class Rep, class Period>
    [[nodiscard]] bool try_lock_for(const std::chrono::duration<Rep, Period>& d) {
        return lock_until_steady(detail::steady_deadline(d));
    }

    // Any clock is converted once to steady_clock.
    template <class Clock, class Duration>
    [[nodiscard]] bool try_lock_until(const std::chrono::time_point<Clock, Duration>& t) {
        return lock_until_steady(detail::steady_deadline(t));
    }

    void unlock() noexcept;

    // Asynchronous forms (include/distlock/async.hpp): take the lock within a
    // timeout (a duration) or by a deadline (a time point of any clock)
    // without holding a thread while waiting. `stop` cancels a pending
    // acquisition (the handler then gets cancelled_error). An object has one
    // grant at a time: acquisitions asked of an object that holds or is
    // acquiring queue behind that grant, as threads sharing one object do,
    // until it is released (from any thread) or their deadline passes.
    template <class Timeout>
    void async_lock(const Timeout& timeout, acquire_handler handler, std::stop_token stop = {}) {
        async_lock_steady(detail::steady_deadline(timeout), std::move(handler), std::move(stop));
    }
    // Releases on a provider's worker, then calls `handler` (if any) there.
    void async_unlock(release_handler handler = {});
    // co_await m.lock_async(5s): true when granted, false on timeout; throws
    // distlock::error (cancelled_error once `stop` is triggered). The coroutine
    // resumes on `resume_on` when given, else on the provider's worker.
    template <class Timeout>
    [[nodiscard]] detail::acquire_awaitable lock_async(const Timeout& timeout, std::stop_token stop = {},
                                                       executor resume_on = {}) {
        return {[this, until = detail::steady_deadline(timeout), stop = std::move(stop)](acquire_handler h) {
                    async_lock_steady(until, std::move(h), stop);
                },
                std::move(resume_on)};
    }
    [[nodiscard]] detail::release_awaitable unlock_async(executor resume_on = {}) {
        return {[this](release_handler h) { async_unlock(std::move(h)); }, std::move(resume_on)};
    }

    // True while this object holds the lock, it has not been reported lost, and
    // (for a lease) the last confirmed renewal is less than a lease old. So it
    // turns false on time even while a renewal is stuck in the network; it turns
    // true again only if that renewal then succeeds (renewals are owner-checked:
    // nobody else held the lock meanwhile), else on_lost follows.
    [[nodiscard]] bool held() const noexcept;

    // Fencing token of the current grant: strictly increasing across successive
    // grants of one name, for storage to reject writes from a stale holder. 0 when
    // not held or when the backend has no fencing token (redlock://).
    [[nodiscard]] std::uint64_t token() const noexcept;

    [[nodiscard]] const std::string& name() const noexcept;

    // When the current grant ends unless it is renewed: its lease as last
    // confirmed by the server, counted from when the confirming request was sent
    // (each renewal moves it on). nullopt when not held, or when the grant has no
    // lease to watch (file://, memory://, and the SQL strategies held by a
    // session: held until released or the connection ends).
    [[nodiscard]] std::optional<std::chrono::steady_clock::time_point> valid_until() const noexcept;

private:
    bool lock_until_steady(std::chrono::steady_clock::time_point deadline);
    void async_lock_steady(std::chrono::steady_clock::time_point deadline, acquire_handler handler,
                           std::stop_token stop);
    std::unique_ptr<detail::mutex_impl> impl_;
};

}  // namespace distlock
