// distlock: the distributed read-write lock.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>

#include "distlock/async.hpp"
#include "distlock/detail/deadline.hpp"
#include "distlock/export.hpp"
#include "distlock/options.hpp"

namespace distlock {

namespace detail {
class shared_mutex_impl;
}

// A named read-write lock shared by every process that uses the same backend
// URL: readers hold it together, a writer alone. Made by provider::shared_mutex
// on backends whose caps() support feature::read_write.
//
// Meets the standard SharedTimedLockable requirements: std::unique_lock (the
// write side) and std::shared_lock (the read side) work as with
// std::shared_timed_mutex. One object may be shared by the threads of a
// process: each thread that reads holds a read grant of its own, and writers of
// one process queue in-process before they talk to the server.
//
// Writers are not starved: once a distlock writer waits, readers that come
// after it wait behind it (writer preference or first-come-first-served, per
// backend; see docs/backends/). A writer of another library on the same
// layout is not seen: a Redisson writer waiting on a redis:// read-write lock
// registers nowhere distlock's readers look, and they keep coming in while
// readers overlap (docs/backends/redis.md, "Writer policy"). Every grant, read or write, has a fencing token where the
// backend has tokens, and readers' and writers' tokens are drawn from one
// strictly increasing sequence per name.
//
// A thread that holds either side and asks for either side again through the
// same object gets would_deadlock_error (std::shared_mutex leaves that
// undefined). unlock_shared() must be called by the thread that locked shared,
// as the standard requires. Errors, losses (lock_options::on_lost / on_error),
// leases and renewal are as for distlock::mutex.
class DISTLOCK_API shared_mutex {
public:
    explicit shared_mutex(std::unique_ptr<detail::shared_mutex_impl> impl) noexcept;
    shared_mutex(shared_mutex&&) noexcept;
    shared_mutex& operator=(shared_mutex&&) noexcept;
    shared_mutex(const shared_mutex&) = delete;
    shared_mutex& operator=(const shared_mutex&) = delete;
    ~shared_mutex();  // releases every grant it holds; never throws

    // The write side.
    void lock();
    [[nodiscard]] bool try_lock();
    template <class Rep, class Period>
    [[nodiscard]] bool try_lock_for(const std::chrono::duration<Rep, Period>& d) {
        return lock_until_steady(false, detail::steady_deadline(d));
    }
    template <class Clock, class Duration>
    [[nodiscard]] bool try_lock_until(const std::chrono::time_point<Clock, Duration>& t) {
        return lock_until_steady(false, detail::steady_deadline(t));
    }
    void unlock() noexcept;

    // The read side (of the calling thread).
    void lock_shared();
    [[nodiscard]] bool try_lock_shared();
    template <class Rep, class Period>
    [[nodiscard]] bool try_lock_shared_for(const std::chrono::duration<Rep, Period>& d) {
        return lock_until_steady(true, detail::steady_deadline(d));
    }
    template <class Clock, class Duration>
    [[nodiscard]] bool try_lock_shared_until(const std::chrono::time_point<Clock, Duration>& t) {
        return lock_until_steady(true, detail::steady_deadline(t));
    }
    void unlock_shared() noexcept;

    // Asynchronous forms of both sides (as mutex's; include/distlock/async.hpp).
    // A read grant taken asynchronously belongs to no thread:
    // async_unlock_shared() (or unlock_shared() from a thread holding no read
    // grant of its own) gives back the one taken last.
    template <class Timeout>
    void async_lock(const Timeout& timeout, acquire_handler handler, std::stop_token stop = {}) {
        async_lock_steady(false, detail::steady_deadline(timeout), std::move(handler), std::move(stop));
    }
    template <class Timeout>
    void async_lock_shared(const Timeout& timeout, acquire_handler handler, std::stop_token stop = {}) {
        async_lock_steady(true, detail::steady_deadline(timeout), std::move(handler), std::move(stop));
    }
    void async_unlock(release_handler handler = {}) { async_release(false, std::move(handler)); }
    void async_unlock_shared(release_handler handler = {}) { async_release(true, std::move(handler)); }
    template <class Timeout>
    [[nodiscard]] detail::acquire_awaitable lock_async(const Timeout& timeout, std::stop_token stop = {},
                                                       executor resume_on = {}) {
        return awaitable(false, detail::steady_deadline(timeout), std::move(stop), std::move(resume_on));
    }
    template <class Timeout>
    [[nodiscard]] detail::acquire_awaitable lock_shared_async(const Timeout& timeout, std::stop_token stop = {},
                                                              executor resume_on = {}) {
        return awaitable(true, detail::steady_deadline(timeout), std::move(stop), std::move(resume_on));
    }
    [[nodiscard]] detail::release_awaitable unlock_async(executor resume_on = {}) {
        return {[this](release_handler h) { async_release(false, std::move(h)); }, std::move(resume_on)};
    }
    [[nodiscard]] detail::release_awaitable unlock_shared_async(executor resume_on = {}) {
        return {[this](release_handler h) { async_release(true, std::move(h)); }, std::move(resume_on)};
    }

    // The write side is held by this object and not lost (as mutex::held()).
    [[nodiscard]] bool held() const noexcept;
    // The calling thread holds a read grant through this object, not lost
    // (for a thread that took none, the read grant taken asynchronously last).
    [[nodiscard]] bool held_shared() const noexcept;
    // Fencing token of the write grant / of the calling thread's read grant
    // (for a thread that took none, of the one taken asynchronously last); 0
    // when not held or when the backend has no tokens.
    [[nodiscard]] std::uint64_t token() const noexcept;
    [[nodiscard]] std::uint64_t shared_token() const noexcept;

    [[nodiscard]] const std::string& name() const noexcept;

private:
    bool lock_until_steady(bool shared, std::chrono::steady_clock::time_point deadline);
    void async_lock_steady(bool shared, std::chrono::steady_clock::time_point deadline, acquire_handler handler,
                           std::stop_token stop);
    void async_release(bool shared, release_handler handler);
    detail::acquire_awaitable awaitable(bool shared, std::chrono::steady_clock::time_point deadline,
                                        std::stop_token stop, executor resume_on) {
        return {[this, shared, deadline, stop = std::move(stop)](acquire_handler h) {
                    async_lock_steady(shared, deadline, std::move(h), stop);
                },
                std::move(resume_on)};
    }
    std::unique_ptr<detail::shared_mutex_impl> impl_;
};

}  // namespace distlock
