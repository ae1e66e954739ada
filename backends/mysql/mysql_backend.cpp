// mysql://user:pw@host:port/db?strategy=... — MySQL 8 / MariaDB 10.6+ through
// mysql-connector-c++ 1.1 (Debian's libmysqlcppconn). This file supplies only
// the MySQL dialect of the SQL strategy layer (backends/sql): a connection
// wrapper, the SQL texts and the GET_LOCK key of a name.
#include <cppconn/driver.h>
#include <cppconn/exception.h>
#include <cppconn/resultset.h>
#include <cppconn/resultset_metadata.h>
#include <cppconn/statement.h>
#include <mysql_connection.h>
#include <mysql_driver.h>

#include <signal.h>
#include <sys/socket.h>

#include <openssl/x509.h>

#include <atomic>
#include <mutex>
#include <optional>

#include "call_deadline.hpp"
#include "distlock/spi/tls.hpp"
#include "mysql_dialect.hpp"

namespace distlock::backends::mysql {
namespace {

constexpr const char* kBackend = "mysql";

namespace s = distlock::backends::sql;
using namespace std::chrono_literals;

s::failure classify(int code, bool connecting) {
    switch (code) {
        case 1044:
        case 1045:
        case 1095:
        case 1142:
        case 1143:
        case 1227:
        case 1698:
        case 1370: return s::failure::access_denied;
        case 1049: return s::failure::no_database;
        case 1146:  // ER_NO_SUCH_TABLE
        case 4091:  // ER_UNKNOWN_SEQUENCES (MariaDB)
            return s::failure::no_table;
        case 1205:  // lock wait timeout (also MariaDB's NOWAIT)
        case 3572:  // MySQL 8 NOWAIT
            return s::failure::lock_timeout;
        case 1213: return s::failure::deadlock;
        case 2002:
        case 2003:
        case 2005:
        case 2026: return s::failure::cannot_connect;
        case 1053:
        case 1927:
        case 2006:
        case 2013:
        case 2055:
        case 4031: return connecting ? s::failure::cannot_connect : s::failure::connection_lost;
        default:
            // Client-side errors (2000-2999) mean the connection cannot be trusted.
            if (code >= 2000 && code < 3000)
                return connecting ? s::failure::cannot_connect : s::failure::connection_lost;
            return s::failure::other;
    }
}

// A TLS handshake (CR_SSL_CONNECTION_ERROR, 2026) refused by policy, as the
// HTTP layer's and PostgreSQL's (access_denied_error): the server's
// certificate (wrong CA, expired, another name), a server in clear where TLS
// is required, or the server refusing this client's certificate (another
// CA's). No retry fixes them, and no login packet was sent.
bool tls_refusal(const std::string& msg) {
    for (const char* what :
         {"certificate", "SSL is required", "self-signed", "self signed", "unable to get local issuer", "unknown ca"})
        if (msg.find(what) != std::string::npos) return true;
    return false;
}

int seconds_at_least_1(std::chrono::milliseconds d) {
    return static_cast<int>(std::max<long long>(1, (d.count() + 999) / 1000));
}

// The most distlock ever reads or sends in a packet (a row, a statement): the
// client library refuses a larger one (our largest statement, a renewal of
// 1024 names of 1024 bytes, is about 2.2 MB). A result is capped as it is read
// (read(): s::max_reply_rows, s::max_reply_bytes).
constexpr int max_packet = 16 << 20;

// A string literal of any bytes, every byte as it is (NUL included): X'..'.
std::string hex_literal(std::string_view bytes) {
    static constexpr char hex[] = "0123456789abcdef";
    std::string out = "X'";
    for (unsigned char b : bytes) {
        out += hex[b >> 4];
        out += hex[b & 15];
    }
    return out + "'";
}

// ssl_mode= as MariaDB Connector/C 3.3 can do it (docs/backends/sql.md, "TLS").
enum class tls_mode {
    library_default,  // nothing said: this client library's default (no TLS)
    disabled,
    verify_identity,  // TLS, the chain and the host name verified (tls=true)
};

struct endpoint {
    std::string host, user, password, schema;
    std::uint16_t port = 3306;
    tls_mode tls = tls_mode::library_default;
    std::string tls_ca, tls_cert, tls_key;  // "" = none
};

// The client library (MariaDB Connector/C) sets SIGPIPE to SIG_IGN for the
// whole process when it starts (mysql_server_init), and children inherit an
// ignored signal across exec. It does not need it: it sends with MSG_NOSIGNAL
// (checked with strace, and tested by writing to a socket shut down under it
// with SIGPIPE at its default, in clear and over TLS). So `f`, which may start it,
// leaves the process's SIGPIPE disposition as it found it.
template <class F>
auto keeping_sigpipe(F&& f) {
    struct sigaction before {};
    ::sigaction(SIGPIPE, nullptr, &before);
    struct restore {
        const struct sigaction& before;
        ~restore() {
            struct sigaction now {};
            ::sigaction(SIGPIPE, nullptr, &now);
            if (now.sa_handler == SIG_IGN && before.sa_handler != SIG_IGN) ::sigaction(SIGPIPE, &before, nullptr);
        }
    } r{before};
    return f();
}

// A claimed duplicate of a connection's socket (call_deadline.hpp), closed last.
struct claimed_socket {
    int fd = -1;
    claimed_socket() = default;
    claimed_socket(const claimed_socket&) = delete;
    claimed_socket& operator=(const claimed_socket&) = delete;
    ~claimed_socket() { release_socket(fd); }
};

// Connector/C++ 1.1's names for MariaDB Connector/C's options: sslEnforce is
// MYSQL_OPT_SSL_ENFORCE, sslVerify MYSQL_OPT_SSL_VERIFY_SERVER_CERT (chain
// and host name). With both, a server that does not offer TLS is refused
// before the login packet (no user, no password hash sent); Connector/C 3.3
// enforces TLS only when it verifies (tested: with sslEnforce alone it logs
// in in clear). OPT_SSL_MODE is not used: Connector/C 3.3 does not know
// MYSQL_OPT_SSL_MODE.
void tls_options(const endpoint& ep, ::sql::ConnectOptionsMap& opts) {
    if (ep.tls != tls_mode::verify_identity) return;
    opts["sslEnforce"] = true;
    opts["sslVerify"] = true;
    if (!ep.tls_ca.empty()) opts["sslCA"] = ::sql::SQLString(ep.tls_ca);
    if (!ep.tls_cert.empty()) opts["sslCert"] = ::sql::SQLString(ep.tls_cert);
    if (!ep.tls_key.empty()) opts["sslKey"] = ::sql::SQLString(ep.tls_key);
}

class connection final : public s::connection {
public:
    // The whole connect (TCP, handshake, login) is bounded by connect_timeout,
    // and each statement after by timeout (call_deadline.hpp).
    connection(const endpoint& ep, const s::conn_settings& cs) : timeout_(cs.timeout) {
        static std::once_flag once;
        static ::sql::mysql::MySQL_Driver* driver = nullptr;
        std::call_once(once,
                       [] { driver = keeping_sigpipe([] { return ::sql::mysql::get_mysql_driver_instance(); }); });
        ::sql::ConnectOptionsMap opts;
        const bool v6 = ep.host.find(':') != std::string::npos;
        opts["hostName"] =
            ::sql::SQLString("tcp://" + (v6 ? "[" + ep.host + "]" : ep.host) + ":" + std::to_string(ep.port));
        opts["userName"] = ::sql::SQLString(ep.user);
        opts["password"] = ::sql::SQLString(ep.password);
        opts["schema"] = ::sql::SQLString(ep.schema);
        opts["OPT_CONNECT_TIMEOUT"] = seconds_at_least_1(cs.connect_timeout);
        opts["OPT_READ_TIMEOUT"] = seconds_at_least_1(cs.timeout);
        opts["OPT_WRITE_TIMEOUT"] = seconds_at_least_1(cs.timeout);
        opts["OPT_RECONNECT"] = false;  // a reconnect would silently drop a held lock
        // Affected rows = rows changed (not matched): an upsert that finds the
        // lease held changes nothing and says 0. Every statement whose count is
        // read changes what it matches (renewals move expires_at, releases delete).
        opts["CLIENT_FOUND_ROWS"] = false;
        opts["CLIENT_MULTI_STATEMENTS"] = true;  // a batch is one query (values are rendered as literals)
        opts["OPT_CHARSET_NAME"] = ::sql::SQLString("utf8mb4");
        opts["OPT_MAX_ALLOWED_PACKET"] = max_packet;
        // A server (or anything on the path, without TLS) may answer any query
        // with a request for a file of the client's (LOAD DATA LOCAL INFILE).
        // Connector/C 3.3 refuses it on its own, other client libraries and
        // versions have not: so the client does not even offer to send files.
        opts["OPT_LOCAL_INFILE"] = 0;
        tls_options(ep, opts);
        const auto until = deadline_clock::now() + cs.connect_timeout;
        const std::string where = ep.host + ":" + std::to_string(ep.port);
        const std::string late =
            "no connection within connect_timeout (" + std::to_string(cs.connect_timeout.count()) + " ms)";
        // No greeting at all: a server of another kind, or a stuck one (a retry may help).
        auto greeting_hint = [&](std::string msg) {
            if (msg.find("initial communication packet") != std::string::npos)
                msg += " (no greeting: is " + where + " a MySQL or MariaDB server?)";
            return msg;
        };
        try {
            connect_turn turn(until);
            if (!turn.owns())
                throw s::sql_error(s::failure::cannot_connect, 0,
                                   late + ": the process's other MySQL connects took it");
            const auto before = socket_inodes();
            {
                call_deadline watch(before, ep.port, until);
                try {
                    // The library starts at the first connect of the process.
                    static std::atomic<bool> started{false};
                    if (started.exchange(true)) conn_.reset(driver->connect(opts));
                    else conn_.reset(keeping_sigpipe([&] { return driver->connect(opts); }));
                } catch (const ::sql::SQLException& e) {
                    if (watch.fired())
                        throw s::sql_error(s::failure::cannot_connect, e.getErrorCode(),
                                           late + ": " + greeting_hint(s::bounded_message(e.what())));
                    throw;
                }
                if (watch.fired()) throw s::sql_error(s::failure::cannot_connect, 0, late);
            }
            sock_.fd = claim_socket(before, ep.port);
            turn.release();
            plain_.reset(conn_->createStatement());
            // Rows are read as they come (mysql_use_result), so that a reply is
            // capped as it arrives (read()), not after the library stored all of it.
            plain_->setResultSetType(::sql::ResultSet::TYPE_FORWARD_ONLY);
            bounded([&] {
                plain_->execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED");
                s::result r;
                read(std::unique_ptr<::sql::ResultSet>(plain_->executeQuery(
                         "SELECT CONNECTION_ID(), VERSION(), IF(@@lower_case_table_names = 0, DATABASE(),"
                         " LOWER(DATABASE())), @@lower_case_table_names")),
                     r);
                if (r.rows.empty() || r.rows[0].size() < 4 || !r.rows[0][0])
                    throw s::sql_error(s::failure::wrong_server, 0, "the server did not say who this session is");
                id_ = s::to_int64(*r.rows[0][0]);
                version_ = r.rows[0][1].value_or("").substr(0, 256);
                database_ = r.rows[0][2].value_or("");
                fold_case_ = r.rows[0][3].value_or("0") != "0";
            });
        } catch (const ::sql::SQLException& e) {
            const int code = e.getErrorCode();
            const std::string msg = s::bounded_message(e.what());
            if (code == 2027)  // malformed packet: another kind of server answered
                throw s::sql_error(s::failure::wrong_server, code,
                                   msg + " (is " + where + " a MySQL or MariaDB server?)");
            if (code == 2026 && tls_refusal(msg)) throw s::sql_error(s::failure::access_denied, code, msg);
            throw s::sql_error(classify(code, true), code, code == 2013 ? greeting_hint(msg) : msg);
        }
    }

