// distlock: Asio completion tokens for the asynchronous forms of the primitives.
//
//   #include <distlock/asio.hpp>
//   bool granted = co_await distlock::async_lock(m, 5s, asio::use_awaitable);
//   ...
//   co_await distlock::async_unlock(m, asio::use_awaitable);
//
// This header alone needs Asio, and only where it is included: libdistlock is
// built without it. It takes standalone Asio (<asio.hpp>, Debian's libasio-dev)
// unless DISTLOCK_ASIO_BOOST is defined before it is included, or <asio.hpp>
// is not found and <boost/asio.hpp> is: then Boost.Asio.
//
// Every operation takes any completion token (a handler, use_awaitable,
// deferred, use_future, ...) and completes with
//   - void(std::exception_ptr error, bool granted) for an acquisition: as the
//     handler of include/distlock/async.hpp (granted; false = the deadline
//     passed; error = a distlock::error, cancelled_error after a cancellation);
//     use_awaitable returns the bool and throws the error;
//   - void() for a release.
// An error the primitive raises at once is delivered the same way, never
// thrown by the initiating call. The primitive must outlive the operation, and
// an object has one grant at a time: give each coroutine its own object.
// The completion runs on the handler's associated executor (for a coroutine,
// its own; a handler without one runs on the provider's worker thread), and
// that executor has work outstanding until it does: an io_context waiting on
// a lock does not return from run(). An io_context must outlive the operations
// given its executor: destroy it once run() has returned (it returns only
// after the provider's workers are done handing over), not after a bare
// run_one() that ran a completion. The timeout (a duration, or a time point
// of any clock) counts from when the operation starts: for deferred, when it
// is launched.
//
// Cancellation: with Asio 1.19 or later (Boost 1.77), an acquisition honours
// its per-operation cancellation slot (bind_cancellation_slot, a coroutine's
// cancellation state): any cancellation type ends the wait with
// cancelled_error, leaves nothing on the server and does not delay the next
// waiter. Emit the signal on the handler's executor, as Asio requires of
// every slot. A release cannot be cancelled. With an older Asio (Boost 1.74's is
// 1.18) there are no slots; a std::stop_token passed to the member functions
// (mutex::async_lock) still cancels.
#pragma once

#include <exception>
#include <functional>
#include <memory>
#include <stop_token>
#include <type_traits>
#include <utility>

#include "distlock/election.hpp"
#include "distlock/multi_lock.hpp"
#include "distlock/mutex.hpp"
#include "distlock/semaphore.hpp"
#include "distlock/shared_mutex.hpp"

#if !defined(DISTLOCK_ASIO_BOOST) && !__has_include(<asio.hpp>) && __has_include(<boost/asio.hpp>)
#define DISTLOCK_ASIO_BOOST
#endif

#if defined(DISTLOCK_ASIO_BOOST)
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/version.hpp>
#if BOOST_ASIO_VERSION >= 101900
#define DISTLOCK_ASIO_CANCELLATION_SLOTS 1
#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/cancellation_type.hpp>
#endif
namespace distlock::detail::asio_impl {
namespace net = ::boost::asio;
}
#else
#include <asio/associated_executor.hpp>
#include <asio/async_result.hpp>
#include <asio/dispatch.hpp>
#include <asio/executor_work_guard.hpp>
#include <asio/post.hpp>
#include <asio/version.hpp>
#if ASIO_VERSION >= 101900
#define DISTLOCK_ASIO_CANCELLATION_SLOTS 1
#include <asio/associated_cancellation_slot.hpp>
#include <asio/cancellation_type.hpp>
#endif
namespace distlock::detail::asio_impl {
namespace net = ::asio;
}
#endif

namespace distlock {
namespace detail::asio_impl {

// One operation in flight: the Asio handler, its executor kept busy, and the
// stop source its cancellation slot triggers. Made on the initiating thread;
// the engine's handler is called once, on a provider's worker; finish() runs
// on the handler's executor.
template <class Handler, class... Args>
class pending : public std::enable_shared_from_this<pending<Handler, Args...>> {
public:
    explicit pending(Handler handler)
        : executor_(net::get_associated_executor(handler)),
          work_(net::make_work_guard(executor_)),
          handler_(std::move(handler)) {}

    // The token the operation's cancellation slot stops (a token that cannot
    // stop when the handler has no connected slot).
    std::stop_token connect_cancellation() {
#if defined(DISTLOCK_ASIO_CANCELLATION_SLOTS)
        auto slot = net::get_associated_cancellation_slot(handler_);
        if (slot.is_connected()) {
            slot.assign([stop = stop_](net::cancellation_type type) mutable {
                if (type != net::cancellation_type::none) stop.request_stop();
            });
            return stop_.get_token();
        }
#endif
        return {};
    }

    // The engine's handler: hands the outcome to the handler's executor.
    std::function<void(Args...)> engine_handler() {
        return [self = this->shared_from_this()](Args... args) { self->template complete<false>(std::move(args)...); };
    }

