// postgres:// for the optimistic stock helper (optimistic_stock_client.hpp),
// over libpq: one connection per session, each statement one PQsendQueryParams
// with $1..$n parameters, the connect and each call bounded by the URL's
// connect_timeout and timeout.
#include <libpq-fe.h>
#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <iterator>
#include <utility>

#include "optimistic_stock_client.hpp"

namespace distlock::tool::stock_client {
namespace {

using steady = std::chrono::steady_clock;
constexpr const char* backend = "postgres";

using settings = postgres_settings;

std::string trimmed(const char* message) {
    std::string m = message ? message : "";
    while (!m.empty() && (m.back() == '\n' || m.back() == ' ')) m.pop_back();
    return m;
}

// libpq gives no SQLSTATE for a failed connection: its message says why.
errc connect_failure(const std::string& msg) {
    auto has = [&](const char* what) { return msg.find(what) != std::string::npos; };
    // Bad credentials; and TLS refused by policy (the server's certificate or
    // name, a server in clear where the mode requires TLS, a client
    // certificate the server wants or refuses), before any password was sent.
    for (const char* denied :
         {"password authentication failed", "no pg_hba.conf entry", "pg_hba.conf rejects", "role \"",
          "permission denied", "no password supplied", "certificate verify failed", "does not match host name",
          "server does not support SSL", "requires a valid client certificate", "alert certificate required",
          "alert unknown ca", "alert bad certificate"})
        if (has(denied)) return errc::access_denied;
    if (has("database \"") && has("does not exist")) return errc::invalid_argument;
    // Another kind of server answered (a wrong port).
    if (has("invalid response to SSL negotiation") || has("expected authentication request from server"))
        return errc::invalid_argument;
    return errc::unavailable;
}

// A statement's SQLSTATE as what to do next.
errc statement_failure(std::string_view state) {
    if (state == "28P01" || state == "28000" || state == "42501") return errc::access_denied;
    if (state == "3D000" || state == "3F000") return errc::invalid_argument;  // no such database or schema
    return errc::unavailable;
}

// Whether `fd` became ready for `events` before `until`.
bool wait_for(int fd, short events, steady::time_point until) {
    for (;;) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - steady::now()).count();
        if (left <= 0) return false;
        pollfd p{fd, events, 0};
        const int rc = ::poll(&p, 1, static_cast<int>(std::min<long long>(left, 60000)));
        if (rc > 0) return true;
        if (rc < 0 && errno != EINTR) return true;  // libpq reports the socket's error
    }
}

std::int64_t to_int64(const char* text, int length) {
    std::int64_t v = 0;
    const auto [end, ec] = std::from_chars(text, text + length, v);
    if (ec != std::errc{} || end != text + length || length == 0)
        throw db_error(errc::unavailable, "the server's reply is not an integer in range");
    return v;
}

class pg_connection final : public connection {
public:
    explicit pg_connection(const settings& s) : timeout_(s.t.call) {
        const std::string port = std::to_string(s.ep.port);
        // Unqualified names resolve in pg_catalog only (pg_temp last): the table
        // is qualified with its schema, and the operators the statements use
        // can only be the built-in ones. No row lock wait outlasts a call.
        const std::string options =
            "-c search_path=pg_catalog,pg_temp -c lock_timeout=" + std::to_string(lock_wait.count());
        std::vector<const char*> keys = {
            "host", "port", "user", "password", "dbname", "application_name", "client_encoding", "options"};
        std::vector<const char*> vals = {
            s.ep.host.c_str(),           port.c_str(), s.ep.user.c_str(), s.ep.password.c_str(), s.ep.database.c_str(),
            "distlock-optimistic-stock", "UTF8",       options.c_str()};
        for (const auto& [k, v] : s.tls) {
            keys.push_back(k.c_str());
            vals.push_back(v.c_str());
        }
        keys.push_back(nullptr);
        vals.push_back(nullptr);
        conn_ = PQconnectStartParams(keys.data(), vals.data(), 0);
        if (conn_ == nullptr) throw db_error(errc::unavailable, "libpq could not allocate a connection", 0, true);
        const auto until = steady::now() + s.t.connect;
        for (auto st = PGRES_POLLING_WRITING; st != PGRES_POLLING_OK; st = PQconnectPoll(conn_)) {
            if (st == PGRES_POLLING_FAILED || PQstatus(conn_) == CONNECTION_BAD) {
                const std::string msg = trimmed(PQerrorMessage(conn_));
                close();
                throw db_error(connect_failure(msg), msg.empty() ? "cannot connect" : msg, 0, true);
            }
            if (!wait_for(PQsocket(conn_), st == PGRES_POLLING_READING ? POLLIN : POLLOUT, until)) {
                close();
                throw db_error(errc::unavailable,
                               "no connection to " + s.ep.host + ":" + port + " within connect_timeout (" +
                                   std::to_string(s.t.connect.count()) + " ms)",
                               0, true);
            }
        }
        PQsetNoticeProcessor(
            conn_, [](void*, const char*) {}, nullptr);  // CREATE TABLE IF NOT EXISTS's NOTICE
    }

