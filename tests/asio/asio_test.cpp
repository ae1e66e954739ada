// Tests of <distlock/asio.hpp> on the backend URL under test (--backend; none:
// memory://): 1,000 coroutines on one single-threaded io_context contending
// for 10 names; cancellation through a cancellation slot mid-wait; each
// completion token (use_awaitable, deferred, use_future, a plain handler) and
// each primitive. Built over standalone Asio, and over Boost.Asio with
// DISTLOCK_ASIO_BOOST (where Boost's Asio has no cancellation slots or
// deferred, those cases are left out: see the #if below).
#include <distlock/asio.hpp>

#include <array>
#include <catch2/catch.hpp>
#include <chrono>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "async_wait.hpp"
#include "distlock/distlock.hpp"
#include "support.hpp"

#if defined(DISTLOCK_ASIO_BOOST)
#include <boost/asio.hpp>
namespace net = boost::asio;
#define ASIO_TEST_VERSION BOOST_ASIO_VERSION
#else
#include <asio.hpp>
namespace net = asio;
#define ASIO_TEST_VERSION ASIO_VERSION
#endif
#if defined(DISTLOCK_ASIO_CANCELLATION_SLOTS)
#if defined(DISTLOCK_ASIO_BOOST)
#include <boost/asio/experimental/awaitable_operators.hpp>
#else
#include <asio/experimental/awaitable_operators.hpp>
#endif
#endif
#if ASIO_TEST_VERSION >= 102400
#define ASIO_TEST_DEFERRED net::deferred
#elif ASIO_TEST_VERSION >= 102000
#if defined(DISTLOCK_ASIO_BOOST)
#include <boost/asio/experimental/deferred.hpp>
#else
#include <asio/experimental/deferred.hpp>
#endif
#define ASIO_TEST_DEFERRED net::experimental::deferred
#endif

using namespace std::chrono_literals;

namespace {

std::string url() {
    const auto& u = distlock::test::backend_url();
    return u.empty() ? "memory://asio-tests" : u;
}

// One acquisition's outcome, as its handler saw it.
struct outcome {
    bool done = false;
    std::exception_ptr error;
    bool granted = false;
};

// A plain handler that records into `o` on the io_context's thread.
[[maybe_unused]] auto record_on(net::io_context& io, outcome& o) {
    return net::bind_executor(io, [&o](std::exception_ptr error, bool granted) {
        o.done = true;
        o.error = std::move(error);
        o.granted = granted;
    });
}

[[maybe_unused]] bool is_cancelled(const std::exception_ptr& error) {
    return distlock::test::errc_of(error) == static_cast<int>(distlock::errc::cancelled);
}

// An io_context that, before it is destroyed, runs until no operation has
// work on it (a minute at most): no provider worker is inside it then.
struct settled_io : net::io_context {
    settled_io() : net::io_context(1) {}
    ~settled_io() {
        restart();
        run_for(std::chrono::minutes(1));
    }
};

// Runs `io` until `cond` holds or `limit` passes (a pending operation keeps
// it from running out of work).
template <class F>
bool run_until(net::io_context& io, F cond, std::chrono::milliseconds limit) {
    const auto until = std::chrono::steady_clock::now() + limit;
    while (!cond() && std::chrono::steady_clock::now() < until) {
        if (io.stopped()) io.restart();  // it ran out of work before: a later operation gives it more
        io.run_one_for(10ms);
    }
    return cond();
}

// ---- 1,000 coroutines, 10 names ----------------------------------------------
// What one name's critical sections left: a count incremented by a read, a
// suspension and a write (a lost update shows when two overlap), and how many
// were inside at once.
struct tally {
    long count = 0;
    int inside = 0;
    int most_inside = 0;
};

struct contention {
    std::array<tally, 10> names{};
    int timeouts = 0;
    int finished = 0;
    std::string errors;
};

net::awaitable<void> take_count_release(distlock::mutex& m, tally& t, contention& c) {
    if (!co_await distlock::async_lock(m, 5min, net::use_awaitable)) {
        ++c.timeouts;
        co_return;
    }
    t.most_inside = std::max(t.most_inside, ++t.inside);
    const long seen = t.count;
    co_await net::post(co_await net::this_coro::executor, net::use_awaitable);  // the others run meanwhile
    t.count = seen + 1;
    --t.inside;
    co_await distlock::async_unlock(m, net::use_awaitable);
}

}  // namespace

