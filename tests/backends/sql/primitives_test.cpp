// The read-write lock and the semaphore of the SQL layer, where the conformance
// suite cannot look: the rows they leave (none once released), where they show
// on the server, the permit-size refusal (also under a race of two sizes), the
// writer policy on the server's own queue or rows, hostile names, and the
// migration of their tables (sql_test_support.hpp: the dialect's facts).
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "distlock/distlock.hpp"
#include "distlock/testing.hpp"
#include "sql_test_support.hpp"
#include "support.hpp"

using namespace std::chrono_literals;
using namespace sql_test;
using distlock::test::eventually;
using distlock::test::unique_name;

namespace {

const std::vector<std::string> every_strategy = {"for-update", "lease-table", "optimistic", facts().native};

// MySQL keeps read-write locks in rows of <table>_rw; PostgreSQL in advisory locks.
bool rw_in_rows() { return facts().scheme == "mysql"; }

std::string count_rows(raw_sql& db, const std::string& table, const std::string& name) {
    return *db.scalar("SELECT COUNT(*) FROM " + db.quote(table) + " WHERE name = ?", {s::bytes{name}});
}

// The sessions holding the read-write lock of `name` (PostgreSQL: advisory locks
// of the documented key's two halves, objsubid 2), on the server's own view.
std::int64_t rw_sessions(raw_sql& db, const std::string& name, const std::string& mode) {
    const auto d = distlock::spi::sha256(name);
    std::uint64_t k = 0;
    for (int i = 0; i < 8; ++i) k = (k << 8) | static_cast<unsigned char>(d[static_cast<std::size_t>(i)]);
    return std::stoll(
        *db.scalar("SELECT COUNT(*) FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 2 AND granted"
                   " AND mode = ? AND classid::bigint = ? AND objid::bigint = ?",
                   {mode, static_cast<std::int64_t>(k >> 32), static_cast<std::int64_t>(k & 0xffffffffu)}));
}

}  // namespace

TEST_CASE("semaphores and read-write locks leave no row behind once released, on every strategy",
          "[sql][primitives][storage]") {
    for (const auto& strategy : every_strategy) {
        DYNAMIC_SECTION("strategy " << strategy) {
            const auto url = url_of(strategy);
            auto p = distlock::connect(url);
            raw_sql db(url);
            const auto name = unique_name("rows");
            {
                auto a = p.semaphore(name, 3), b = p.semaphore(name, 3);
                REQUIRE(a.try_acquire_for(5s));
                REQUIRE(a.try_acquire_for(5s));
                REQUIRE(b.try_acquire_for(5s));
                CHECK(count_rows(db, "distlock_locks_permits", name) == "3");
                CHECK(
                    *db.scalar("SELECT COUNT(DISTINCT slot) FROM distlock_locks_permits WHERE name = ? AND permits = 3"
                               " AND slot < 3",
                               {s::bytes{name}}) == "3");
                CHECK_FALSE(b.try_acquire());
                a.release();
                a.release();
                b.release();
                CHECK(count_rows(db, "distlock_locks_permits", name) == "0");
            }
            {
                auto r1 = p.shared_mutex(name);
                auto r2 = distlock::connect(url).shared_mutex(name);
                REQUIRE(r1.try_lock_shared_for(5s));
                REQUIRE(r2.try_lock_shared_for(5s));
                if (rw_in_rows()) {
                    CHECK(count_rows(db, "distlock_locks_rw", name) == "2");
                } else {
                    CHECK(rw_sessions(db, name, "ShareLock") == 2);
                }
                r1.unlock_shared();
                r2.unlock_shared();
                REQUIRE(r1.try_lock_for(5s));
                if (rw_in_rows()) {
                    CHECK(*db.scalar("SELECT COUNT(*) FROM distlock_locks_rw WHERE name = ? AND holder = 'w'",
                                     {s::bytes{name}}) == "1");
                } else {
                    CHECK(rw_sessions(db, name, "ExclusiveLock") == 1);
                }
                // The mutex of the same name is a lock of its own.
                auto m = p.mutex(name);
                CHECK(m.try_lock());
                m.unlock();
                r1.unlock();
                if (rw_in_rows()) CHECK(count_rows(db, "distlock_locks_rw", name) == "0");
                else CHECK(rw_sessions(db, name, "ExclusiveLock") + rw_sessions(db, name, "ShareLock") == 0);
            }
            // Nothing of either went into the mutex's table.
            CHECK(count_rows(db, "distlock_locks", name) == "0");
        }
    }
}

