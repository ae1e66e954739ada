// postgres://: the SQL layer's shared tests (tests/backends/sql/sql_test.cpp) run
// with PostgreSQL's facts below, and the cases that only PostgreSQL has.
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <string>
#include <thread>

#include "distlock/distlock.hpp"
#include "distlock/spi/backend.hpp"
#include "postgres_dialect.hpp"
#include "sql_test_support.hpp"
#include "support.hpp"
#include "tcp_proxy.hpp"

using namespace std::chrono_literals;
using namespace sql_test;
using distlock::test::eventually;
using distlock::test::unique_name;
using clk = std::chrono::steady_clock;

namespace {

// The documented advisory-lock key (docs/backends/sql.md), computed here on its
// own: of the name alone for the default lock table, else in the schema and
// table's namespace.
std::int64_t documented_advisory_key(const std::string& name, const std::string& schema = "public",
                                     const std::string& table = "distlock_locks") {
    const std::string space =
        schema == "public" && table == "distlock_locks" ? "" : schema + '\0' + table + '\0';
    auto d = distlock::spi::sha256(space + name);
    std::uint64_t k = 0;
    for (int i = 0; i < 8; ++i) k = (k << 8) | static_cast<unsigned char>(d[static_cast<std::size_t>(i)]);
    return static_cast<std::int64_t>(k);
}

}  // namespace

const dialect_facts& sql_test::facts() {
    static const dialect_facts f{
        .env = "POSTGRES",
        .scheme = "postgres",
        .native = "advisory",
        .make_dialect = &distlock::backends::postgres::make_dialect,
        .kill = "SELECT pg_terminate_backend(CAST(? AS integer))",
        .native_holder = [](raw_sql& db, const std::string& name) {
            const auto key = static_cast<std::uint64_t>(documented_advisory_key(name, "public", db.table()));
            return db.scalar("SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 1 AND granted"
                             " AND classid::bigint = ? AND objid::bigint = ?",
                             {static_cast<std::int64_t>(key >> 32), static_cast<std::int64_t>(key & 0xffffffffu)});
        },
        // The row's xmax is the locking transaction, whose own lock names its session.
        .row_holder = [](raw_sql& db, const std::string& name) {
            return db.scalar("SELECT l.pid FROM distlock_locks_rows r JOIN pg_locks l ON l.locktype = 'transactionid'"
                             " AND l.transactionid = r.xmax AND l.granted WHERE r.name = ?",
                             {s::bytes{name}});
        },
        .fence_object = "SEQUENCE",
        .count_unit = "transactions",
        .server_count = [](raw_sql& db) -> std::int64_t {
            // A session reports its transactions when it ends: wait for the count database's to end.
            const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
            while (*db.scalar("SELECT numbackends FROM pg_stat_database WHERE datname = 'distlock_count'") != "0" &&
                   std::chrono::steady_clock::now() < until)
                std::this_thread::sleep_for(std::chrono::milliseconds(20));
            return std::stoll(*db.scalar("SELECT xact_commit + xact_rollback FROM pg_stat_database"
                                         " WHERE datname = 'distlock_count'"));
        },
        // advisory: SELECT nextval() FROM pg_advisory_lock(); SELECT pg_advisory_unlock().
        // lease-table, optimistic: INSERT ... nextval() ... RETURNING version; DELETE (notifying).
        // for-update: [BEGIN; SELECT ... FOR UPDATE] ... ROLLBACK, and SELECT nextval() on another session.
        .per_cycle = {{"strategy=advisory", {2, 2}},
                      {"strategy=lease-table", {2, 2}},
                      {"strategy=optimistic", {2, 2}},
                      {"strategy=for-update", {2, 3}}},
        .legacy_tables = {"CREATE TABLE {t} (name bytea PRIMARY KEY, owner text, expires_at timestamptz,"
                          " version bigint NOT NULL DEFAULT 0, holder bigint)",
                          "CREATE TABLE {t}_rows (name bytea PRIMARY KEY)"},
        .previous_tables = {"CREATE TABLE {t} (name bytea PRIMARY KEY, owner text, expires_at timestamptz,"
                            " version bigint NOT NULL DEFAULT 0)",
                            "CREATE TABLE {t}_rows (name bytea PRIMARY KEY)"},
        .in_an_hour = "now() + interval '1 hour'",
        .an_hour_ago = "now() - interval '1 hour'",
        // read/write: SELECT nextval() FROM pg_advisory_lock[_shared](); SELECT pg_advisory_unlock[_shared]().
        // permit: [SELECT pg_advisory_xact_lock(); WITH ... INSERT ... RETURNING] (one transaction); DELETE (notifying).
        .per_primitive_cycle = {{"strategy=lease-table", "permit", {2, 2}},
                                {"strategy=lease-table", "read", {2, 2}},
                                {"strategy=lease-table", "write", {2, 2}},
                                {"strategy=advisory", "permit", {2, 2}},
                                {"strategy=advisory", "read", {2, 2}}},
        .raw_session_setup = "SET search_path TO public",
    };
    return f;
}

