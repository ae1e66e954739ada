// The SQL layer's tests, shared by the dialects: built into each dialect's test
// program (tests/backends/mysql/, tests/backends/postgres/) with its facts and
// its own cases, and run against its real server (sql_test_support.hpp).
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <ctime>
#include <mutex>
#include <thread>
#include <vector>

#include "child_process.hpp"
#include "distlock/distlock.hpp"
#include "distlock/spi/backend.hpp"
#include "distlock/testing.hpp"
#include "sql_test_support.hpp"
#include "support.hpp"
#include "tcp_proxy.hpp"

using namespace std::chrono_literals;
using namespace sql_test;
using distlock::test::eventually;
using distlock::test::unique_name;
using clk = std::chrono::steady_clock;

namespace {

const std::string native = facts().native;
const std::vector<std::string> all_strategies = {"for-update", "lease-table", "optimistic", native};
const std::vector<std::string> session_strategies = {"for-update", native};
const std::vector<std::string> lease_strategies = {"lease-table", "optimistic"};

// The probe helper under the clock-skew shim, its clock `skew_seconds` off,
// its stdout on a pipe.
distlock::test::child_process skewed_probe(const std::vector<std::string>& args, long skew_seconds) {
    std::vector<std::string> argv{DISTLOCK_SQL_PROBE};
    argv.insert(argv.end(), args.begin(), args.end());
    // Under -DDISTLOCK_SANITIZE=address the shim comes before the ASan runtime.
    const auto asan = distlock::test::env("ASAN_OPTIONS");
    return distlock::test::child_process(
        argv, {.env = {{"DISTLOCK_SKEW_SECONDS", std::to_string(skew_seconds)},
                       {"LD_PRELOAD", DISTLOCK_SQL_SKEW_SHIM},
                       {"ASAN_OPTIONS", "verify_asan_link_order=0" + (asan.empty() ? "" : ":" + asan)}}});
}

}  // namespace

TEST_CASE("lock names with quotes, semicolons, backslashes, NUL and multi-byte characters are bound, never spliced",
          "[sql][injection]") {
    const std::string base = unique_name("inj");
    const std::vector<std::string> names = {
        base + "x'); DROP TABLE distlock_locks; --",
        base + "\\'; DELETE FROM distlock_locks; --",
        base + "\"; DROP TABLE \"distlock_locks\"; --",
        base + "`distlock_locks`",
        base + std::string("a\0b", 3),
        base + std::string("a\0c", 3),
        base + "%",
        base + "_",
        base + "$1?",
        base + "\xe9\x94\x81\xf0\x9f\x94\x92",
        base + "\xff\xfe\x80",  // not UTF-8 at all
    };
    for (const auto& strategy : all_strategies) {
        DYNAMIC_SECTION("strategy " << strategy) {
            const auto url = url_of(strategy);
            auto a = distlock::connect(url);
            auto b = distlock::connect(url);
            raw_sql db(url);
            // Rows of for-update are never deleted; lease rows go at each release (other tests' too).
            const auto rows_before = std::stoll(*db.scalar("SELECT COUNT(*) FROM distlock_locks_rows"));
            std::vector<distlock::mutex> held;
            for (const auto& n : names) {
                held.push_back(a.mutex(n));
                REQUIRE(held.back().try_lock_for(5s));
            }
            for (const auto& n : names) CHECK_FALSE(b.mutex(n).try_lock());
            // Names that a LIKE, a truncation at NUL or a charset conversion would merge are free.
            for (const auto& other : {base, base + "a", base + "ab", base + "x", base + "\xe9"}) {
                auto m = b.mutex(other);
                CHECK(m.try_lock());
                m.unlock();
            }
            // The tables are intact and hold each name byte for byte.
            CHECK(db.scalar("SELECT COUNT(*) FROM distlock_locks").has_value());
            CHECK(std::stoll(*db.scalar("SELECT COUNT(*) FROM distlock_locks_rows")) >= rows_before);
            for (const auto& n : names) {
                INFO("name of " << n.size() << " bytes");
                if (strategy == "for-update")
                    CHECK(*db.scalar("SELECT COUNT(*) FROM distlock_locks_rows WHERE name = ?", {s::bytes{n}}) == "1");
                else if (strategy == facts().native)
                    CHECK(facts().native_holder(db, n).has_value());  // no row: the server's own lock
                else CHECK(*db.scalar("SELECT COUNT(*) FROM distlock_locks WHERE name = ?", {s::bytes{n}}) == "1");
            }
            for (auto& m : held) m.unlock();
            for (const auto& n : names) {
                auto m = b.mutex(n);
                CHECK(m.try_lock());
                m.unlock();
            }
        }
    }
}

