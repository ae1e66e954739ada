// Redis-specific tests of asynchronous waits' wake-ups (lock_handle::watch_releases):
// a release published by another provider wakes the handles watching that
// name only, never after their subscription ended; strategy=plain hands the
// lock to one queued asynchronous waiter and wakes it alone; many watched names
// share one pub/sub connection and its one thread. On the shared server of
// DISTLOCK_TEST_REDIS_URL (db 0 plain, db 1 reentrant).
#include <filesystem>

#include "redis_test_helpers.hpp"

namespace {

namespace spi = distlock::spi;

// Wake-ups received by a sink.
struct wake_count {
    std::atomic<int> n{0};
    spi::wake_sink sink() {
        return spi::wake_sink([this] { n.fetch_add(1); });
    }
};

// A provider of its own (a backend with its own connections and subscriber).
std::shared_ptr<spi::backend> provider(const std::string& strategy) {
    capture_registry registry;
    distlock::backends::redis::register_backend(registry);
    auto u = spi::url::parse(shared_url(strategy == "plain" ? "" : "/1?strategy=reentrant"));
    auto b = registry.factories.at("redis")(u);
    u.expect_all_taken();
    return b;
}

spi::lock_request request(const std::string& name, spi::lock_kind kind) {
    spi::lock_request r;
    r.name = name;
    r.kind = kind;
    r.permits = kind == spi::lock_kind::permit ? 1 : 0;
    r.lease = 10s;
    return r;
}

// Threads of this process, and its sockets.
std::size_t thread_count() {
    return static_cast<std::size_t>(std::distance(std::filesystem::directory_iterator("/proc/self/task"), {}));
}
std::size_t socket_count() {
    std::size_t n = 0;
    for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) {
        std::error_code ec;
        n += std::filesystem::read_symlink(e.path(), ec).string().rfind("socket:", 0) == 0 ? 1 : 0;
    }
    return n;
}

const char* kind_name(spi::lock_kind k) {
    switch (k) {
        case spi::lock_kind::read: return "read";
        case spi::lock_kind::write: return "write";
        case spi::lock_kind::permit: return "permit";
        default: return "exclusive";
    }
}

}  // namespace

TEST_CASE("watch_releases: another provider's release of the name wakes the watcher, another name's does not",
          "[redis][async][wake]") {
    for (std::string strategy : {"plain", "reentrant"}) {
        for (auto kind : {spi::lock_kind::exclusive, spi::lock_kind::write, spi::lock_kind::read,
                          spi::lock_kind::permit}) {
            DYNAMIC_SECTION("strategy=" << strategy << " kind=" << kind_name(kind)) {
                auto holder = provider(strategy), watcher = provider(strategy);
                const auto name = unique_name("wake"), other = unique_name("wake-other");
                // A reader waits for a writer; the others for their own kind.
                const auto holds = kind == spi::lock_kind::read ? spi::lock_kind::write : kind;
                auto held = holder->make_lock(request(name, holds));
                auto held_other = holder->make_lock(request(other, holds));
                REQUIRE(held->acquire(clk::now() + 5s, {}));
                REQUIRE(held_other->acquire(clk::now() + 5s, {}));
                auto waiting = watcher->make_lock(request(name, kind));
                wake_count woken;
                auto sub = waiting->watch_releases(woken.sink());
                REQUIRE(sub != nullptr);
                CHECK_FALSE(waiting->acquire(clk::now(), {}));  // one attempt: held
                held_other->release();  // published first, on the same connection: read before the next
                held->release();
                REQUIRE(eventually([&] { return woken.n.load() >= 1; }, 5s));
                CHECK(woken.n.load() == 1);
                auto grant = waiting->acquire(clk::now(), {});  // the attempt the wake-up asks for
                CHECK(grant.has_value());
                sub.reset();
                if (grant) waiting->release();
            }
        }
    }
}