    // Runs finish(args) on the handler's executor: queued when `Queued` (from
    // inside the initiating function, which must not call the handler), else
    // at once where the caller already runs there. The executor keeps its work
    // until this thread is done handing over: an io_context's run() cannot
    // return (and the io_context be destroyed) while a worker is still inside
    // its post().
    template <bool Queued>
    void complete(Args... args) {
        auto work = std::move(work_);
        auto finishing = [self = this->shared_from_this(), ... args = std::move(args)]() mutable {
            self->finish(std::move(args)...);
        };
        if constexpr (Queued) net::post(executor_, std::move(finishing));
        else net::dispatch(executor_, std::move(finishing));
    }

private:
    void finish(Args... args) {
#if defined(DISTLOCK_ASIO_CANCELLATION_SLOTS)
        auto slot = net::get_associated_cancellation_slot(handler_);
        if (slot.is_connected()) slot.clear();
#endif
        Handler handler = std::move(handler_);
        std::move(handler)(std::move(args)...);
    }

    using executor_type = net::associated_executor_t<Handler>;
    const executor_type executor_;
    net::executor_work_guard<executor_type> work_;
    Handler handler_;
    std::stop_source stop_;
};

// The initiation of every operation: `start(engine_handler[, stop_token])`
// begins it on the primitive; a start that takes a stop_token is an
// acquisition, cancellable, and an error it throws at once is its outcome.
template <class... Args>
struct initiate {
    template <class Handler, class Start>
    void operator()(Handler&& handler, Start start) const {
        auto op = std::make_shared<pending<std::decay_t<Handler>, Args...>>(std::forward<Handler>(handler));
        if constexpr (std::is_invocable_v<Start&, std::function<void(Args...)>, std::stop_token>) {
            auto stop = op->connect_cancellation();
            try {
                start(op->engine_handler(), std::move(stop));
            } catch (...) {  // refused at once (would_deadlock_error, ...): an outcome like any other
                op->template complete<true>(std::current_exception(), false);
            }
        } else {
            start(op->engine_handler());
        }
    }
};

template <class Token, class Start>
auto initiate_acquire(Token&& token, Start start) {
    return net::async_initiate<Token, void(std::exception_ptr, bool)>(initiate<std::exception_ptr, bool>{}, token,
                                                                      std::move(start));
}

template <class Token, class Start>
auto initiate_release(Token&& token, Start start) {
    return net::async_initiate<Token, void()>(initiate<>{}, token, std::move(start));
}

}  // namespace detail::asio_impl

// Each works on any primitive with the member function of its name, and
// forwards to it:
//   async_lock(p, timeout, token), async_unlock(p, token)
//       a mutex, a multi_lock, or a shared_mutex's write side;
//   async_lock_shared(p, timeout, token), async_unlock_shared(p, token)
//       a shared_mutex's read side;
//   async_acquire(p, timeout, token), async_release(p, token)
//       one permit of a semaphore;
//   async_campaign(p, timeout, token), async_resign(p, token)
//       an election's candidate (granted = it leads).
#define DISTLOCK_ASIO_ACQUISITION(name)                                                                     \
    template <class Primitive, class Timeout, class CompletionToken>                                        \
    requires requires(Primitive & p, const Timeout& t) { p.name(t, acquire_handler{}, std::stop_token{}); } \
    auto name(Primitive& p, const Timeout& timeout, CompletionToken&& token) {                              \
        return detail::asio_impl::initiate_acquire(std::forward<CompletionToken>(token),                    \
                                                   [&p, timeout](acquire_handler h, std::stop_token stop) { \
                                                       p.name(timeout, std::move(h), std::move(stop));      \
                                                   });                                                      \
    }
#define DISTLOCK_ASIO_RELEASE(name)                                                                    \
    template <class Primitive, class CompletionToken>                                                  \
    requires requires(Primitive & p) { p.name(release_handler{}); }                                    \
    auto name(Primitive& p, CompletionToken&& token) {                                                 \
        return detail::asio_impl::initiate_release(std::forward<CompletionToken>(token),               \
                                                   [&p](release_handler h) { p.name(std::move(h)); }); \
    }
DISTLOCK_ASIO_ACQUISITION(async_lock)
DISTLOCK_ASIO_RELEASE(async_unlock)
DISTLOCK_ASIO_ACQUISITION(async_lock_shared)
DISTLOCK_ASIO_RELEASE(async_unlock_shared)
DISTLOCK_ASIO_ACQUISITION(async_acquire)
DISTLOCK_ASIO_RELEASE(async_release)
DISTLOCK_ASIO_ACQUISITION(async_campaign)
DISTLOCK_ASIO_RELEASE(async_resign)
#undef DISTLOCK_ASIO_ACQUISITION
#undef DISTLOCK_ASIO_RELEASE

}  // namespace distlock
