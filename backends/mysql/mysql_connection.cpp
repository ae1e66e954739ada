// A session of a MySQL / MariaDB server through mysql-connector-c++ 1.1 (see
// mysql_connection.hpp): the connect under its deadline, statements rendered
// with their values as literals, replies capped, errors classified.
#include <cppconn/driver.h>
#include <cppconn/exception.h>
#include <cppconn/resultset.h>
#include <cppconn/resultset_metadata.h>
#include <cppconn/statement.h>
#include <mysql_connection.h>
#include <mysql_driver.h>

#include <signal.h>
#include <sys/socket.h>

#include <atomic>
#include <mutex>
#include <optional>

#include "call_deadline.hpp"
#include "mysql_connection.hpp"

namespace distlock::backends::mysql {

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

namespace {

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

int seconds_at_least_1(std::chrono::milliseconds d) {
    return static_cast<int>(std::max<long long>(1, (d.count() + 999) / 1000));
}

// The most distlock ever reads or sends in a packet (a row, a statement): the
// client library refuses a larger one (our largest statement, a renewal of
// 1024 names of 1024 bytes, is about 2.2 MB). A result is capped as it is read
// (read(): s::max_reply_rows, s::max_reply_bytes).
constexpr int max_packet = 16 << 20;

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
    if (ep.tls.tls != spi::mariadb_tls::mode::verify_identity) return;
    opts["sslEnforce"] = true;
    opts["sslVerify"] = true;
    if (!ep.tls.ca.empty()) opts["sslCA"] = ::sql::SQLString(ep.tls.ca);
    if (!ep.tls.cert.empty()) opts["sslCert"] = ::sql::SQLString(ep.tls.cert);
    if (!ep.tls.key.empty()) opts["sslKey"] = ::sql::SQLString(ep.tls.key);
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
            if (code == 2026 && spi::mariadb_tls_refused(msg)) throw s::sql_error(s::failure::access_denied, code, msg);
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

}  // namespace

opened open_connection(const endpoint& ep, const sql::conn_settings& cs) {
    auto c = std::make_unique<connection>(ep, cs);
    opened o{nullptr, c->server_version(), c->database(), c->folds_case()};
    o.conn = std::move(c);
    return o;
}

}  // namespace distlock::backends::mysql