    ~connection() override {
        plain_.reset();
        try {
            if (conn_) conn_->close();
        } catch (...) {}
    }

    // The session's database as the server names it (lower case where the
    // server folds table names), and whether it folds them.
    const std::string& database() const noexcept { return database_; }
    bool folds_case() const noexcept { return fold_case_; }

    std::int64_t session_id() const noexcept override { return id_; }
    bool broken() const noexcept override { return broken_; }
    const std::string& server_version() const noexcept { return version_; }

protected:
    // A batch is one text query of the statements joined by ';' (the session
    // allows multi-statements), each '?' replaced by its value as a literal:
    // integers in decimal, text and bytes as hex string literals (X'..', every
    // byte as it is, NUL included), so that nothing is ever spliced as SQL. The
    // server runs them in order and stops at the first error. Measured against
    // server-side prepared statements (docs/benchmarks/sql.md): as fast, with no
    // statement cache and no long-data packets for names.
    std::vector<s::result> send(std::span<const s::statement> steps, std::span<const s::value> args) override {
        if (broken_) throw s::sql_error(s::failure::connection_lost, 2006, "the connection is already broken");
        std::string text;
        for (const auto& st : steps) {
            if (!text.empty()) text += ";\n";
            render(st, args, text);
        }
        std::vector<s::result> out;
        bounded([&] {
            bool rows = plain_->execute(text);
            for (std::size_t i = 0; i < steps.size(); ++i) {
                if (i > 0) rows = plain_->getMoreResults();
                s::result r;
                // Connector/C++ 1.1 tells the affected rows of the first
                // statement only (what sql.hpp promises); later ones read 0.
                if (rows) read(std::unique_ptr<::sql::ResultSet>(plain_->getResultSet()), r);
                else if (i == 0) r.affected = plain_->getUpdateCount();
                out.push_back(std::move(r));
            }
        });
        return out;
    }

private:
    // Runs one call of the client library under the whole-call deadline
    // (`timeout`, call_deadline.hpp): past it, the socket is shut down, the
    // library's blocked read fails, and the call is a timeout (the connection
    // is dropped). Library errors become sql_error.
    template <class F>
    void bounded(F&& f) {
        call_deadline watch(sock_.fd, deadline_clock::now() + timeout_);
        try {
            f();
        } catch (const ::sql::SQLException& e) {
            if (watch.fired()) timed_out(s::bounded_message(e.what()));
            auto kind = classify(e.getErrorCode(), false);
            if (kind == s::failure::connection_lost) broken_ = true;
            throw s::sql_error(kind, e.getErrorCode(), s::bounded_message(e.what()));
        }
        if (watch.fired()) timed_out("");
    }

