// mysql://: the SQL layer's shared tests (tests/backends/sql/sql_test.cpp) run
// with MySQL's facts below, and the cases that only MySQL/MariaDB has.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "child_process.hpp"
#include "distlock/distlock.hpp"
#include "distlock/spi/backend.hpp"
#include "distlock/testing.hpp"
#include "fake_mysql.hpp"
#include "mysql_dialect.hpp"
#include "sql_test_support.hpp"
#include "support.hpp"
#include "tcp_proxy.hpp"

using namespace std::chrono_literals;
using namespace sql_test;
using distlock::test::eventually;
using distlock::test::unique_name;
using clk = std::chrono::steady_clock;

namespace {

// The documented GET_LOCK key and for-update mark (docs/backends/sql.md),
// computed here on their own: SHA-256 of the database, NUL, the lock table,
// NUL and the name.
std::string digest_hex(const std::string& database, const std::string& table, const std::string& name) {
    return distlock::spi::sha256_hex(database + std::string(1, '\0') + table + std::string(1, '\0') + name);
}
std::string documented_get_lock_key(const std::string& name, const std::string& database = "distlock",
                                    const std::string& table = "distlock_locks") {
    return "distlock:" + digest_hex(database, table, name).substr(0, 55);
}
std::string documented_mark(const std::string& name, const std::string& database = "distlock",
                            const std::string& table = "distlock_locks") {
    return "distlock#row:" + digest_hex(database, table, name).substr(0, 51);
}

}  // namespace

