// Internal to the public headers (not API: the names may change in any
// release): the one conversion of a timeout to a steady_clock deadline that
// the primitives' try_*_for / try_*_until templates share.
#pragma once

#include <chrono>
#include <type_traits>

namespace distlock::detail {

// now() + d, never in the past (a negative duration is zero: one attempt).
template <class Rep, class Period>
std::chrono::steady_clock::time_point steady_deadline(const std::chrono::duration<Rep, Period>& d) {
    auto rel = std::chrono::duration_cast<std::chrono::steady_clock::duration>(d);
    if (rel < std::chrono::steady_clock::duration::zero()) rel = {};
    return std::chrono::steady_clock::now() + rel;
}

// Any clock's time point, converted once to steady_clock.
template <class Clock, class Duration>
std::chrono::steady_clock::time_point steady_deadline(const std::chrono::time_point<Clock, Duration>& t) {
    if constexpr (std::is_same_v<Clock, std::chrono::steady_clock>)
        return std::chrono::time_point_cast<std::chrono::steady_clock::duration>(t);
    else return steady_deadline(t - Clock::now());
}

}  // namespace distlock::detail
