// A session of a PostgreSQL server through libpq (see postgres_connection.hpp):
// asynchronous libpq calls bounded by the query timeout, the server's bytes
// handed to libpq through a relay that caps them (relay.hpp), errors classified.
#include <libpq-fe.h>
#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <utility>
#include <vector>

#include "postgres_connection.hpp"
#include "relay.hpp"

namespace distlock::backends::postgres {
namespace {

namespace s = distlock::backends::sql;
using namespace std::chrono_literals;
using clk = std::chrono::steady_clock;

constexpr Oid int8_oid = 20, text_oid = 25, bytea_oid = 17;

s::failure classify_state(std::string_view state) {
    if (state == "55P03") return s::failure::lock_timeout;  // lock_not_available (lock_timeout, NOWAIT)
    if (state == "40P01" || state == "40001") return s::failure::deadlock;
    if (state == "28P01" || state == "28000" || state == "42501") return s::failure::access_denied;
    if (state == "3D000" || state == "3F000") return s::failure::no_database;  // database, or schema=
    if (state == "42P01") return s::failure::no_table;                         // undefined_table
    if (state.substr(0, 2) == "08" || state.substr(0, 3) == "57P") return s::failure::connection_lost;
    return s::failure::other;
}

// libpq gives no SQLSTATE for a failed connection: read its message.
s::failure classify_connect(const std::string& msg) {
    auto has = [&](const char* what) { return msg.find(what) != std::string::npos; };
    if (has("password authentication failed") || has("no pg_hba.conf entry") || has("pg_hba.conf rejects") ||
        has("role \"") || has("permission denied") || has("no password supplied"))
        return s::failure::access_denied;
    if (has("database \"") && has("does not exist")) return s::failure::no_database;
    // TLS refused by policy, as the HTTP layer's (access_denied_error): the
    // server's certificate (wrong CA, expired, another name), a server in
    // clear where the mode requires TLS, a client certificate the server
    // wants or refuses. No retry fixes them; libpq sent no password.
    if (has("certificate verify failed") || has("does not match host name") || has("server does not support SSL") ||
        has("requires a valid client certificate") || has("alert certificate required") || has("alert unknown ca") ||
        has("alert bad certificate"))
        return s::failure::access_denied;
    // Another kind of server answered the startup packet (a wrong port).
    if (has("invalid response to SSL negotiation") || has("expected authentication request from server"))
        return s::failure::wrong_server;
    return s::failure::cannot_connect;
}

// Every session resolves unqualified names in pg_catalog only (pg_temp, which
// only this session can write, last): distlock qualifies every table and
// sequence with its schema, and the functions and operators it calls (now(),
// nextval(), ||, set_config() ...) can then only be the built-in ones. With the
// default search_path ("$user", public), a role that may create objects in
// public (every role before PostgreSQL 15) could define a better-matching
// operator, e.g. ||(bigint, text), and have it run as this role. Sent in the
// startup packet: no statement, no round trip.
constexpr const char* session_options = "-c search_path=pg_catalog,pg_temp";

class connection final : public s::connection {
public:
    connection(const endpoint& ep, const s::conn_settings& cs) : timeout_(cs.timeout) {
        std::vector<const char*> keys = {
            "host", "port", "user", "password", "dbname", "application_name", "client_encoding", "options"};
        std::vector<const char*> vals = {ep.host.c_str(),   ep.port.c_str(), ep.user.c_str(), ep.password.c_str(),
                                         ep.dbname.c_str(), "distlock",      "UTF8",          session_options};
        for (const auto& [k, v] : ep.tls) {
            keys.push_back(k.c_str());
            vals.push_back(v.c_str());
        }
        keys.push_back(nullptr);
        vals.push_back(nullptr);
        conn_ = PQconnectStartParams(keys.data(), vals.data(), 0);
        if (conn_ == nullptr)
            throw s::sql_error(s::failure::cannot_connect, 0, "libpq could not allocate a connection");
        const auto until = clk::now() + cs.connect_timeout;
        for (auto st = PGRES_POLLING_WRITING;;) {
            if (st == PGRES_POLLING_OK) break;
            if (st == PGRES_POLLING_FAILED || PQstatus(conn_) == CONNECTION_BAD) {
                std::string msg = s::bounded_message(trim(PQerrorMessage(conn_)));
                close();
                const auto kind = classify_connect(msg);
                if (kind == s::failure::wrong_server)
                    msg += " (is " + ep.host + ":" + ep.port + " a PostgreSQL server?)";
                throw s::sql_error(kind, 0, msg);
            }
            const auto late = [&] {
                close();
                return s::sql_error(
                    s::failure::cannot_connect, 0,
                    "no connection within connect_timeout (" + std::to_string(cs.connect_timeout.count()) + " ms)");
            };
            // Once the socket is connected, the server's replies (the SSL
            // answer, the authentication, the session's parameters) come
            // through the relay, capped as a call's are.
            relay_socket();
            if (!relay_.owns(PQsocket(conn_))) {
                if (!wait_socket(st == PGRES_POLLING_READING ? POLLIN : POLLOUT, until)) throw late();
            } else if (st == PGRES_POLLING_READING) {
                const auto got = relay_.feed(until);
                if (got == relay::fed::nothing) throw late();
                if (got == relay::fed::too_much) too_large(s::failure::cannot_connect);
            } else if (clk::now() >= until) {
                throw late();
            }
            st = PQconnectPoll(conn_);
            if (relay_.owns(PQsocket(conn_)) && !relay_.forward(until)) throw late();
        }
        relay_socket();
        if (!relay_.owns(PQsocket(conn_))) {
            close();
            throw s::sql_error(s::failure::cannot_connect, 0,
                               "cannot relay the connection's socket (no descriptors left?)");
        }
        PQsetNoticeProcessor(
            conn_, [](void*, const char*) {}, nullptr);  // e.g. the WARNING of a stale unlock
        if (PQsetnonblocking(conn_, 1) != 0) {
            close();
            throw s::sql_error(s::failure::cannot_connect, 0, "cannot make the connection non-blocking");
        }
        pid_ = PQbackendPID(conn_);
    }