const dialect_facts& sql_test::facts() {
    static const dialect_facts f{
        .env = "MYSQL",
        .scheme = "mysql",
        .native = "get-lock",
        .make_dialect = &distlock::backends::mysql::make_dialect,
        .kill = "KILL ?",
        // The key and the holder's mark as the server computes them (the named
        // lock 'distlock:' + 55, or 'distlock#row:' + 51 hex digits of the digest).
        .native_holder =
            [](raw_sql& db, const std::string& name) {
                return db.scalar(
                    "SELECT IS_USED_LOCK(CONCAT('distlock:', LEFT(SHA2(CONCAT(CAST(DATABASE() AS BINARY), X'00', ?, "
                    "X'00', ?),"
                    " 256), 55)))",
                    {db.table(), s::bytes{name}});
            },
        .row_holder =
            [](raw_sql& db, const std::string& name) {
                return db.scalar(
                    "SELECT IS_USED_LOCK(CONCAT('distlock#row:', LEFT(SHA2(CONCAT(CAST(DATABASE() AS BINARY), X'00', "
                    "?, X'00',"
                    " ?), 256), 51)))",
                    {db.table(), s::bytes{name}});
            },
        .fence_object = "TABLE",
        .crash_strategies = {"strategy=get-lock", "strategy=for-update",
                             "strategy=lease-table&engine=memory&table=distlock_memory_crash"},
        .draw_and_count_left = [](raw_sql& db, const std::string& fence) -> std::int64_t {
            const auto v = std::stoll(*db.scalar("SELECT NEXTVAL(" + fence + ")"));
            return std::stoll(*db.scalar("SELECT next_not_cached_value FROM " + fence)) - 1 - v;
        },
        .count_unit = "statements",
        .server_count = [](raw_sql& db) -> std::int64_t {
            auto n = db.scalar(
                "SELECT SELECT_COMMANDS + UPDATE_COMMANDS + OTHER_COMMANDS FROM"
                " information_schema.USER_STATISTICS WHERE USER = 'distlock_count'");
            return n ? std::stoll(*n) : 0;
        },
        // get-lock: SELECT IF(GET_LOCK(), NEXTVAL(), NULL); SELECT RELEASE_LOCK().
        // lease-table, optimistic: [INSERT ... NEXTVAL() ... ON DUPLICATE KEY; SELECT version]; DELETE.
        // for-update: [START TRANSACTION; SELECT ... FOR UPDATE; SELECT GET_LOCK(mark)]; SELECT NEXTVAL();
        // [SELECT RELEASE_LOCK(mark); ROLLBACK].
        // With counter rows (MySQL 8), each token costs one more statement (the row's bump).
        .per_cycle = {{"strategy=get-lock", {2, 2}},
                      {"strategy=lease-table", {3, 2}},
                      // wake=bell: GET_LOCK of the doorbell before the upsert, RELEASE_LOCK after the DELETE.
                      {"strategy=lease-table&wake=bell", {5, 2}},
                      // engine=memory: the same statements, on a MEMORY lock table.
                      {"strategy=lease-table&engine=memory&table=distlock_memory_count", {3, 2}},
                      {"strategy=optimistic", {3, 2}},
                      {"strategy=for-update", {6, 3}},
                      {"strategy=get-lock&fence=table&table=distlock_fence_rows", {3, 2}},
                      {"strategy=lease-table&fence=table&table=distlock_fence_rows", {4, 2}},
                      {"strategy=optimistic&fence=table&table=distlock_fence_rows", {4, 2}},
                      {"strategy=for-update&fence=table&table=distlock_fence_rows", {7, 3}}},
        .legacy_tables = {"CREATE TABLE {t} (name VARBINARY(1024) NOT NULL, owner VARCHAR(64) CHARACTER SET ascii NULL,"
                          " expires_at DATETIME(6) NULL, version BIGINT NOT NULL DEFAULT 0, holder BIGINT NULL,"
                          " PRIMARY KEY (name)) ENGINE=InnoDB",
                          "CREATE TABLE {t}_rows (name VARBINARY(1024) NOT NULL, PRIMARY KEY (name)) ENGINE=InnoDB"},
        .previous_tables =
            {"CREATE TABLE {t} (name VARBINARY(1024) NOT NULL, owner VARCHAR(64) CHARACTER SET ascii NULL,"
             " expires_at DATETIME(6) NULL, version BIGINT NOT NULL DEFAULT 0, PRIMARY KEY (name))"
             " ENGINE=InnoDB",
             "CREATE TABLE {t}_rows (name VARBINARY(1024) NOT NULL, PRIMARY KEY (name)) ENGINE=InnoDB"},
        .in_an_hour = "UTC_TIMESTAMP(6) + INTERVAL 1 HOUR",
        .an_hour_ago = "UTC_TIMESTAMP(6) - INTERVAL 1 HOUR",
        // permit: [SET @n, @s; INSERT ... SELECT ... NEXTVAL() ... ON DUPLICATE KEY; SELECT token, size]; DELETE.
        // read: [INSERT ... NEXTVAL(); SET @w; DELETE if a writer; SELECT version]; DELETE.
        // write: [INSERT ... ON DUPLICATE KEY; SET @r; UPDATE version = NEXTVAL(); SELECT version]; DELETE.
        // With counter rows, each adds the row's bump.
        .per_primitive_cycle = {{"strategy=lease-table", "permit", {4, 2}},
                                {"strategy=lease-table", "read", {5, 2}},
                                {"strategy=lease-table", "write", {5, 2}},
                                {"strategy=get-lock", "permit", {4, 2}},
                                {"strategy=lease-table&fence=table&table=distlock_fence_rows", "permit", {5, 2}},
                                {"strategy=lease-table&fence=table&table=distlock_fence_rows", "read", {6, 2}},
                                {"strategy=lease-table&fence=table&table=distlock_fence_rows", "write", {6, 2}}},
        .raw_session_setup = "",
        .tls_off = "ssl_mode=disabled",
        .tls_ca_alias = "ssl_ca",
    };
    return f;
}

TEST_CASE("a URL that points at a server of another kind says so", "[sql][input]") {
    distlock::test::wrong_server http("HTTP/1.1 400 Bad Request\r\n\r\n");
    const auto target = url_at_port(http.port());
    // MySQL's client reads a packet's length from the first bytes and waits for
    // the rest: no greeting, as from a stuck server, which a retry may fix.
    try {
        (void)distlock::connect(target);
        FAIL("connected");
    } catch (const distlock::unavailable_error& e) {
        CHECK(std::string(e.what()).find("is 127.0.0.1:" + std::to_string(http.port()) +
                                         " a MySQL or MariaDB server?") != std::string::npos);
    }
}

