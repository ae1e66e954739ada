// One renewal thread per provider: renews every held lease at lease/3 (or
// checks a lock without a lease at its check_interval()), batches the
// keepalives that fall due together into one backend::keepalive_batch() call,
// and reports a loss when a keepalive says so or when no keepalive has
// succeeded for a whole lease (through the mutex, which only records it and
// queues the user's callback: no user code runs on this thread). Each entry may also publish
// the end of its lease as last confirmed (`valid_until`), so that held() turns
// false on time even while a keepalive is stuck in the backend.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "distlock/observe.hpp"
#include "distlock/spi/backend.hpp"

namespace distlock::detail {

class scheduler {
public:
    using clock = std::chrono::steady_clock;
    using entry_id = std::uint64_t;
    // Called (on the scheduler thread, outside its locks) when an entry is lost;
    // the entry is already removed.
    using lost_fn = std::function<void(std::string reason)>;
    using failed_fn = std::function<void(const std::string& reason)>;

    // `watcher`: told of each batched renewal (null = nobody), as `scheme`. The
    // thread shares the backend and the watcher, so that it may outlive *this.
    scheduler(std::shared_ptr<spi::backend> backend, std::shared_ptr<distlock::observer> watcher, std::string scheme);
    // Stops the thread and joins it; from the thread itself (the last user of
    // the provider went away in one of its callbacks) it lets the thread end on
    // its own: everything the thread touches is in the state it shares. In a
    // forked child it abandons the parent's thread and state (process.hpp).
    ~scheduler();
    scheduler(const scheduler&) = delete;
    scheduler& operator=(const scheduler&) = delete;

    // What to watch: keepalive `handle` every `interval`, counted from `since`
    // (when the grant's request was sent, for a lease). With `renew == false`
    // nothing is sent: the entry only reports the loss once `lease` has passed
    // since `since` (a lease that is not renewed). `lease` bounds how long
    // keepalives may fail before loss. `valid_until` (may be null) is set to the
    // send time of each successful keepalive plus `lease`, in clock ticks since its
    // epoch; the caller sets its first value. A success that comes after that time
    // still counts: the renewals are owner-checked, so nobody else can have held
    // the lock meanwhile. The handle, the callbacks and `valid_until` must stay
    // valid until remove() of the entry returns.
    struct watch {
        spi::lock_handle* handle = nullptr;
        std::chrono::milliseconds interval{0}, lease{0};
        bool renew = true;
        clock::time_point since{};
        lost_fn lost;
        failed_fn failed;
        std::atomic<clock::rep>* valid_until = nullptr;
    };
    entry_id add(watch w);

    // Removes an entry. Waits for a keepalive of it that is under way, except when
    // called on the scheduler thread itself. Unknown ids are ignored.
    void remove(entry_id id);

    // How many times the thread has woken up (for tests of its idle behaviour).
    std::uint64_t wakeups() const noexcept;

private:
    struct state;
    std::shared_ptr<state> state_;  // shared with the thread, which may outlive *this
};

}  // namespace distlock::detail
