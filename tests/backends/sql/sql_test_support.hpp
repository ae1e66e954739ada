// What the SQL layer's tests share: the shared cases (sql_test.cpp) and each
// dialect's own (tests/backends/<mysql|postgres>/), built into one program per
// dialect and run against the real server of integration/servers/<dialect>.sh.
// The dialect's file defines facts(); the strategies' URLs come from
// DISTLOCK_TEST_<ENV>_<STRATEGY>_URL.
#pragma once

#include <catch2/catch.hpp>
#include <cctype>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "distlock/distlock.hpp"
#include "distlock/spi/url.hpp"
#include "sql.hpp"
#include "support.hpp"
#include "tcp_proxy.hpp"

namespace sql_test {

// connect(target) is refused as a reply larger than the client asks for (the
// caps of docs/backends/sql.md, "A broken or hostile server").
inline void check_refused_as_too_large(const std::string& target) {
    try {
        (void)distlock::connect(target);
        FAIL("connected");
    } catch (const distlock::unavailable_error& e) {
        INFO(e.what());
        CHECK(std::string(e.what()).find("larger than any this client asks for") != std::string::npos);
    }
}

namespace s = distlock::backends::sql;

class raw_sql;

// What a dialect's test program supplies (tests/backends/<mysql|postgres>/).
struct dialect_facts {
    std::string env;     // "MYSQL": URLs from DISTLOCK_TEST_MYSQL_<STRATEGY>_URL
    std::string scheme;  // "mysql": the backend's name in errors
    std::string native;  // the native strategy: "get-lock" or "advisory"
    std::shared_ptr<s::dialect> (*make_dialect)(distlock::spi::url&, const s::conn_settings&);
    std::string kill;  // ends the session given as its one '?' argument
    // The session holding the native lock of `name`, on the server's own view
    // (IS_USED_LOCK, pg_locks) and under the documented key.
    std::optional<std::string> (*native_holder)(raw_sql& db, const std::string& name);
    // The session whose transaction holds the for-update row of `name` locked,
    // on the server's own view.
    std::optional<std::string> (*row_holder)(raw_sql& db, const std::string& name);
    std::string fence_object;  // what <table>_fence is: "TABLE" (MySQL's counter rows) or "SEQUENCE"
    // The crash test (crash_test.cpp): the strategies (URL queries) whose grant
    // draws a token from the sequence with no write of its own to commit, and,
    // after one draw of its own on `db` from the sequence `fence` (quoted), how
    // many more the server can hand out before a draw writes the sequence's state
    // (MariaDB: its next cached block; PostgreSQL: its next WAL record).
    std::vector<std::string> crash_strategies;
    std::int64_t (*draw_and_count_left)(raw_sql& db, const std::string& fence);

    // The statement-count test (round_trip_test.cpp). The server's own count of
    // what the DISTLOCK_TEST_<ENV>_COUNT_URL's user or database ran (MariaDB:
    // statements of that user in USER_STATISTICS; PostgreSQL: transactions of that
    // database in pg_stat_database, read once its sessions have ended and so
    // reported them), read on `monitor`, a session of the main URL.
    std::string count_unit;
    std::int64_t (*server_count)(raw_sql& monitor);
    struct cycle_cost {
        int server;       // count_unit per uncontended lock()+unlock()
        int round_trips;  // of the client
    };
    std::vector<std::pair<std::string, cycle_cost>> per_cycle;  // by strategy (URL query)

    // The layout before 2026-11-24 (the version column of a row per name was the
    // token; "{t}" stands for the table name), and an expression of the time an
    // hour from now in its expires_at column.
    std::vector<std::string> legacy_tables;
    // The layout just before holder labels (no holder_label column); "{t}" as above.
    std::vector<std::string> previous_tables;
    std::string in_an_hour;
    std::string an_hour_ago;

    // The same for the read-write lock and the semaphore: per uncontended cycle of
    // a primitive ("read", "write" or "permit") on a strategy (URL query).
    struct primitive_cost {
        std::string query, primitive;
        cycle_cost cost;
    };
    std::vector<primitive_cost> per_primitive_cycle;