TEST_CASE("a wrong password carries MySQL's code; a database the user may not use is access denied", "[sql][auth]") {
    try {
        (void)distlock::connect(wrong_password_url());
        FAIL("connected");
    } catch (const distlock::access_denied_error& e) {
        CHECK(e.native_code() == 1045);
    }
    // MySQL does not tell a user whether a database it may not use exists (1044).
    CHECK_THROWS_AS(distlock::connect(missing_database_url()), distlock::access_denied_error);
}

TEST_CASE("GET_LOCK keys are the ones the server's own SQL computes, in the database and table's namespace",
          "[sql][native]") {
    const auto url = url_of("get-lock");
    auto p = distlock::connect(url);
    raw_sql db(url);
    const auto prefix = distlock::test::unique_name("long");
    for (const auto& n : {"plain-" + distlock::spi::random_token().substr(0, 8),
                          "Upper/" + distlock::spi::random_token().substr(0, 8), prefix + std::string(900, 'x')}) {
        auto m = p.mutex(n);
        REQUIRE(m.try_lock());
        auto key = db.scalar(
            "SELECT CONCAT('distlock:', LEFT(SHA2(CONCAT(CAST(DATABASE() AS BINARY), X'00', 'distlock_locks', X'00', "
            "?),"
            " 256), 55))",
            {s::bytes{n}});
        REQUIRE(key.has_value());
        CHECK(*key == documented_get_lock_key(n));
        CHECK(db.scalar("SELECT IS_USED_LOCK(?)", {*key}).has_value());
        if (n.size() <= 64) CHECK_FALSE(db.scalar("SELECT IS_USED_LOCK(?)", {n}).has_value());  // never the bare name
        m.unlock();
    }
}

// MySQL's read-write lock keeps a waiting writer in a row (PostgreSQL's waits in
// the server's lock queue, left when its connection ends).
TEST_CASE("a waiting writer that is gone stops holding readers back once its row's lease ends",
          "[sql][primitives][crash]") {
    const auto url = url_of("lease-table");
    auto p = distlock::connect(url);
    raw_sql db(url);
    const auto name = unique_name("gone-writer");
    // The row a writer process killed while waiting leaves: version 0, a lease of 4 s.
    db.run(
        "INSERT INTO distlock_locks_rw (name, holder, owner, expires_at, version) VALUES (?, 'w', ?,"
        " UTC_TIMESTAMP(6) + INTERVAL 4 SECOND, 0)",
        {s::bytes{name}, std::string("a-killed-writer")});
    auto reader = p.shared_mutex(name);
    CHECK_FALSE(reader.try_lock_shared());
    CHECK_FALSE(reader.try_lock_shared_for(500ms));
    // A liveness bound, not a speed one: the row's lease ends 4 s after it was
    // written, and a reader polls at most retry_max apart; a CI machine running
    // four test programs on two cores once took longer than 10 s here, so the
    // bound is wide, and what the server had is shown if it is passed.
    const bool got = reader.try_lock_shared_for(30s);
    if (!got) {
        const auto rows = db.scalar(
            "SELECT GROUP_CONCAT(CONCAT(IF(holder = 'w', 'writer', 'reader'), ' ', version, ' ', expires_at)) FROM "
            "distlock_locks_rw WHERE name = ?",
            {s::bytes{name}});
        UNSCOPED_INFO("server time " << db.scalar("SELECT UTC_TIMESTAMP(6)").value_or("?")
                                     << ", rows of the name: " << rows.value_or("none"));
    }
    REQUIRE(got);
    reader.unlock_shared();
    auto writer = p.shared_mutex(name);  // the expired row is taken over
    REQUIRE(writer.try_lock_for(5s));
    CHECK(writer.token() > 0);
    writer.unlock();
    CHECK(*db.scalar("SELECT COUNT(*) FROM distlock_locks_rw WHERE name = ?", {s::bytes{name}}) == "0");
}

