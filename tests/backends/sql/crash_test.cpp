// Fencing tokens never repeat after the server crashes, on the strategies whose
// grant draws its token with nothing of its own to commit (get-lock, for-update,
// a MEMORY lock table; PostgreSQL's advisory and for-update): the server is
// SIGKILLed right after a draw that wrote the sequence's state (MariaDB's next
// cached block, PostgreSQL's next WAL record) and before anything else could
// flush it, then started again; the next token must be above every earlier one.
// Hidden ([.crash]): it kills the server the whole suite uses, so its ctest runs
// on its own (RUN_SERIAL), through the server control of integration/backends.sh
// (DISTLOCK_TEST_SERVERS_CTL).
#include <catch2/catch.hpp>
#include <cctype>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <thread>

#include "distlock/distlock.hpp"
#include "sql_test_support.hpp"
#include "support.hpp"

using namespace std::chrono_literals;
using namespace sql_test;

namespace {

// The server's name in integration/backends.sh: "mysql", "postgres".
std::string server_name() {
    std::string name;
    for (char c : facts().env) name += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return name;
}

void server_control(const std::string& command) {
    const auto ctl = distlock::test::env("DISTLOCK_TEST_SERVERS_CTL");
    if (ctl.empty()) FAIL("DISTLOCK_TEST_SERVERS_CTL is not set (integration/backends.sh up)");
    const auto r = distlock::test::run_command(ctl + " " + command + " " + server_name() + " 2>&1");
    INFO(r.out);
    REQUIRE(r.status == 0);
}

// One grant's token on `p`. Right after the restart, a pooled session of `p`
// may still be the dead one: the attempt that meets it fails as unavailable.
std::uint64_t token_of_a_grant(distlock::provider& p, const std::string& name, int tries) {
    for (int attempt = 1;; ++attempt) {
        try {
            auto m = p.mutex(name);
            const bool granted = m.try_lock_for(10s);  // outside REQUIRE, which would take its exception
            REQUIRE(granted);
            const auto token = m.token();
            m.unlock();
            return token;
        } catch (const distlock::unavailable_error& e) {
            INFO(e.what());
            if (attempt >= tries) throw;
            std::this_thread::sleep_for(200ms);
        }
    }
}

}  // namespace

TEST_CASE("tokens never repeat after the server is killed right after a draw", "[.crash]") {
    const auto base = distlock::test::env(("DISTLOCK_TEST_" + facts().env + "_URL").c_str());
    if (base.empty()) FAIL("DISTLOCK_TEST_" << facts().env << "_URL is not set (integration/backends.sh up)");
    for (const auto& query : facts().crash_strategies) {
        DYNAMIC_SECTION(query) {
            const auto url = with_query(base, query + "&lease=30s");
            const auto name = distlock::test::unique_name("crash");
            auto p = distlock::connect(url);
            const auto first = token_of_a_grant(p, name, 1);  // the tables exist, the pool has its session
            // Draws of our own until the next one writes the sequence's state;
            // that one is the grant's.
            std::optional<std::uint64_t> before;
            {
                raw_sql db(url);
                const auto fence = db.quote(db.table() + "_fence");
                int draws = 1;
                while (facts().draw_and_count_left(db, fence) > 0) REQUIRE(++draws < 5000);
                before = token_of_a_grant(p, name, 1);
            }
            CHECK(*before > first);
            server_control("kill");
            server_control("spawn");
            // The same provider (its sessions died with the server) and a new one.
            const auto after = token_of_a_grant(p, name, 3);
            INFO("token before the kill " << *before << ", after " << after);
            CHECK(after > *before);
            auto fresh = distlock::connect(url);
            CHECK(token_of_a_grant(fresh, name, 1) > after);
        }
    }
}
