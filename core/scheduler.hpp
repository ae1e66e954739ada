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
#include <map>
#include <mutex>
#include <thread>

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

    // `watcher`: told of each batched renewal (null = nobody), as `scheme`.
    scheduler(spi::backend& backend, distlock::observer* watcher, std::string scheme)
        : backend_(backend), watcher_(watcher), scheme_(std::move(scheme)) {}
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
    // the lock meanwhile.
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
    std::uint64_t wakeups() const noexcept { return wakeups_.load(); }

private:
    struct entry {
        spi::lock_handle* handle;
        std::chrono::milliseconds interval, lease;
        bool renew;
        clock::time_point due, last_ok;
        lost_fn lost;
        failed_fn failed;
        std::atomic<clock::rep>* valid_until;
        bool in_flight = false;  // a keepalive or callback of it is running
        bool dead = false;       // lost: erased once its callback has run
    };
    void run();

    spi::backend& backend_;
    distlock::observer* watcher_;
    std::string scheme_;
    std::mutex mutex_;
    std::condition_variable wake_, done_;
    std::map<entry_id, entry> entries_;
    entry_id next_id_ = 1;
    bool stop_ = false;
    clock::time_point sleeping_until_ = clock::time_point::min();  // when the thread waits, until when
    // Longest sleep with nothing due: half the shortest first interval added, so
    // that add() need not wake the thread while locks come and go; it grows back
    // (doubling, up to max_idle_wait) while nothing is added.
    static constexpr clock::duration max_idle_wait = std::chrono::seconds{1};
    clock::duration idle_wait_ = max_idle_wait;
    std::uint64_t adds_ = 0;
    std::atomic<std::uint64_t> wakeups_{0};
    std::thread thread_;
    std::thread::id thread_id_;
};

}  // namespace distlock::detail
