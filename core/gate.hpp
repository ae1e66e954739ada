// The in-process wait queue ("gate") of one lock name in one provider: the
// provider's threads that want the name queue here in FIFO order, and only the
// head of the queue talks to the server (provider_state::gate_for).
#pragma once

#include <condition_variable>
#include <deque>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

#include "distlock/spi/backend.hpp"

namespace distlock::detail {

class gate {
public:
    // Enters the gate before `until`; false on timeout. Throws
    // would_deadlock_error when the calling thread already holds the gate through
    // another mutex object (`who` identifies the mutex).
    // `queued`: whether it had to wait behind another thread.
    bool enter(spi::deadline until, const void* who, std::string_view backend, const std::string& name, bool& queued);
    void leave() noexcept;

private:
    struct waiter {
        std::condition_variable cv;  // each waiter has its own: a release wakes only the head
    };
    std::mutex mutex_;
    std::deque<waiter*> queue_;
    bool busy_ = false;
    std::thread::id owner_;
    const void* holder_ = nullptr;
};

}  // namespace distlock::detail