    ~pg_connection() override { close(); }
    pg_connection(const pg_connection&) = delete;
    pg_connection& operator=(const pg_connection&) = delete;

    std::vector<row> query(const std::string& text, const std::vector<param>& args) override {
        auto res = run(text, args);
        std::vector<row> rows;
        const int n = PQntuples(res.get()), cols = PQnfields(res.get());
        for (int r = 0; r < n; ++r) {
            row cells;
            for (int c = 0; c < cols; ++c) {
                if (PQgetisnull(res.get(), r, c)) cells.emplace_back(std::nullopt);
                else cells.emplace_back(to_int64(PQgetvalue(res.get(), r, c), PQgetlength(res.get(), r, c)));
            }
            rows.push_back(std::move(cells));
        }
        return rows;
    }

    std::uint64_t execute(const std::string& text, const std::vector<param>& args) override {
        auto res = run(text, args);
        const char* count = PQcmdTuples(res.get());  // "" for a statement that counts no rows
        if (count == nullptr || *count == '\0') return 0;
        const auto n = to_int64(count, static_cast<int>(std::char_traits<char>::length(count)));
        return static_cast<std::uint64_t>(std::max<std::int64_t>(0, n));
    }

    bool broken() const noexcept override { return conn_ == nullptr; }

private:
    using result = std::unique_ptr<PGresult, decltype(&PQclear)>;

    // Sends the statement and reads its one result within the call timeout.
    result run(const std::string& text, const std::vector<param>& args) {
        if (conn_ == nullptr) throw db_error(errc::unavailable, "the connection is already broken", 0, true);
        std::vector<std::string> texts;
        for (const auto& a : args)
            texts.push_back(std::holds_alternative<std::string>(a) ? std::get<std::string>(a)
                                                                   : std::to_string(std::get<std::int64_t>(a)));
        std::vector<const char*> values;
        for (const auto& t : texts) values.push_back(t.c_str());
        // Blocking mode: the statement is sent whole before this returns.
        if (PQsendQueryParams(conn_, text.c_str(), static_cast<int>(values.size()), nullptr,
                              values.empty() ? nullptr : values.data(), nullptr, nullptr, 0) != 1)
            lost("cannot send the statement");
        const auto until = steady::now() + timeout_;
        result first(nullptr, &PQclear);
        for (;;) {
            while (PQisBusy(conn_)) {
                if (!wait_for(PQsocket(conn_), POLLIN, until)) timed_out();
                if (PQconsumeInput(conn_) != 1) lost("the connection broke");
            }
            PGresult* r = PQgetResult(conn_);
            if (r == nullptr) break;
            if (first) PQclear(r);
            else first.reset(r);
        }
        if (!first) lost("no result");
        const auto status = PQresultStatus(first.get());
        if (status == PGRES_TUPLES_OK || status == PGRES_COMMAND_OK) return first;
        const char* state = PQresultErrorField(first.get(), PG_DIAG_SQLSTATE);
        const std::string code = state ? state : "";
        const std::string msg = trimmed(PQresultErrorMessage(first.get()));
        const bool gone = PQstatus(conn_) == CONNECTION_BAD || code.starts_with("08") || code.starts_with("57P");
        if (gone) close();
        throw db_error(statement_failure(code), msg.empty() ? "the statement failed" : msg, 0, gone);
    }

    [[noreturn]] void lost(const std::string& why) {
        const std::string msg = conn_ ? trimmed(PQerrorMessage(conn_)) : std::string{};
        close();
        throw db_error(errc::unavailable, why + (msg.empty() ? "" : ": " + msg), 0, true);
    }

    // No reply in time: the session is dropped, and the statement's outcome is unknown.
    [[noreturn]] void timed_out() {
        close();
        throw db_error(errc::unavailable,
                       "no reply within the query timeout (" + std::to_string(timeout_.count()) + " ms)", 0, true);
    }

    void close() noexcept {
        if (conn_) PQfinish(conn_);
        conn_ = nullptr;
    }

    PGconn* conn_ = nullptr;
    std::chrono::milliseconds timeout_;
};

class pg_database final : public database {
public:
    explicit pg_database(settings s) : s_(std::move(s)) {}
    std::string_view name() const noexcept override { return backend; }
    std::string quote(std::string_view id) const override { return "\"" + std::string(id) + "\""; }
    std::string table(std::string_view id) const override { return quote(s_.schema) + "." + quote(id); }
    std::string placeholder(int n) const override { return "$" + std::to_string(n); }
    std::unique_ptr<connection> connect() override { return std::make_unique<pg_connection>(s_); }

private:
    settings s_;
};

}  // namespace

std::unique_ptr<database> postgres_database(const postgres_settings& s) { return std::make_unique<pg_database>(s); }

}  // namespace distlock::tool::stock_client

#if DISTLOCK_TOOL_STOCK_PLUGIN
DISTLOCK_TOOL_STOCK_PLUGIN_ENTRY(postgres_settings, postgres_database, "postgres")
#endif
