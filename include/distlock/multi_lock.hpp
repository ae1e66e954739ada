// distlock: several locks of one provider taken as one.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "distlock/async.hpp"
#include "distlock/detail/deadline.hpp"
#include "distlock/export.hpp"
#include "distlock/options.hpp"

namespace distlock {

namespace detail {
class multi_lock_impl;
}

// The mutexes of several names of one provider, taken all or none. Made by
// provider::multi_lock.
//
// Meets the standard TimedLockable requirements (std::unique_lock works). The
// names are taken one after another in one order that does not depend on how
// the caller listed them (ascending bytes; names() shows it), so that processes
// naming overlapping sets in different orders never deadlock. try_lock_for and
// try_lock_until take every name before the deadline or none: the parts taken
// are given back when one cannot be had in time. Each part is a mutex of its
// own (the same lock as provider::mutex of that name), with its lease and
// renewal; when any part is lost the whole is lost: held() turns false and
// lock_options::on_lost runs once for that grant, naming the part.
class DISTLOCK_API multi_lock {
public:
    explicit multi_lock(std::unique_ptr<detail::multi_lock_impl> impl) noexcept;
    multi_lock(multi_lock&&) noexcept;
    multi_lock& operator=(multi_lock&&) noexcept;
    multi_lock(const multi_lock&) = delete;
    multi_lock& operator=(const multi_lock&) = delete;
    ~multi_lock();  // releases every part it holds; never throws

    void lock();
    [[nodiscard]] bool try_lock();
    template <class Rep, class Period>
    [[nodiscard]] bool try_lock_for(const std::chrono::duration<Rep, Period>& d) {
        return lock_until_steady(detail::steady_deadline(d));
    }
    template <class Clock, class Duration>
    [[nodiscard]] bool try_lock_until(const std::chrono::time_point<Clock, Duration>& t) {
        return lock_until_steady(detail::steady_deadline(t));
    }
    void unlock() noexcept;

    // Asynchronous forms (include/distlock/async.hpp): every part taken, in
    // names() order, without holding a thread, or none (the parts taken are
    // given back when one is not granted in time, is cancelled or fails). One
    // acquisition at a time per object (another completes with
    // would_deadlock_error thrown at the call).
    template <class Timeout>
    void async_lock(const Timeout& timeout, acquire_handler handler, std::stop_token stop = {}) {
        async_lock_steady(detail::steady_deadline(timeout), std::move(handler), std::move(stop));
    }
    void async_unlock(release_handler handler = {});
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

    // Every part is held and none was lost.
    [[nodiscard]] bool held() const noexcept;
    // The names, in the order they are taken (ascending bytes, each once).
    [[nodiscard]] const std::vector<std::string>& names() const noexcept;
    // The fencing token of each part's grant, in names() order (0s when not held).
    [[nodiscard]] std::vector<std::uint64_t> tokens() const;

private:
    bool lock_until_steady(std::chrono::steady_clock::time_point deadline);
    void async_lock_steady(std::chrono::steady_clock::time_point deadline, acquire_handler handler,
                           std::stop_token stop);
    std::unique_ptr<detail::multi_lock_impl> impl_;
};

}  // namespace distlock
