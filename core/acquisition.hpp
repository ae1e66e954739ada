// One acquisition of a mutex_impl, whoever drives it: the calling thread
// (lock_until, the blocking API) or the provider's workers (async_op, the
// asynchronous API). Both drivers run the same steps, so that a grant, a
// timeout, an error or a cancellation means the same on either side:
//  - step(): one request to the backend (lock_handle::acquire) up to a step
//    deadline, a reply that came after its lease given back, the grant
//    recorded and handed to the renewal thread, the observer told;
//  - the errors of a wait: an error at the first attempt ends it, an
//    unavailable_error after an answered attempt is ridden out for a while,
//    errors that last until the deadline end it with the error;
//  - the end at the deadline, and a cancellation (before a request, or a
//    grant that came back after it, which is given back).
// What differs is only how a driver waits between steps: the engine's timers
// and the backend's release events (step deadline `now`, one attempt), or
// the backend's own wait (step deadline = the caller's: the blocking SPI's
// acquire(deadline), the adapter through which a backend written against it
// works unchanged; docs/backend-authoring.md).
#pragma once

#include <atomic>
#include <exception>
#include <optional>

#include "acquire_report.hpp"
#include "mutex_impl.hpp"

namespace distlock::detail {

class mutex_impl::acquisition {
public:
    // A step's result.
    enum class outcome {
        granted,    // held now (by the calling thread when thread_bound)
        busy,       // not granted: the lock is someone else's
        again,      // not answered (a transient error): try again after backoff_delay()
        failed,     // ended with error() (reported; the gate left)
        cancelled,  // ended by cancel() (reported; a grant that came was given back)
    };

    acquisition(mutex_impl& m, spi::deadline until, bool thread_bound)
        : m_(m),
          until_(until),
          thread_bound_(thread_bound),
          report_(m),
          backoff_(m.request_.retry_min, m.request_.retry_max) {}
    acquisition(const acquisition&) = delete;
    acquisition& operator=(const acquisition&) = delete;

    // The driver holds the name's gate now (`queued`: it waited behind another
    // waiter of this provider first).
    void entered_gate(bool queued) noexcept {
        in_gate_ = true;
        queued_ = queued;
    }
    // One request, waiting at most until `step_until`.
    outcome step(spi::deadline step_until);
    // The deadline came between steps (after busy or again): a timeout
    // (nullptr) or the error of the attempts the server stopped answering.
    // Reported; the gate left.
    std::exception_ptr at_deadline();
    // Before any step: the gate could not be entered in time (false) or
    // entering it threw (from a catch block). Reported.
    void gate_timed_out() const { report_.timed_out(); }
    void gate_failed() const { report_.failed(); }
    // Ends the acquisition with `e` between steps (a subscription that
    // failed): reported, the gate left; error() is `e`.
    void end_failed(std::exception_ptr e);
    // From any thread: the next step ends the acquisition as cancelled.
    void cancel() noexcept { cancelled_ = true; }
    bool cancel_requested() const noexcept { return cancelled_; }
    // Ends a cancelled acquisition between steps: reported, the gate left.
    void end_cancelled();
    // The delay before the next step after `again`, or a busy step on a
    // backend that does not wait (never past the deadline).
    std::chrono::nanoseconds backoff_delay() { return backoff_.next(until_); }
    spi::deadline until() const noexcept { return until_; }
    // After `failed`: the error, as the backend (or hold()) threw it.
    const std::exception_ptr& error() const noexcept { return error_; }

private:
    outcome fail(std::exception_ptr e, bool gate_left = false);
    // An unavailable_error after an answered attempt, within transient_errors
    // of the first of a run of them and before the deadline.
    bool transient(const std::exception_ptr& e);
    void leave_gate() noexcept;

    mutex_impl& m_;
    const spi::deadline until_;
    const bool thread_bound_;
    const acquire_report report_;
    spi::backoff backoff_;
    std::atomic<bool> cancelled_{false};
    // Touched by the driver's steps only (one at a time).
    bool in_gate_ = false, queued_ = false;
    bool attempted_ = false;                               // an attempt was answered (busy or not)
    std::optional<spi::clock::time_point> failing_since_;  // the first of a run of transient errors
    std::exception_ptr last_error_;                        // of that run
    std::exception_ptr error_;                             // the end's
};

}  // namespace distlock::detail
