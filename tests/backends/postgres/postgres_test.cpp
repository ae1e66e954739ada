// postgres://: the SQL layer's shared tests (tests/backends/sql/sql_test.cpp) run
// with PostgreSQL's facts below, and the cases that only PostgreSQL has.
#include <poll.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "distlock/distlock.hpp"
#include "distlock/spi/backend.hpp"
#include "distlock/testing.hpp"
#include "fake_postgres.hpp"
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
    const std::string space = schema == "public" && table == "distlock_locks" ? "" : schema + '\0' + table + '\0';
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
        .native_holder =
            [](raw_sql& db, const std::string& name) {
                const auto key = static_cast<std::uint64_t>(documented_advisory_key(name, "public", db.table()));
                return db.scalar(
                    "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 1 AND granted"
                    " AND classid::bigint = ? AND objid::bigint = ?",
                    {static_cast<std::int64_t>(key >> 32), static_cast<std::int64_t>(key & 0xffffffffu)});
            },
        // The row's xmax is the locking transaction, whose own lock names its session.
        .row_holder =
            [](raw_sql& db, const std::string& name) {
                return db.scalar(
                    "SELECT l.pid FROM distlock_locks_rows r JOIN pg_locks l ON l.locktype = 'transactionid'"
                    " AND l.transactionid = r.xmax AND l.granted WHERE r.name = ?",
                    {s::bytes{name}});
            },
        .fence_object = "SEQUENCE",
        .crash_strategies = {"strategy=advisory", "strategy=for-update"},
        .draw_and_count_left = [](raw_sql& db, const std::string& fence) -> std::int64_t {
            (void)db.scalar("SELECT nextval(?::regclass)", {fence});
            return std::stoll(*db.scalar("SELECT log_cnt FROM " + fence));
        },
        .count_unit = "transactions",
        .server_count = [](raw_sql& db) -> std::int64_t {
            // A session reports its transactions when it ends: wait for the count database's to end.
            const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
            while (*db.scalar("SELECT numbackends FROM pg_stat_database WHERE datname = 'distlock_count'") != "0" &&
                   std::chrono::steady_clock::now() < until)
                std::this_thread::sleep_for(std::chrono::milliseconds(20));
            return std::stoll(
                *db.scalar("SELECT xact_commit + xact_rollback FROM pg_stat_database"
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
        .tls_off = "sslmode=disable",
        .tls_ca_alias = "sslrootcert",
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

TEST_CASE("PostgreSQL lease waiters are woken by the release's notification, not by their next poll", "[sql][notify]") {
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

// ---- tenants on one server (issue 23): schema=, ownership, name resolution
//
// Database distlock_shared (integration/servers/postgres.sh): every role may
// create objects in public, as before PostgreSQL 15; roles distlock_tenant_a
// and distlock_tenant_b, each with a schema of its own (tenant_a, tenant_b),
// and tenant_b's schema open to tenant_a.

namespace {

// The main URL as another role (same password), on distlock_shared, with `query`.
std::string tenant_url(const std::string& role, const std::string& query) {
    const auto url = url_of("lease-table");
    const auto at = url.find("://") + 3;
    const auto slash = url.find('/', url.find('@'));
    return url.substr(0, at) + role + url.substr(url.find(':', at), slash - url.find(':', at)) + "/distlock_shared" +
           (query.empty() ? "" : "?" + query);
}

// Runs `cleanup` on a session of `role` at scope exit, whatever the test did.
struct tenant_cleanup {
    std::string role;
    std::vector<std::string> statements;
    ~tenant_cleanup() {
        try {
            raw_sql db(tenant_url(role, ""));
            for (const auto& st : statements) db.run(st);
        } catch (...) {}
    }
};

std::string table_name(const std::string& what) {
    return "dl_" + what + "_" + distlock::spi::random_token().substr(0, 10);
}

}  // namespace

TEST_CASE(
    "a lock table another role planted first in public, with a trigger, is refused by name; the trigger never runs",
    "[sql][tenants]") {
    const auto t = table_name("planted");
    tenant_cleanup mine{"distlock_tenant_a",
                        {"DROP TABLE IF EXISTS public." + t + "_rows", "DROP SEQUENCE IF EXISTS public." + t + "_fence",
                         "DROP TABLE IF EXISTS public." + t + "_permits"}};
    tenant_cleanup theirs{"distlock_tenant_b",
                          {"DROP TABLE IF EXISTS public." + t, "DROP TABLE IF EXISTS public." + t + "_log",
                           "DROP FUNCTION IF EXISTS public." + t + "_spy()"}};
    {
        // Another tenant plants the lock table (the layout distlock makes), open
        // to everyone, with a trigger that records whoever writes to it.
        raw_sql b(tenant_url("distlock_tenant_b", ""));
        b.run("CREATE TABLE public." + t +
              " (name bytea PRIMARY KEY, owner text, expires_at timestamptz,"
              " version bigint NOT NULL DEFAULT 0, holder_label bytea)");
        b.run("CREATE TABLE public." + t + "_log (who text)");
        b.run("CREATE FUNCTION public." + t +
              "_spy() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN INSERT INTO public." + t +
              "_log VALUES (current_user); RETURN NULL; END $$");
        b.run("CREATE TRIGGER spy AFTER INSERT OR UPDATE OR DELETE ON public." + t +
              " FOR EACH STATEMENT EXECUTE FUNCTION public." + t + "_spy()");
        b.run("GRANT ALL ON public." + t + ", public." + t + "_log TO PUBLIC");
    }
    // The victim starts with the default schema (public) and that table name.
    for (const std::string strategy : {"lease-table", "advisory"}) {
        try {
            auto p = distlock::connect(tenant_url("distlock_tenant_a", "strategy=" + strategy + "&table=" + t));
            auto m = p.mutex(unique_name("planted"));
            if (m.try_lock()) m.unlock();
            FAIL("used a table another role owns");
        } catch (const distlock::access_denied_error& e) {
            const std::string what = e.what();
            INFO(what);
            CHECK(what.find("the table public." + t + " is owned by role") != std::string::npos);
            CHECK(what.find("_tenant_b") != std::string::npos);
        }
    }
    raw_sql b(tenant_url("distlock_tenant_b", ""));
    CHECK(b.scalar("SELECT count(*) FROM public." + t + "_log") == std::optional<std::string>("0"));
}

TEST_CASE("distlock's sessions resolve functions and operators in pg_catalog: one planted in public never runs",
          "[sql][tenants]") {
    const auto t = table_name("resolve");
    const auto log = table_name("oplog");
    // ||(bigint, text) matches `$1::bigint || 'ms'` (the lock wait bound every
    // new session sets) better than the built-in ||(anynonarray, text).
    tenant_cleanup theirs{
        "distlock_tenant_b",
        {"DROP OPERATOR IF EXISTS public.|| (bigint, text)",
         "DROP FUNCTION IF EXISTS public." + log + "_cat(bigint, text)", "DROP TABLE IF EXISTS public." + log}};
    tenant_cleanup mine{
        "distlock_tenant_a",
        {"DROP TABLE IF EXISTS public." + t, "DROP TABLE IF EXISTS public." + t + "_rows",
         "DROP SEQUENCE IF EXISTS public." + t + "_fence", "DROP TABLE IF EXISTS public." + t + "_permits"}};
    {
        raw_sql b(tenant_url("distlock_tenant_b", ""));
        b.run("DROP OPERATOR IF EXISTS public.|| (bigint, text)");
        b.run("CREATE TABLE public." + log + " (who text)");
        b.run("GRANT INSERT, SELECT ON public." + log + " TO PUBLIC");
        b.run("CREATE FUNCTION public." + log +
              "_cat(bigint, text) RETURNS text LANGUAGE plpgsql AS $$ BEGIN"
              " INSERT INTO public." +
              log + " VALUES (current_user); RETURN $1::text OPERATOR(pg_catalog.||) $2; END $$");
        b.run("CREATE OPERATOR public.|| (LEFTARG = bigint, RIGHTARG = text, FUNCTION = public." + log + "_cat)");
        // The operator takes a session with the default search_path ("$user", public): the test is sound.
        raw_sql probe(tenant_url("distlock_tenant_a", ""));
        probe.run("SET search_path TO \"$user\", public");
        probe.run("SELECT 1::bigint || 'x'");
        REQUIRE(b.scalar("SELECT count(*) FROM public." + log) == std::optional<std::string>("1"));
        b.run("DELETE FROM public." + log);
    }
    for (const std::string strategy : {"advisory", "lease-table", "for-update"}) {
        auto p = distlock::connect(tenant_url("distlock_tenant_a", "strategy=" + strategy + "&table=" + t));
        auto m = p.mutex(unique_name("resolve"));
        REQUIRE(m.try_lock());
        m.unlock();
    }
    raw_sql b(tenant_url("distlock_tenant_b", ""));
    CHECK(b.scalar("SELECT count(*) FROM public." + log) == std::optional<std::string>("0"));
}

TEST_CASE("schema= keeps every object in that schema: two schemas never share a lock, a table or a channel",
          "[sql][tenants]") {
    const auto t = table_name("schema");
    tenant_cleanup a_drop{
        "distlock_tenant_a",
        {"DROP TABLE IF EXISTS tenant_a." + t, "DROP TABLE IF EXISTS tenant_a." + t + "_rows",
         "DROP SEQUENCE IF EXISTS tenant_a." + t + "_fence", "DROP TABLE IF EXISTS tenant_a." + t + "_permits"}};
    tenant_cleanup b_drop{
        "distlock_tenant_b",
        {"DROP TABLE IF EXISTS tenant_b." + t, "DROP TABLE IF EXISTS tenant_b." + t + "_rows",
         "DROP SEQUENCE IF EXISTS tenant_b." + t + "_fence", "DROP TABLE IF EXISTS tenant_b." + t + "_permits"}};
    for (const std::string strategy : {"lease-table", "advisory", "for-update"}) {
        DYNAMIC_SECTION(strategy) {
            const auto query = "strategy=" + strategy + "&table=" + t + "&lease=5s";
            auto a = distlock::connect(tenant_url("distlock_tenant_a", query + "&schema=tenant_a"));
            auto b = distlock::connect(tenant_url("distlock_tenant_b", query + "&schema=tenant_b"));
            const auto name = unique_name("schema-" + strategy);
            auto ma = a.mutex(name);
            auto mb = b.mutex(name);
            REQUIRE(ma.try_lock());
            CHECK(mb.try_lock());  // another schema: another lock
            raw_sql db(tenant_url("distlock_tenant_a", ""));
            // Every object is in the tenant's schema, none in public.
            CHECK(db.scalar("SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE"
                            " n.nspname = 'tenant_a' AND c.relname IN (?, ?, ?, ?)",
                            {t, t + "_rows", t + "_fence", t + "_permits"}) == std::optional<std::string>("4"));
            CHECK(db.scalar("SELECT count(*) FROM pg_class WHERE relkind IN ('r', 'S') AND relname LIKE ?",
                            {t + "%"}) == std::optional<std::string>("8"));  // four of each tenant's
            distlock::testing::break_lock(b, name);                          // tenant_b's holder only
            CHECK(eventually([&] { return !mb.held(); }, 5s));
            CHECK(ma.held());
            ma.unlock();
        }
    }
}

TEST_CASE("a schema another ordinary role owns is refused; schema= is an identifier; a missing one is a bad argument",
          "[sql][tenants][url]") {
    try {  // tenant_b's schema, open to tenant_a: its owner could drop and replace the tables
        (void)distlock::connect(tenant_url("distlock_tenant_a", "schema=tenant_b&table=" + table_name("foreign")));
        FAIL("used another role's schema");
    } catch (const distlock::access_denied_error& e) {
        INFO(e.what());
        CHECK(std::string(e.what()).find("schema tenant_b is owned by role") != std::string::npos);
        CHECK(std::string(e.what()).find("_tenant_b") != std::string::npos);
    }
    const auto url = url_of("lease-table");
    CHECK_THROWS_AS(distlock::connect(with_query(url, "schema=a;b")), distlock::invalid_argument_error);
    CHECK_THROWS_AS(distlock::connect(with_query(url, "schema=" + std::string(64, 's'))),
                    distlock::invalid_argument_error);
    CHECK_THROWS_AS(distlock::connect(with_query(url, "schema=no_such_schema_here")), distlock::invalid_argument_error);
}

// ---- a hostile server (issue 23): capped replies

// ThreadSanitizer keeps shadow memory, several bytes for each byte the program
// touches: the resident size grows by that much more than the process holds.
#if defined(__SANITIZE_THREAD__)
constexpr std::int64_t kMemorySlack = 4;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
constexpr std::int64_t kMemorySlack = 4;
#else
constexpr std::int64_t kMemorySlack = 1;
#endif
#else
constexpr std::int64_t kMemorySlack = 1;
#endif

TEST_CASE("a server that streams a reply past 16 MiB is cut off as it arrives and not at the deadline",
          "[sql][hostile]") {
    // libpq keeps a whole result (or error) before handing it over: without a
    // cap, the process grows by what the server sends until the deadline.
    using fake_postgres::answer;
    for (const auto what : {answer::endless_rows, answer::endless_startup_error}) {
        const bool rows = what == answer::endless_rows;
        // The start's first statement answered with 1 MiB data rows without end
        // (within timeout, 30 s), or the startup with an error of a 512 MiB
        // message (within connect_timeout, 30 s).
        DYNAMIC_SECTION((rows ? "rows" : "startup error")) {
            fake_postgres::server fake(what);
            const auto target = with_port(url_of("lease-table"), fake.port()) + "&connect_timeout=30s&timeout=30s";
            const auto t0 = clk::now();
            check_refused_as_too_large(target);
            CHECK(clk::now() - t0 < 3s);
            constexpr std::int64_t mib = 1 << 20;
            INFO("sent: " << fake.sent() / mib << " MiB; resident size grew by up to " << fake.peak_growth() / mib
                          << " MiB");
            CHECK(fake.sent() < 48 * mib);  // 16 MiB read, and what the sockets' buffers hold
            CHECK(fake.peak_growth() < kMemorySlack * 64 * mib);
        }
    }
}

TEST_CASE("a server's error message is cut to a bounded length, at the startup and in a reply", "[sql][hostile]") {
    for (const auto what : {fake_postgres::answer::startup_error, fake_postgres::answer::long_error}) {
        DYNAMIC_SECTION((what == fake_postgres::answer::startup_error ? "startup" : "statement")) {
            fake_postgres::server fake(what);
            const auto target = with_port(url_of("lease-table"), fake.port()) + "&connect_timeout=2s&timeout=2s";
            try {
                (void)distlock::connect(target);
                FAIL("connected");
            } catch (const distlock::error& e) {
                const std::string text = e.what();
                INFO(text.substr(0, 300) << " (" << text.size() << " bytes)");
                CHECK(text.find("yyyyyyyy") != std::string::npos);  // the server's message, cut
                CHECK(text.size() < 2048);
            }
        }
    }
}

TEST_CASE("a result of more rows or more cells than any this client asks for is refused", "[sql][hostile]") {
    // Both within 16 MiB sent: 200,000 rows of one byte (2.4 MB), and 2,000
    // rows of 1,000 NULLs (8 MB, but 2,000,000 cells to keep: 80 MB copied out).
    for (const auto& [what, rows] : {std::pair{"rows", fake_postgres::rows_spec{200000, 1, "1"}},
                                     std::pair{"cells", fake_postgres::rows_spec{2000, 1000, std::nullopt}}}) {
        DYNAMIC_SECTION(what) {
            fake_postgres::server fake(rows);
            const auto target = with_port(url_of("lease-table"), fake.port()) + "&connect_timeout=2s&timeout=5s";
            check_refused_as_too_large(target);
        }
    }
}

// ---- TLS (docs/backends/sql.md, "TLS") ------------------------------------------
// The handshake failures over TLS are the SQL layer's shared case
// (tests/backends/sql/tls_test.cpp); the hidden [.tls] cases here need the TLS
// servers too (ctest: distlock-postgres-tests.tls, skipped when unset).

namespace {

// A PostgreSQL in clear that says no to TLS ('N'), asks for the password in
// clear and keeps every byte it is sent.
class plaintext_postgres {
public:
    plaintext_postgres() : srv_([this](int fd) { serve(fd); }) {}
    int port() const { return srv_.port(); }
    // What was sent, once the first connection has ended (waiting 5 s at most):
    // the client's failure may come before the server has seen it close.
    std::string received() {
        (void)distlock::test::eventually([&] { return ended_.load() > 0; }, 5s);
        std::lock_guard lk(mutex_);
        return got_;
    }

private:
    void serve(int fd) {
        using namespace fake_postgres;
        struct count_end {
            std::atomic<int>& n;
            ~count_end() { ++n; }
        } end{ended_};
        std::string seen;
        const bool started = read_startup(fd, &seen);
        keep(seen);
        if (!started) return;
        if (!scripted_server::send_all(fd, message('R', be(3, 4)))) return;  // AuthenticationCleartextPassword
        pollfd p{fd, POLLIN, 0};
        char buf[4096];
        while (::poll(&p, 1, 2000) == 1) {
            const auto n = ::recv(fd, buf, sizeof buf, 0);
            if (n <= 0) return;
            keep(std::string(buf, static_cast<std::size_t>(n)));
        }
    }
    void keep(const std::string& bytes) {
        std::lock_guard lk(mutex_);
        got_ += bytes;
    }
    std::mutex mutex_;
    std::string got_;
    std::atomic<int> ended_{0};
    distlock::test::scripted_server srv_;  // last: its threads stop before the members above go
};

}  // namespace

TEST_CASE("tls=true against a PostgreSQL in clear fails typed, and sends no startup packet nor password",
          "[sql][tls]") {
    for (const std::string mode : {"tls=true", "sslmode=verify-full", "sslmode=require"}) {
        plaintext_postgres server;
        const std::string url =
            "postgres://someone:Zq7-pw-secret@127.0.0.1:" + std::to_string(server.port()) + "/db?" + mode;
        const auto what = tls_refused<distlock::access_denied_error>(url);
        CHECK(what.find("server does not support SSL") != std::string::npos);
        CHECK(what.find("Zq7") == std::string::npos);
        const auto got = server.received();
        CHECK(got.size() == 8);  // the SSLRequest alone
        CHECK(got.find("someone") == std::string::npos);
        CHECK(got.find("Zq7") == std::string::npos);
    }
    // What it guards against: libpq's default (prefer) falls back to clear
    // and sends the password to whoever asks.
    plaintext_postgres server;
    try {
        (void)distlock::connect("postgres://someone:Zq7-pw-secret@127.0.0.1:" + std::to_string(server.port()) +
                                "/db?connect_timeout=2s");
    } catch (const distlock::error&) {}
    CHECK(server.received().find("Zq7-pw-secret") != std::string::npos);
}

TEST_CASE("the TLS parameters and sslmode: bad values and conflicts are refused before any connection",
          "[sql][tls][input]") {
    const std::string base = "postgres://u:p@127.0.0.1:1/db?";
    for (const char* q :
         {"sslmode=bogus", "tls=true&sslmode=disable", "tls=true&sslmode=require",
          "tls=true&tls_insecure=true&sslmode=verify-full", "tls_ca=/x", "tls=true&tls_ca=/a&sslrootcert=/b",
          "sslkey=/nonexistent/key.pem", "sslcrl=/nonexistent/crl.pem", "tls=true&tls_cert=/nonexistent"}) {
        INFO(q);
        CHECK_THROWS_AS(distlock::connect(base + q), distlock::invalid_argument_error);
    }
    // Taken (port 1 refuses: the connection was tried).
    CHECK_THROWS_AS(distlock::connect(base + "tls=true&tls_server_name=db.example&connect_timeout=1s"),
                    distlock::unavailable_error);
    CHECK_THROWS_AS(distlock::connect("postgres://u:p@localhost:1/db?tls=true&tls_server_name=db.example"),
                    distlock::unsupported_error);  // libpq's hostaddr needs a number
}

TEST_CASE("PostgreSQL over TLS: tls_server_name verifies another name; tls_insecure verifies none, and says so",
          "[.tls][sql]") {
    const auto base = tls_base(), dir = tls_dir(), ca = distlock::test::env("DISTLOCK_TEST_TLS_CA");
    REQUIRE(!base.empty());
    tls_locks(base + "?tls=true&sslrootcert=" + ca);
    // The wrong-name server's certificate names wrong.example.
    const auto wrong_name = tls_must_fail("TLS_WRONG_NAME");
    CHECK(tls_refused<distlock::access_denied_error>(wrong_name + "?tls=true&tls_ca=" + ca)
              .find("does not match host name") != std::string::npos);
    // Past the handshake: the server has no such role (its login refuses), the certificate passed.
    const auto what = tls_refused<distlock::access_denied_error>(wrong_name + "?tls=true&tls_ca=" + ca +
                                                                 "&tls_server_name=wrong.example");
    CHECK(what.find("password authentication failed") != std::string::npos);
    std::vector<std::string> warnings;
    distlock::provider_options o;
    o.log = [&](const distlock::log_record& r) {
        if (r.level == distlock::log_level::warning) warnings.emplace_back(r.message);
    };
    // A CA that signed nothing of this server: not even it is checked.
    auto p = distlock::connect(base + "?tls=true&tls_insecure=true&tls_ca=" + dir + "/other-ca.crt&lease=2s", o);
    auto m = p.mutex(unique_name("pg-tls-insecure"));
    m.lock();
    m.unlock();
    REQUIRE(warnings.size() == 1);
    CHECK(warnings[0].find("tls_insecure") != std::string::npos);
}