TEST_CASE("a URL that points at a server of another kind says so, as a bad argument", "[sql][input]") {
    distlock::test::wrong_server http("HTTP/1.1 400 Bad Request\r\n\r\n");
    const auto target = url_at_port(http.port());
    try {
        (void)distlock::connect(target);
        FAIL("connected");
    } catch (const distlock::invalid_argument_error& e) {
        CHECK(std::string(e.what()).find("a PostgreSQL server?") != std::string::npos);
        CHECK(std::string(e.what()).find("cannot connect") != std::string::npos);
    }
}

TEST_CASE("a missing database is a bad argument", "[sql][auth]") {
    CHECK_THROWS_AS(distlock::connect(missing_database_url()), distlock::invalid_argument_error);
}

TEST_CASE("advisory keys of hashed names are the ones the server's own SQL computes", "[sql][native]") {
    raw_sql db(url_of("advisory"));
    const auto prefix = unique_name("long");
    for (const auto& n : {"Upper/" + distlock::spi::random_token().substr(0, 8), prefix + std::string(900, 'x')}) {
        auto key = db.scalar("SELECT ('x' || left(encode(sha256(?), 'hex'), 16))::bit(64)::bigint", {s::bytes{n}});
        REQUIRE(key.has_value());
        CHECK(*key == std::to_string(documented_advisory_key(n)));
    }
}

TEST_CASE("PostgreSQL lease waiters are woken by the release's notification, not by their next poll",
          "[sql][notify]") {
    for (const std::string strategy : {"lease-table", "optimistic"}) {
        DYNAMIC_SECTION("strategy " << strategy) {
            const auto url = url_of(strategy);
            auto a = distlock::connect(url);
            auto b = distlock::connect(url);
            CHECK(b.caps().supports(distlock::feature::notified_wakeup));
            const auto name = unique_name("notify");
            auto holder = a.mutex(name);
            REQUIRE(holder.try_lock());
            distlock::lock_options slow_polling;  // a poll every 4 s at most: only a notification is sooner
            slow_polling.retry_min = 4000ms;
            slow_polling.retry_max = 4000ms;
            auto waiter = b.mutex(name, slow_polling);
            std::atomic<bool> got{false};
            auto t0 = clk::now();
            std::thread t([&] { got = waiter.try_lock_for(20s); });
            std::this_thread::sleep_for(500ms);
            CHECK_FALSE(got.load());
            holder.unlock();
            const bool woke = eventually([&] { return got.load(); }, 2500ms);
            t.join();
            CHECK(woke);  // well before the 4 s poll
            INFO("acquired " << std::chrono::duration_cast<std::chrono::milliseconds>(clk::now() - t0).count()
                             << " ms after the wait began");
            CHECK(got.load());
            waiter.unlock();
        }
    }
}
