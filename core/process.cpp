// retire(): the worker threads whose owner was destroyed on that very thread,
// joined by one reaper thread, and at the latest when the process exits.
#include "process.hpp"

#include <openssl/crypto.h>
#include <pthread.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>

namespace distlock::detail {
namespace {

// The retired threads of one fork generation and the thread that joins them.
// Never destroyed: a thread left running at exit (below) may still use it, and
// a forked child keeps its parent's (whose mutex a parent's thread may have
// held at fork time) without touching it. Reachable from `reapers` all along,
// so that leak checkers do not report it.
struct reaper {
    const unsigned generation = fork_generation();
    reaper* const previous;  // the parent's, in a forked child
    std::mutex mutex;
    std::condition_variable wake;  // the worker: a thread to join, or stop
    std::condition_variable idle;  // the exit: nothing left to join
    std::deque<std::thread> queue;
    std::thread worker;
    bool joining = false;
    bool stop = false;

    explicit reaper(reaper* prev) : previous(prev) {}

    void run() {
        std::unique_lock lk(mutex);
        for (;;) {
            wake.wait(lk, [&] { return stop || !queue.empty(); });
            if (queue.empty()) return;  // stopped, and everything joined
            auto t = std::move(queue.front());
            queue.pop_front();
            joining = true;
            lk.unlock();
            t.join();  // it ends by itself: its owner told it to stop
            lk.lock();
            joining = false;
            ++joined;
            if (queue.empty()) idle.notify_all();
        }
    }

    std::uint64_t retired = 0;
    std::uint64_t joined = 0;
};

// Guards `current`. Held across fork() (pthread_atfork), so that a child never
// inherits it locked; a child's first retire() then starts a reaper of its own.
std::mutex reapers_mutex;
reaper* current = nullptr;
const bool reapers_fork_safe = [] {
    ::pthread_atfork([] { reapers_mutex.lock(); }, [] { reapers_mutex.unlock(); }, [] { reapers_mutex.unlock(); });
    return true;
}();

// How long the exit waits for retired threads still running: they were told
// to stop, and each ends when its step returns. One stuck in a user's code is
// left to the exit, as a detached thread would be.
constexpr auto exit_wait = std::chrono::seconds(2);

// At exit: the retired threads are joined, before libcrypto's own exit handler
// runs. A thread that ends while exit() tears libcrypto down loses its
// per-thread state (the error queue, its random generators): nothing frees it,
// and LeakSanitizer reports it. Made at the first retire(), after
// OPENSSL_init_crypto() registered that handler, so it is destroyed first
// (exit handlers run in the reverse order of their registration).
struct exit_join {
    exit_join() { OPENSSL_init_crypto(0, nullptr); }
    ~exit_join() {
        reaper* r = nullptr;
        {
            std::lock_guard lk(reapers_mutex);
            r = current;
        }
        if (r == nullptr || r->generation != fork_generation()) return;
        std::unique_lock lk(r->mutex);
        r->stop = true;
        r->wake.notify_all();
        const bool drained = r->idle.wait_for(lk, exit_wait, [&] { return r->queue.empty() && !r->joining; });
        if (!drained) {  // left running: detached, as before the reaper
            for (auto& t : r->queue) t.detach();
            r->queue.clear();
        }
        lk.unlock();
        if (!r->worker.joinable()) return;
        if (drained) r->worker.join();
        else r->worker.detach();
    }
};

}  // namespace

void retire(std::thread t) noexcept {
    if (!t.joinable()) return;
    static exit_join at_exit;
    std::lock_guard guard(reapers_mutex);
    if (current == nullptr || current->generation != fork_generation()) current = new reaper(current);
    auto& r = *current;
    std::lock_guard lk(r.mutex);
    if (r.stop) {  // the process is exiting: nothing joins any more
        t.detach();
        return;
    }
    try {
        if (!r.worker.joinable()) r.worker = std::thread([&r] { r.run(); });
        r.queue.push_back(std::move(t));
    } catch (...) {  // no thread or memory for it: detached, as before the reaper
        if (t.joinable()) t.detach();
        return;
    }
    ++r.retired;
    r.wake.notify_one();
}

retired_threads retired_counts() noexcept {
    std::lock_guard guard(reapers_mutex);
    if (current == nullptr || current->generation != fork_generation()) return {};
    std::lock_guard lk(current->mutex);
    return {current->retired, current->joined};
}

}  // namespace distlock::detail