    [[noreturn]] void timed_out(const std::string& what) {
        broken_ = true;
        throw s::sql_error(s::failure::timed_out, 2013,
                           "no reply within the query timeout (" + std::to_string(timeout_.count()) +
                               " ms): the connection was closed" + (what.empty() ? "" : " (" + what + ")"));
    }

    static void render(const s::statement& st, std::span<const s::value> args, std::string& out) {
        std::size_t next = 0;
        for (char c : st.text) {
            if (c != '?') {
                out += c;
                continue;
            }
            if (next >= st.args.size())
                throw s::sql_error(s::failure::other, 0, "a statement has more '?' than arguments");
            const auto& v = args[static_cast<std::size_t>(st.args[next++])];
            const std::string* raw = nullptr;
            if (std::holds_alternative<std::nullptr_t>(v)) out += "NULL";
            else if (auto n = std::get_if<std::int64_t>(&v)) out += std::to_string(*n);
            else if (auto t = std::get_if<std::string>(&v)) raw = t;
            else raw = &std::get<s::bytes>(v).data;
            if (raw) out += raw->empty() ? std::string("''") : hex_literal(*raw);
        }
        if (next != st.args.size())
            throw s::sql_error(s::failure::other, 0, "a statement has fewer '?' than arguments");
    }

    // Reads a result set, capped (s::max_reply_rows, s::max_reply_bytes of
    // cells as kept here): past the cap the socket is shut down first, so that
    // the library does not read the rest when the result is freed, and the
    // connection is dropped.
    void read(std::unique_ptr<::sql::ResultSet> rs, s::result& out) {
        out.query = true;
        if (!rs) return;
        const unsigned cols = rs->getMetaData()->getColumnCount();
        std::size_t bytes = 0;
        while (rs->next()) {
            s::row r;
            r.reserve(cols);
            for (unsigned c = 1; c <= cols; ++c) {
                if (rs->isNull(c)) r.emplace_back(std::nullopt);
                else r.emplace_back(static_cast<const std::string&>(rs->getString(c)));
                bytes += s::kept_bytes(r.back());
            }
            out.rows.push_back(std::move(r));
            if (out.rows.size() > s::max_reply_rows || bytes > s::max_reply_bytes) {
                if (sock_.fd >= 0) ::shutdown(sock_.fd, SHUT_RDWR);
                broken_ = true;
                throw s::reply_too_large();
            }
        }
        out.affected = out.rows.size();
    }

