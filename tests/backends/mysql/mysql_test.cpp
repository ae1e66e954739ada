// mysql://: the SQL layer's shared tests (tests/backends/sql/sql_test.cpp) run
// with MySQL's facts below, and the cases that only MySQL/MariaDB has.
#include <catch2/catch.hpp>
#include <chrono>
#include <string>

#include "distlock/distlock.hpp"
#include "distlock/spi/backend.hpp"
#include "mysql_dialect.hpp"
#include "sql_test_support.hpp"
#include "support.hpp"
#include "tcp_proxy.hpp"

using namespace std::chrono_literals;
using namespace sql_test;
using distlock::test::unique_name;

namespace {

// The documented GET_LOCK key (docs/backends/sql.md), computed here on its own.
std::string documented_get_lock_key(const std::string& name) {
    bool plain = !name.empty() && name.size() <= 64 && name.rfind("distlock:", 0) != 0;
    for (unsigned char c : name)
        plain = plain && ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || std::string("_.:/-").find(static_cast<char>(c)) != std::string::npos);
    return plain ? name : "distlock:" + distlock::spi::sha256_hex(name).substr(0, 55);
}

}  // namespace

const dialect_facts& sql_test::facts() {
    static const dialect_facts f{
        .env = "MYSQL",
        .scheme = "mysql",
        .native = "get-lock",
        .make_dialect = &distlock::backends::mysql::make_dialect,
        .kill = "KILL ?",
        .native_holder = [](raw_sql& db, const std::string& name) {
            return db.scalar("SELECT IS_USED_LOCK(?)", {documented_get_lock_key(name)});
        },
        // The holder's mark: the named lock 'distlock#row:' + 51 hex digits of SHA-256(name).
        .row_holder = [](raw_sql& db, const std::string& name) {
            const auto mark = "distlock#row:" + distlock::spi::sha256_hex(name).substr(0, 51);
            return db.scalar("SELECT IS_USED_LOCK(?)", {mark});
        },
        .fence_object = "TABLE",
        .count_unit = "statements",
        .server_count = [](raw_sql& db) -> std::int64_t {
            auto n = db.scalar("SELECT SELECT_COMMANDS + UPDATE_COMMANDS + OTHER_COMMANDS FROM"
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
        .previous_tables = {"CREATE TABLE {t} (name VARBINARY(1024) NOT NULL, owner VARCHAR(64) CHARACTER SET ascii NULL,"
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

TEST_CASE("GET_LOCK keys of hashed names are the ones the server's own SQL computes", "[sql][native]") {
    const auto url = url_of("get-lock");
    auto p = distlock::connect(url);
    raw_sql db(url);
    const auto prefix = distlock::test::unique_name("long");
    for (const auto& n : {"Upper/" + distlock::spi::random_token().substr(0, 8), prefix + std::string(900, 'x')}) {
        auto m = p.mutex(n);
        REQUIRE(m.try_lock());
        auto key = db.scalar("SELECT CONCAT('distlock:', LEFT(SHA2(?, 256), 55))", {s::bytes{n}});
        REQUIRE(key.has_value());
        CHECK(*key == documented_get_lock_key(n));
        CHECK(db.scalar("SELECT IS_USED_LOCK(?)", {*key}).has_value());
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
    db.run("INSERT INTO distlock_locks_rw (name, holder, owner, expires_at, version) VALUES (?, 'w', ?,"
           " UTC_TIMESTAMP(6) + INTERVAL 4 SECOND, 0)",
           {s::bytes{name}, std::string("a-killed-writer")});
    auto reader = p.shared_mutex(name);
    CHECK_FALSE(reader.try_lock_shared());
    CHECK_FALSE(reader.try_lock_shared_for(500ms));
    REQUIRE(reader.try_lock_shared_for(10s));
    reader.unlock_shared();
    auto writer = p.shared_mutex(name);  // the expired row is taken over
    REQUIRE(writer.try_lock_for(5s));
    CHECK(writer.token() > 0);
    writer.unlock();
    CHECK(*db.scalar("SELECT COUNT(*) FROM distlock_locks_rw WHERE name = ?", {s::bytes{name}}) == "0");
}
