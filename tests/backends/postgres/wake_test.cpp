// postgres://: asynchronous waits' wake-ups (lock_handle::watch_releases) on
// the lease-table and optimistic strategies: a release NOTIFYed by another
// provider wakes the waiters of that name only, never after their subscription
// ended; a lost LISTEN session is made again and wakes every waiter (it may
// have missed a release); 1,000 watched names share one LISTEN session and one
// thread. Session strategies have no release event: no subscription.
#include <catch2/catch.hpp>
#include <filesystem>

#include "backend.hpp"
#include "distlock/spi/backend.hpp"
#include "sql_test_support.hpp"
#include "support.hpp"

using namespace std::chrono_literals;
using namespace sql_test;
using distlock::test::eventually;
using distlock::test::unique_name;
using clk = std::chrono::steady_clock;

namespace {

namespace spi = distlock::spi;

struct wake_count {
    std::atomic<int> n{0};
    spi::wake_sink sink() {
        return spi::wake_sink([this] { n.fetch_add(1); });
    }
};

std::shared_ptr<spi::backend> provider(const std::string& strategy) {
    auto u = spi::url::parse(url_of(strategy));
    auto settings = s::take_settings(u, facts().scheme, facts().native);
    return s::make_backend(facts().make_dialect(u, settings.conn), settings);
}

spi::lock_request request(const std::string& name, spi::lock_kind kind = spi::lock_kind::exclusive) {
    spi::lock_request r;
    r.name = name;
    r.kind = kind;
    r.permits = kind == spi::lock_kind::permit ? 1 : 0;
    r.lease = 10s;
    return r;
}

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

// Sessions of the server whose last statement was a LISTEN (the shared ones).
std::int64_t listening_sessions(raw_sql& db) {
    return std::stoll(
        db.scalar("SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'LISTEN %' AND pid <> pg_backend_pid()")
            .value_or("0"));
}

}  // namespace

TEST_CASE("watch_releases: another provider's release of the name wakes the watcher, another name's does not",
          "[postgres][async][wake]") {
    for (std::string strategy : {"lease-table", "optimistic"}) {
        for (auto kind : {spi::lock_kind::exclusive, spi::lock_kind::permit}) {
            DYNAMIC_SECTION(strategy << (kind == spi::lock_kind::permit ? " permit" : " mutex")) {
                auto holder = provider(strategy), watcher = provider(strategy);
                const auto name = unique_name("wake"), other = unique_name("wake-other");
                auto held = holder->make_lock(request(name, kind));
                auto held_other = holder->make_lock(request(other, kind));
                REQUIRE(held->acquire(clk::now() + 5s, {}));
                REQUIRE(held_other->acquire(clk::now() + 5s, {}));
                auto waiting = watcher->make_lock(request(name, kind));
                wake_count woken;
                auto sub = waiting->watch_releases(woken.sink());
                REQUIRE(sub != nullptr);
                CHECK_FALSE(waiting->acquire(clk::now(), {}));  // one attempt: held
                held_other->release();  // notified first, on the same session: read before the next
                held->release();
                REQUIRE(eventually([&] { return woken.n.load() >= 1; }, 5s));
                CHECK(woken.n.load() == 1);
                auto grant = waiting->acquire(clk::now(), {});
                CHECK(grant.has_value());
                sub.reset();
                if (grant) waiting->release();
            }
        }
    }
}

TEST_CASE("watch_releases: no wake-up after the subscription is destroyed", "[postgres][async][wake]") {
    auto holder = provider("lease-table"), watcher = provider("lease-table");
    const auto name = unique_name("wake-gone");
    auto held = holder->make_lock(request(name));
    REQUIRE(held->acquire(clk::now() + 5s, {}));
    auto kept = watcher->make_lock(request(name)), dropped = watcher->make_lock(request(name));
    wake_count kept_woken, dropped_woken;
    auto kept_sub = kept->watch_releases(kept_woken.sink());
    auto dropped_sub = dropped->watch_releases(dropped_woken.sink());
    dropped_sub.reset();
    held->release();
    REQUIRE(eventually([&] { return kept_woken.n.load() >= 1; }, 5s));
    CHECK(dropped_woken.n.load() == 0);  // the same notification
}

TEST_CASE("watch_releases: a LISTEN session that is killed is made again, and wakes every waiter",
          "[postgres][async][wake]") {
    raw_sql db(url_of("lease-table"));
    auto holder = provider("lease-table"), watcher = provider("lease-table");
    const auto name = unique_name("wake-kill");
    auto held = holder->make_lock(request(name));
    REQUIRE(held->acquire(clk::now() + 5s, {}));
    auto waiting = watcher->make_lock(request(name));
    wake_count woken;
    auto sub = waiting->watch_releases(woken.sink());
    REQUIRE(eventually([&] { return listening_sessions(db) == 1; }, 5s));
    const auto pid =
        db.scalar("SELECT pid FROM pg_stat_activity WHERE query LIKE 'LISTEN %' AND pid <> pg_backend_pid()");
    REQUIRE(pid);
    db.kill(std::stoll(*pid));
    // Back (another session): the waiters are told that a release may have gone unheard.
    REQUIRE(eventually([&] { return woken.n.load() == 1; }, 10s));
    REQUIRE(eventually([&] { return listening_sessions(db) == 1; }, 5s));
    held->release();
    REQUIRE(eventually([&] { return woken.n.load() == 2; }, 5s));
}

TEST_CASE("watch_releases: 1,000 watched names share one LISTEN session and one thread",
          "[postgres][async][wake][bounded]") {
    raw_sql db(url_of("lease-table"));
    auto holder = provider("lease-table"), watcher = provider("lease-table");
    REQUIRE(eventually([&] { return listening_sessions(db) == 0; }, 5s));  // other cases' providers are gone
    const auto threads = thread_count(), sockets = socket_count();
    const auto prefix = unique_name("wake-many");
    constexpr int n = 1000;
    std::vector<std::unique_ptr<spi::lock_handle>> handles;
    std::vector<std::unique_ptr<spi::wake_subscription>> subs;
    std::vector<wake_count> woken(n);
    for (int i = 0; i < n; ++i) {
        handles.push_back(watcher->make_lock(request(prefix + "-" + std::to_string(i))));
        subs.push_back(handles.back()->watch_releases(woken[i].sink()));
    }
    CHECK(thread_count() - threads <= 1);  // the listener's thread
    CHECK(socket_count() - sockets <= 1);  // its session (statements use the pool's)
    CHECK(listening_sessions(db) == 1);
    auto held = holder->make_lock(request(prefix + "-7"));
    REQUIRE(held->acquire(clk::now() + 5s, {}));
    held->release();
    REQUIRE(eventually([&] { return woken[7].n.load() == 1; }, 5s));
    int total = 0;
    for (auto& w : woken) total += w.n.load();
    CHECK(total == 1);
    subs.clear();
    // The session is closed a while after its last waiter left.
    CHECK(eventually([&] { return listening_sessions(db) == 0; }, 10s));
}

TEST_CASE("watch_releases: session strategies have no release event (the core polls)", "[postgres][async][wake]") {
    for (std::string strategy : {"advisory", "for-update"}) {
        auto watcher = provider(strategy);
        auto h = watcher->make_lock(request(unique_name("wake-session")));
        CHECK(h->watch_releases(spi::wake_sink{}) == nullptr);
    }
}