// ---- tenants on one server (issue 23): GET_LOCK names and marks are server-wide

namespace {

// The URL on another database of the same server (same user and password).
std::string with_database(const std::string& url, const std::string& database) {
    const auto slash = url.find('/', url.find('@'));
    const auto query = url.find('?');
    return url.substr(0, slash + 1) + database + (query == std::string::npos ? "" : url.substr(query));
}

}  // namespace

TEST_CASE("two databases, or two lock tables of one database, never share a GET_LOCK lock or a for-update mark",
          "[sql][tenants]") {
    for (const std::string strategy : {"get-lock", "for-update"}) {
        DYNAMIC_SECTION(strategy) {
            const auto a_url = url_of(strategy);
            // distlock_b: a second database of the server, which the same user may use
            // (integration/servers/mysql.sh), and a second lock table in the first.
            const auto b_url = with_database(a_url, "distlock_b");
            const auto c_url = a_url + "&table=distlock_tenant_c";
            auto a = distlock::connect(a_url);
            auto b = distlock::connect(b_url);
            auto c = distlock::connect(c_url);
            const auto name = unique_name("tenant-" + strategy);
            auto ma = a.mutex(name);
            auto mb = b.mutex(name);
            auto mc = c.mutex(name);
            REQUIRE(ma.try_lock());
            CHECK(mb.try_lock());  // another database: another lock
            CHECK(mc.try_lock());  // another table: another lock
            // Each holds the key (or mark) of its own namespace, as the server computes it.
            raw_sql db(a_url);
            const auto held = [&](const std::string& database, const std::string& table) {
                const auto key = strategy == "get-lock" ? documented_get_lock_key(name, database, table)
                                                        : documented_mark(name, database, table);
                return db.scalar("SELECT IS_USED_LOCK(?)", {key});
            };
            const auto a_session = held("distlock", "distlock_locks");
            REQUIRE(a_session.has_value());
            REQUIRE(held("distlock_b", "distlock_locks").has_value());
            REQUIRE(held("distlock", "distlock_tenant_c").has_value());
            CHECK(*held("distlock_b", "distlock_locks") != *a_session);
            // Breaking the name in one database ends that database's holder only.
            distlock::testing::break_lock(b, name);
            CHECK(eventually([&] { return !held("distlock_b", "distlock_locks").has_value(); }, 5s));
            CHECK(held("distlock", "distlock_locks") == a_session);  // the same session, still holding
            CHECK(ma.held());
            distlock::testing::break_lock(c, name);
            CHECK(held("distlock", "distlock_locks") == a_session);
            ma.unlock();
            CHECK(eventually([&] { return !mb.held(); }, 5s));  // told it lost the lock
        }
    }
}

TEST_CASE("a user of one database cannot use another's: the server's grants isolate tenants' tables",
          "[sql][tenants]") {
    // distlock_b may use only its own database (integration/servers/mysql.sh).
    const auto url = url_of("lease-table");
    const auto at = url.find("://") + 3;
    const auto b_user = url.substr(0, at) + "distlock_b" + url.substr(url.find(':', at));
    CHECK_NOTHROW(distlock::connect(with_database(b_user, "distlock_b")));
    try {
        (void)distlock::connect(b_user);  // database distlock
        FAIL("connected to another tenant's database");
    } catch (const distlock::access_denied_error& e) {
        CHECK(e.native_code() == 1044);
    }
}

TEST_CASE("no lock name meets another's GET_LOCK key: not the key's own text, not an earlier version's key",
          "[sql][tenants][native]") {
    const auto url = url_of("get-lock");
    auto p = distlock::connect(url);
    const auto long_name = unique_name("long") + std::string(200, 'y');
    // The text of the long name's key as a name of its own, and the key an
    // earlier version gave the long name ("distlock:" + 55 hex digits of SHA-256(name)).
    const auto key_text = documented_get_lock_key(long_name);
    const auto old_key_text = "distlock:" + distlock::spi::sha256_hex(long_name).substr(0, 55);
    auto m = p.mutex(long_name);
    REQUIRE(m.try_lock());
    for (const auto& other : {key_text, old_key_text}) {
        auto o = p.mutex(other);
        CHECK(o.try_lock());
        if (o.held()) o.unlock();
    }
    m.unlock();
}