TEST_CASE("a holder whose session is killed on the server is told it lost the lock, and the lock is free at once",
          "[sql][kill]") {
    for (const auto& strategy : session_strategies) {
        DYNAMIC_SECTION("strategy " << strategy) {
            const auto url = url_of(strategy);
            distlock::test::loss_recorder rec;  // before the providers: their callback threads call it until they end
            auto a = distlock::connect(url);
            auto b = distlock::connect(url);
            raw_sql db(url);
            const auto name = "kill/" + unique_name(strategy);  // plain lower-case: its own GET_LOCK key
            auto holder = a.mutex(name, rec.options());
            REQUIRE(holder.try_lock());
            const auto token = holder.token();
            const auto session = holder_session(db, strategy, name);
            CHECK(session != db.session_id());
            auto waiter = b.mutex(name);
            CHECK_FALSE(waiter.try_lock());
            db.kill(session);
            // Freed by the server at once (not after any lease)...
            CHECK(waiter.try_lock_for(5s));
            CHECK(waiter.token() > token);
            // ... and the holder learns it on its next liveness check (lease/3).
            CHECK(eventually([&] { return !holder.held(); }, 5s));
            CHECK(rec.wait_lost(1, 2s));
            CHECK_FALSE(rec.wait_lost(2, 200ms));  // and only once
            holder.unlock();                       // never throws, never frees the new holder's lock
            CHECK(waiter.held());
            CHECK_FALSE(a.mutex(name).try_lock());
            waiter.unlock();
            // The killed session is not reused: the old holder's handle locks again.
            CHECK(holder.try_lock_for(5s));
            CHECK(holder.token() > waiter.token());
            holder.unlock();
        }
    }
}

TEST_CASE("lease expiry follows the server's clock: a client with a skewed clock steals nothing", "[sql][clock]") {
    for (const auto& strategy : lease_strategies) {
        DYNAMIC_SECTION("strategy " << strategy) {
            const auto url = url_of(strategy);
            auto p = distlock::connect(url);
            const auto name = unique_name("skew-" + strategy);
            auto holder = p.mutex(name);
            REQUIRE(holder.try_lock());
            {
                // An hour ahead: by its own clock our 2 s lease ended long ago.
                auto ahead = skewed_probe({url, name, "try"}, 3600);
                auto line = ahead.read_line(60s);
                INFO("probe said: " << line);
                REQUIRE(line.find(' ') != std::string::npos);
                const long probe_time = std::stol(line.substr(0, line.find(' ')));
                CHECK(probe_time - std::time(nullptr) > 3500);  // the skew was in effect
                CHECK(line.substr(line.find(' ') + 1) == "busy");
            }
            CHECK(holder.held());
            holder.unlock();
            {
                // An hour behind, holding without renewal: by its clock the lease
                // lasts an hour more; the server ends it after 2 s all the same.
                auto behind = skewed_probe({url, name, "hold-no-renew"}, -3600);
                auto line = behind.read_line(60s);
                INFO("probe said: " << line);
                REQUIRE(line.find(" locked ") != std::string::npos);
                CHECK(std::time(nullptr) - std::stol(line.substr(0, line.find(' '))) > 3500);
                auto m = p.mutex(name);
                CHECK_FALSE(m.try_lock());
                auto t0 = clk::now();
                REQUIRE(m.try_lock_for(15s));
                // Not at once: the lease runs its 2 s on the server's clock from the
                // probe's grant (a little of which passed before t0).
                CHECK(clk::now() - t0 >= 500ms);
                m.unlock();
            }
        }
    }
}

