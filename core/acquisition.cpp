// The steps of one acquisition, shared by the blocking and the asynchronous
// drivers (acquisition.hpp).
#include "acquisition.hpp"

namespace distlock::detail {

namespace {
// How long a waiting acquisition rides out its attempts' unavailable_errors
// (the server restarting, a request timed out under load) before the wait ends
// with the error; the first attempt's error ends it at once.
constexpr std::chrono::seconds transient_errors{3};
}  // namespace

mutex_impl::acquisition::outcome mutex_impl::acquisition::step(spi::deadline step_until) {
    if (cancelled_) {
        end_cancelled();
        return outcome::cancelled;
    }
    const auto validity = m_.grant_validity();
    std::uint64_t generation = 0;
    std::optional<spi::grant> granted;
    try {
        granted = m_.acquire_within(step_until, validity, generation);
    } catch (...) {
        m_.end_acquire();
        auto e = std::current_exception();
        if (transient(e)) return outcome::again;
        end_failed(std::move(e));
        return outcome::failed;
    }
    failing_since_.reset();  // answered
    attempted_ = true;
    if (!granted) {
        m_.end_acquire();
        return outcome::busy;
    }
    if (cancelled_) {  // cancelled while the grant was on its way: give it back
        try {
            m_.handle_->release();
        } catch (...) {}
        m_.end_acquire();
        end_cancelled();
        return outcome::cancelled;
    }
    report_.granted(queued_, *granted);
    try {
        m_.hold(*granted, generation, validity, thread_bound_);
    } catch (...) {  // hold() gave the grant back, and the gate with it
        return fail(std::current_exception(), true);
    }
    return outcome::granted;
}

bool mutex_impl::acquisition::transient(const std::exception_ptr& e) {
    if (acquire_report::code_of(e) != errc::unavailable) return false;
    const auto now = spi::clock::now();
    if (!failing_since_) failing_since_ = now;
    last_error_ = e;
    return attempted_ && now < until_ && now - *failing_since_ < transient_errors;
}

std::exception_ptr mutex_impl::acquisition::at_deadline() {
    leave_gate();
    if (!failing_since_) {
        report_.timed_out();
        return nullptr;
    }
    report_.failed(errc::unavailable);
    return last_error_;
}

void mutex_impl::acquisition::end_failed(std::exception_ptr e) {
    report_.failed(acquire_report::code_of(e));
    fail(std::move(e));
}

void mutex_impl::acquisition::end_cancelled() {
    report_.failed(errc::cancelled);
    leave_gate();
}

mutex_impl::acquisition::outcome mutex_impl::acquisition::fail(std::exception_ptr e, bool gate_left) {
    error_ = std::move(e);
    if (gate_left) in_gate_ = false;
    leave_gate();
    return outcome::failed;
}

void mutex_impl::acquisition::leave_gate() noexcept {
    if (!in_gate_) return;
    in_gate_ = false;
    m_.gate_->leave();
}

}  // namespace distlock::detail