    ~connection() override { close(); }

    std::vector<std::string> wait_notifications(spi::deadline until) override {
        if (conn_ == nullptr) throw s::sql_error(s::failure::connection_lost, 0, "the connection is already broken");
        if (!pending_.empty()) return std::exchange(pending_, {});
        const auto got = relay_.feed(until);
        if (got == relay::fed::too_much) too_large();
        if (got == relay::fed::some) {
            if (PQconsumeInput(conn_) != 1) lost("the connection broke");
            take_notifications();
            // What is capped is what came since the last call or notification:
            // a listener may wait long, and legitimately hear much.
            if (!pending_.empty()) relay_.restart_count();
        }
        return std::exchange(pending_, {});
    }

    std::int64_t session_id() const noexcept override { return pid_; }
    bool broken() const noexcept override { return conn_ == nullptr; }

protected:
    // Every batch is one pipeline (libpq's pipeline mode: each statement, then
    // one Sync), so that it costs one round trip. A statement text met for the
    // first time on this session is prepared in the same pipeline (the first 64
    // texts; others run unnamed), so that the server parses and plans it once
    // per session: that halves a lease-table cycle's server time. After a failed
    // statement the server skips the rest up to the Sync.
    std::vector<s::result> send(std::span<const s::statement> steps, std::span<const s::value> args) override {
        if (conn_ == nullptr) throw s::sql_error(s::failure::connection_lost, 0, "the connection is already broken");
        const auto until = clk::now() + timeout_;
        relay_.restart_count();
        kept_ = 0;
        if (PQenterPipelineMode(conn_) != 1) lost("cannot enter pipeline mode");
        std::vector<std::optional<std::string>> preparing(steps.size());  // cache keys prepared by this pipeline
        for (std::size_t i = 0; i < steps.size(); ++i) preparing[i] = send_one(steps[i], args);
        if (PQpipelineSync(conn_) != 1) lost("cannot send the query");
        for (;;) {  // flush the request: libpq to the relay, the relay to the server
            const int f = PQflush(conn_);
            if (f < 0) lost("cannot send the query");
            if (!relay_.forward(until)) timed_out();
            if (f == 0) break;
        }
        std::vector<s::result> out(steps.size());
        std::optional<s::sql_error> error;
        for (std::size_t i = 0; i < steps.size(); ++i) {
            if (preparing[i]) {
                s::result parsed;
                read_results(parsed, error, until);
                if (!error) prepared_[*preparing[i]].ready = true;
            }
            read_results(out[i], error, until);
        }
        PGresult* sync = next_result(until);  // the Sync's result
        const bool synced = sync != nullptr && PQresultStatus(sync) == PGRES_PIPELINE_SYNC;
        PQclear(sync);
        if (!synced || PQexitPipelineMode(conn_) != 1) lost(error ? error->what() : "the pipeline did not end");
        for (auto it = prepared_.begin(); it != prepared_.end();)  // a Parse that failed or did not run
            it = it->second.ready ? std::next(it) : prepared_.erase(it);
        take_notifications();
        if (PQstatus(conn_) == CONNECTION_BAD) lost(error ? error->what() : "the connection broke");
        if (error) {
            if (error->kind() == s::failure::connection_lost) close();
            throw *error;
        }
        return out;
    }

private:
    // Queues one statement; returns its cache key when it is prepared by this pipeline.
    std::optional<std::string> send_one(const s::statement& st, std::span<const s::value> args) {
        const std::size_t n = st.args.size();
        std::vector<std::string> texts(n);
        std::vector<const char*> values(n, nullptr);
        std::vector<int> lengths(n, 0), formats(n, 0);
        std::vector<Oid> types(n, 0);
        std::string key = st.text;
        for (std::size_t i = 0; i < n; ++i) {
            const auto& v = args[static_cast<std::size_t>(st.args[i])];
            if (auto num = std::get_if<std::int64_t>(&v)) {
                texts[i] = std::to_string(*num);
                types[i] = int8_oid;
            } else if (auto t = std::get_if<std::string>(&v)) {
                texts[i] = *t;
                types[i] = text_oid;
            } else if (auto b = std::get_if<s::bytes>(&v)) {
                texts[i] = b->data;  // sent in binary: every byte as it is, NUL included
                types[i] = bytea_oid;
                formats[i] = 1;
            }
            key += '\0' + std::to_string(types[i]);  // a statement is prepared for its parameter types
            if (types[i] == 0) continue;             // NULL
            values[i] = texts[i].data();
            lengths[i] = static_cast<int>(texts[i].size());
        }
        const int count = static_cast<int>(n);
        const Oid* t = n ? types.data() : nullptr;
        const char* const* v = n ? values.data() : nullptr;
        const int* l = n ? lengths.data() : nullptr;
        const int* f = n ? formats.data() : nullptr;
        std::optional<std::string> preparing;
        auto it = prepared_.find(key);
        if (it == prepared_.end() && prepared_.size() < 64) {
            it = prepared_.emplace(key, prepared{"distlock_" + std::to_string(next_statement_++), false}).first;
            if (PQsendPrepare(conn_, it->second.name.c_str(), st.text.c_str(), count, t) != 1)
                lost("cannot send the query");
            preparing = key;
        }
        const int sent = it == prepared_.end() ? PQsendQueryParams(conn_, st.text.c_str(), count, t, v, l, f, 0)
                                               : PQsendQueryPrepared(conn_, it->second.name.c_str(), count, v, l, f, 0);
        if (sent != 1) lost("cannot send the query");
        return preparing;
    }

