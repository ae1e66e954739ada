// distlock: waiting for a lock without holding a thread.
//
// Every primitive has an asynchronous form beside its blocking one:
//
//   m.async_lock(5s, [](std::exception_ptr error, bool granted) { ... });
//   bool granted = co_await m.lock_async(5s);          // any C++20 coroutine
//   co_await distlock::async_lock(m, 5s, token);       // <distlock/asio.hpp>
//
// A pending acquisition is an entry in a queue and a timer, not a thread: the
// provider takes the lock by one-attempt requests on a small pool of worker
// threads of its own (bounded, whatever the number of waiters), woken by the
// server's own release events where the backend has them, else by a jittered
// backoff between lock_options::retry_min and retry_max (docs/architecture.md,
// "Threads"). The handler runs once, on one of those workers (or, for an
// awaitable, on the executor given): keep it short and never block in it.
//
// The outcome is (error, granted):
//   - (nullptr, true): granted; the grant belongs to the object, not to a
//     thread: unlock or async_unlock it from any thread or coroutine;
//   - (nullptr, false): the deadline passed first;
//   - (error, false): a distlock::error (unavailable_error, ...), or
//     cancelled_error when the stop_token was triggered first. A timeout, a
//     cancellation and an error all leave nothing on the server, and the next
//     waiter is not delayed.
//
// Misuse found at the call itself (a moved-from object, a forked child, a
// multi-lock already acquiring) throws at once, before anything is queued;
// <distlock/asio.hpp> turns such a throw into the operation's outcome.
#pragma once

#include <coroutine>
#include <exception>
#include <functional>
#include <stop_token>
#include <utility>

namespace distlock {

// Called once with the outcome of an asynchronous acquisition (see above).
using acquire_handler = std::function<void(std::exception_ptr error, bool granted)>;
// Called once when an asynchronous release is over. A release never fails: as
// with unlock(), what goes wrong goes to lock_options::on_error / on_lost.
using release_handler = std::function<void()>;
// Where an awaiting coroutine resumes: called once with the continuation, which
// it must run (post it to an event loop, a thread pool, ...). Empty: the
// coroutine resumes on the provider's worker that completed the operation.
using executor = std::function<void(std::function<void()> continuation)>;

namespace detail {

// What co_await on lock_async() / acquire_async() waits for; `start` begins
// the operation with the handler that resumes the coroutine. Internal to the
// public headers (not API).
class acquire_awaitable {
public:
    using start_fn = std::function<void(acquire_handler)>;
    acquire_awaitable(start_fn start, executor resume_on) noexcept
        : start_(std::move(start)), resume_on_(std::move(resume_on)) {}
    bool await_ready() const noexcept { return false; }
    void await_suspend(std::coroutine_handle<> waiting) {
        // The operation never completes inside start_ (its handler is always
        // queued), so the coroutine is suspended before it can be resumed.
        start_([this, waiting](std::exception_ptr error, bool granted) {
            error_ = std::move(error);
            granted_ = granted;
            if (resume_on_) resume_on_([waiting] { waiting.resume(); });
            else waiting.resume();
        });
    }
    // True when granted, false when the deadline passed; rethrows the error
    // (cancelled_error after a cancellation).
    bool await_resume() {
        if (error_) std::rethrow_exception(error_);
        return granted_;
    }

private:
    start_fn start_;
    executor resume_on_;
    std::exception_ptr error_;
    bool granted_ = false;
};

// What co_await on unlock_async() / release_async() waits for.
class release_awaitable {
public:
    using start_fn = std::function<void(release_handler)>;
    release_awaitable(start_fn start, executor resume_on) noexcept
        : start_(std::move(start)), resume_on_(std::move(resume_on)) {}
    bool await_ready() const noexcept { return false; }
    void await_suspend(std::coroutine_handle<> waiting) {
        start_([this, waiting] {
            if (resume_on_) resume_on_([waiting] { waiting.resume(); });
            else waiting.resume();
        });
    }
    void await_resume() const noexcept {}

private:
    start_fn start_;
    executor resume_on_;
};

}  // namespace detail
}  // namespace distlock
