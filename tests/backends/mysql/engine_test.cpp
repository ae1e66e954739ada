// mysql:// engine=memory: the lock table on the MEMORY engine, whose leases are
// never written to disk and vanish with the server, while the fence counter
// stays InnoDB so that tokens never repeat. What a restart does to the table is
// done here by emptying it (the fault matrix restarts the server:
// mysql-memory-bell / restart-server): holders are told at their next renewal,
// and the next grant's token is above every earlier one. Clients that disagree
// on a table's engine are refused.
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <string>
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

std::string memory_url(const std::string& table, const std::string& more = "") {
    return with_query(url_of("lease-table"), "strategy=lease-table&lease=2s&engine=memory&table=" + table + more);
}

std::string fresh_table() { return "dl_mem_" + distlock::spi::random_token().substr(0, 10); }

std::optional<std::string> engine_of(raw_sql& db, const std::string& table) {
    return db.scalar("SELECT ENGINE FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?",
                     {table});
}

}  // namespace

TEST_CASE(
    "engine=memory: the lock table is MEMORY, the counter InnoDB; emptied (as by a restart) its holders are "
    "told and tokens go on rising",
    "[mysql][engine]") {
    raw_sql db(url_of("lease-table"));
    const auto table = fresh_table();
    auto p = distlock::connect(memory_url(table));
    CHECK(engine_of(db, table) == "MEMORY");
    CHECK(engine_of(db, table + "_fence") == "InnoDB");
    std::atomic<int> lost{0};
    distlock::lock_options o;
    o.on_lost = [&](const distlock::lock_event&) { ++lost; };
    const auto name = unique_name("memory");
    auto m = p.mutex(name, o);
    m.lock();
    const auto first = m.token();
    CHECK(db.scalar("SELECT COUNT(*) FROM `" + table + "` WHERE name = ?", {s::bytes{name}}) == "1");
    // What a server restart does to a MEMORY table.
    db.run("DELETE FROM `" + table + "`");
    REQUIRE(eventually([&] { return lost.load() == 1; }, 10s));  // at the next renewal (lease/3)
    CHECK_FALSE(m.held());
    auto other = distlock::connect(memory_url(table));
    auto n = other.mutex(name);
    REQUIRE(n.try_lock());
    CHECK(n.token() > first);
    n.unlock();
    drop_lock_tables(db, table);
}

TEST_CASE("engine=: clients that disagree on a table's engine are refused, naming the table; unknown engines too",
          "[mysql][engine][url]") {
    raw_sql db(url_of("lease-table"));
    const auto table = fresh_table();
    auto made = distlock::connect(memory_url(table));
    // A client without engine=memory on the MEMORY table: its leases would vanish unannounced.
    CHECK_THROWS_AS(distlock::connect(with_query(url_of("lease-table"), "table=" + table)),
                    distlock::invalid_argument_error);
    CHECK_THROWS_WITH(distlock::connect(with_query(url_of("lease-table"), "table=" + table)),
                      Catch::Contains(table) && Catch::Contains("is MEMORY"));
    // engine=memory on the default InnoDB table.
    CHECK_THROWS_WITH(distlock::connect(with_query(url_of("lease-table"), "engine=memory")),
                      Catch::Contains("says engine=memory"));
    CHECK_THROWS_WITH(distlock::connect(with_query(url_of("lease-table"), "engine=myisam")),
                      Catch::Contains("unknown engine"));
    CHECK(engine_of(db, table) == "MEMORY");
    drop_lock_tables(db, table);
}

TEST_CASE(
    "engine=memory: a full MEMORY table refuses a grant with unavailable_error and the server's reason; the held "
    "locks stay held",
    "[mysql][engine][hostile]") {
    raw_sql db(url_of("lease-table"));
    const auto table = fresh_table();
    auto p = distlock::connect(memory_url(table));
    // The table made again under the smallest bound the server takes (16 KiB).
    db.run("SET SESSION max_heap_table_size = 16384");
    db.run("ALTER TABLE `" + table + "` ENGINE=MEMORY");
    std::vector<distlock::mutex> held;
    std::string refused;
    for (int i = 0; i < 1000 && refused.empty(); ++i) {
        auto m = p.mutex(unique_name("full"));
        try {
            const bool granted = m.try_lock();
            REQUIRE(granted);
            held.push_back(std::move(m));
        } catch (const distlock::unavailable_error& e) {
            refused = e.what();
        }
    }
    INFO("granted before the table was full: " << held.size());
    CHECK(refused.find("is full") != std::string::npos);
    CHECK_FALSE(held.empty());
    for (auto& m : held) CHECK(m.held());
    for (auto& m : held) m.unlock();
    drop_lock_tables(db, table);
}