TEST_CASE("1,000 coroutines on one io_context contend for 10 names and never overlap", "[asio]") {
    constexpr int coroutines = 1000;
    // Four connections: each name's waiters meet in each provider's local
    // queue and, across providers, on the server.
    std::vector<distlock::provider> providers;
    for (int p = 0; p < 4; ++p) providers.push_back(distlock::connect(url()));
    contention c;
    std::vector<std::string> names;
    for (std::size_t n = 0; n < c.names.size(); ++n)
        names.push_back(distlock::test::unique_name("asio:contend:" + std::to_string(n)));
    std::vector<distlock::mutex> mutexes;  // one each: an object has one grant at a time
    mutexes.reserve(coroutines);
    for (int i = 0; i < coroutines; ++i)
        mutexes.push_back(providers[(i / names.size()) % providers.size()].mutex(names[i % names.size()]));

    settled_io io;
    for (int i = 0; i < coroutines; ++i)
        net::co_spawn(io, take_count_release(mutexes[i], c.names[i % names.size()], c), [&c](std::exception_ptr e) {
            ++c.finished;
            if (!e) return;
            try {
                std::rethrow_exception(e);
            } catch (const std::exception& x) {
                c.errors += std::string(x.what()) + "\n";
            }
        });
    io.run();

    CHECK(c.errors == "");
    CHECK(c.finished == coroutines);
    CHECK(c.timeouts == 0);
    for (std::size_t n = 0; n < c.names.size(); ++n) {
        INFO("name " << n);
        CHECK(c.names[n].count == coroutines / 10);
        CHECK(c.names[n].most_inside == 1);
    }
}

#if defined(DISTLOCK_ASIO_CANCELLATION_SLOTS)
TEST_CASE(
    "a wait cancelled through its cancellation slot ends with cancelled_error and the next acquirer gets the lock "
    "at once",
    "[asio][cancel]") {
    auto locks = distlock::connect(url());
    const auto name = distlock::test::unique_name("asio:cancel");
    auto holder = locks.mutex(name);
    auto waiter = locks.mutex(name);
    auto next = locks.mutex(name);
    REQUIRE(holder.try_lock());
    settled_io io;
    net::cancellation_signal signal;

    SECTION("a plain handler bound to the slot") {
        outcome o;
        distlock::async_lock(waiter, 5min, net::bind_cancellation_slot(signal.slot(), record_on(io, o)));
        CHECK_FALSE(run_until(
            io, [&] { return o.done; }, 300ms));  // waiting: the holder has it
        signal.emit(net::cancellation_type::terminal);
        REQUIRE(run_until(
            io, [&] { return o.done; }, 30s));
        CHECK(is_cancelled(o.error));
        CHECK_FALSE(o.granted);
    }
    SECTION("a coroutine's cancellation state") {
        bool started = false;
        std::exception_ptr ended;
        bool done = false;
        net::co_spawn(
            io,
            [&]() -> net::awaitable<void> {
                started = true;
                co_await distlock::async_lock(waiter, 5min, net::use_awaitable);
            },
            net::bind_cancellation_slot(signal.slot(), [&](std::exception_ptr e) {
                ended = std::move(e);
                done = true;
            }));
        CHECK_FALSE(run_until(
            io, [&] { return done; }, 300ms));
        REQUIRE(started);
        signal.emit(net::cancellation_type::terminal);
        REQUIRE(run_until(
            io, [&] { return done; }, 30s));
        CHECK(is_cancelled(ended));
    }
    SECTION("the loser of awaitable_operators' || (a timer wins)") {
        using namespace net::experimental::awaitable_operators;
        std::size_t winner = 9;
        std::string error;
        net::co_spawn(
            io,
            [&]() -> net::awaitable<void> {
                net::steady_timer timer(co_await net::this_coro::executor, 300ms);
                auto first = co_await (distlock::async_lock(waiter, 5min, net::use_awaitable) ||
                                       timer.async_wait(net::use_awaitable));
                winner = first.index();
            },
            [&](std::exception_ptr e) { error = e ? "the coroutine threw" : ""; });
        REQUIRE(run_until(
            io, [&] { return winner != 9 || !error.empty(); }, 30s));
        CHECK(error == "");
        CHECK(winner == 1);
    }
    CHECK_FALSE(waiter.held());
    holder.unlock();
    // Nothing of the cancelled wait is left on the server: one attempt takes it.
    CHECK(next.try_lock());
    next.unlock();
}
#endif

