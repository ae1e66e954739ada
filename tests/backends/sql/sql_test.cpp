// SQL-specific tests, built once per dialect (DISTLOCK_SQL_TEST_DIALECT is
// "MYSQL" or "POSTGRES") and run against the real server of
// integration/servers/<mysql|postgres>.sh. The strategies' URLs come from
// DISTLOCK_TEST_<DIALECT>_<STRATEGY>_URL.
#include <arpa/inet.h>
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
#include "sql.hpp"
#include "stock.hpp"
#include "support.hpp"
#include "tcp_proxy.hpp"

using namespace std::chrono_literals;
using distlock::test::eventually;
using distlock::test::unique_name;
namespace s = distlock::backends::sql;
using clk = std::chrono::steady_clock;

namespace {

const std::string dialect_name = DISTLOCK_SQL_TEST_DIALECT;  // MYSQL or POSTGRES
const bool is_mysql = dialect_name == "MYSQL";
const std::string native = is_mysql ? "get-lock" : "advisory";

std::string url_of(const std::string& strategy) {
    std::string var = "DISTLOCK_TEST_" + dialect_name + "_";
    for (char c : strategy) var += c == '-' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    var += "_URL";
    auto u = distlock::test::env(var.c_str());
    if (u.empty()) FAIL(var << " is not set (integration/backends.sh up)");
    return u;
}

const std::vector<std::string> all_strategies = {"for-update", "lease-table", "optimistic", native};
const std::vector<std::string> session_strategies = {"for-update", native};
const std::vector<std::string> lease_strategies = {"lease-table", "optimistic"};

// The URL with its query replaced (host, credentials and database kept).
std::string with_query(const std::string& url, const std::string& query) {
    return url.substr(0, url.find('?')) + (query.empty() ? "" : "?" + query);
}

// Plain SQL on a session of our own, written with '?' placeholders.
class raw_sql {
public:
    explicit raw_sql(const std::string& url) {
        (void)distlock::schemes();  // registers the dialects
        auto u = distlock::spi::url::parse(url);
        const auto* factory = s::find_dialect(u.scheme());
        REQUIRE(factory != nullptr);
        dialect_ = (*factory)(u, s::conn_settings{});
        conn_ = dialect_->connect();
    }
    s::result run(const std::string& text, std::vector<s::value> args = {}) {
        s::statement st;
        int n = 0;
        for (char c : text) {
            if (c == '?') {
                st.text += dialect_->placeholder(++n);
                st.args.push_back(n - 1);
            } else {
                st.text += c;
            }
        }
        return conn_->exec(st, args);
    }
    std::optional<std::string> scalar(const std::string& text, std::vector<s::value> args = {}) {
        auto r = run(text, std::move(args));
        if (r.rows.empty() || r.rows[0].empty()) return std::nullopt;
        return r.rows[0][0];
    }
    std::int64_t session_id() const { return conn_->session_id(); }
    void kill(std::int64_t session) {
        if (is_mysql) run("KILL ?", {session});
        else run("SELECT pg_terminate_backend(CAST(? AS integer))", {session});
    }
    std::string quote(const std::string& id) const { return dialect_->quote(id); }

private:
    std::shared_ptr<s::dialect> dialect_;
    std::unique_ptr<s::connection> conn_;
};

// The documented native keys (docs/backends/sql.md), computed here on their own.
std::string documented_get_lock_key(const std::string& name) {
    bool plain = !name.empty() && name.size() <= 64 && name.rfind("distlock:", 0) != 0;
    for (unsigned char c : name)
        plain = plain && ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || std::string("_.:/-").find(static_cast<char>(c)) != std::string::npos);
    return plain ? name : "distlock:" + distlock::spi::sha256_hex(name).substr(0, 55);
}
std::int64_t documented_advisory_key(const std::string& name) {
    auto d = distlock::spi::sha256(name);
    std::uint64_t k = 0;
    for (int i = 0; i < 8; ++i) k = (k << 8) | static_cast<unsigned char>(d[static_cast<std::size_t>(i)]);
    return static_cast<std::int64_t>(k);
}

