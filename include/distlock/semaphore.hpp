// distlock: the distributed counting semaphore.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

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
// the one taken last. Errors are as for distlock::mutex; where the server keeps
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

    // Permits this object holds now and has not lost.
    [[nodiscard]] std::size_t held() const noexcept;
    // Fencing token of the permit the calling thread took last (0: none, or no tokens).
    [[nodiscard]] std::uint64_t token() const noexcept;
    [[nodiscard]] std::uint32_t permits() const noexcept;
    [[nodiscard]] const std::string& name() const noexcept;

private:
    bool acquire_until_steady(std::chrono::steady_clock::time_point deadline);
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