    PGresult* next_result(clk::time_point until) {
        while (PQisBusy(conn_)) {
            const auto got = relay_.feed(until);
            if (got == relay::fed::nothing) timed_out();
            if (got == relay::fed::too_much) too_large();
            if (PQconsumeInput(conn_) != 1) lost("the connection broke");
        }
        return PQgetResult(conn_);
    }

    // Puts the relay between libpq and the server once libpq's socket is
    // connected (its first packet sent, nothing read yet), and again when libpq
    // has made a new one (another address; again without SSL).
    void relay_socket() {
        const int fd = PQsocket(conn_);
        if (fd < 0 || relay_.owns(fd)) return;
        relay_.reset();
        const auto st = PQstatus(conn_);
        if (st != CONNECTION_STARTED && st != CONNECTION_MADE && st != CONNECTION_NEEDED && st != CONNECTION_BAD)
            (void)relay_.take_over(fd);
    }

    // The results of one statement, up to the NULL that ends them; the first
    // error is kept in `error`.
    void read_results(s::result& out, std::optional<s::sql_error>& error, clk::time_point until) {
        while (PGresult* res = next_result(until)) {
            switch (PQresultStatus(res)) {
                case PGRES_TUPLES_OK: {
                    const int rows = PQntuples(res), cols = PQnfields(res);
                    if (static_cast<std::size_t>(rows) > s::max_reply_rows - out.rows.size()) {
                        PQclear(res);
                        too_large();
                    }
                    for (int r = 0; r < rows; ++r) {
                        s::row row;
                        for (int c = 0; c < cols; ++c) {
                            if (PQgetisnull(res, r, c)) row.emplace_back(std::nullopt);
                            else row.emplace_back(std::string(PQgetvalue(res, r, c), PQgetlength(res, r, c)));
                            kept_ += s::kept_bytes(row.back());
                        }
                        out.rows.push_back(std::move(row));
                        if (kept_ > s::max_reply_bytes) {  // many empty cells: 4 bytes each sent, more kept
                            PQclear(res);
                            too_large();
                        }
                    }
                    out.affected = static_cast<std::uint64_t>(rows);
                    out.query = true;
                    break;
                }
                case PGRES_COMMAND_OK: {
                    const char* count = PQcmdTuples(res);
                    try {  // the rest of the pipeline is read all the same
                        out.affected = count && *count ? s::to_uint64(count) : 0;
                    } catch (const s::sql_error& e) {
                        if (!error) error.emplace(e);
                    }
                    break;
                }
                case PGRES_PIPELINE_ABORTED: break;  // skipped after an earlier error
                default: {
                    const char* state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
                    std::string msg = s::bounded_message(trim(PQresultErrorMessage(res)));
                    if (!error)
                        error.emplace(classify_state(state ? state : ""), 0, msg.empty() ? "query failed" : msg);
                }
            }
            PQclear(res);
        }
    }