TEST_CASE("a semaphore asked with another size is refused, naming both sizes, and leaves nothing",
          "[sql][primitives][input]") {
    const auto url = url_of("lease-table");
    auto a = distlock::connect(url);
    auto b = distlock::connect(url);
    raw_sql db(url);
    const auto name = unique_name("size");
    auto two = a.semaphore(name, 2);
    REQUIRE(two.try_acquire_for(5s));
    auto five = b.semaphore(name, 5);
    try {
        (void)five.try_acquire();
        FAIL("a semaphore of 5 was granted beside a holder of a semaphore of 2");
    } catch (const distlock::invalid_argument_error& e) {
        CHECK_THAT(e.what(), Catch::Contains("held with 2 permits") && Catch::Contains("asks for 5"));
    }
    CHECK(count_rows(db, "distlock_locks_permits", name) == "1");
    two.release();
    REQUIRE(five.try_acquire_for(5s));  // nobody holds 2 any more
    CHECK(*db.scalar("SELECT MAX(permits) FROM distlock_locks_permits WHERE name = ?", {s::bytes{name}}) == "5");
    five.release();
    CHECK(count_rows(db, "distlock_locks_permits", name) == "0");
}

TEST_CASE("holders of two sizes racing for a free semaphore are never granted together", "[sql][primitives][race]") {
    const auto url = url_of("lease-table");
    auto a = distlock::connect(url);
    auto b = distlock::connect(url);
    raw_sql db(url);
    std::atomic<int> overlaps{0}, refused{0}, granted{0};
    for (int round = 0; round < 20; ++round) {
        const auto name = unique_name("size-race");
        std::atomic<int> inside_one{0}, inside_two{0};
        std::vector<std::thread> racers;
        for (int t = 0; t < 4; ++t) {
            racers.emplace_back([&, t] {
                auto sem = (t % 2 == 0 ? a : b).semaphore(name, t % 2 == 0 ? 1u : 2u);
                try {
                    if (!sem.try_acquire_for(200ms)) return;
                } catch (const distlock::invalid_argument_error&) {
                    ++refused;
                    return;
                }
                ++granted;
                auto& mine = t % 2 == 0 ? inside_one : inside_two;
                auto& theirs = t % 2 == 0 ? inside_two : inside_one;
                ++mine;
                if (theirs.load() != 0 || inside_one.load() > 1 || inside_two.load() > 2) ++overlaps;
                std::this_thread::sleep_for(20ms);
                if (theirs.load() != 0) ++overlaps;
                --mine;
                sem.release();
            });
        }
        for (auto& r : racers) r.join();
        CHECK(count_rows(db, "distlock_locks_permits", name) == "0");  // a refused racer gave its permit back
    }
    INFO("granted " << granted.load() << ", refused " << refused.load());
    CHECK(overlaps.load() == 0);
    CHECK(granted.load() > 0);
    CHECK(refused.load() > 0);  // the sizes did meet
}