#if defined(ASIO_TEST_DEFERRED)
TEST_CASE("deferred operations start only when launched", "[asio][token]") {
    auto locks = distlock::connect(url());
    const auto name = distlock::test::unique_name("asio:deferred");
    auto m = locks.mutex(name);
    auto other = locks.mutex(name);
    auto lock_op = distlock::async_lock(m, 30s, ASIO_TEST_DEFERRED);
    auto unlock_op = distlock::async_unlock(m, ASIO_TEST_DEFERRED);
    REQUIRE(other.try_lock());  // nothing was started
    other.unlock();

    settled_io io;
    outcome o;
    std::move(lock_op)(record_on(io, o));
    REQUIRE(run_until(
        io, [&] { return o.done; }, 60s));
    CHECK_FALSE(o.error);
    CHECK(o.granted);
    CHECK(m.held());
    bool released = false;
    std::move(unlock_op)(net::bind_executor(io, [&] { released = true; }));
    REQUIRE(run_until(
        io, [&] { return released; }, 60s));
    CHECK(other.try_lock());
    other.unlock();
}
#endif

TEST_CASE("use_future gives the grant, the timeout and the error", "[asio][token]") {
    auto locks = distlock::connect(url());
    const auto name = distlock::test::unique_name("asio:future");
    auto m = locks.mutex(name);
    auto other = locks.mutex(name);

    CHECK(distlock::async_lock(m, 30s, net::use_future).get());
    CHECK_FALSE(distlock::async_lock(other, 200ms, net::use_future).get());  // times out: m holds it
#if defined(DISTLOCK_ASIO_CANCELLATION_SLOTS)
    net::cancellation_signal signal;
    auto cancelled = distlock::async_lock(other, 5min, net::bind_cancellation_slot(signal.slot(), net::use_future));
    CHECK(cancelled.wait_for(200ms) == std::future_status::timeout);  // waiting
    signal.emit(net::cancellation_type::terminal);
    CHECK_THROWS_AS(cancelled.get(), distlock::cancelled_error);
#endif
    // An error the primitive raises at once (a moved-from object) is the
    // outcome too, never thrown by the initiating call.
    auto moved = std::move(other);
    std::future<bool> refused;
    CHECK_NOTHROW(refused = distlock::async_lock(other, 30s, net::use_future));
    CHECK_THROWS_AS(refused.get(), distlock::invalid_argument_error);
    other = std::move(moved);
    std::future<void> released = distlock::async_unlock(m, net::use_future);
    released.get();
    CHECK(distlock::async_lock(other, 30s, net::use_future).get());
    distlock::async_unlock(other, net::use_future).get();
}

TEST_CASE("a plain handler keeps its io_context running until it has run there", "[asio][token]") {
    auto locks = distlock::connect(url());
    const auto name = distlock::test::unique_name("asio:handler");
    auto holder = locks.mutex(name);
    auto waiter = locks.mutex(name);
    REQUIRE(holder.try_lock());
    settled_io io;
    outcome o;
    std::thread::id ran_on;
    distlock::async_lock(waiter, 5min, net::bind_executor(io, [&](std::exception_ptr error, bool granted) {
                             o = {true, std::move(error), granted};
                             ran_on = std::this_thread::get_id();
                         }));
    // The holder lets go a little later by a release whose handler has no
    // executor: from then on io.run() has nothing but the pending lock.
    net::steady_timer later(io, 300ms);
    later.async_wait([&](auto) { distlock::async_unlock(holder, [] {}); });
    io.run();  // returns only once the handler ran: the operation kept it busy
    REQUIRE(o.done);
    CHECK_FALSE(o.error);
    CHECK(o.granted);
    CHECK(ran_on == std::this_thread::get_id());

    // Without an executor of its own the handler runs on the provider's worker.
    std::promise<std::thread::id> unlocked_on;
    distlock::async_unlock(waiter, [&] { unlocked_on.set_value(std::this_thread::get_id()); });
    CHECK(unlocked_on.get_future().get() != std::this_thread::get_id());
    CHECK(holder.try_lock());
    holder.unlock();
}

namespace {

// Runs `body` as the only coroutine of a fresh io_context; "" or what it threw.
template <class Body>
std::string run_coroutine(Body body) {
    settled_io io;
    std::string error;
    net::co_spawn(io, std::move(body), [&](std::exception_ptr e) {
        if (!e) return;
        try {
            std::rethrow_exception(e);
        } catch (const std::exception& x) {
            error = x.what();
        }
    });
    io.run();
    return error;
}

}  // namespace

