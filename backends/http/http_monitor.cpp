#include "http_monitor.hpp"

#include <algorithm>
#include <utility>

namespace distlock::backends::http {

monitor::monitor(loop& l, loop::line_fn on_line, loop::done_fn on_done)
    : loop_(l), on_line_(std::move(on_line)), on_done_(std::move(on_done)) {}

void monitor::start(const guard&, request r, spi::loss_sink lost) {
    running_ = true;
    lost_ = std::move(lost);
    idle_ = 0;
    began_ = std::chrono::steady_clock::now();
    current_ = loop_.start(std::move(r), on_line_, on_done_);
}

bool monitor::running(const guard&) const noexcept { return running_; }

void monitor::restart(request r, std::chrono::milliseconds delay) {
    std::lock_guard lk(mutex_);
    if (!running_) return;
    began_ = std::chrono::steady_clock::now() + delay;
    current_ = loop_.start(std::move(r), on_line_, on_done_, delay);
}

std::chrono::milliseconds monitor::pace(bool progress, std::chrono::milliseconds full) {
    using namespace std::chrono_literals;
    std::lock_guard lk(mutex_);
    if (progress || std::chrono::steady_clock::now() - began_ >= full) {
        idle_ = 0;
        return 0ms;
    }
    idle_ = std::min(idle_ + 1, 6);
    return std::min<std::chrono::milliseconds>(1s, 50ms * (1 << (idle_ - 1)));
}

void monitor::lost(const guard&, std::string why) noexcept {
    if (!running_) return;
    running_ = false;
    // current_ stays: that transfer's callback is still returning, and stop()
    // (unlock, the handle's destructor) must wait for it to finish.
    std::exchange(lost_, {})(std::move(why));
}

void monitor::stop() noexcept {
    loop::id which;
    {
        std::lock_guard lk(mutex_);
        running_ = false;
        lost_ = {};
        which = std::exchange(current_, 0);
    }
    // Outside the mutex: cancel() waits for a callback under way, which takes it.
    if (which != 0) loop_.cancel(which);
}

}  // namespace distlock::backends::http
