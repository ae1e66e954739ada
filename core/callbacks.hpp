// The thread of a provider that runs user code: every on_lost and on_error
// callback, in the order they were queued. Backends and the renewal thread only
// queue (post() never waits for user code), so a stuck renewal never delays a
// callback, and a callback may call unlock() (which waits for a renewal of its
// lock under way and calls the backend's release()) without deadlock.
#pragma once

#include <functional>
#include <memory>
#include <thread>

namespace distlock::detail {

class callback_thread {
public:
    callback_thread();
    // Runs what is still queued, then stops. From a callback of its own (the
    // last user of a provider went away inside on_lost), it lets the thread run
    // the rest of the queue and end on its own instead of joining itself: each
    // queued callback keeps alive what it uses (mutex_impl::post). In a forked
    // child it abandons the parent's thread and queue (process.hpp).
    ~callback_thread();
    callback_thread(const callback_thread&) = delete;
    callback_thread& operator=(const callback_thread&) = delete;

    // Queues `fn` (the thread starts on first use). Never runs it inline. A
    // callback's exception is swallowed: it must not stop the others.
    void post(std::function<void()> fn);

    // True on the thread itself (for tests of where callbacks run).
    bool on_this_thread() const noexcept;

private:
    struct state;
    std::shared_ptr<state> state_;  // shared with the thread, which may outlive *this
};

}  // namespace distlock::detail
