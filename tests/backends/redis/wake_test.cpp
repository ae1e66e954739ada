// Redis-specific tests of asynchronous waits' wake-ups (lock_handle::watch_releases):
// a release published by another provider wakes the handles watching that
// name only, never after their subscription ended; a killed pub/sub connection
// is made again and wakes every waiter (it may have missed a release);
// strategy=plain hands the lock to one queued asynchronous waiter and wakes it
// alone; many watched names share one pub/sub connection and its one thread;
// async_lock hands off with one attempt per wake-up. On the shared server of
// DISTLOCK_TEST_REDIS_URL (db 0 plain, db 1 reentrant).
#include "redis_test_helpers.hpp"
#include "wake_counting.hpp"

namespace {

namespace spi = distlock::spi;
using namespace wake_support;

// A provider of its own (a backend with its own connections and subscriber).
std::shared_ptr<spi::backend> provider(const std::string& strategy) {
    capture_registry registry;
    distlock::backends::redis::register_backend(registry);
    auto u = spi::url::parse(shared_url(strategy == "plain" ? "" : "/1?strategy=reentrant"));
    auto b = registry.factories.at("redis")(u);
    u.expect_all_taken();
    return b;
}

}  // namespace

TEST_CASE("watch_releases: another provider's release of the name wakes the watcher, another name's does not",
          "[redis][async][wake]") {
    for (std::string strategy : {"plain", "reentrant"}) {
        for (auto kind :
             {spi::lock_kind::exclusive, spi::lock_kind::write, spi::lock_kind::read, spi::lock_kind::permit}) {
            DYNAMIC_SECTION("strategy=" << strategy << " kind=" << kind_name(kind)) {
                auto holder = provider(strategy), watcher = provider(strategy);
                // A reader waits for a writer; the others for their own kind.
                const auto holds = kind == spi::lock_kind::read ? spi::lock_kind::write : kind;
                check_release_wakes(*holder, *watcher, holds, kind, unique_name("wake"), unique_name("wake-other"))
                    ->release();
            }
        }
    }
}

TEST_CASE("watch_releases: no wake-up after the subscription is destroyed", "[redis][async][wake]") {
    for (std::string strategy : {"plain", "reentrant"}) {
        DYNAMIC_SECTION("strategy=" << strategy) {
            auto holder = provider(strategy), watcher = provider(strategy);
            check_no_wake_after_end(*holder, *watcher, unique_name("wake-gone"));  // free for all: nobody queued
        }
    }
}

TEST_CASE("watch_releases: a killed pub/sub connection is made again, and wakes every waiter", "[redis][async][wake]") {
    for (std::string strategy : {"plain", "reentrant"}) {
        DYNAMIC_SECTION("strategy=" << strategy) {
            auto holder = provider(strategy), watcher = provider(strategy);
            raw_client raw(shared_port());
            const auto name = unique_name("wake-kill");
            const auto subscribed = [&] { return raw.cmd({"PUBSUB", "CHANNELS", "*" + name + "*"})->elements == 1; };
            watched_wait w(*holder, *watcher, name);
            REQUIRE(subscribed());  // confirmed before watch_releases returned
            // The watcher's subscriber is the server's one pub/sub client (the holder has none).
            REQUIRE(raw.integer({"CLIENT", "KILL", "TYPE", "pubsub"}) == 1);
            // Back (subscribed again): the waiters are told that a release may have gone unheard.
            REQUIRE(eventually([&] { return w.woken.value() == 1; }, 30s));
            REQUIRE(eventually(subscribed, 20s));
            w.held->release();
            REQUIRE(eventually([&] { return w.woken.value() == 2; }, 20s));
        }
    }
}

