// mysql:// lease-table with wake=bell: a holder keeps the name's doorbell (a
// GET_LOCK of the documented bell key) for its grant's life, and a blocking
// waiter waits on it in the server instead of polling the row. Counted with the
// client's round trips: a waiter makes no try between the one that found the
// name held and the one that the release wakes, and a release wakes one waiter.
// The hostile cases: a holder without a doorbell (wake=poll on the same table),
// and a doorbell whose session the server kills under its holder.
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "distlock/distlock.hpp"
#include "distlock/spi/backend.hpp"
#include "sql_test_support.hpp"
#include "support.hpp"

using namespace std::chrono_literals;
using namespace sql_test;
using distlock::test::eventually;
using distlock::test::unique_name;

namespace {

// The lease-table URL of the test server with wake=bell (or `wake`) and a
// lease long enough that no renewal falls in a case.
std::string bell_url(const std::string& wake = "bell") {
    return with_query(url_of("lease-table"), "strategy=lease-table&lease=60s&wake=" + wake);
}

// The documented bell key of a name in the default database and table
// (docs/backends/sql.md): "distlock#bell:" + 50 hex digits of SHA-256 of the
// database, NUL, the table, NUL and the name.
std::string bell_key(const std::string& name) {
    const std::string nul(1, '\0');
    return "distlock#bell:" + distlock::spi::sha256_hex("distlock" + nul + "distlock_locks" + nul + name).substr(0, 50);
}

// The session holding a name's doorbell, if any (IS_USED_LOCK).
std::optional<std::string> bell_holder(raw_sql& db, const std::string& name) {
    return db.scalar("SELECT IS_USED_LOCK(?)", {s::bytes{bell_key(name)}});
}

std::uint64_t round_trips() { return s::connection::round_trip_counter().load(); }

// Polling would show: a waiter that polled would try every 1..20 ms.
distlock::lock_options quick_polls() {
    distlock::lock_options o;
    o.retry_min = 1ms;
    o.retry_max = 20ms;
    return o;
}

// A blocking lock() of `name` on its own thread.
struct waiter {
    distlock::mutex m;
    std::atomic<bool> granted{false};
    std::thread t;
    waiter(const distlock::provider& p, const std::string& name, bool unlock_at_once)
        : m(p.mutex(name, quick_polls())) {
        t = std::thread([this, unlock_at_once] {
            m.lock();
            granted = true;
            if (unlock_at_once) m.unlock();
        });
    }
    ~waiter() {
        if (t.joinable()) t.join();
    }
};

// A provider whose pool holds a session already (its first lock made it).
distlock::provider warm(const std::string& url) {
    auto p = distlock::connect(url);
    auto m = p.mutex(unique_name("warm"));
    m.lock();
    m.unlock();
    return p;
}

}  // namespace

TEST_CASE("wake=bell: a waiter makes no try while the name is held, and the release's round trip wakes it",
          "[mysql][bell][count]") {
    raw_sql db(url_of("lease-table"));
    auto holder = warm(bell_url()), other = warm(bell_url());
    const auto name = unique_name("bell");
    auto h = holder.mutex(name);
    h.lock();
    const auto holding = bell_holder(db, name);
    REQUIRE(holding);  // the grant keeps the doorbell
    const auto before = round_trips();
    waiter w(other, name, false);
    // Its first try found the name held, its second waits on the doorbell.
    REQUIRE(eventually([&] { return round_trips() - before >= 2; }, 20s));
    std::this_thread::sleep_for(1s);  // polling every 1..20 ms would show here
    CHECK(round_trips() - before == 2);
    CHECK_FALSE(w.granted);
    h.unlock();  // one round trip: the row deleted and the doorbell given back
    w.t.join();
    CHECK(w.granted);
    CHECK(round_trips() - before == 3);  // nothing but the release: the waiter's second try was granted
    CHECK(w.m.token() > h.token());
    // The new holder keeps the doorbell in its turn, and gives it back with its row.
    const auto now_holding = bell_holder(db, name);
    CHECK(now_holding);
    CHECK(now_holding != holding);
    w.m.unlock();
    CHECK_FALSE(bell_holder(db, name));
    CHECK(db.scalar("SELECT COUNT(*) FROM distlock_locks WHERE name = ?", {s::bytes{name}}) == "0");
}