TEST_CASE("break_lock never ends a session that holds another name now, nor one it may not end", "[sql][break]") {
    const auto url = url_of("get-lock");
    auto p = distlock::connect(url);
    // A session of another user holds the key of our name (as if it computed it):
    // ending it takes a privilege this user lacks; the refusal is not hidden.
    const auto name = unique_name("not-mine");
    const auto at = url.find("://") + 3;
    raw_sql other(url.substr(0, at) + "distlock_count" + url.substr(url.find(':', at)));
    REQUIRE(other.scalar("SELECT GET_LOCK(?, 0)", {documented_get_lock_key(name)}) == std::optional<std::string>("1"));
    CHECK_THROWS_AS(distlock::testing::break_lock(p, name), distlock::access_denied_error);
    CHECK(other.scalar("SELECT IS_USED_LOCK(?)", {documented_get_lock_key(name)}).has_value());
    // A name nobody holds: nothing to end, no error.
    CHECK_NOTHROW(distlock::testing::break_lock(p, unique_name("nobody")));
}

// ---- a hostile or broken server (issue 23): whole-call deadlines, capped replies

TEST_CASE("a server that trickles its greeting a byte at a time cannot hold connect() past connect_timeout",
          "[sql][hostile]") {
    fake_mysql::script how;
    how.slow_greeting = true;
    fake_mysql::server fake(how);
    const auto target = with_port(url_of("lease-table"), fake.port()) + "&connect_timeout=1s&timeout=1s";
    const auto t0 = clk::now();
    try {
        (void)distlock::connect(target);
        FAIL("connected");
    } catch (const distlock::unavailable_error& e) {
        CHECK(std::string(e.what()).find("connect_timeout") != std::string::npos);
    }
    // Each byte came within the library's per-read timeout (1 s): only a bound on
    // the whole call ends it. The greeting alone would take about 30 s.
    CHECK(clk::now() - t0 < 2500ms);
    CHECK(fake.trickled() == 1);
}

TEST_CASE("a server that trickles a reply a byte at a time cannot hold a statement past timeout", "[sql][hostile]") {
    // The reply to the first CREATE TABLE of the start: an OK packet of 200
    // bytes, a byte every 300 ms (a minute in all).
    fake_mysql::script how;
    how.slow_query = "CREATE TABLE";
    fake_mysql::server fake(how);
    const auto target = with_port(url_of("lease-table"), fake.port()) + "&connect_timeout=2s&timeout=1s";
    const auto t0 = clk::now();
    try {
        (void)distlock::connect(target);
        FAIL("connected");
    } catch (const distlock::unavailable_error& e) {
        CHECK(std::string(e.what()).find("no reply within the query timeout (1000 ms)") != std::string::npos);
    }
    CHECK(clk::now() - t0 < 2500ms);
    CHECK(fake.trickled() == 1);
}

TEST_CASE("a reply larger than any the client asks for is refused as it arrives, as a typed error", "[sql][hostile]") {
    // 200,000 rows for the start's one-row look at the lock table's columns.
    fake_mysql::script how;
    how.odd_query = "information_schema.COLUMNS";
    how.odd_rows = 200000;
    fake_mysql::server fake(how);
    const auto target = with_port(url_of("lease-table"), fake.port()) + "&connect_timeout=2s&timeout=5s";
    check_refused_as_too_large(target);
}

TEST_CASE("a reply is capped by what its cells cost to keep and not by their text alone", "[sql][hostile]") {
    // 99,000 rows (under the row cap) of four 8-byte cells for the start's
    // first question: 3.2 MB of text, 19 MB as kept (each cell has its slot).
    fake_mysql::script how;
    how.odd_query = "CONNECTION_ID()";
    how.odd_rows = 99000;
    how.odd_cell = "12345678";
    fake_mysql::server fake(how);
    check_refused_as_too_large(with_port(url_of("lease-table"), fake.port()) + "&connect_timeout=2s&timeout=5s");
}