// The server session that holds `name`, found through the server's own view
// where it has one (IS_USED_LOCK, pg_locks), else through the holder column.
std::int64_t holder_session(raw_sql& db, const std::string& strategy, const std::string& name) {
    std::optional<std::string> id;
    if (strategy == "get-lock") {
        id = db.scalar("SELECT IS_USED_LOCK(?)", {documented_get_lock_key(name)});
    } else if (strategy == "advisory") {
        const auto key = static_cast<std::uint64_t>(documented_advisory_key(name));
        id = db.scalar("SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 1 AND granted"
                       " AND classid::bigint = ? AND objid::bigint = ?",
                       {static_cast<std::int64_t>(key >> 32), static_cast<std::int64_t>(key & 0xffffffffu)});
    } else {
        id = db.scalar("SELECT holder FROM distlock_locks WHERE name = ?", {s::bytes{name}});
    }
    REQUIRE(id.has_value());
    return std::stoll(*id);
}

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

// A loopback TCP port that accepts connections (the kernel completes the
// handshake) but never answers: a server that is stopped (SIGSTOP) or hung.
std::string with_port(const std::string& url, int port) {
    auto at = url.find('@');
    auto colon = url.find(':', at);
    auto slash = url.find('/', colon);
    return url.substr(0, colon + 1) + std::to_string(port) + url.substr(slash);
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
            const auto rows_before = std::stoll(*db.scalar("SELECT COUNT(*) FROM distlock_locks"));
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
            CHECK(std::stoll(*db.scalar("SELECT COUNT(*) FROM distlock_locks")) >= rows_before);
            for (const auto& n : names) {
                INFO("name of " << n.size() << " bytes");
                if (strategy == "for-update")
                    CHECK(*db.scalar("SELECT COUNT(*) FROM distlock_locks_rows WHERE name = ?", {s::bytes{n}}) == "1");
                else
                    CHECK(*db.scalar("SELECT COUNT(*) FROM distlock_locks WHERE name = ?", {s::bytes{n}}) == "1");
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
            auto a = distlock::connect(url);
            auto b = distlock::connect(url);
            raw_sql db(url);
            const auto name = "kill/" + unique_name(strategy);  // plain lower-case: its own GET_LOCK key
            std::atomic<int> lost{0};
            distlock::lock_options o;
            o.on_lost = [&](const distlock::lock_event&) { ++lost; };
            auto holder = a.mutex(name, o);
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
            CHECK(eventually([&] { return lost.load() == 1; }, 2s));
            holder.unlock();  // never throws, never frees the new holder's lock
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
        auto target = with_port(url, silent.port()) + "&connect_timeout=1s&timeout=2s";
        auto t0 = clk::now();
        CHECK_THROWS_AS(distlock::connect(target), distlock::unavailable_error);
        CHECK(clk::now() - t0 < 10s);
    }
}

TEST_CASE("a URL that points at a server of another kind says so; a bad argument where the reply shows it",
          "[sql][input]") {
    distlock::test::wrong_server http("HTTP/1.1 400 Bad Request\r\n\r\n");
    const auto target = with_port(url_of("lease-table"), http.port()) + "&connect_timeout=1s&timeout=2s";
    if (is_mysql) {
        // MySQL's client reads a packet's length from the first bytes and waits for
        // the rest: no greeting, as from a stuck server, which a retry may fix.
        try {
            (void)distlock::connect(target);
            FAIL("connected");
        } catch (const distlock::unavailable_error& e) {
            CHECK(std::string(e.what()).find("is 127.0.0.1:" + std::to_string(http.port()) +
                                             " a MySQL or MariaDB server?") != std::string::npos);
        }
        return;
    }
    try {
        (void)distlock::connect(target);
        FAIL("connected");
    } catch (const distlock::invalid_argument_error& e) {
        CHECK(std::string(e.what()).find("a PostgreSQL server?") != std::string::npos);
        CHECK(std::string(e.what()).find("cannot connect") != std::string::npos);
    }
}