TEST_CASE("a server that is down or does not answer gives unavailable_error, no hang", "[sql][unavailable]") {
    const auto url = url_of("lease-table");
    SECTION("nothing listens on the port") {
        auto t0 = clk::now();
        CHECK_THROWS_AS(distlock::connect(with_port(url, distlock::test::free_port())), distlock::unavailable_error);
        CHECK(clk::now() - t0 < 10s);
    }
    SECTION("the server accepts but never answers (as a stopped one)") {
        distlock::test::silent_listener silent;
        auto target = url_at_port(silent.port());
        auto t0 = clk::now();
        CHECK_THROWS_AS(distlock::connect(target), distlock::unavailable_error);
        CHECK(clk::now() - t0 < 10s);
    }
}

TEST_CASE("a misspelled parameter is refused before anything is sent: no table is made, the server may be down",
          "[sql][input]") {
    const auto table = "dl_typo_" + distlock::spi::random_token().substr(0, 10);
    for (const std::string strategy : {"lease-table", "for-update", "optimistic"}) {
        DYNAMIC_SECTION(strategy) {
            const auto url = url_of(strategy);
            const auto typo = url + (url.find('?') == std::string::npos ? "?" : "&") + "table=" + table + "&leas=5s";
            for (const auto& target : {typo, with_port(typo, distlock::test::free_port())}) {
                try {
                    (void)distlock::connect(target);
                    FAIL("a misspelled parameter was accepted");
                } catch (const distlock::invalid_argument_error& e) {  // not unavailable_error, even with no server
                    CHECK_THAT(e.what(), Catch::Contains("unknown parameter(s)") && Catch::Contains("leas") &&
                                             Catch::Contains("its parameters:") && Catch::Contains("lease"));
                }
            }
            raw_sql db(url);
            CHECK(db.scalar("SELECT count(*) FROM information_schema.tables WHERE table_name LIKE ?", {table + "%"}) ==
                  std::optional<std::string>("0"));
        }
    }
}

TEST_CASE("wrong credentials give access_denied_error without the password; a missing database an error",
          "[sql][auth]") {
    const auto wrong_password = wrong_password_url();
    CHECK_THROWS_AS(distlock::connect(wrong_password), distlock::access_denied_error);
    try {
        (void)distlock::connect(wrong_password);
    } catch (const distlock::error& e) {
        CHECK(e.backend() == facts().scheme);
        CHECK(std::string(e.what()).find("not-the-password") == std::string::npos);
    }
    // The error of a missing database is the dialect's own (its tests).
    CHECK_THROWS_AS(distlock::connect(missing_database_url()), distlock::error);
}

TEST_CASE("URL parameters are validated: strategy, table identifier, durations", "[sql][url]") {
    const auto url = url_of("lease-table");
    CHECK_THROWS_AS(distlock::connect(with_query(url, "strategy=redlock")), distlock::invalid_argument_error);
    for (const std::string other_native : {"get-lock", "advisory"})  // the other dialect's
        if (other_native != native)
            CHECK_THROWS_AS(distlock::connect(with_query(url, "strategy=" + other_native)),
                            distlock::invalid_argument_error);
    CHECK_THROWS_AS(distlock::connect(with_query(url, "table=locks;drop")), distlock::invalid_argument_error);
    CHECK_THROWS_AS(distlock::connect(with_query(url, "table=1abc")), distlock::invalid_argument_error);
    CHECK_THROWS_AS(distlock::connect(with_query(url, "tries=0")), distlock::invalid_argument_error);
    CHECK_THROWS_AS(distlock::connect(with_query(url, "timeout=forever")), distlock::invalid_argument_error);
    CHECK_NOTHROW(distlock::connect(with_query(url, "")));  // lease-table is the default
}

