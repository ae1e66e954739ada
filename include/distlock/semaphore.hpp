// distlock: the distributed counting semaphore.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "distlock/async.hpp"
#include "distlock/detail/deadline.hpp"
#include "distlock/export.hpp"
#include "distlock/options.hpp"

namespace distlock {

namespace detail {
class semaphore_impl;
}

// A named semaphore of `permits()` permits shared by every process that uses
// the same backend URL: at most that many grants of the name at once, across
// all of them. Made by provider::semaphore on backends whose caps() support
// feature::semaphore.
//
// Each permit is a grant of its own, exactly as a mutex's: it has a lease that
// the provider's renewal thread renews, it comes back to the others when its
// holder crashes (within caps().crash_release_bound), its loss is reported
// through lock_options::on_lost, and it has a fencing token where the backend
// has tokens (strictly increasing across the permits of one name).
//
// One object may hold several permits, taken by one thread or several.
// release() gives back one of them: the one the calling thread took last, else
// the one taken asynchronously last, else the one taken last. Errors are as for distlock::mutex; where the server keeps
// the semaphore's size (feature::permit_limit), acquiring with another size than
// the name's holders use throws invalid_argument_error.
class DISTLOCK_API semaphore {
public:
    explicit semaphore(std::unique_ptr<detail::semaphore_impl> impl) noexcept;
    semaphore(semaphore&&) noexcept;
    semaphore& operator=(semaphore&&) noexcept;
    semaphore(const semaphore&) = delete;
    semaphore& operator=(const semaphore&) = delete;
    ~semaphore();  // releases every permit it holds; never throws

    void acquire();
    [[nodiscard]] bool try_acquire();
    template <class Rep, class Period>
    [[nodiscard]] bool try_acquire_for(const std::chrono::duration<Rep, Period>& d) {
        return acquire_until_steady(detail::steady_deadline(d));
    }
    template <class Clock, class Duration>
    [[nodiscard]] bool try_acquire_until(const std::chrono::time_point<Clock, Duration>& t) {
        return acquire_until_steady(detail::steady_deadline(t));
    }
    // Gives back one permit (see above); nothing when none is held. Never throws:
    // a failed release goes to lock_options::on_error / on_lost.
    void release() noexcept;

    // Asynchronous forms (as mutex's; include/distlock/async.hpp). A permit
    // taken asynchronously belongs to no thread: async_release() (or release()
    // from a thread holding no permit of its own) gives back the one taken last.
    template <class Timeout>
    void async_acquire(const Timeout& timeout, acquire_handler handler, std::stop_token stop = {}) {
        async_acquire_steady(detail::steady_deadline(timeout), std::move(handler), std::move(stop));
    }
    void async_release(release_handler handler = {});
    template <class Timeout>
    [[nodiscard]] detail::acquire_awaitable acquire_async(const Timeout& timeout, std::stop_token stop = {},
                                                          executor resume_on = {}) {
        return {[this, until = detail::steady_deadline(timeout), stop = std::move(stop)](acquire_handler h) {
                    async_acquire_steady(until, std::move(h), stop);
                },
                std::move(resume_on)};
    }
    [[nodiscard]] detail::release_awaitable release_async(executor resume_on = {}) {
        return {[this](release_handler h) { async_release(std::move(h)); }, std::move(resume_on)};
    }

    // Permits this object holds now and has not lost.
    [[nodiscard]] std::size_t held() const noexcept;
    // Fencing token of the permit the calling thread took last (for a thread
    // that took none, of the one taken asynchronously last; 0: none, or no tokens).
    [[nodiscard]] std::uint64_t token() const noexcept;
    [[nodiscard]] std::uint32_t permits() const noexcept;
    [[nodiscard]] const std::string& name() const noexcept;

private:
    bool acquire_until_steady(std::chrono::steady_clock::time_point deadline);
    void async_acquire_steady(std::chrono::steady_clock::time_point deadline, acquire_handler handler,
                              std::stop_token stop);
    std::unique_ptr<detail::semaphore_impl> impl_;
};

// Holds one permit for a scope, as std::lock_guard holds a mutex: acquires in
// the constructor (without a bound), releases in the destructor.
class DISTLOCK_API permit_guard {
public:
    explicit permit_guard(semaphore& s) : semaphore_(s) { semaphore_.acquire(); }
    ~permit_guard() { semaphore_.release(); }
    permit_guard(const permit_guard&) = delete;
    permit_guard& operator=(const permit_guard&) = delete;

private:
    semaphore& semaphore_;
};

}  // namespace distlock