TEST_CASE("a token that is not a number is a typed error, never a standard-library exception", "[sql][hostile]") {
    // The fake answers as MySQL 8 would (no "MariaDB" in its version): tokens are
    // counter rows, read back by "SELECT version FROM <table> ...".
    fake_mysql::script how;
    how.odd_query = "SELECT version FROM";
    how.odd_cell = "not-a-number";
    fake_mysql::server fake(how);
    auto p = distlock::connect(with_port(url_of("lease-table"), fake.port()) + "&connect_timeout=2s&timeout=2s");
    auto m = p.mutex(unique_name("garbage-token"));
    try {
        (void)m.try_lock();
        FAIL("granted");
    } catch (const distlock::error& e) {
        CHECK(std::string(e.what()).find("not-a-number") != std::string::npos);
    } catch (const std::exception& e) {
        FAIL("a standard-library exception escaped: " << e.what());
    }
}

TEST_CASE("a server that asks for a file of the client's (LOAD DATA LOCAL INFILE) gets none", "[sql][hostile]") {
    // A rogue server answers the start's first CREATE TABLE with a LOCAL INFILE
    // request for a file this process can read. The client must not even offer
    // to send files (CLIENT_LOCAL_FILES), and sends nothing of it.
    const std::string secret = "distlock-local-infile-secret-" + distlock::spi::random_token();
    const std::string path = "/tmp/" + unique_name("local-infile");
    std::ofstream(path) << secret << '\n';
    fake_mysql::script how;
    how.infile_query = "CREATE TABLE";
    how.infile_name = path;
    fake_mysql::server fake(how);
    try {
        (void)distlock::connect(with_port(url_of("lease-table"), fake.port()) + "&connect_timeout=2s&timeout=2s");
    } catch (const distlock::error&) {  // refused or not, what matters is what the server got
    }
    std::remove(path.c_str());
    CHECK(fake.infile_asked());
    CHECK((fake.client_caps() & fake_mysql::client_local_files) == 0);
    CHECK(fake.infile_reply().find(secret) == std::string::npos);
    CHECK(fake.infile_reply().empty());
}

TEST_CASE("MySQL leaves SIGPIPE alone, and a write to a socket shut down under it raises none",
          "[sql][hostile][sigpipe]") {
    // In a process of its own (the client library starts once per process),
    // with SIGPIPE at its default: a reply trickled past timeout makes the
    // socket shut down; closing the connection then writes to it (COM_QUIT).
    fake_mysql::script how;
    how.slow_query = "CREATE TABLE";
    fake_mysql::server fake(how);
    distlock::test::child_process probe(
        {DISTLOCK_SQL_PROBE, with_port(url_of("lease-table"), fake.port()) + "&connect_timeout=2s&timeout=1s",
         unique_name("sigpipe"), "sigpipe"});
    std::string last, line;
    while (!(line = probe.read_line(10s)).empty()) last = line;
    CHECK(probe.wait_exit() == 1);  // the connect failed; not 128 + SIGPIPE
    CHECK(last == "sigpipe default");
    CHECK(fake.trickled() == 1);
}

// ---- TLS (docs/backends/sql.md, "TLS") ------------------------------------------
// The handshake failures over TLS are the SQL layer's shared case
// (tests/backends/sql/tls_test.cpp); the hidden [.tls] cases here need the TLS
// servers too (ctest: distlock-mysql-tests.tls, skipped when unset).