TEST_CASE("both sides of a read-write lock through use_awaitable", "[asio][primitives]") {
    auto locks = distlock::connect(url());
    if (!locks.caps().supports(distlock::feature::read_write)) {
        WARN("not applicable: " << locks.caps().why_not(distlock::feature::read_write));
        return;
    }
    const auto name = distlock::test::unique_name("asio:rw");
    auto r1 = locks.shared_mutex(name);
    auto r2 = locks.shared_mutex(name);
    auto w = locks.shared_mutex(name);
    std::vector<std::string> seen;
    CHECK(run_coroutine([&]() -> net::awaitable<void> {
              seen.push_back(co_await distlock::async_lock_shared(r1, 30s, net::use_awaitable) ? "r1" : "-");
              seen.push_back(co_await distlock::async_lock_shared(r2, 30s, net::use_awaitable) ? "r2" : "-");
              seen.push_back(co_await distlock::async_lock(w, 200ms, net::use_awaitable) ? "w" : "w timed out");
              co_await distlock::async_unlock_shared(r1, net::use_awaitable);
              co_await distlock::async_unlock_shared(r2, net::use_awaitable);
              seen.push_back(co_await distlock::async_lock(w, 30s, net::use_awaitable) ? "w" : "-");
              co_await distlock::async_unlock(w, net::use_awaitable);
          }) == "");
    CHECK(seen == std::vector<std::string>{"r1", "r2", "w timed out", "w"});
}

TEST_CASE("a semaphore's permits through use_awaitable", "[asio][primitives]") {
    auto locks = distlock::connect(url());
    if (!locks.caps().supports(distlock::feature::semaphore)) {
        WARN("not applicable: " << locks.caps().why_not(distlock::feature::semaphore));
        return;
    }
    const auto name = distlock::test::unique_name("asio:sem");
    auto a = locks.semaphore(name, 2);
    auto b = locks.semaphore(name, 2);
    auto c = locks.semaphore(name, 2);
    std::vector<std::string> seen;
    CHECK(run_coroutine([&]() -> net::awaitable<void> {
              seen.push_back(co_await distlock::async_acquire(a, 30s, net::use_awaitable) ? "a" : "-");
              seen.push_back(co_await distlock::async_acquire(b, 30s, net::use_awaitable) ? "b" : "-");
              seen.push_back(co_await distlock::async_acquire(c, 200ms, net::use_awaitable) ? "c" : "c timed out");
              co_await distlock::async_release(a, net::use_awaitable);
              seen.push_back(co_await distlock::async_acquire(c, 30s, net::use_awaitable) ? "c" : "-");
              co_await distlock::async_release(b, net::use_awaitable);
              co_await distlock::async_release(c, net::use_awaitable);
          }) == "");
    CHECK(seen == std::vector<std::string>{"a", "b", "c timed out", "c"});
}

TEST_CASE("a multi_lock and an election through use_awaitable", "[asio][primitives]") {
    auto locks = distlock::connect(url());
    const auto a = distlock::test::unique_name("asio:multi:a");
    const auto b = distlock::test::unique_name("asio:multi:b");
    const auto c = distlock::test::unique_name("asio:multi:c");
    auto first = locks.multi_lock({a, b});
    auto second = locks.multi_lock({b, c});
    std::vector<std::string> seen;
    CHECK(run_coroutine([&]() -> net::awaitable<void> {
              seen.push_back(co_await distlock::async_lock(first, 30s, net::use_awaitable) ? "ab" : "-");
              seen.push_back(co_await distlock::async_lock(second, 200ms, net::use_awaitable) ? "bc" : "bc timed out");
              co_await distlock::async_unlock(first, net::use_awaitable);
              seen.push_back(co_await distlock::async_lock(second, 30s, net::use_awaitable) ? "bc" : "-");
              co_await distlock::async_unlock(second, net::use_awaitable);
          }) == "");
    CHECK(seen == std::vector<std::string>{"ab", "bc timed out", "bc"});

    if (!locks.caps().supports(distlock::feature::election)) {
        WARN("elections not applicable: " << locks.caps().why_not(distlock::feature::election));
        return;
    }
    const auto name = distlock::test::unique_name("asio:election");
    auto one = locks.election(name);
    auto two = locks.election(name);
    seen.clear();
    CHECK(run_coroutine([&]() -> net::awaitable<void> {
              seen.push_back(co_await distlock::async_campaign(one, 30s, net::use_awaitable) ? "one leads" : "-");
              seen.push_back(co_await distlock::async_campaign(two, 200ms, net::use_awaitable) ? "two leads"
                                                                                               : "two timed out");
              co_await distlock::async_resign(one, net::use_awaitable);
              seen.push_back(co_await distlock::async_campaign(two, 30s, net::use_awaitable) ? "two leads" : "-");
              co_await distlock::async_resign(two, net::use_awaitable);
          }) == "");
    CHECK(seen == std::vector<std::string>{"one leads", "two timed out", "two leads"});
}