TEST_CASE("wrong credentials give access_denied_error; a missing database a typed error", "[sql][auth]") {
    const auto url = url_of("lease-table");
    auto at = url.find('@');
    auto colon = url.find(':', url.find("://") + 3);
    const auto wrong_password = url.substr(0, colon + 1) + "not-the-password" + url.substr(at);
    CHECK_THROWS_AS(distlock::connect(wrong_password), distlock::access_denied_error);
    try {
        (void)distlock::connect(wrong_password);
    } catch (const distlock::error& e) {
        CHECK(e.backend() == (is_mysql ? "mysql" : "postgres"));
        CHECK(std::string(e.what()).find("not-the-password") == std::string::npos);
        if (is_mysql) CHECK(e.native_code() == 1045);
    }
    const auto slash = url.find('/', at);
    const auto no_db = url.substr(0, slash) + "/no_such_database_here" + url.substr(url.find('?'));
    // MySQL does not tell a user whether a database it may not use exists (1044).
    if (is_mysql) CHECK_THROWS_AS(distlock::connect(no_db), distlock::access_denied_error);
    else CHECK_THROWS_AS(distlock::connect(no_db), distlock::invalid_argument_error);
}

TEST_CASE("URL parameters are validated: strategy, table identifier, durations", "[sql][url]") {
    const auto url = url_of("lease-table");
    CHECK_THROWS_AS(distlock::connect(with_query(url, "strategy=redlock")), distlock::invalid_argument_error);
    CHECK_THROWS_AS(distlock::connect(with_query(url, "strategy=" + std::string(is_mysql ? "advisory" : "get-lock"))),
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
    db.run("DROP TABLE " + db.quote(table));
    db.run("DROP TABLE " + db.quote(table + "_rows"));
}

TEST_CASE("lock tables dropped under a running provider are created again by the next acquisition",
          "[sql][ddl]") {
    // As when the database is re-created, or restored from a dump without them.
    for (const auto& strategy : {std::string("lease-table"), std::string("optimistic"), std::string("for-update"),
                                 std::string(native)}) {
        INFO(strategy);
        const auto table = "dl_gone_" + distlock::spi::random_token().substr(0, 10);
        auto p = distlock::connect(with_query(url_of(strategy), "strategy=" + strategy + "&lease=2s&table=" + table));
        auto m = p.mutex(unique_name("gone"));
        REQUIRE(m.try_lock_for(5s));
        m.unlock();
        raw_sql db(url_of("lease-table"));
        db.run("DROP TABLE " + db.quote(table));
        db.run("DROP TABLE " + db.quote(table + "_rows"));
        REQUIRE(m.try_lock_for(5s));  // not 'unavailable' until the process restarts
        CHECK(m.token() > 0);
        m.unlock();
        CHECK(db.scalar("SELECT COUNT(*) FROM " + db.quote(table)).has_value());
        db.run("DROP TABLE " + db.quote(table));
        db.run("DROP TABLE " + db.quote(table + "_rows"));
    }
}

TEST_CASE("native lock keys follow the documented mapping; long names are hashed and still exclude", "[sql][native]") {
    const auto url = url_of(native);
    auto a = distlock::connect(url);
    auto b = distlock::connect(url);
    raw_sql db(url);
    const auto prefix = unique_name("long");
    const std::vector<std::string> names = {
        "orders/" + distlock::spi::random_token().substr(0, 8),  // plain: used as it is by GET_LOCK
        "Upper/" + distlock::spi::random_token().substr(0, 8),    // hashed (case)
        prefix + std::string(900, 'x') + "1",                     // 64+ bytes sharing a long prefix
        prefix + std::string(900, 'x') + "2",
    };
    std::vector<distlock::mutex> held;
    for (const auto& n : names) {
        held.push_back(a.mutex(n));
        REQUIRE(held.back().try_lock());
        CHECK(holder_session(db, native, n) > 0);  // visible on the server under the documented key
        CHECK_FALSE(b.mutex(n).try_lock());
    }
    // The same keys computed by the server's own SQL, as another language would.
    for (const auto& n : {names[1], names[2]}) {
        if (is_mysql) {
            auto key = db.scalar("SELECT CONCAT('distlock:', LEFT(SHA2(?, 256), 55))", {s::bytes{n}});
            REQUIRE(key.has_value());
            CHECK(db.scalar("SELECT IS_USED_LOCK(?)", {*key}).has_value());
        } else {
            auto key = db.scalar("SELECT ('x' || left(encode(sha256(?), 'hex'), 16))::bit(64)::bigint", {s::bytes{n}});
            REQUIRE(key.has_value());
            CHECK(*key == std::to_string(documented_advisory_key(n)));
        }
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
            distlock::testing::break_lock(p, first);  // nobody holds `first`
            std::this_thread::sleep_for(1s);          // past several liveness checks (lease/3)
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
            auto p = distlock::connect(url);
            auto other = distlock::connect(url);
            const auto base = unique_name("batch");
            std::atomic<int> lost{0};
            std::mutex lost_mutex;
            std::vector<std::string> lost_names;
            distlock::lock_options o;
            o.on_lost = [&](const distlock::lock_event& e) {
                std::lock_guard lk(lost_mutex);
                lost_names.push_back(e.name);
                ++lost;
            };
            std::vector<distlock::mutex> held;
            for (int i = 0; i < 24; ++i) {
                held.push_back(p.mutex(base + ":" + std::to_string(i), o));
                REQUIRE(held.back().try_lock());
            }
            std::this_thread::sleep_for(3s);  // one and a half leases: renewed, not expired
            CHECK(lost.load() == 0);
            distlock::testing::break_lock(other, base + ":7");
            CHECK(eventually([&] { return lost.load() == 1; }, 5s));
            std::this_thread::sleep_for(2500ms);  // more renewals of the others
            CHECK(lost.load() == 1);
            {
                std::lock_guard lk(lost_mutex);
                REQUIRE(lost_names.size() == 1);
                CHECK(lost_names[0] == base + ":7");
            }
            for (int i = 0; i < 24; ++i) {
                INFO("lock " << i);
                CHECK(held[static_cast<std::size_t>(i)].held() == (i != 7));
                if (i != 7) CHECK_FALSE(other.mutex(base + ":" + std::to_string(i)).try_lock());
            }
            for (auto& m : held) m.unlock();
        }
    }
}