TEST_CASE("tables are created on first use, by racing first users too, under the configured name", "[sql][ddl]") {
    const auto table = "dl_race_" + distlock::spi::random_token().substr(0, 10);
    for (const auto& strategy : {std::string("lease-table"), std::string("for-update")}) {
        const auto url = with_query(url_of(strategy), "strategy=" + strategy + "&lease=2s&table=" + table);
        std::vector<std::thread> racers;
        std::atomic<int> ok{0};
        std::mutex errors_mutex;
        std::vector<std::string> errors;
        for (int i = 0; i < 4; ++i)
            racers.emplace_back([&] {
                try {
                    auto p = distlock::connect(url);
                    auto m = p.mutex(unique_name("ddl"));
                    if (m.try_lock_for(5s)) {
                        m.unlock();
                        ++ok;
                    }
                } catch (const std::exception& e) {
                    std::lock_guard lk(errors_mutex);  // Catch2's macros are not thread-safe
                    errors.push_back(e.what());
                }
            });
        for (auto& t : racers) t.join();
        for (const auto& e : errors) UNSCOPED_INFO("racer failed: " << e);
        CHECK(ok.load() == 4);
    }
    raw_sql db(url_of("lease-table"));
    CHECK(db.scalar("SELECT COUNT(*) FROM " + db.quote(table)).has_value());
    CHECK(db.scalar("SELECT COUNT(*) FROM " + db.quote(table + "_rows")).has_value());
    CHECK(db.scalar("SELECT COUNT(*) FROM " + db.quote(table + "_fence")).has_value());
    drop_lock_tables(db, table);
}

TEST_CASE("lock tables dropped under a running provider are created again by the next acquisition", "[sql][ddl]") {
    // As when the database is re-created, or restored from a dump without them.
    for (const auto& strategy :
         {std::string("lease-table"), std::string("optimistic"), std::string("for-update"), std::string(native)}) {
        INFO(strategy);
        const auto table = "dl_gone_" + distlock::spi::random_token().substr(0, 10);
        auto p = distlock::connect(with_query(url_of(strategy), "strategy=" + strategy + "&lease=2s&table=" + table));
        auto m = p.mutex(unique_name("gone"));
        REQUIRE(m.try_lock_for(5s));
        m.unlock();
        raw_sql db(url_of("lease-table"));
        drop_lock_tables(db, table);
        REQUIRE(m.try_lock_for(5s));  // not 'unavailable' until the process restarts
        CHECK(m.token() > 0);
        m.unlock();
        CHECK(db.scalar("SELECT COUNT(*) FROM " + db.quote(table)).has_value());
        drop_lock_tables(db, table);
    }
}

TEST_CASE("native locks show on the server under their documented key; long names are hashed and still exclude",
          "[sql][native]") {
    const auto url = url_of(native);
    auto a = distlock::connect(url);
    auto b = distlock::connect(url);
    raw_sql db(url);
    const auto prefix = unique_name("long");
    const std::vector<std::string> names = {
        "orders/" + distlock::spi::random_token().substr(0, 8),  // plain: used as it is by GET_LOCK
        "Upper/" + distlock::spi::random_token().substr(0, 8),   // hashed (case)
        prefix + std::string(900, 'x') + "1",                    // 64+ bytes sharing a long prefix
        prefix + std::string(900, 'x') + "2",
    };
    std::vector<distlock::mutex> held;
    for (const auto& n : names) {
        held.push_back(a.mutex(n));
        REQUIRE(held.back().try_lock());
        CHECK(holder_session(db, native, n) > 0);  // visible on the server under the documented key
        CHECK_FALSE(b.mutex(n).try_lock());
    }
    for (auto& m : held) m.unlock();
    for (const auto& n : names) {
        auto m = b.mutex(n);
        CHECK(m.try_lock());
        m.unlock();
    }
}

TEST_CASE("break_lock ends the holder's session (session strategies) or clears its lease row", "[sql][break]") {
    for (const auto& strategy : all_strategies) {
        DYNAMIC_SECTION("strategy " << strategy) {
            const auto url = url_of(strategy);
            auto a = distlock::connect(url);
            auto b = distlock::connect(url);
            const auto name = unique_name("break");
            auto holder = a.mutex(name);
            REQUIRE(holder.try_lock());
            const auto token = holder.token();
            distlock::testing::break_lock(b, name);
            auto next = b.mutex(name);
            CHECK(next.try_lock_for(5s));
            CHECK(next.token() > token);  // the version survives a break
            CHECK(eventually([&] { return !holder.held(); }, 5s));
            next.unlock();
        }
    }
}