    claimed_socket sock_;  // destroyed last: the library's connection is closed first
    std::unique_ptr<::sql::Connection> conn_;
    std::unique_ptr<::sql::Statement> plain_;
    std::chrono::milliseconds timeout_;
    std::int64_t id_ = 0;
    std::string version_;
    std::string database_;
    bool fold_case_ = false;
    bool broken_ = false;
};

// GET_LOCK names are server-wide: a name's key is put in its lock table's
// namespace (dialect::key_namespace(): the database, as the server names it,
// NUL, the table, NUL), so that two databases, or two tables of one, never
// share a lock. Every name is hashed, whatever it is: "distlock:" + the first
// 55 hex digits of SHA-256(namespace + name), 64 characters (the longest
// GET_LOCK name MySQL takes). No name is used as it is, so no name can be
// chosen to meet another's key (finding one is a SHA-256 preimage). The
// for-update marks are "distlock#row:" + 51 hex digits of the same digest:
// '#' is in no key. The server can compute both (docs/backends/sql.md).
std::string get_lock_key(std::string_view name_space, std::string_view name) {
    return "distlock:" + spi::sha256_hex(std::string(name_space) + std::string(name)).substr(0, 55);
}

enum class fence_kind { automatic, sequence, table };

class dialect final : public s::dialect {
public:
    dialect(endpoint ep, s::conn_settings cs, fence_kind f) : ep_(std::move(ep)), cs_(cs), fence_(f) {}

    std::string_view name() const noexcept override { return kBackend; }
    std::string_view native_strategy() const noexcept override { return "get-lock"; }

    std::unique_ptr<s::connection> connect() override {
        auto c = std::make_unique<connection>(ep_, cs_);
        mariadb_ = c->server_version().find("MariaDB") != std::string::npos;
        // The namespace of the server's names for this database, the first
        // time (the backend's first connection, before its texts are made).
        std::call_once(namespace_once_, [&] {
            std::string table = cs_.table;
            if (c->folds_case())
                for (auto& ch : table) ch = spi::ascii_lower(ch);
            namespace_ = c->database() + '\0' + table + '\0';
        });
        return c;
    }

    std::string key_namespace() const override { return namespace_; }

    // The fence counter: a SEQUENCE on MariaDB (NEXTVAL() writes only once per
    // cached block of 1000 values, and a crash skips the rest of the block), 1024
    // counter rows on MySQL 8, which has no sequences (each token is then a
    // committed row update), or where fence=table asks for them.
    bool sequence() const noexcept {
        return fence_ == fence_kind::sequence || (fence_ == fence_kind::automatic && mariadb_);
    }

