// postgres://: asynchronous waits' wake-ups (lock_handle::watch_releases) on
// the lease-table and optimistic strategies: a release NOTIFYed by another
// provider wakes the waiters of that name only, never after their subscription
// ended; a lost LISTEN session is made again and wakes every waiter (it may
// have missed a release); 1,000 watched names share one LISTEN session and one
// thread; async_lock hands off with one attempt per wake-up; blocking waiters
// share that session too, and a release wakes the waiters of its name only.
// Session strategies have no release event: no subscription.
#include "backend.hpp"
#include "sql_test_support.hpp"
#include "wake_counting.hpp"

using namespace std::chrono_literals;
using namespace sql_test;
using distlock::test::eventually;
using distlock::test::unique_name;
using clk = std::chrono::steady_clock;

namespace {

namespace spi = distlock::spi;
using namespace wake_support;

std::shared_ptr<spi::backend> provider(const std::string& strategy) {
    auto u = spi::url::parse(url_of(strategy));
    auto settings = s::take_settings(u, facts().scheme, facts().native);
    return s::make_backend(facts().make_dialect(u, settings.conn), settings);
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
                check_release_wakes(*holder, *watcher, kind, kind, unique_name("wake"), unique_name("wake-other"))
                    ->release();
            }
        }
    }
}

TEST_CASE("watch_releases: no wake-up after the subscription is destroyed", "[postgres][async][wake]") {
    auto holder = provider("lease-table"), watcher = provider("lease-table");
    check_no_wake_after_end(*holder, *watcher, unique_name("wake-gone"));
}

TEST_CASE("watch_releases: a LISTEN session that is killed is made again, and wakes every waiter",
          "[postgres][async][wake]") {
    raw_sql db(url_of("lease-table"));
    auto holder = provider("lease-table"), watcher = provider("lease-table");
    watched_wait w(*holder, *watcher, unique_name("wake-kill"));
    REQUIRE(eventually([&] { return listening_sessions(db) == 1; }, 20s));
    const auto pid =
        db.scalar("SELECT pid FROM pg_stat_activity WHERE query LIKE 'LISTEN %' AND pid <> pg_backend_pid()");
    REQUIRE(pid);
    db.kill(std::stoll(*pid));
    // Back (another session): the waiters are told that a release may have gone unheard.
    REQUIRE(eventually([&] { return w.woken.value() == 1; }, 30s));
    REQUIRE(eventually([&] { return listening_sessions(db) == 1; }, 20s));
    w.held->release();
    REQUIRE(eventually([&] { return w.woken.value() == 2; }, 20s));
}

TEST_CASE("watch_releases: 1,000 watched names share one LISTEN session and one thread",
          "[postgres][async][wake][bounded]") {
    raw_sql db(url_of("lease-table"));
    auto holder = provider("lease-table"), watcher = provider("lease-table");
    REQUIRE(eventually([&] { return listening_sessions(db) == 0; }, 20s));  // other cases' providers are gone
    const auto threads = thread_count(), sockets = socket_count();
    const auto prefix = unique_name("wake-many");
    many_watchers many(*watcher, prefix, 1000);
    CHECK(thread_count() - threads <= 1);  // the listener's thread
    CHECK(socket_count() - sockets <= 1);  // its session (statements use the pool's)
    CHECK(listening_sessions(db) == 1);
    many.check_one_woken(*holder, prefix);
    many.subs.clear();
    // The session is closed a while after its last waiter left.
    CHECK(eventually([&] { return listening_sessions(db) == 0; }, 30s));
}

TEST_CASE("watch_releases: session strategies have no release event (the core polls)", "[postgres][async][wake]") {
    for (std::string strategy : {"advisory", "for-update"}) {
        auto watcher = provider(strategy);
        auto h = watcher->make_lock(request(unique_name("wake-session")));
        CHECK(h->watch_releases(spi::wake_sink{}) == nullptr);
    }
}

TEST_CASE("async_lock hands off after a release with one attempt per wake-up, and in the process with no subscription",
          "[postgres][async][wake][e2e]") {
    for (std::string strategy : {"lease-table", "optimistic"}) {
        DYNAMIC_SECTION(strategy) {
            register_counting("count-postgres-" + strategy, [strategy] { return provider(strategy); });
            auto holder = distlock::connect(url_of(strategy));
            auto waiter = distlock::connect("count-postgres-" + strategy + "://x");
            check_event_handoff(holder, waiter, unique_name("handoff"));
            check_gate_handoff(waiter, unique_name("gate-handoff"));
        }
    }
}

TEST_CASE("blocking waiters are woken by the provider's one LISTEN session, only by the release of their own name",
          "[postgres][wake][blocking]") {
    // 10 names, 3 threads waiting (blocking acquire) on each. Their backoff is
    // longer than the case, so a notification is their only wake-up: the release
    // of one name wakes its 3 waiters (each makes one attempt, one wins), none of
    // the 27 others. Each waiter had a LISTEN session of its own before, which
    // every release of the table woke.
    constexpr int names = 10, per_name = 3;
    for (std::string strategy : {"lease-table", "optimistic"}) {
        DYNAMIC_SECTION(strategy) {
            auto holder = provider(strategy), waiter = provider(strategy);
            auto& listener = dynamic_cast<s::backend&>(*waiter).shared_context().releases();
            const auto prefix = unique_name("wake-blocking");
            std::vector<std::unique_ptr<spi::lock_handle>> held;
            for (int i = 0; i < names; ++i) {
                held.push_back(holder->make_lock(request(prefix + "-" + std::to_string(i))));
                REQUIRE(held.back()->acquire(clk::now() + 10s, {}));
            }
            std::atomic<int> granted{0}, granted_first{0};
            std::atomic<bool> give_back{false};
            std::vector<std::thread> threads;
            for (int i = 0; i < names; ++i)
                for (int k = 0; k < per_name; ++k)
                    threads.emplace_back([&, i] {
                        auto r = request(prefix + "-" + std::to_string(i));
                        r.retry_min = r.retry_max = 120s;
                        auto h = waiter->make_lock(r);
                        if (!h->acquire(clk::now() + 120s, {})) return;
                        ++granted;
                        if (i == 0) ++granted_first;
                        while (!give_back) std::this_thread::sleep_for(10ms);
                        h->release();
                    });
            const bool all_waiting = eventually([&] { return listener.watchers() == names * per_name; }, 30s);
            CHECK(all_waiting);
            CHECK(eventually([&] { return listener.listening(); }, 30s));
            CHECK(granted == 0);
            const auto before = listener.wakes();
            held[0]->release();
            CHECK(eventually([&] { return granted == 1; }, 30s));
            CHECK(granted_first == 1);
            // The 3 waiters of the name, once each (1 s more for a late one).
            CHECK(eventually([&] { return listener.wakes() - before >= per_name; }, 10s));
            std::this_thread::sleep_for(1s);
            CHECK(listener.wakes() - before == per_name);
            CHECK(listener.watchers() == names * per_name - 1);  // the winner no longer watches
            // Every waiter gets its turn once all is given back.
            give_back = true;
            for (int i = 1; i < names; ++i) held[i]->release();
            for (auto& t : threads) t.join();
            CHECK(granted == names * per_name);
        }
    }
}