TEST_CASE(
    "watch_releases, strategy=plain: a release hands the lock to the first queued async waiter and wakes it alone",
    "[redis][async][wake][handoff]") {
    auto holder = provider("plain"), watcher = provider("plain");
    raw_client raw(shared_port());
    const auto name = unique_name("wake-queue");
    const std::string base = "distlock:{" + name + "}";
    auto held = holder->make_lock(request(name, spi::lock_kind::exclusive));
    REQUIRE(held->acquire(clk::now() + 5s, {}));
    auto a = watcher->make_lock(request(name, spi::lock_kind::exclusive));
    auto b = watcher->make_lock(request(name, spi::lock_kind::exclusive));
    auto c = watcher->make_lock(request(name, spi::lock_kind::exclusive));
    wake_count a_woken, b_woken, c_woken;
    auto a_sub = a->watch_releases(a_woken.sink());
    auto b_sub = b->watch_releases(b_woken.sink());
    auto c_sub = c->watch_releases(c_woken.sink());
    CHECK_FALSE(a->acquire(clk::now(), {}));  // each one attempt queues it, in this order
    CHECK_FALSE(b->acquire(clk::now(), {}));
    CHECK_FALSE(c->acquire(clk::now(), {}));
    CHECK(raw.integer({"LLEN", base + ":queue"}) == 3);
    held->release();  // hands the lock to a
    REQUIRE(eventually([&] { return a_woken.value() == 1; }, 20s));
    CHECK(b_woken.value() == 0);
    CHECK(c_woken.value() == 0);
    CHECK(raw.string({"GET", base}).rfind("r:", 0) == 0);  // reserved for a
    CHECK_FALSE(b->acquire(clk::now(), {}));               // not for b
    // a gives up without taking it: leaving the queue passes the reservation on to b at once.
    a_sub.reset();
    REQUIRE(eventually([&] { return b_woken.value() == 1; }, 20s));
    CHECK(c_woken.value() == 0);
    REQUIRE(b->acquire(clk::now(), {}));
    b_sub.reset();  // granted: nothing to leave
    b->release();   // hands it to c
    REQUIRE(eventually([&] { return c_woken.value() == 1; }, 20s));
    REQUIRE(c->acquire(clk::now(), {}));
    c_sub.reset();
    CHECK(raw.integer({"LLEN", base + ":queue"}) == 0);
    CHECK(raw.integer({"ZCARD", base + ":waiters"}) == 0);
    c->release();
    CHECK(raw.integer({"EXISTS", base}) == 0);
    CHECK(a_woken.value() == 1);
}

TEST_CASE("watch_releases: 1,000 watched names share one pub/sub connection and its thread",
          "[redis][async][wake][bounded]") {
    for (std::string strategy : {"plain", "reentrant"}) {
        DYNAMIC_SECTION("strategy=" << strategy) {
            auto holder = provider(strategy), watcher = provider(strategy);
            raw_client raw(shared_port(), {}, strategy == "plain" ? 0 : 1);
            const auto prefix = unique_name("wake-many");
            const auto threads = thread_count(), sockets = socket_count();
            constexpr int n = 1000;
            many_watchers many(*watcher, prefix, n);
            CHECK(thread_count() - threads <= 1);  // the subscriber's reader
            CHECK(socket_count() - sockets <= 1);  // its connection (commands use the pool's, made at connect)
            auto channels = raw.cmd({"PUBSUB", "CHANNELS", "*" + prefix + "-*"});
            CHECK(channels->elements == n);  // all subscribed, on that one connection
            many.check_one_woken(*holder, prefix);
            many.subs.clear();
            // Unsubscribed (after the subscriber's linger, a second).
            CHECK(eventually([&] { return raw.cmd({"PUBSUB", "CHANNELS", "*" + prefix + "-*"})->elements == 0; }, 30s));
        }
    }
}

TEST_CASE("async_lock hands off after a release with one attempt per wake-up, and in the process with no subscription",
          "[redis][async][wake][e2e]") {
    for (std::string strategy : {"plain", "reentrant"}) {
        DYNAMIC_SECTION("strategy=" << strategy) {
            const auto url = shared_url(strategy == "plain" ? "" : "/1?strategy=reentrant");
            register_counting("count-redis-" + strategy, [strategy] { return provider(strategy); });
            auto holder = distlock::connect(url), waiter = distlock::connect("count-redis-" + strategy + "://x");
            check_event_handoff(holder, waiter, unique_name("handoff"));
            check_gate_handoff(waiter, unique_name("gate-handoff"));
        }
    }
}