TEST_CASE("a waiting writer holds later readers back; one that gives up lets them in at once",
          "[sql][primitives][policy]") {
    for (const auto& strategy : {std::string("lease-table"), facts().native}) {
        DYNAMIC_SECTION("strategy " << strategy) {
            const auto url = url_of(strategy);
            auto a = distlock::connect(url), b = distlock::connect(url), c = distlock::connect(url);
            const auto name = unique_name("policy");
            auto reader = a.shared_mutex(name), writer = b.shared_mutex(name), late = c.shared_mutex(name);
            REQUIRE(reader.try_lock_shared_for(5s));
            std::atomic<bool> written{false}, waiting{true};
            std::thread w([&] {
                written = writer.try_lock_for(20s);
                waiting = false;
            });
            // While the writer waits, a later reader does not get in (with or without waiting).
            std::this_thread::sleep_for(500ms);
            CHECK(waiting.load());
            CHECK_FALSE(late.try_lock_shared());
            CHECK_FALSE(late.try_lock_shared_for(300ms));
            reader.unlock_shared();
            w.join();
            REQUIRE(written.load());
            CHECK_FALSE(late.try_lock_shared());
            writer.unlock();
            REQUIRE(late.try_lock_shared_for(5s));
            late.unlock_shared();
            // A writer that gives up leaves nothing that holds readers back.
            REQUIRE(reader.try_lock_shared_for(5s));
            CHECK_FALSE(writer.try_lock_for(400ms));
            CHECK(late.try_lock_shared());
            late.unlock_shared();
            reader.unlock_shared();
            if (rw_in_rows()) {
                raw_sql db(url);
                CHECK(count_rows(db, "distlock_locks_rw", name) == "0");
            }
        }
    }
}

TEST_CASE("names with quotes, NUL and bytes that are not UTF-8 are bound in the semaphore and read-write statements",
          "[sql][primitives][injection]") {
    const std::string base = unique_name("inj-prim");
    const std::vector<std::string> names = {
        base + "x'); DROP TABLE distlock_locks_permits; --",
        base + "\\'; DELETE FROM distlock_locks_rw; --",
        base + "\"; DROP TABLE \"distlock_locks_permits\"; --",
        base + std::string("a\0b", 3),
        base + std::string("a\0c", 3),
        base + "%",
        base + "$1?",
        base + "\xff\xfe\x80",
    };
    for (const auto& strategy : {std::string("lease-table"), facts().native}) {
        DYNAMIC_SECTION("strategy " << strategy) {
            const auto url = url_of(strategy);
            auto a = distlock::connect(url), b = distlock::connect(url);
            raw_sql db(url);
            std::vector<distlock::semaphore> sems;
            std::vector<distlock::shared_mutex> rws;
            for (const auto& n : names) {
                sems.push_back(a.semaphore(n, 1));
                REQUIRE(sems.back().try_acquire_for(5s));
                rws.push_back(a.shared_mutex(n));
                REQUIRE(rws.back().try_lock_for(5s));
            }
            for (const auto& n : names) {
                INFO("name of " << n.size() << " bytes");
                CHECK_FALSE(b.semaphore(n, 1).try_acquire());
                CHECK_FALSE(b.shared_mutex(n).try_lock_shared());
                CHECK(count_rows(db, "distlock_locks_permits", n) == "1");
                if (rw_in_rows()) CHECK(count_rows(db, "distlock_locks_rw", n) == "1");
            }
            // Names a LIKE or a truncation at NUL would merge are free.
            for (const auto& other : {base, base + "a", base + "x"}) {
                auto s = b.semaphore(other, 1);
                CHECK(s.try_acquire());
                s.release();
                auto rw = b.shared_mutex(other);
                CHECK(rw.try_lock());
                rw.unlock();
            }
            for (auto& s : sems) s.release();
            for (auto& rw : rws) rw.unlock();
            for (const auto& n : names) {
                CHECK(count_rows(db, "distlock_locks_permits", n) == "0");
                auto s = b.semaphore(n, 1);
                CHECK(s.try_acquire());
                s.release();
            }
        }
    }
}

