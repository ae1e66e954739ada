#include "http_monitor.hpp"

#include <utility>

namespace distlock::backends::http {

monitor::monitor(loop& l, loop::line_fn on_line, loop::done_fn on_done)
    : loop_(l), on_line_(std::move(on_line)), on_done_(std::move(on_done)) {}

void monitor::start(const guard&, request r) {
    running_ = true;
    current_ = loop_.start(std::move(r), on_line_, on_done_);
}

bool monitor::running(const guard&) const noexcept { return running_; }

void monitor::restart(request r, std::chrono::milliseconds delay) {
    std::lock_guard lk(mutex_);
    if (!running_) return;
    current_ = loop_.start(std::move(r), on_line_, on_done_, delay);
}

bool monitor::end(const guard&) noexcept {
    if (!running_) return false;
    running_ = false;
    // current_ stays: the caller reports the loss from that transfer's callback,
    // and stop() (unlock, the handle's destructor) must wait for it to finish.
    return true;
}

void monitor::stop() noexcept {
    loop::id which;
    {
        std::lock_guard lk(mutex_);
        running_ = false;
        which = std::exchange(current_, 0);
    }
    // Outside the mutex: cancel() waits for a callback under way, which takes it.
    if (which != 0) loop_.cancel(which);
}

}  // namespace distlock::backends::http