    static std::string trim(std::string m) {
        while (!m.empty() && (m.back() == '\n' || m.back() == ' ')) m.pop_back();
        return m;
    }

    // Notifications arrive with any reply: keep them for wait_notifications()
    // (a bounded number: a session that stopped listening drops them).
    void take_notifications() {
        while (PGnotify* n = PQnotifies(conn_)) {
            if (pending_.size() < 1024) pending_.emplace_back(n->extra ? n->extra : "");
            PQfreemem(n);
        }
    }

    // Before the relay is in place: libpq's own socket.
    bool wait_socket(short events, clk::time_point until) {
        for (;;) {
            auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - clk::now()).count();
            if (left <= 0) return false;
            pollfd p{PQsocket(conn_), events, 0};
            int rc = ::poll(&p, 1, static_cast<int>(std::min<long long>(left, 60000)));
            if (rc > 0) return true;
            if (rc < 0 && errno != EINTR) return true;  // let libpq report the socket's error
        }
    }

    [[noreturn]] void lost(const std::string& why) {
        std::string msg = conn_ ? s::bounded_message(trim(PQerrorMessage(conn_))) : std::string{};
        close();
        throw s::sql_error(s::failure::connection_lost, 0, why + (msg.empty() ? "" : ": " + msg));
    }

    // No reply in time: the session is abandoned (closing it ends whatever it held
    // once the server notices) and the outcome of the statement is unknown.
    [[noreturn]] void timed_out() {
        close();
        throw s::sql_error(s::failure::timed_out, 0,
                           "no reply within the query timeout (" + std::to_string(timeout_.count()) + " ms)");
    }

    // A reply over the caps: the session is dropped (what libpq holds of it is freed).
    [[noreturn]] void too_large(s::failure kind = s::failure::connection_lost) {
        close();
        throw s::reply_too_large(kind);
    }

    void close() noexcept {
        if (conn_) PQfinish(conn_);  // its goodbye, to the relay
        conn_ = nullptr;
        relay_.finish();
    }

    PGconn* conn_ = nullptr;
    struct prepared {
        std::string name;
        bool ready;  // its Parse succeeded
    };
    std::map<std::string, prepared> prepared_;  // by text and parameter types
    int next_statement_ = 0;
    std::vector<std::string> pending_;  // notification payloads not yet collected
    std::chrono::milliseconds timeout_;
    std::int64_t pid_ = 0;
    relay relay_;           // between libpq and the server: what the server sends, capped per call
    std::size_t kept_ = 0;  // bytes of the call's results as kept (s::kept_bytes)
};

}  // namespace

std::unique_ptr<sql::connection> open_connection(const endpoint& ep, const sql::conn_settings& cs) {
    return std::make_unique<connection>(ep, cs);
}

}  // namespace distlock::backends::postgres
