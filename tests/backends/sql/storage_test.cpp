// Bounded storage: tokens live in the fence counter, not in a row per name, so
// the lock table holds only the locks held now; tokens of a name still only
// increase across the removal of its row; tables of the earlier layout are
// migrated (sql_test_support.hpp: the dialect's facts).
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "distlock/distlock.hpp"
#include "distlock/testing.hpp"
#include "sql_test_support.hpp"
#include "support.hpp"

using namespace std::chrono_literals;
using namespace sql_test;
using distlock::test::unique_name;

namespace {

std::int64_t rows_of(raw_sql& db, const std::string& table) {
    return std::stoll(*db.scalar("SELECT COUNT(*) FROM " + db.quote(table)));
}

}  // namespace

// CI locks 10,000 names by lease-table; DISTLOCK_TEST_STORAGE_NAMES=100000 runs the
// issue's 100,000 (docs/backends/sql.md has the run: under a minute on MariaDB).
TEST_CASE("names locked once each leave no row behind; native locks never write one", "[sql][storage]") {
    const auto many = distlock::test::env("DISTLOCK_TEST_STORAGE_NAMES");
    for (const auto& [strategy, names] :
         {std::pair<std::string, int>{"lease-table", many.empty() ? 10000 : std::stoi(many)},
          {"optimistic", 2000},
          {facts().native, 2000}}) {
        DYNAMIC_SECTION(strategy << ", " << names << " names") {
            const auto table = "dl_bounded_" + distlock::spi::random_token().substr(0, 10);
            auto p =
                distlock::connect(with_query(url_of(strategy), "strategy=" + strategy + "&lease=30s&table=" + table));
            raw_sql db(url_of(strategy));
            const auto base = unique_name("once");
            constexpr int threads = 4;
            std::vector<std::thread> workers;
            std::atomic<int> failures{0};
            for (int t = 0; t < threads; ++t)
                workers.emplace_back([&, t] {
                    for (int i = t; i < names; i += threads) {
                        auto m = p.mutex(base + "/" + std::to_string(i));
                        if (!m.try_lock_for(5s)) {
                            ++failures;
                            continue;
                        }
                        if (i == names / 2) CHECK(rows_of(db, table) >= (strategy == facts().native ? 0 : 1));
                        m.unlock();
                    }
                });
            for (auto& w : workers) w.join();
            CHECK(failures == 0);
            CHECK(rows_of(db, table) == 0);
            drop_lock_tables(db, table);
        }
    }
}

TEST_CASE("tokens of a name keep increasing across the removal of its row, by release or by break_lock",
          "[sql][storage]") {
    for (const auto& strategy :
         {std::string("lease-table"), std::string("optimistic"), std::string("for-update"), facts().native}) {
        DYNAMIC_SECTION("strategy " << strategy) {
            auto p = distlock::connect(url_of(strategy));
            auto other = distlock::connect(url_of(strategy));
            raw_sql db(url_of(strategy));
            const auto name = unique_name("again");
            auto m = p.mutex(name);
            std::uint64_t last = 0;
            for (int round = 0; round < 5; ++round) {
                REQUIRE(m.try_lock_for(5s));
                CHECK(m.token() > last);
                last = m.token();
                if (round % 2 == 0) {
                    m.unlock();
                } else {
                    distlock::testing::break_lock(other, name);  // the row goes (lease strategies) or the session ends
                    CHECK(distlock::test::eventually([&] { return !m.held(); }, 5s));
                    try {
                        m.unlock();
                    } catch (const distlock::error&) {}
                }
                CHECK(*db.scalar("SELECT COUNT(*) FROM distlock_locks WHERE name = ?", {s::bytes{name}}) == "0");
            }
        }
    }
}

TEST_CASE("tables of the earlier layout are migrated: tokens above every version they handed out, free rows gone",
          "[sql][storage][migrate]") {
    raw_sql db(url_of("lease-table"));
    const auto table = "dl_legacy_" + distlock::spi::random_token().substr(0, 10);
    for (auto text : facts().legacy_tables) {
        for (auto at = text.find("{t}"); at != std::string::npos; at = text.find("{t}")) {
            const bool rows = text.compare(at, 8, "{t}_rows") == 0;
            text.replace(at, rows ? 8 : 3, db.quote(rows ? table + "_rows" : table));
        }
        db.run(text);
    }
    const auto t = db.quote(table);
    db.run("INSERT INTO " + t + " (name, owner, expires_at, version) VALUES (?, NULL, NULL, 5000)", {s::bytes{"free"}});
    db.run("INSERT INTO " + t + " (name, owner, expires_at, version) VALUES (?, ?, " + facts().in_an_hour + ", 7000)",
           {s::bytes{"held"}, std::string("an-old-client")});
    db.run("INSERT INTO " + db.quote(table + "_rows") + " (name) VALUES (?)", {s::bytes{"row"}});
    for (const auto& strategy :
         {std::string("lease-table"), std::string("optimistic"), std::string("for-update"), facts().native}) {
        INFO(strategy);
        auto p = distlock::connect(with_query(url_of(strategy), "strategy=" + strategy + "&lease=30s&table=" + table));
        CHECK(*db.scalar("SELECT COUNT(*) FROM " + t + " WHERE owner IS NULL") == "0");  // the free row is gone
        for (const auto* name : {"free", "row", "fresh"}) {
            auto m = p.mutex(name);
            REQUIRE(m.try_lock_for(5s));
            CHECK(m.token() > 7000);
            m.unlock();
        }
        if (strategy == "lease-table" || strategy == "optimistic") CHECK_FALSE(p.mutex("held").try_lock());
    }
    CHECK(*db.scalar("SELECT COUNT(*) FROM " + t) == "1");  // the old client's lease, still held
    drop_lock_tables(db, table);
}
