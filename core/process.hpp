// The process a core object belongs to, and what a forked child does with the
// objects it inherited.
//
// A child made by fork() shares its parent's connections, lock files and
// sessions (the descriptors are the same), but has none of its threads, and a
// mutex that another thread of the parent held at fork time stays locked for
// ever in the child. So a child must neither release the parent's grants (an
// unlock through a shared connection, a flock(LOCK_UN) on a shared open file, a
// session closed by a destructor all free the lock the parent still holds) nor
// join or lock anything the parent's threads owned. The core makes every
// provider, mutex and thread remember the fork generation it was made in; in
// another generation they do nothing to the server and abandon what they own
// (abandon(): never destroyed, so no destructor of a backend or client library
// runs in the child).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>

namespace distlock::detail {

// 0 in the process that loaded distlock, one more in the child of every fork()
// (a pthread_atfork handler): an atomic load, cheap enough for every unlock().
unsigned fork_generation() noexcept;

// Keeps `object` alive until the process ends and never runs its destructor
// (it stays reachable, so that leak checkers do not report it). For what a
// forked child inherited and must not tear down. Allocates a small node: out
// of memory it terminates the process, which releases nothing either.
void abandon(std::shared_ptr<const void> object) noexcept;

// A worker thread whose owner is being destroyed on that very thread (a step
// of it dropped the owner's last reference): it cannot join itself, and ends
// by itself once its step returns. A reaper thread joins it (so its stack is
// freed), and the process's exit waits for it (up to 2 s) before libcrypto's
// exit handler runs: a thread that ends while exit() tears libcrypto down
// loses its per-thread state, and leak checkers report it. Out of memory it
// terminates the process, as abandon() does.
void retire(std::thread t) noexcept;

// What retire() took and what its reaper has joined, in this fork generation.
struct retired_threads {
    std::uint64_t retired = 0;
    std::uint64_t joined = 0;
};
retired_threads retired_counts() noexcept;

// The destructor of an object whose thread shares `state` with it (the state's
// members: generation, mutex, stop, thread, wake). In a forked child the thread
// does not exist and the mutex may be held for ever: abandon the state, queue
// and all (it was the parent's). Otherwise tell the thread to stop and join it,
// or retire it when this runs on that very thread (it holds the state and ends
// by itself).
template <class State>
void stop_worker(std::shared_ptr<State> state) {
    if (state->generation != fork_generation()) {
        abandon(std::move(state));
        return;
    }
    std::thread t;
    {
        std::lock_guard lk(state->mutex);
        state->stop = true;
        t = std::move(state->thread);
    }
    state->wake.notify_all();
    if (!t.joinable()) return;
    if (t.get_id() == std::this_thread::get_id()) retire(std::move(t));
    else t.join();
}

}  // namespace distlock::detail