TEST_CASE("the TLS parameters and ssl_mode: bad values and conflicts are refused before any connection",
          "[sql][tls][input]") {
    const std::string base = "mysql://u:p@127.0.0.1:1/db?";
    for (const char* q : {"ssl_mode=bogus", "tls=true&ssl_mode=disabled", "tls_ca=/x", "tls=true&tls_ca=/a&ssl_ca=/b",
                          "ssl_mode=verify_identity&ssl_key=/nonexistent/key.pem", "tls=true&tls_cert=/nonexistent",
                          "ssl_ca=/etc/hostname", "ssl_mode=disabled&ssl_ca=/etc/hostname"}) {
        INFO(q);
        CHECK_THROWS_AS(distlock::connect(base + q), distlock::invalid_argument_error);
    }
    // Modes without verification: Connector/C 3.3 would log in in clear where
    // the server does not offer TLS (the case below shows why).
    for (const char* q : {"ssl_mode=preferred", "ssl_mode=required", "ssl_mode=verify_ca", "tls=true&tls_insecure=true",
                          "tls=true&tls_server_name=db.example"}) {
        INFO(q);
        CHECK_THROWS_AS(distlock::connect(base + q), distlock::unsupported_error);
    }
}

TEST_CASE("TLS required against a MySQL in clear fails typed, and sends no login packet", "[sql][tls]") {
    for (const std::string mode : {"tls=true", "ssl_mode=verify_identity"}) {
        INFO(mode);
        fake_mysql::script how;
        fake_mysql::server fake(how);  // its greeting offers no CLIENT_SSL
        const auto what = tls_refused<distlock::access_denied_error>(
            "mysql://someone:Zq7-pw@127.0.0.1:" + std::to_string(fake.port()) + "/db?" + mode);
        CHECK(what.find("SSL is required") != std::string::npos);
        CHECK(fake.client_caps() == 0);  // no login packet came
    }
    // What it guards against: without TLS the login (user, password hash) goes out in clear.
    fake_mysql::script how;
    fake_mysql::server fake(how);
    try {
        (void)distlock::connect("mysql://someone:Zq7-pw@127.0.0.1:" + std::to_string(fake.port()) +
                                "/db?connect_timeout=2s");
    } catch (const distlock::error&) {}
    CHECK(fake.client_caps() != 0);
}

// The whole-call deadline (call_deadline.cpp) shuts the TCP socket under the
// TLS layer down; closing the connection then writes (COM_QUIT, a TLS record,
// maybe an alert) to it. In a child process with SIGPIPE at its default: a
// SIGPIPE would kill it.
TEST_CASE("MySQL over TLS: a call whose replies stop is cut at its deadline, and no SIGPIPE follows",
          "[.tls][sql][sigpipe]") {
    const auto base = tls_base(), ca = distlock::test::env("DISTLOCK_TEST_TLS_CA");
    REQUIRE(!base.empty());
    tls_proxy via;
    const std::string url = via.base() + "?tls=true&tls_ca=" + ca + "&timeout=1s&connect_timeout=1s&pool=0";
    int to_parent[2], to_child[2];
    REQUIRE(::pipe(to_parent) == 0);
    REQUIRE(::pipe(to_child) == 0);
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        ::signal(SIGPIPE, SIG_DFL);
        int rc = 10;
        try {
            auto p = distlock::connect(url);
            auto m = p.mutex(unique_name("mysql-tls-deadline"));
            char c = 'c';
            if (::write(to_parent[1], &c, 1) != 1 || ::read(to_child[0], &c, 1) != 1) ::_exit(11);
            const auto t0 = clk::now();
            try {
                (void)m.try_lock();
                rc = 12;  // the replies came after all
            } catch (const distlock::unavailable_error&) {
                // The call's 1 s (and a reconnect's 1 s), not the 10 s the replies are held.
                const auto took = std::chrono::duration_cast<std::chrono::seconds>(clk::now() - t0).count();
                rc = took < 4 ? 0 : 20 + static_cast<int>(std::min<long long>(took, 30));
            }
        } catch (...) {
            rc = 14;
        }
        ::_exit(rc);  // after the provider closed its connection
    }
    char c = 0;
    CHECK(::read(to_parent[0], &c, 1) == 1);
    via.proxy.delay_replies(10s);
    CHECK(::write(to_child[1], &c, 1) == 1);
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    via.proxy.delay_replies(0ms);
    CHECK_FALSE(WIFSIGNALED(status));
    REQUIRE(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
    for (int fd : {to_parent[0], to_parent[1], to_child[0], to_child[1]}) ::close(fd);
}