TEST_CASE("watch_releases: no wake-up after the subscription is destroyed", "[redis][async][wake]") {
    for (std::string strategy : {"plain", "reentrant"}) {
        DYNAMIC_SECTION("strategy=" << strategy) {
            auto holder = provider(strategy), watcher = provider(strategy);
            const auto name = unique_name("wake-gone");
            auto held = holder->make_lock(request(name, spi::lock_kind::exclusive));
            REQUIRE(held->acquire(clk::now() + 5s, {}));
            auto kept = watcher->make_lock(request(name, spi::lock_kind::exclusive));
            auto dropped = watcher->make_lock(request(name, spi::lock_kind::exclusive));
            wake_count kept_woken, dropped_woken;
            auto kept_sub = kept->watch_releases(kept_woken.sink());
            auto dropped_sub = dropped->watch_releases(dropped_woken.sink());
            dropped_sub.reset();
            held->release();  // free for all: neither handle queued
            REQUIRE(eventually([&] { return kept_woken.n.load() >= 1; }, 5s));
            CHECK(dropped_woken.n.load() == 0);  // the same message, on the same connection
        }
    }
}

TEST_CASE("watch_releases, strategy=plain: a release hands the lock to the first queued async waiter and wakes it alone",
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
    REQUIRE(eventually([&] { return a_woken.n.load() == 1; }, 5s));
    CHECK(b_woken.n.load() == 0);
    CHECK(c_woken.n.load() == 0);
    CHECK(raw.string({"GET", base}).rfind("r:", 0) == 0);  // reserved for a
    CHECK_FALSE(b->acquire(clk::now(), {}));             // not for b
    // a gives up without taking it: leaving the queue passes the reservation on to b at once.
    a_sub.reset();
    REQUIRE(eventually([&] { return b_woken.n.load() == 1; }, 5s));
    CHECK(c_woken.n.load() == 0);
    REQUIRE(b->acquire(clk::now(), {}));
    b_sub.reset();  // granted: nothing to leave
    b->release();   // hands it to c
    REQUIRE(eventually([&] { return c_woken.n.load() == 1; }, 5s));
    REQUIRE(c->acquire(clk::now(), {}));
    c_sub.reset();
    CHECK(raw.integer({"LLEN", base + ":queue"}) == 0);
    CHECK(raw.integer({"ZCARD", base + ":waiters"}) == 0);
    c->release();
    CHECK(raw.integer({"EXISTS", base}) == 0);
    CHECK(a_woken.n.load() == 1);
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
            std::vector<std::unique_ptr<spi::lock_handle>> handles;
            std::vector<std::unique_ptr<spi::wake_subscription>> subs;
            std::vector<wake_count> woken(n);
            for (int i = 0; i < n; ++i) {
                handles.push_back(watcher->make_lock(request(prefix + "-" + std::to_string(i), spi::lock_kind::exclusive)));
                subs.push_back(handles.back()->watch_releases(woken[i].sink()));
            }
            CHECK(thread_count() - threads <= 1);  // the subscriber's reader
            CHECK(socket_count() - sockets <= 1);  // its connection (commands use the pool's, made at connect)
            auto channels = raw.cmd({"PUBSUB", "CHANNELS", "*" + prefix + "-*"});
            CHECK(channels->elements == n);  // all subscribed, on that one connection
            // A release of one of them wakes that one alone.
            auto held = holder->make_lock(request(prefix + "-7", spi::lock_kind::exclusive));
            REQUIRE(held->acquire(clk::now() + 5s, {}));
            held->release();
            REQUIRE(eventually([&] { return woken[7].n.load() == 1; }, 5s));
            int total = 0;
            for (auto& w : woken) total += w.n.load();
            CHECK(total == 1);
            subs.clear();
            // Unsubscribed (after the subscriber's linger, a second).
            CHECK(eventually([&] { return raw.cmd({"PUBSUB", "CHANNELS", "*" + prefix + "-*"})->elements == 0; }, 10s));
        }
    }
}
