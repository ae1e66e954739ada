// The in-process wait queue ("gate") of one lock name in one provider: the
// provider's waiters that want the name queue here in FIFO order, and only the
// head of the queue talks to the server (provider_state::gate_for). A waiter
// is a blocked thread (enter) or an asynchronous acquisition (enter_async),
// which waits without a thread and is handed the gate by the one leaving it.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

#include "distlock/spi/backend.hpp"

namespace distlock::detail {

class gate {
public:
    // An asynchronous waiter's place in the queue, owned by its acquisition.
    struct ticket {
        // Called once the gate is this waiter's (by the thread leaving it,
        // outside the gate's lock): must only queue the waiter's next step.
        std::function<void()> on_turn;
    };

    // Enters the gate before `until`; false on timeout. Throws
    // would_deadlock_error when the calling thread already holds the gate through
    // another mutex object (`who` identifies the mutex).
    // `queued`: whether it had to wait behind another waiter.
    bool enter(spi::deadline until, const void* who, std::string_view backend, const std::string& name, bool& queued);
    // Enters at once (true), or queues `t` (false): its on_turn is called when
    // the gate is its. `t` stays valid until then or until withdraw().
    bool enter_async(ticket& t, const void* who);
    // Takes a queued ticket out of the queue: true; false when the gate was
    // handed to it already (its holder must leave() it).
    bool withdraw(ticket& t) noexcept;
    void leave() noexcept;

private:
    struct waiter {
        std::condition_variable cv;  // a blocked thread: each has its own, a release wakes only the head
        ticket* async = nullptr;     // else an asynchronous waiter
        const void* who = nullptr;
    };
    // The gate is free: gives it to the head of the queue (wakes its thread,
    // or takes an asynchronous head's ticket out and returns it, to be told
    // outside the lock).
    ticket* hand_over() noexcept;
    void take(std::thread::id owner, const void* who) noexcept;

    std::mutex mutex_;
    std::deque<waiter*> queue_;
    bool busy_ = false;
    std::thread::id owner_;  // none for an asynchronous holder
    const void* holder_ = nullptr;
};

}  // namespace distlock::detail
