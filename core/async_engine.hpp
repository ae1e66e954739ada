// The threads of a provider's asynchronous acquisitions: a fixed, small pool of
// workers that run queued steps (one-attempt requests, completions) and fire
// timers. A pending acquisition is a timer and a queue entry here, never a
// thread: the pool's size does not grow with the number of waiters. Started
// on first use, so a program that never waits asynchronously has no such
// thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>

namespace distlock::detail {

class async_engine {
public:
    using clock = std::chrono::steady_clock;
    using task = std::function<void()>;
    using timer_id = std::uint64_t;

    // The number of worker threads of every provider (docs/architecture.md, "Threads").
    static constexpr unsigned workers = 4;

    async_engine();
    // Stops the workers (what is still queued or timed is dropped: every
    // pending acquisition keeps the provider, and so its engine, alive, so
    // none is left by then) and joins them; from a worker itself it lets that
    // one end on its own. In a forked child it abandons the parent's workers.
    ~async_engine();
    async_engine(const async_engine&) = delete;
    async_engine& operator=(const async_engine&) = delete;

    // Runs `t` on a worker soon (never inline).
    void post(task t);
    // Runs `t` on a worker at `when` (at once when it has passed), unless
    // cancel()led first.
    timer_id at(clock::time_point when, task t);
    // Takes a timer out before it fires: true when it had not fired (its task
    // is dropped, outside the caller's locks), false when it has fired or is
    // unknown.
    bool cancel(timer_id id);
    // Whether the calling thread is one of this engine's workers.
    bool on_worker() const noexcept;

private:
    struct state;
    std::shared_ptr<state> state_;  // shared with the workers, which may outlive *this
};

}  // namespace distlock::detail