TEST_CASE("break_lock of a released name leaves alone the session that held it, now holding another lock",
          "[sql][break]") {
    for (const auto& strategy : session_strategies) {
        DYNAMIC_SECTION("strategy " << strategy) {
            const auto url = url_of(strategy) + "&pool=2";  // idle sessions are reused last-in first-out
            auto p = distlock::connect(url);
            raw_sql db(url);
            const auto first = "first/" + unique_name("reuse"), second = "second/" + unique_name("reuse");
            auto a = p.mutex(first);
            REQUIRE(a.try_lock());
            const auto session = holder_session(db, strategy, first);
            a.unlock();
            auto b = p.mutex(second);
            REQUIRE(b.try_lock());
            REQUIRE(holder_session(db, strategy, second) == session);  // the same pooled session
            distlock::testing::break_lock(p, first);                   // nobody holds `first`
            std::this_thread::sleep_for(1s);                           // past several liveness checks (lease/3)
            CHECK(b.held());
            CHECK_FALSE(distlock::connect(url).mutex(second).try_lock());
            b.unlock();
        }
    }
}

TEST_CASE("many leases renewed together stay held; a broken one among them is the only one reported lost",
          "[sql][renewal]") {
    for (const auto& strategy : lease_strategies) {
        DYNAMIC_SECTION("strategy " << strategy) {
            const auto url = url_of(strategy);  // lease=2s
            distlock::test::loss_recorder rec;  // before the providers: their callback threads call it until they end
            auto p = distlock::connect(url);
            auto other = distlock::connect(url);
            const auto base = unique_name("batch");
            const auto o = rec.options();
            std::vector<distlock::mutex> held;
            for (int i = 0; i < 24; ++i) {
                held.push_back(p.mutex(base + ":" + std::to_string(i), o));
                REQUIRE(held.back().try_lock());
            }
            std::this_thread::sleep_for(3s);  // one and a half leases: renewed, not expired
            CHECK(rec.lost() == 0);
            distlock::testing::break_lock(other, base + ":7");
            CHECK(rec.wait_lost(1, 5s));
            std::this_thread::sleep_for(2500ms);  // more renewals of the others
            const auto losses = rec.losses();
            REQUIRE(losses.size() == 1);
            CHECK(losses[0].name == base + ":7");
            for (int i = 0; i < 24; ++i) {
                INFO("lock " << i);
                CHECK(held[static_cast<std::size_t>(i)].held() == (i != 7));
                if (i != 7) CHECK_FALSE(other.mutex(base + ":" + std::to_string(i)).try_lock());
            }
            for (auto& m : held) m.unlock();
        }
    }
}

TEST_CASE("every socket a provider holds to the server is close-on-exec", "[sql][cloexec]") {
    // libpq sets FD_CLOEXEC itself; MySQL's Connector/C makes its socket without
    // SOCK_CLOEXEC (strace: socket(AF_INET, SOCK_STREAM, IPPROTO_TCP)), and
    // distlock sets FD_CLOEXEC once connected.
    const auto url = url_of(native);
    const auto port = static_cast<std::uint16_t>(std::stoi(url.substr(url.find(':', url.find('@')) + 1)));
    auto p = distlock::connect(url);
    auto m = p.mutex(unique_name("cloexec"));
    auto n = p.mutex(unique_name("cloexec"));
    REQUIRE(m.try_lock());  // a session each
    REQUIRE(n.try_lock());
    int seen = 0;
    for (int fd = 0; fd < 4096; ++fd) {
        sockaddr_storage a{};
        socklen_t len = sizeof a;
        if (::getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0 || a.ss_family != AF_INET) continue;
        if (ntohs(reinterpret_cast<sockaddr_in*>(&a)->sin_port) != port) continue;
        ++seen;
        INFO("descriptor " << fd);
        CHECK((::fcntl(fd, F_GETFD) & FD_CLOEXEC) != 0);
    }
    CHECK(seen >= 2);
    m.unlock();
    n.unlock();
}