    s::sql_texts texts(const std::string& table) const override {
        const std::string t = "`" + table + "`", rows = "`" + table + "_rows`", fence = "`" + table + "_fence`";
        const std::string expires = "UTC_TIMESTAMP(6) + INTERVAL (? * 1000) MICROSECOND";
        const std::string free = "(expires_at IS NULL OR expires_at <= UTC_TIMESTAMP(6))";
        const std::string free_flag = "(expires_at IS NULL OR expires_at <= UTC_TIMESTAMP(6), 1, 0)";
        // Free, or already ours (a retried acquire). Evaluated before each
        // assignment, left to right: `owner` changes only when it is true, after
        // which it stays true for `expires_at`.
        const std::string take = "(expires_at IS NULL OR expires_at <= UTC_TIMESTAMP(6) OR owner <=> VALUES(owner))";
        // Counter rows: the name's row is bumped first; LAST_INSERT_ID() is then its
        // new value for the rest of the batch. The rows exist from the start
        // (migrate), so the INSERT never happens: it is the form that can take a
        // WHERE (the native lock, which must come first).
        const bool seq = sequence();
        auto bump = [&](const std::string& where) -> s::statement {
            return {"INSERT INTO " + fence + " (slot, version) SELECT ?, LAST_INSERT_ID(1) FROM DUAL" + where +
                        " ON DUPLICATE KEY UPDATE version = LAST_INSERT_ID(version + 1)",
                    {3}};
        };
        const std::string draw = seq ? "NEXTVAL(" + fence + ")" : "LAST_INSERT_ID()";
        auto drawn = [&](s::batch steps) {
            if (!seq) steps.insert(steps.begin(), bump(""));
            return steps;
        };
        // The token of a grant: with a sequence, the value NEXTVAL() just drew on
        // this session, when the upsert before changed a row (no table read);
        // with counter rows, the row's version.
        const s::statement mine =
            seq ? s::statement{"SELECT IF(ROW_COUNT() > 0, LASTVAL(" + fence + "), NULL)", {}}
                : s::statement{"SELECT version FROM " + t + " WHERE name = ? AND owner = ?", {0, 1}};
        s::sql_texts q;
        q.create = {
            {"CREATE TABLE IF NOT EXISTS " + t +
                 " (name VARBINARY(1024) NOT NULL, owner VARCHAR(64) CHARACTER SET ascii NULL,"
                 " expires_at DATETIME(6) NULL, version BIGINT NOT NULL DEFAULT 0, holder_label VARBINARY(320) NULL,"
                 " PRIMARY KEY (name)) ENGINE=InnoDB",
             {}},
            {"CREATE TABLE IF NOT EXISTS " + rows +
                 " (name VARBINARY(1024) NOT NULL, PRIMARY KEY (name)) ENGINE=InnoDB",
             {}},
            seq ? s::statement{"CREATE SEQUENCE IF NOT EXISTS " + fence + " ENGINE=InnoDB", {}}
                : s::statement{"CREATE TABLE IF NOT EXISTS " + fence +
                                   " (slot INT NOT NULL, version BIGINT NOT NULL, PRIMARY KEY (slot)) ENGINE=InnoDB",
                               {}},
        };
        q.ping = {"SELECT 1", {}};
        q.rollback = {"ROLLBACK", {}};
        q.lease_acquire = drawn({
            {"INSERT INTO " + t + " (name, owner, expires_at, version, holder_label) VALUES (?, ?, " + expires + ", " +
                 draw + ", ?) ON DUPLICATE KEY UPDATE version = IF(" + take +
                 ", VALUES(version), version),"
                 " owner = IF(" +
                 take + ", VALUES(owner), owner), expires_at = IF(" + take +
                 ", VALUES(expires_at), expires_at), holder_label = IF(" + take +
                 ", VALUES(holder_label), holder_label)",
             {0, 1, 2, 4}},
            mine,
        });
        q.lease_renew = {"UPDATE " + t + " SET expires_at = " + expires + " WHERE name = ? AND owner = ?", {2, 0, 1}};
        q.lease_release = {"DELETE FROM " + t + " WHERE name = ? AND owner = ?", {0, 1}};
        q.lease_clear = {"DELETE FROM " + t + " WHERE name = ?", {0}};
        q.opt_insert = drawn({
            {"INSERT INTO " + t + " (name, owner, expires_at, version, holder_label) VALUES (?, ?, " + expires + ", " +
                 draw + ", ?) ON DUPLICATE KEY UPDATE version = version",
             {0, 1, 2, 4}},
            mine,
        });
        q.opt_read = {"SELECT version, IF" + free_flag + " FROM " + t + " WHERE name = ?", {0}};
        q.opt_update = drawn({
            {"UPDATE " + t + " SET owner = ?, expires_at = " + expires + ", version = " + draw +
                 ", holder_label = ? WHERE name = ? AND version = ? AND " + free,
             {1, 2, 5, 0, 4}},
            mine,
        });
        q.row_ensure = {"INSERT IGNORE INTO " + rows + " (name) VALUES (?)", {0}};
        // Once the row is locked, its holder takes a named lock of its own, the
        // mark by which holder_of (IS_USED_LOCK) names the holding session without
        // a write. '#' is in no GET_LOCK key of a lock name (docs/backends/sql.md).
        // A holder gives the mark back before the row, so the next one finds it
        // free; a session that ends frees both (the wait of 1 s covers the moment
        // between the two).
        const std::string mark_key =
            "CONCAT('distlock#row:', LEFT(SHA2(CONCAT(" + hex_literal(namespace_) + ", ?), 256), 51))";
        const s::statement mark = {"SELECT IF(FOUND_ROWS() > 0, GET_LOCK(" + mark_key + ", 1), NULL)", {0}};
        q.row_lock = {{"START TRANSACTION", {}}, {"SELECT 1 FROM " + rows + " WHERE name = ? FOR UPDATE", {0}}, mark};
        q.row_lock_nowait = {
            {"START TRANSACTION", {}}, {"SELECT 1 FROM " + rows + " WHERE name = ? FOR UPDATE NOWAIT", {0}}, mark};
        q.row_unlock = {{"SELECT RELEASE_LOCK(" + mark_key + ")", {0}}, {"ROLLBACK", {}}};
        q.set_wait = {"SET SESSION innodb_lock_wait_timeout = GREATEST(1, ? DIV 1000)", {0}};
        if (seq) q.fence = {{"SELECT NEXTVAL(" + fence + ")", {}}};
        else q.fence = {{bump("").text, {0}}, {"SELECT LAST_INSERT_ID()", {}}};
        // break_lock: the holder found and ended in one statement (KILL takes an
        // expression; NULL, nobody, is error 1094 "unknown thread id").
        q.row_break = {"KILL IS_USED_LOCK(" + mark_key + ")", {0}};
        // GET_LOCK first: the token is drawn (and a counter row locked) only once
        // the named lock is held. Counter rows: ROW_COUNT() is 0 when it was not.
        if (seq) {
            q.native_lock = {{"SELECT IF(GET_LOCK(?, ? / 1000) = 1, " + draw + ", NULL)", {0, 1}}};
            q.native_try = {{"SELECT IF(GET_LOCK(?, 0) = 1, " + draw + ", NULL)", {0}}};
        } else {
            const s::statement token = {"SELECT IF(ROW_COUNT() > 0, LAST_INSERT_ID(), NULL)", {}};
            q.native_lock = {{bump(" WHERE GET_LOCK(?, ? / 1000) = 1").text, {2, 0, 1}}, token};
            q.native_try = {{bump(" WHERE GET_LOCK(?, 0) = 1").text, {2, 0}}, token};
        }
        q.native_release = {"SELECT RELEASE_LOCK(?)", {0}};
        q.native_plain = {"SELECT GET_LOCK(?, 0)", {0}};
        q.native_break = {"KILL IS_USED_LOCK(?)", {0}};
        // inspect: the lease row by the server's clock; the session holding a
        // GET_LOCK key or a for-update row's mark (IS_USED_LOCK). MySQL keeps no
        // label beside a named lock, and counts its waiters only in
        // performance_schema.metadata_locks.
        q.inspect_lease = {
            "SELECT expires_at > UTC_TIMESTAMP(6), HEX(holder_label), version,"
            " TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at), owner FROM " +
                t + " WHERE name = ? AND owner IS NOT NULL",
            {0}};
        q.inspect_native = {"SELECT IS_USED_LOCK(?), NULL, NULL", {0}};
        q.inspect_row = {"SELECT IS_USED_LOCK(" + mark_key + "), NULL, NULL", {0}};
        q.no_session_label = "MySQL keeps no data beside a named lock: the server names only the holding connection";
        q.no_native_waiters =
            "MySQL counts GET_LOCK waiters only in performance_schema.metadata_locks, which distlock does not read"
            " (off by default on MariaDB, and not readable without a grant)";
        q.no_row_waiters =
            "MySQL shows row lock waits only in performance_schema/information_schema InnoDB tables,"
            " which distlock does not read (not readable without a grant)";

        // Semaphores and read-write locks: lease rows of tables of their own.
        // Each statement of a batch commits on its own (autocommit), so a row
        // written by one is seen by the look of any statement that starts after.
        const std::string permits = "`" + table + "_permits`", rw = "`" + table + "_rw`";
        const std::string now = "UTC_TIMESTAMP(6)";
        q.create.push_back(
            {"CREATE TABLE IF NOT EXISTS " + permits +
                 " (name VARBINARY(1024) NOT NULL, slot INT UNSIGNED NOT NULL, permits INT UNSIGNED NOT NULL,"
                 " owner VARCHAR(64) CHARACTER SET ascii NOT NULL, expires_at DATETIME(6) NOT NULL,"
                 " version BIGINT NOT NULL, PRIMARY KEY (name, slot)) ENGINE=InnoDB",
             {}});
        q.create.push_back({"CREATE TABLE IF NOT EXISTS " + rw +
                                " (name VARBINARY(1024) NOT NULL, holder VARCHAR(64) CHARACTER SET ascii NOT NULL,"
                                " owner VARCHAR(64) CHARACTER SET ascii NOT NULL, expires_at DATETIME(6) NOT NULL,"
                                " version BIGINT NOT NULL, PRIMARY KEY (name, holder)) ENGINE=InnoDB",
                            {}});
        auto rows_of = [&](const std::string& name, const std::string& quoted) {
            s::sql_texts::lease_rows r;
            r.table = name;
            r.renew = {"UPDATE " + quoted + " SET expires_at = " + expires + " WHERE name = ? AND owner = ?",
                       {2, 0, 1}};
            r.release = {"DELETE FROM " + quoted + " WHERE name = ? AND owner = ?", {0, 1}};
            r.clear = {"DELETE FROM " + quoted + " WHERE name = ?", {0}};
            return r;
        };
        q.permit_rows = rows_of(table + "_permits", permits);
        q.rw_rows = rows_of(table + "_rw", rw);
        // Semaphore [name, owner, lease_ms, slot, permits]: the size of another
        // holder of the name, and the lowest slot under `permits` that no
        // unexpired row holds; the row in that slot (an expired one taken over);
        // the token, and the size check again after the insert: of two clients
        // asking different sizes at the same moment, at least one sees the other
        // (and gives its permit back).
        const std::string other_size =
            "(SELECT MAX(permits) FROM " + permits + " WHERE name = ? AND permits <> ? AND expires_at > " + now + ")";
        const std::string fresh = "(expires_at <= " + now + " OR owner <=> VALUES(owner))";
        s::batch permit = {
            {"SET @distlock_n = " + other_size +
                 ", @distlock_s = (SELECT MIN(c.s) FROM (SELECT 0 AS s UNION ALL"
                 " SELECT slot + 1 FROM " +
                 permits + " WHERE name = ? AND expires_at > " + now +
                 ") c WHERE c.s < ? AND"
                 " NOT EXISTS (SELECT 1 FROM " +
                 permits + " h WHERE h.name = ? AND h.slot = c.s AND h.expires_at > " + now + "))",
             {0, 4, 0, 4, 0}},
        };
        const std::string can_take = " WHERE @distlock_s IS NOT NULL AND @distlock_n IS NULL";
        if (!seq) permit.push_back({bump(can_take).text, {3}});
        permit.push_back({"INSERT INTO " + permits +
                              " (name, slot, permits, owner, expires_at, version) SELECT ?, @distlock_s, ?, ?, " +
                              expires + ", " + draw + " FROM DUAL" + can_take +
                              " ON DUPLICATE KEY UPDATE version = IF(" + fresh +
                              ", VALUES(version), version),"
                              " permits = IF(" +
                              fresh +
                              ", VALUES(permits), permits),"
                              " owner = IF(" +
                              fresh +
                              ", VALUES(owner), owner),"
                              " expires_at = IF(" +
                              fresh + ", VALUES(expires_at), expires_at)",
                          {0, 4, 1, 2}});
        permit.push_back({"SELECT (SELECT version FROM " + permits +
                              " WHERE name = ? AND owner = ?), COALESCE(@distlock_n, " + other_size + "), @distlock_s",
                          {0, 1, 0, 4}});
        q.permit_acquire = std::move(permit);
        // Read-write lock [name, owner, lease_ms, slot]: a row per reader (holder =
        // its owner token) and one writer row per name (holder 'w'), which a
        // waiting writer holds too (version 0 until granted).
        const std::string writer_row = "name = ? AND holder = 'w'";
        s::batch read = {
            {"INSERT INTO " + rw + " (name, holder, owner, expires_at, version) VALUES (?, ?, ?, " + expires + ", " +
                 draw + ") ON DUPLICATE KEY UPDATE expires_at = VALUES(expires_at)",
             {0, 1, 1, 2}},
            {"SET @distlock_w = (SELECT COUNT(*) FROM " + rw + " WHERE " + writer_row + " AND expires_at > " + now +
                 ")",
             {0}},
            {"DELETE FROM " + rw + " WHERE name = ? AND holder = ? AND @distlock_w > 0", {0, 1}},
            {"SELECT version FROM " + rw + " WHERE name = ? AND holder = ?", {0, 1}},
        };
        if (!seq) read.insert(read.begin(), bump(""));
        q.rw_read_acquire = std::move(read);
        s::batch write = {
            {"INSERT INTO " + rw + " (name, holder, owner, expires_at, version) VALUES (?, 'w', ?, " + expires +
                 ", 0) ON DUPLICATE KEY UPDATE version = IF(" + fresh +
                 ", IF(owner <=> VALUES(owner), version, 0), version),"
                 " owner = IF(" +
                 fresh + ", VALUES(owner), owner), expires_at = IF(" + fresh + ", VALUES(expires_at), expires_at)",
             {0, 1, 2}},
            {"SET @distlock_r = (SELECT COUNT(*) FROM " + rw + " WHERE name = ? AND holder <> 'w' AND expires_at > " +
                 now + ")",
             {0}},
        };
        const std::string mine_waiting = writer_row + " AND owner = ? AND version = 0";
        if (!seq)
            write.push_back({"INSERT INTO " + fence +
                                 " (slot, version) SELECT ?, LAST_INSERT_ID(1) FROM DUAL WHERE"
                                 " @distlock_r = 0 AND EXISTS (SELECT 1 FROM " +
                                 rw + " WHERE " + mine_waiting +
                                 ")"
                                 " ON DUPLICATE KEY UPDATE version = LAST_INSERT_ID(version + 1)",
                             {3, 0, 1}});
        write.push_back(
            {"UPDATE " + rw + " SET version = " + draw + " WHERE " + mine_waiting + " AND @distlock_r = 0", {0, 1}});
        write.push_back(
            {"SELECT version FROM " + rw + " WHERE " + writer_row + " AND owner = ? AND version <> 0", {0, 1}});
        q.rw_write_acquire = std::move(write);
        return q;
    }