TEST_CASE("break_lock takes a name's permits and read-write lock too; their holders are told",
          "[sql][primitives][break]") {
    for (const auto& strategy : {std::string("lease-table"), facts().native}) {
        DYNAMIC_SECTION("strategy " << strategy) {
            const auto url = url_of(strategy);
            auto a = distlock::connect(url), b = distlock::connect(url);
            const auto name = unique_name("break-prim");
            distlock::test::loss_recorder rec;
            auto sem = a.semaphore(name, 1, rec.options());
            auto rw = a.shared_mutex(name, rec.options());
            REQUIRE(sem.try_acquire_for(5s));
            REQUIRE(rw.try_lock_shared_for(5s));
            distlock::testing::break_lock(b, name);
            CHECK(rec.wait_lost(2, 10s));
            CHECK(eventually([&] { return sem.held() == 0 && !rw.held_shared(); }, 10s));
            auto other = b.semaphore(name, 1);
            CHECK(other.try_acquire());
            other.release();
            auto writer = b.shared_mutex(name);
            CHECK(writer.try_lock_for(5s));
            writer.unlock();
            sem.release();
            rw.unlock_shared();
        }
    }
}

TEST_CASE("the semaphore and read-write tables are made at start and their expired rows deleted",
          "[sql][primitives][migrate]") {
    const auto table = "dl_prim_" + distlock::spi::random_token().substr(0, 10);
    const auto url = with_query(url_of("lease-table"), "strategy=lease-table&lease=30s&table=" + table);
    raw_sql db(url_of("lease-table"));
    { auto first = distlock::connect(url); }
    const auto permits = db.quote(table + "_permits");
    CHECK(*db.scalar("SELECT COUNT(*) FROM " + permits) == "0");
    db.run("INSERT INTO " + permits + " (name, slot, permits, owner, expires_at, version) VALUES (?, 0, 1, ?, " +
               facts().in_an_hour + ", 1)",
           {s::bytes{"held"}, std::string("a-holder")});
    db.run("INSERT INTO " + permits + " (name, slot, permits, owner, expires_at, version) VALUES (?, 0, 1, ?, " +
               facts().an_hour_ago + ", 2)",
           {s::bytes{"crashed"}, std::string("a-crashed-holder")});
    if (rw_in_rows())
        db.run("INSERT INTO " + db.quote(table + "_rw") +
                   " (name, holder, owner, expires_at, version) VALUES (?, 'w', ?, " + facts().an_hour_ago + ", 0)",
               {s::bytes{"crashed"}, std::string("a-crashed-writer")});
    auto p = distlock::connect(url);  // a second start: the expired rows go, the held one stays
    CHECK(*db.scalar("SELECT COUNT(*) FROM " + permits) == "1");
    CHECK_FALSE(p.semaphore("held", 1).try_acquire());
    auto s = p.semaphore("crashed", 1);
    CHECK(s.try_acquire());
    s.release();
    if (rw_in_rows()) CHECK(*db.scalar("SELECT COUNT(*) FROM " + db.quote(table + "_rw")) == "0");
    drop_lock_tables(db, table);
}

TEST_CASE("many names taken once each as permits and read-write locks leave no row", "[sql][primitives][storage]") {
    for (const auto& strategy : {std::string("lease-table"), facts().native}) {
        DYNAMIC_SECTION("strategy " << strategy) {
            const auto table = "dl_prim_bounded_" + distlock::spi::random_token().substr(0, 8);
            auto p =
                distlock::connect(with_query(url_of(strategy), "strategy=" + strategy + "&lease=30s&table=" + table));
            raw_sql db(url_of(strategy));
            const auto base = unique_name("prim-once");
            constexpr int names = 500;
            int failures = 0;
            for (int i = 0; i < names; ++i) {
                const auto n = base + "/" + std::to_string(i);
                auto s = p.semaphore(n, 1 + static_cast<std::uint32_t>(i % 3));
                auto rw = p.shared_mutex(n);
                if (!s.try_acquire_for(5s)) ++failures;
                if (!(i % 2 == 0 ? rw.try_lock_for(5s) : rw.try_lock_shared_for(5s))) ++failures;
                s.release();
                if (i % 2 == 0) rw.unlock();
                else rw.unlock_shared();
            }
            CHECK(failures == 0);
            CHECK(*db.scalar("SELECT COUNT(*) FROM " + db.quote(table + "_permits")) == "0");
            if (rw_in_rows()) CHECK(*db.scalar("SELECT COUNT(*) FROM " + db.quote(table + "_rw")) == "0");
            drop_lock_tables(db, table);
        }
    }
}