    // Run first on every raw_sql session. PostgreSQL: distlock's sessions
    // resolve unqualified names in pg_catalog only; the tests' own SQL names
    // the tables of the default schema, public, unqualified.
    std::string raw_session_setup;
    // TLS (tls_test.cpp): the native parameter that turns TLS off, and the
    // native alias of tls_ca.
    std::string tls_off;       // "sslmode=disable"
    std::string tls_ca_alias;  // "sslrootcert"
};
const dialect_facts& facts();

inline std::string url_of(const std::string& strategy) {
    std::string var = "DISTLOCK_TEST_" + facts().env + "_";
    for (char c : strategy) var += c == '-' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    var += "_URL";
    auto u = distlock::test::env(var.c_str());
    if (u.empty()) FAIL(var << " is not set (integration/backends.sh up)");
    return u;
}

// Plain SQL on a session of our own, written with '?' placeholders.
class raw_sql {
public:
    explicit raw_sql(const std::string& url) {
        auto u = distlock::spi::url::parse(url);
        if (auto t = u.take("table")) table_ = *t;
        dialect_ = facts().make_dialect(u, s::conn_settings{});
        conn_ = dialect_->connect();
        if (!facts().raw_session_setup.empty()) run(facts().raw_session_setup);
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
    void kill(std::int64_t session) { run(facts().kill, {session}); }
    std::string quote(const std::string& id) const { return dialect_->quote(id); }
    // The URL's lock table (table=), whose namespace the server-wide keys are in.
    const std::string& table() const { return table_; }

private:
    std::string table_ = "distlock_locks";
    std::shared_ptr<s::dialect> dialect_;
    std::unique_ptr<s::connection> conn_;
};

// The server session that holds `name`, found through the server's own view
// where it has one (IS_USED_LOCK, pg_locks), else through the holder column.
inline std::int64_t holder_session(raw_sql& db, const std::string& strategy, const std::string& name) {
    std::optional<std::string> id;
    if (strategy == facts().native) id = facts().native_holder(db, name);
    else id = facts().row_holder(db, name);
    REQUIRE(id.has_value());
    return std::stoll(*id);
}

// Drops a lock table, its rows table, its fence counter, and the tables of the
// semaphores and (MySQL) read-write locks.
inline void drop_lock_tables(raw_sql& db, const std::string& table) {
    db.run("DROP TABLE " + db.quote(table));
    db.run("DROP TABLE " + db.quote(table + "_rows"));
    db.run("DROP " + facts().fence_object + " " + db.quote(table + "_fence"));
    db.run("DROP TABLE IF EXISTS " + db.quote(table + "_permits"));
    db.run("DROP TABLE IF EXISTS " + db.quote(table + "_rw"));
    db.run("DROP TABLE IF EXISTS " + db.quote(table + "_epoch"));  // MariaDB's fence guard
    db.run("DROP TABLE IF EXISTS " + db.quote(table + "_boot"));
}

// The URL with its query replaced (host, credentials and database kept).
inline std::string with_query(const std::string& url, const std::string& query) {
    return url.substr(0, url.find('?')) + (query.empty() ? "" : "?" + query);
}

// The URL with another port (a loopback listener of the test's own).
inline std::string with_port(const std::string& url, int port) {
    auto at = url.find('@');
    auto colon = url.find(':', at);
    auto slash = url.find('/', colon);
    return url.substr(0, colon + 1) + std::to_string(port) + url.substr(slash);
}

// The lease-table URL with a wrong password, and with a database that does not exist.
inline std::string wrong_password_url() {
    const auto url = url_of("lease-table");
    const auto colon = url.find(':', url.find("://") + 3);
    return url.substr(0, colon + 1) + "not-the-password" + url.substr(url.find('@'));
}
inline std::string missing_database_url() {
    const auto url = url_of("lease-table");
    return url.substr(0, url.find('/', url.find('@'))) + "/no_such_database_here" + url.substr(url.find('?'));
}

// The lease-table URL pointed at a loopback `port` of the test's own, with
// short timeouts.
inline std::string url_at_port(int port) {
    return with_port(url_of("lease-table"), port) + "&connect_timeout=1s&timeout=2s";
}

// ---- TLS: the servers of integration/backends.sh's TLS set -------------------------

// The dialect's TLS server URL (DISTLOCK_TEST_<ENV>_TLS_URL) up to its query;
// "" when the TLS servers are not there.
inline std::string tls_base() {
    const auto u = distlock::test::env(("DISTLOCK_TEST_" + facts().env + "_TLS_URL").c_str());
    return u.substr(0, u.find('?'));
}
// The certificates' directory (DISTLOCK_TEST_TLS_DIR).
inline std::string tls_dir() { return distlock::test::env("DISTLOCK_TEST_TLS_DIR"); }
// The URL, up to its query, of the dialect's failing TLS server `name`
// (DISTLOCK_TEST_<ENV>_<name>_URL_MUST_FAIL: TLS_WRONG_NAME, TLS_EXPIRED...).
inline std::string tls_must_fail(const std::string& name) {
    const auto u = distlock::test::env(("DISTLOCK_TEST_" + facts().env + "_" + name + "_URL_MUST_FAIL").c_str());
    REQUIRE(!u.empty());
    return u.substr(0, u.find('?'));
}

// A proxy in front of the dialect's TLS server (tcp_proxy.hpp: to count its
// connections, or hold its replies back), and the TLS server's URL through it
// up to its query.
struct tls_proxy {
    std::string host = tls_base().substr(tls_base().find('@') + 1);
    distlock::test::tcp_proxy proxy{host.substr(0, host.find(':')),
                                    std::stoi(host.substr(host.find(':') + 1, host.find('/') - host.find(':') - 1))};
    std::string base() const {
        const auto b = tls_base();
        const auto colon = b.find(':', b.find('@'));
        return b.substr(0, colon) + ":" + std::to_string(proxy.port()) + b.substr(b.find('/', colon));
    }
};

// connect(url) fails with E within 2 s, and its message shows no private key;
// its message.
template <class E>
std::string tls_refused(const std::string& url) {
    INFO(url);
    const auto t0 = std::chrono::steady_clock::now();
    try {
        (void)distlock::connect(url + "&connect_timeout=5s");
        FAIL("connected");
    } catch (const E& e) {
        CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(2));
        const std::string what = e.what();
        CHECK(what.find("PRIVATE KEY") == std::string::npos);
        return what;
    }
    return {};
}

// connect(url) locks and unlocks a lock of its own.
inline void tls_locks(const std::string& url) {
    INFO(url);
    auto p = distlock::connect(url);
    auto m = p.mutex(distlock::test::unique_name("sql-tls"));
    m.lock();
    CHECK(m.held());
    m.unlock();
}

}  // namespace sql_test