    // Tables of the earlier layout: the counter is raised to the highest version
    // a lease row holds (its token: SETVAL never lowers a sequence; counter rows
    // are raised, never lowered); then the rows of locks nobody holds are deleted.
    void migrate(s::connection& c, const std::string& table) const override {
        const std::string t = "`" + table + "`", fence = "`" + table + "_fence`";
        // A lock table made before holder labels gets its holder_label column
        // (an instant ADD COLUMN on InnoDB; old clients name their columns, so
        // they keep working). Two clients starting together may both add it:
        // the second finds it there (1060, duplicate column), which is fine.
        auto has = c.exec({"SELECT COUNT(*) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE()"
                           " AND TABLE_NAME = ? AND COLUMN_NAME = 'holder_label'",
                           {0}},
                          {std::string(table)});
        if (has.rows.empty() || !has.rows[0][0] || *has.rows[0][0] == "0") {
            try {
                c.exec({"ALTER TABLE " + t + " ADD COLUMN holder_label VARBINARY(320) NULL", {}});
            } catch (const s::sql_error& e) {
                if (e.code() != 1060) throw;  // ER_DUP_FIELDNAME: added meanwhile by another client
            }
        }
        if (sequence()) {
            auto m = c.exec({"SELECT COALESCE(MAX(version), 0) FROM " + t, {}});
            const auto top = m.rows.empty() || !m.rows[0][0] ? 0 : s::to_int64(*m.rows[0][0]);
            if (top > 0) c.exec({"SELECT SETVAL(" + fence + ", ?)", {0}}, {static_cast<std::int64_t>(top)});
        } else {
            std::string slots;
            for (int i = 0; i < 1024; ++i) slots += (i ? ", (" : "(") + std::to_string(i) + ", 0)";
            c.exec({"INSERT IGNORE INTO " + fence + " (slot, version) VALUES " + slots, {}});
            c.exec({"UPDATE " + fence + " f JOIN (SELECT COALESCE(MAX(version), 0) AS m FROM " + t +
                        ") x SET f.version = x.m WHERE f.version < x.m",
                    {}});
        }
        c.exec({"DELETE FROM " + t + " WHERE owner IS NULL OR expires_at <= UTC_TIMESTAMP(6)", {}});
        for (const char* rows : {"_permits", "_rw"})
            c.exec({"DELETE FROM `" + table + rows + "` WHERE expires_at <= UTC_TIMESTAMP(6)", {}});
    }