TEST_CASE("wake=bell: each release wakes one waiter of three, which hands on in its turn", "[mysql][bell][count]") {
    auto holder = warm(bell_url());
    std::vector<distlock::provider> others;
    for (int i = 0; i < 3; ++i) others.push_back(warm(bell_url()));
    const auto name = unique_name("bell-three");
    auto h = holder.mutex(name);
    h.lock();
    const auto before = round_trips();
    std::vector<std::unique_ptr<waiter>> waiters;
    for (auto& p : others) waiters.push_back(std::make_unique<waiter>(p, name, true));
    // Each has found the name held and waits on the doorbell: two tries each.
    REQUIRE(eventually([&] { return round_trips() - before >= 6; }, 20s));
    std::this_thread::sleep_for(500ms);
    CHECK(round_trips() - before == 6);
    h.unlock();
    for (auto& w : waiters) w->t.join();
    for (auto& w : waiters) CHECK(w->granted);
    // The holder's release and each waiter's: no waiter tried again, so each
    // release woke exactly the one that was granted.
    CHECK(round_trips() - before == 6 + 1 + 3);
}

TEST_CASE("wake=bell: behind a holder without a doorbell one waiter polls, the others wait on its doorbell",
          "[mysql][bell][hostile]") {
    raw_sql db(url_of("lease-table"));
    auto plain = warm(bell_url("poll")), first = warm(bell_url()), second = warm(bell_url());
    const auto name = unique_name("bell-plain");
    auto h = plain.mutex(name);
    h.lock();
    CHECK_FALSE(bell_holder(db, name));  // wake=poll keeps none
    waiter a(first, name, false);
    // The first waiter finds the doorbell free and keeps it while it polls.
    REQUIRE(eventually([&] { return bell_holder(db, name).has_value(); }, 20s));
    const auto poller = bell_holder(db, name);
    waiter b(second, name, false);
    std::this_thread::sleep_for(300ms);
    CHECK(bell_holder(db, name) == poller);
    CHECK_FALSE(a.granted);
    CHECK_FALSE(b.granted);
    h.unlock();
    a.t.join();  // the poller has the row and the doorbell: the second still waits on it
    CHECK(a.m.token() > h.token());
    CHECK(bell_holder(db, name) == poller);
    CHECK_FALSE(b.granted);
    a.m.unlock();
    b.t.join();
    CHECK(b.m.token() > a.m.token());
    b.m.unlock();
    CHECK_FALSE(bell_holder(db, name));
}

TEST_CASE(
    "wake=bell: a doorbell's session killed under its holder wakes the waiter, which waits out the row; the "
    "holder's unlock still deletes its row",
    "[mysql][bell][hostile]") {
    raw_sql db(url_of("lease-table"));
    auto holder = warm(bell_url()), other = warm(bell_url());
    const auto name = unique_name("bell-killed");
    std::atomic<int> errors{0}, losses{0};
    distlock::lock_options o;
    o.on_error = [&](const distlock::lock_event&, const distlock::error&) { ++errors; };
    o.on_lost = [&](const distlock::lock_event&) { ++losses; };
    auto h = holder.mutex(name, o);
    h.lock();
    waiter w(other, name, false);
    std::this_thread::sleep_for(300ms);
    const auto session = bell_holder(db, name);
    REQUIRE(session);
    db.run("KILL " + *session);
    // The waiter wakes, finds the row still held, and now keeps the doorbell while it polls.
    REQUIRE(eventually([&] { return bell_holder(db, name).has_value() && bell_holder(db, name) != session; }, 20s));
    std::this_thread::sleep_for(200ms);
    CHECK_FALSE(w.granted);
    CHECK(h.held());
    h.unlock();  // its doorbell's session is gone: the row is deleted on a pooled session
    w.t.join();
    CHECK(errors == 0);
    CHECK(losses == 0);
    CHECK(w.m.token() > h.token());
    w.m.unlock();
    CHECK(db.scalar("SELECT COUNT(*) FROM distlock_locks WHERE name = ?", {s::bytes{name}}) == "0");
}

TEST_CASE("wake= is validated: bell is lease-table's only", "[mysql][bell][url]") {
    const auto url = url_of("lease-table");
    CHECK_THROWS_AS(distlock::connect(with_query(url, "wake=ring")), distlock::invalid_argument_error);
    for (const std::string strategy : {"for-update", "get-lock", "optimistic"})
        CHECK_THROWS_WITH(distlock::connect(with_query(url, "strategy=" + strategy + "&wake=bell")),
                          Catch::Contains("lease-table only"));
    CHECK_NOTHROW(distlock::connect(with_query(url, "wake=poll")));
    CHECK_NOTHROW(distlock::connect(with_query(url, "wake=bell")));
}
