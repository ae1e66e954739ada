// distlock: several locks of one provider taken as one.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

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

    // Every part is held and none was lost.
    [[nodiscard]] bool held() const noexcept;
    // The names, in the order they are taken (ascending bytes, each once).
    [[nodiscard]] const std::vector<std::string>& names() const noexcept;
    // The fencing token of each part's grant, in names() order (0s when not held).
    [[nodiscard]] std::vector<std::uint64_t> tokens() const;

private:
    bool lock_until_steady(std::chrono::steady_clock::time_point deadline);
    std::unique_ptr<detail::multi_lock_impl> impl_;
};

}  // namespace distlock