TEST_CASE("PostgreSQL lease waiters are woken by the release's notification, not by their next poll",
          "[sql][notify]") {
    if (is_mysql) {
        SUCCEED("MySQL has no notifications: lease waiters poll (declared: notified_wakeup unsupported)");
        return;
    }
    for (const auto& strategy : lease_strategies) {
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

TEST_CASE("the optimistic stock update never oversells under concurrent buyers", "[sql][stock]") {
    s::stock_options o;
    o.table = "dl_stock_" + distlock::spi::random_token().substr(0, 10);
    auto stock = s::open_optimistic_stock(url_of("optimistic"), o);
    stock->create_table();
    stock->put("product_01", 25);
    CHECK(stock->stock("product_01") == 25);
    CHECK_FALSE(stock->stock("no-such-product").has_value());
    CHECK_THROWS_AS(stock->take("no-such-product"), distlock::invalid_argument_error);
    std::atomic<int> sold{0}, sold_out{0}, conflicts{0}, most_attempts{0};
    std::vector<std::thread> buyers;
    for (int t = 0; t < 8; ++t)
        buyers.emplace_back([&, t] {
            auto mine = s::open_optimistic_stock(url_of("optimistic"), o);
            for (int i = 0; i < 10; ++i) {
                auto r = mine->take("product_01");
                if (r.outcome == s::stock_outcome::taken) ++sold;
                else if (r.outcome == s::stock_outcome::sold_out) ++sold_out;
                else ++conflicts;
                for (int seen = most_attempts.load(); r.attempts > seen;)
                    if (most_attempts.compare_exchange_weak(seen, r.attempts)) break;
                (void)t;
            }
        });
    for (auto& b : buyers) b.join();
    INFO("sold " << sold << ", sold out " << sold_out << ", gave up after conflicts " << conflicts);
    CHECK(sold.load() <= 25);
    CHECK(stock->stock("product_01") == 25 - sold.load());
    CHECK(sold + sold_out + conflicts == 80);
    CHECK(most_attempts.load() <= o.tries);  // bounded retries
    raw_sql db(url_of("optimistic"));
    db.run("DROP TABLE " + db.quote(o.table));
}
