// What the observer is told of one acquisition, blocking or asynchronous
// (provider_options; nothing without an observer). Included by the files that
// acquire (mutex.cpp, async_acquire.cpp) only.
#pragma once

#include <exception>

#include "mutex_impl.hpp"

namespace distlock::detail {

// What the observer is told of one lock_until() (provider_options; nothing
// without an observer).
class mutex_impl::acquire_report {
public:
    explicit acquire_report(mutex_impl& m) : m_(m), started_(spi::clock::now()) {}
    void timed_out() const { tell(acquire_outcome::timed_out, contention::waited, errc{}); }
    // From a catch block: the error being handled.
    void failed() const { failed(code_of(std::current_exception())); }
    void failed(errc code) const { tell(acquire_outcome::failed, contention::unknown, code); }
    // The code of a distlock::error, unavailable for anything else.
    static errc code_of(const std::exception_ptr& e) {
        try {
            std::rethrow_exception(e);
        } catch (const error& err) {
            return err.code_value();
        } catch (...) {}
        return errc::unavailable;
    }
    // `queued`: it waited behind another thread of this provider first.
    void granted(bool queued, const spi::grant& g) const {
        tell(acquire_outcome::granted,
             queued || g.waited.value_or(false) ? contention::waited
             : g.waited                         ? contention::none
                                                : contention::unknown,
             errc{});
    }

private:
    void tell(acquire_outcome outcome, contention contended, errc code) const {
        m_.provider_->observe([&](observer& o) {
            o.acquired(acquire_event{m_.provider_->scheme(), m_.request_.name, m_.observed_kind_, outcome, contended,
                                     spi::clock::now() - started_, code});
        });
    }
    mutex_impl& m_;
    spi::clock::time_point started_;
};

}  // namespace distlock::detail