    // `name IN (...) AND owner IN (...)` (the primary key's range, then the
    // owners): equivalent to matching the pairs, since owner tokens are unique.
    renew_batch lease_renew_batch(const std::string& table, std::size_t n) const override {
        std::string names, owners;
        std::vector<int> pairs;
        for (std::size_t i = 0; i < n; ++i) {
            names += i ? ", ?" : "?";
            owners += i ? ", ?" : "?";
        }
        for (std::size_t i = 0; i < n; ++i) pairs.push_back(static_cast<int>(1 + 2 * i));
        for (std::size_t i = 0; i < n; ++i) pairs.push_back(static_cast<int>(2 + 2 * i));
        const std::string where = " WHERE name IN (" + names + ") AND owner IN (" + owners + ")";
        std::vector<int> update_args{0};
        update_args.insert(update_args.end(), pairs.begin(), pairs.end());
        return {
            {"UPDATE `" + table + "` SET expires_at = UTC_TIMESTAMP(6) + INTERVAL (? * 1000) MICROSECOND" + where,
             update_args},
            {"SELECT owner FROM `" + table + "`" + where, pairs},
        };
    }

    s::value native_key(std::string_view name) const override { return get_lock_key(namespace_, name); }
    std::chrono::milliseconds row_wait_resolution() const noexcept override { return 1000ms; }  // whole seconds
    // MariaDB's GET_LOCK takes fractions of a second; MySQL's is documented in seconds.
    std::chrono::milliseconds native_wait_resolution() const noexcept override { return mariadb_ ? 1ms : 1000ms; }
    bool native_wait_in_call() const noexcept override { return true; }
    std::string quote(std::string_view id) const override { return "`" + std::string(id) + "`"; }
    std::string placeholder(int) const override { return "?"; }

private:
    endpoint ep_;
    s::conn_settings cs_;
    fence_kind fence_;
    std::atomic<bool> mariadb_{false};
    std::once_flag namespace_once_;
    std::string namespace_;  // set by the first connection, then fixed
};

// Why the modes that do not verify the server's certificate are refused.
constexpr std::string_view unverified_mode =
    "MariaDB Connector/C 3.3 enforces TLS only when it verifies the server's certificate and name: without "
    "verification it logs in in clear to a server (or an attacker on the path) that does not offer TLS, and "
    "verify_ca is not offered apart from the name. Use ssl_mode=verify_identity (tls=true), or disabled to say "
    "that clear is meant";

// The URL's TLS parameters (spi/tls.hpp) and MySQL's own ssl_mode, ssl_ca,
// ssl_cert, ssl_key.
void tls_from_url(spi::url& u, endpoint& ep) {
    const auto t = spi::take_tls(u, kBackend, {"ssl_ca", "ssl_cert", "ssl_key", ""});
    if (!t.server_name.empty())
        throw_error(errc::unsupported, kBackend,
                    "tls_server_name is not supported: the client library verifies the URL's host");
    std::optional<tls_mode> mode;
    if (auto m = u.take("ssl_mode")) {
        if (*m == "disabled") mode = tls_mode::disabled;
        else if (*m == "verify_identity") mode = tls_mode::verify_identity;
        else if (*m == "preferred" || *m == "required" || *m == "verify_ca")
            throw_error(errc::unsupported, kBackend,
                        "ssl_mode=" + *m + " is not supported: " + std::string(unverified_mode));
        else
            throw_error(
                errc::invalid_argument, kBackend,
                "unknown ssl_mode '" + *m + "' (known: disabled, preferred, required, verify_ca, verify_identity)");
    }
    if (t.enabled) {
        if (!t.verify)
            throw_error(errc::unsupported, kBackend, "tls_insecure is not supported: " + std::string(unverified_mode));
        if (mode && *mode != tls_mode::verify_identity) spi::tls_conflict(kBackend, "tls=true", "ssl_mode");
        mode = tls_mode::verify_identity;
    }
    spi::check_tls_files(t, kBackend);
    if ((t.ca.given() || t.cert.given() || t.key.given()) && (!mode || *mode == tls_mode::disabled))
        throw_error(errc::invalid_argument, kBackend,
                    "ssl_ca/ssl_cert/ssl_key need TLS: add tls=true or ssl_mode=verify_identity");
    ep.tls = mode.value_or(tls_mode::library_default);
    // tls=true without a CA: the system's bundle, as the HTTP layer's.
    ep.tls_ca = t.ca.given() ? t.ca.path : ep.tls == tls_mode::verify_identity ? X509_get_default_cert_file() : "";
    ep.tls_cert = t.cert.path;
    ep.tls_key = t.key.path;
}

}  // namespace

std::shared_ptr<s::dialect> make_dialect(spi::url& u, const s::conn_settings& cs) {
    endpoint ep;
    auto hosts = u.hosts_or_throw(3306);
    if (hosts.size() != 1) throw_error(errc::invalid_argument, kBackend, "mysql:// takes one host");
    ep.host = hosts[0].host;
    ep.port = hosts[0].port;
    ep.user = u.user();
    ep.password = u.password();
    ep.schema = u.path().empty() ? std::string{} : u.path().substr(1);
    if (ep.schema.empty() || ep.schema.find('/') != std::string::npos)
        throw_error(errc::invalid_argument, kBackend, "mysql:// needs a database: mysql://user:pw@host:port/db");
    if (spi::has_dot_segment(ep.schema))
        throw_error(errc::invalid_argument, kBackend, "the database cannot be '.' or '..'");
    if (ep.user.empty())
        throw_error(errc::invalid_argument, kBackend, "mysql:// needs a user: mysql://user:pw@host/db");
    tls_from_url(u, ep);
    auto fence = fence_kind::automatic;
    if (auto f = u.take("fence")) {
        if (*f == "sequence") fence = fence_kind::sequence;
        else if (*f == "table") fence = fence_kind::table;
        else throw_error(errc::invalid_argument, kBackend, "unknown fence '" + *f + "' (known: sequence, table)");
    }
    return std::make_shared<dialect>(std::move(ep), cs, fence);
}

void register_backend(spi::registry& r) {
    r.add("mysql", [](spi::url& u) -> std::shared_ptr<spi::backend> {
        auto settings = s::take_settings(u, kBackend, "get-lock");
        return s::make_backend(make_dialect(u, settings.conn), settings);
    });
}

}  // namespace distlock::backends::mysql
