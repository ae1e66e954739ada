// postgres://user:pw@host:port/db?strategy=... — PostgreSQL through libpq. This
// file supplies only the PostgreSQL dialect of the SQL strategy layer
// (backends/sql): a connection wrapper (asynchronous libpq calls bounded by the
// query timeout; the server's bytes handed to libpq through a relay that caps
// them, relay.hpp), the SQL texts and the advisory-lock key of a name.
#include <arpa/inet.h>
#include <libpq-fe.h>
#include <openssl/x509.h>
#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <utility>
#include <vector>

#include "distlock/spi/tls.hpp"

#include "postgres_dialect.hpp"
#include "relay.hpp"

namespace distlock::backends::postgres {
namespace {

constexpr const char* kBackend = "postgres";

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

struct endpoint {
    std::string host, port, user, password, dbname;
    std::string schema = "public";  // where every object distlock makes or uses lives (schema=)
    // libpq's TLS keywords (sslmode, sslrootcert, hostaddr...) with their
    // values, from the URL's TLS parameters (tls_options()); none = libpq's
    // defaults (sslmode=prefer).
    std::vector<std::pair<std::string, std::string>> tls;
};

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

// The advisory-lock key of a name in its namespace (dialect::key_namespace():
// empty for the default lock table): the first 8 bytes of SHA-256(namespace +
// name), read as a big-endian two's-complement signed 64-bit integer.
std::int64_t advisory_key(std::string_view name) {
    const std::string digest = spi::sha256(name);
    std::uint64_t k = 0;
    for (int i = 0; i < 8; ++i) k = (k << 8) | static_cast<unsigned char>(digest[static_cast<std::size_t>(i)]);
    return static_cast<std::int64_t>(k);
}

class dialect final : public s::dialect {
public:
    dialect(endpoint ep, s::conn_settings cs, std::string table)
        : ep_(std::move(ep)), cs_(cs), table_(std::move(table)) {}

    std::string_view name() const noexcept override { return kBackend; }
    std::string_view native_strategy() const noexcept override { return "advisory"; }
    std::unique_ptr<s::connection> connect() override { return std::make_unique<connection>(ep_, cs_); }

    // A table or sequence of this lock table, schema-qualified.
    std::string object(const std::string& name) const { return quote(ep_.schema) + "." + quote(name); }

    // The default lock table ("public"."distlock_locks") keeps the advisory keys
    // and notification channel of earlier versions; any other is a namespace of
    // its own: two lock tables never share a lock or a channel.
    bool default_table() const { return ep_.schema == "public" && table_ == "distlock_locks"; }
    std::string key_namespace() const override {
        return default_table() ? std::string{} : ep_.schema + '\0' + table_ + '\0';
    }
    // Notification channels are per database: "distlock_<table>" in public (as
    // before schema=), else "distlock_<schema>.<table>", hashed past the 63
    // bytes of an identifier. Only [A-Za-z0-9_.]: it is also a string literal.
    std::string channel(const std::string& table) const {
        const std::string base = ep_.schema == "public" ? table : ep_.schema + "." + table;
        const std::string whole = "distlock_" + base;
        return whole.size() <= 63 ? whole : "distlock_" + spi::sha256_hex(base).substr(0, 48);
    }

    s::sql_texts texts(const std::string& table) const override {
        const std::string t = object(table), rows = object(table + "_rows");
        const std::string expires = "now() + $3::bigint * interval '1 millisecond'";
        const std::string free = "(expires_at IS NULL OR expires_at <= now())";
        // The fence counter: a sequence. nextval() is never rolled back, and a
        // committed one survives a crash (PostgreSQL's documentation, "Sequence
        // Manipulation Functions").
        const std::string next = "nextval('" + object(table + "_fence") + "')";
        s::sql_texts q;
        q.create = {
            {"CREATE TABLE IF NOT EXISTS " + t +
                 " (name bytea PRIMARY KEY, owner text, expires_at timestamptz, version bigint NOT NULL DEFAULT 0,"
                 " holder_label bytea)",
             {}},
            {"CREATE TABLE IF NOT EXISTS " + rows + " (name bytea PRIMARY KEY)", {}},
            {"CREATE SEQUENCE IF NOT EXISTS " + object(table + "_fence"), {}},
        };
        q.ping = {"SELECT 1", {}};
        q.rollback = {"ROLLBACK", {}};
        q.lease_acquire = {
            {"INSERT INTO " + t + " AS t (name, owner, expires_at, version, holder_label) VALUES ($1, $2, " + expires +
                 ", " + next +
                 ", $4) ON CONFLICT (name) DO UPDATE SET owner = EXCLUDED.owner, expires_at = EXCLUDED.expires_at,"
                 " version = EXCLUDED.version, holder_label = EXCLUDED.holder_label"
                 " WHERE t.expires_at IS NULL OR t.expires_at <= now()"
                 " OR t.owner = EXCLUDED.owner RETURNING version",
             {0, 1, 2, 4}}};
        q.lease_renew = {"UPDATE " + t + " SET expires_at = " + expires + " WHERE name = $1 AND owner = $2", {0, 1, 2}};
        // Release and break wake the waiters of the name (one row = released).
        const std::string notify =
            ") SELECT pg_notify('" + channel(table) + "', encode(sha256(name), 'hex')) FROM done";
        q.lease_release = {"WITH done AS (DELETE FROM " + t + " WHERE name = $1 AND owner = $2 RETURNING name" + notify,
                           {0, 1}};
        q.lease_clear = {"WITH done AS (DELETE FROM " + t + " WHERE name = $1 RETURNING name" + notify, {0}};
        q.listen = {"LISTEN " + quote(channel(table)), {}};
        q.unlisten = {"UNLISTEN " + quote(channel(table)), {}};
        q.opt_insert = {{"INSERT INTO " + t + " (name, owner, expires_at, version, holder_label) VALUES ($1, $2, " +
                             expires + ", " + next + ", $4) ON CONFLICT (name) DO NOTHING RETURNING version",
                         {0, 1, 2, 4}}};
        q.opt_read = {"SELECT version, CASE WHEN " + free + " THEN 1 ELSE 0 END FROM " + t + " WHERE name = $1", {0}};
        q.opt_update = {{"UPDATE " + t + " SET owner = $2, expires_at = " + expires + ", version = " + next +
                             ", holder_label = $5 WHERE name = $1 AND version = $4 AND " + free + " RETURNING version",
                         {0, 1, 2, 4, 5}}};
        q.row_ensure = {"INSERT INTO " + rows + " (name) VALUES ($1) ON CONFLICT (name) DO NOTHING", {0}};
        // The holding session's application_name carries the holder's label
        // (docs/backends/sql.md, "Inspect"): set inside the locking transaction,
        // so that its ROLLBACK (release, or a failed try) sets it back.
        const std::string row_label = " AND set_config('application_name', $2, false) IS NOT NULL";
        q.row_lock = {{"BEGIN", {}},
                      {"SELECT 1 FROM " + rows + " WHERE name = $1" + row_label + " FOR UPDATE", {0, 1}}};
        q.row_lock_nowait = {{"BEGIN", {}},
                             {"SELECT 1 FROM " + rows + " WHERE name = $1" + row_label + " FOR UPDATE NOWAIT", {0, 1}}};
        q.row_unlock = {{"ROLLBACK", {}}};
        q.set_wait = {"SELECT set_config('lock_timeout', $1::bigint || 'ms', false)", {0}};
        q.fence = {{"SELECT " + next, {}}};
        // A row locked FOR UPDATE carries the locking transaction's id in xmax;
        // that transaction, while it runs, holds the lock on its own id, which
        // names its session: found and ended in one statement.
        q.row_break = {"SELECT pg_terminate_backend(l.pid) FROM " + rows +
                           " r JOIN pg_locks l ON l.locktype ="
                           " 'transactionid' AND l.transactionid = r.xmax AND l.mode = 'ExclusiveLock' AND l.granted"
                           " WHERE r.name = $1",
                       {0}};
        // The token is drawn once the lock is held, in the same statement, which
        // also names the holding session after the grant: application_name
        // 'distlock #<token>' and ' <label>' ($2, empty when the label is not
        // printable ASCII) when the whole fits the 63 bytes PostgreSQL keeps.
        const std::string name_session =
            " SELECT v FROM t WHERE set_config('application_name', CASE WHEN octet_length('distlock #' || v || $2) <= "
            "63"
            " THEN 'distlock #' || v || $2 ELSE 'distlock #' || v END, false) IS NOT NULL";
        q.native_lock = {
            {"WITH t AS MATERIALIZED (SELECT " + next + " AS v FROM pg_advisory_lock($1::bigint))" + name_session,
             {0, 3}}};
        q.native_try = {
            {"WITH l AS MATERIALIZED (SELECT pg_try_advisory_lock($1::bigint) AS ok), t AS MATERIALIZED"
             " (SELECT " +
                 next + " AS v FROM l WHERE l.ok)" + name_session,
             {0, 3}}};
        // The release gives the session its name from the connection back.
        q.native_release = {
            "SELECT CASE WHEN pg_advisory_unlock($1::bigint) THEN 1 ELSE 0 END,"
            " set_config('application_name', 'distlock', false)",
            {0}};
        q.native_plain = {"SELECT pg_advisory_lock($1::bigint)", {0}};
        // A bigint advisory key shows in pg_locks as classid = high half, objid = low half, objsubid = 1.
        q.native_break = {
            "SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' AND granted"
            " AND objsubid = 1 AND database = (SELECT oid FROM pg_database WHERE datname ="
            " current_database()) AND classid = (($1::bigint >> 32) & 4294967295)::oid"
            " AND objid = ($1::bigint & 4294967295)::oid",
            {0}};
        // inspect: one statement each. Advisory: the granted lock of the key in
        // this database, its session's application_name, and the sessions
        // queued for it (ungranted). for-update: the row's xmax is the locking
        // transaction, whose lock on its own id names its session; the first
        // waiter waits on that id (holding the row's tuple lock), later ones on
        // the tuple lock.
        const std::string this_db = "database = (SELECT oid FROM pg_database WHERE datname = current_database())";
        const std::string key_is =
            " AND classid = (($1::bigint >> 32) & 4294967295)::oid"
            " AND objid = ($1::bigint & 4294967295)::oid";
        q.inspect_native = {
            "SELECT h.pid, (SELECT a.application_name FROM pg_stat_activity a WHERE a.pid = h.pid),"
            " (SELECT count(DISTINCT pid) FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 1 AND " +
                this_db + key_is +
                " AND NOT granted)"
                " FROM (SELECT 1) one LEFT JOIN (SELECT pid FROM pg_locks WHERE locktype = 'advisory'"
                " AND objsubid = 1 AND " +
                this_db + key_is + " AND granted) h ON true",
            {0}};
        q.inspect_lease = {
            "SELECT CASE WHEN expires_at > now() THEN 1 ELSE 0 END, encode(holder_label, 'hex'), version,"
            " (extract(epoch FROM expires_at - now()) * 1000000)::bigint, owner FROM " +
                t + " WHERE name = $1 AND owner IS NOT NULL",
            {0}};
        q.no_session_label = "";  // application_name
        q.no_native_waiters = "";
        q.no_row_waiters = "";
        q.inspect_row = {
            "SELECT l.pid, (SELECT a.application_name FROM pg_stat_activity a WHERE a.pid = l.pid),"
            " CASE WHEN l.pid IS NULL THEN 0 ELSE (SELECT count(DISTINCT w.pid) FROM pg_locks w WHERE NOT w.granted"
            " AND ((w.locktype = 'transactionid' AND w.transactionid = r.xmax) OR (w.locktype = 'tuple' AND w." +
                this_db + " AND w.relation = '" + rows +
                "'::regclass AND w.page = (r.ctid::text::point)[0] AND w.tuple = (r.ctid::text::point)[1])))"
                " END FROM (SELECT 1) one LEFT JOIN " +
                rows +
                " r ON r.name = $1 LEFT JOIN pg_locks l"
                " ON l.locktype = 'transactionid' AND l.transactionid = r.xmax AND l.mode = 'ExclusiveLock'"
                " AND l.granted",
            {0}};

        // Semaphores: a row per permit held. The acquisitions of a name are
        // serialized by a transaction-scoped advisory lock on the name's permit
        // key (the pipeline is one implicit transaction, so it is held until the
        // upsert has committed), so that the look for a free slot and the size
        // check see every permit taken before.
        const std::string permits = object(table + "_permits");
        q.create.push_back(
            {"CREATE TABLE IF NOT EXISTS " + permits +
                 " (name bytea NOT NULL, slot bigint NOT NULL, permits bigint NOT NULL, owner text NOT NULL,"
                 " expires_at timestamptz NOT NULL, version bigint NOT NULL, PRIMARY KEY (name, slot))",
             {}});
        q.permit_rows.table = table + "_permits";
        q.permit_rows.renew = {"UPDATE " + permits + " SET expires_at = " + expires + " WHERE name = $1 AND owner = $2",
                               {0, 1, 2}};
        q.permit_rows.release = {
            "WITH done AS (DELETE FROM " + permits + " WHERE name = $1 AND owner = $2 RETURNING name" + notify, {0, 1}};
        q.permit_rows.clear = {"WITH done AS (DELETE FROM " + permits + " WHERE name = $1 RETURNING name" + notify,
                               {0}};
        // [name, owner, lease_ms, slot, permits, key]; the upsert's $3 = permits, $4 = lease_ms.
        q.permit_acquire = {
            {"SELECT pg_advisory_xact_lock($1::bigint)", {5}},
            {"WITH held AS (SELECT slot, permits FROM " + permits +
                 " WHERE name = $1 AND expires_at > now()),"
                 " other AS (SELECT max(permits) AS n FROM held WHERE permits <> $3),"
                 " pick AS (SELECT min(c.s) AS s FROM (SELECT 0::bigint AS s UNION ALL SELECT slot + 1 FROM held) c"
                 " WHERE c.s < $3 AND NOT EXISTS (SELECT 1 FROM held h WHERE h.slot = c.s)),"
                 " ins AS (INSERT INTO " +
                 permits +
                 " AS t (name, slot, permits, owner, expires_at, version)"
                 " SELECT $1, pick.s, $3, $2, now() + $4::bigint * interval '1 millisecond', " +
                 next +
                 " FROM pick, other WHERE pick.s IS NOT NULL AND other.n IS NULL"
                 " ON CONFLICT (name, slot) DO UPDATE SET permits = EXCLUDED.permits, owner = EXCLUDED.owner,"
                 " expires_at = EXCLUDED.expires_at, version = EXCLUDED.version"
                 " WHERE t.expires_at <= now() OR t.owner = EXCLUDED.owner RETURNING version)"
                 " SELECT (SELECT version FROM ins), (SELECT n FROM other), NULL",
             {0, 1, 4, 2}},
        };

        // Read-write locks: the advisory lock of two int4 keys, the high and the
        // low half of the name's advisory key (so pg_locks shows the same
        // classid and objid as the mutex's, with objsubid 2: a lock apart from
        // the mutex of the same name), shared for readers, exclusive for
        // writers. The token is drawn once the lock is held, as for the mutex.
        const std::string halves = "($1::bigint >> 32)::int, (($1::bigint << 32) >> 32)::int";
        q.rw_read_lock = {{"SELECT " + next + " FROM pg_advisory_lock_shared(" + halves + ")", {0}}};
        q.rw_read_try = {{"WITH l AS MATERIALIZED (SELECT pg_try_advisory_lock_shared(" + halves + ") AS ok) SELECT " +
                              next + " FROM l WHERE l.ok",
                          {0}}};
        q.rw_write_lock = {{"SELECT " + next + " FROM pg_advisory_lock(" + halves + ")", {0}}};
        q.rw_write_try = {{"WITH l AS MATERIALIZED (SELECT pg_try_advisory_lock(" + halves + ") AS ok) SELECT " + next +
                               " FROM l WHERE l.ok",
                           {0}}};
        q.rw_read_release = {"SELECT CASE WHEN pg_advisory_unlock_shared(" + halves + ") THEN 1 ELSE 0 END", {0}};
        q.rw_write_release = {"SELECT CASE WHEN pg_advisory_unlock(" + halves + ") THEN 1 ELSE 0 END", {0}};
        q.rw_break = {
            "SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' AND granted"
            " AND objsubid = 2 AND database = (SELECT oid FROM pg_database WHERE datname ="
            " current_database()) AND classid = (($1::bigint >> 32) & 4294967295)::oid"
            " AND objid = ($1::bigint & 4294967295)::oid",
            {0}};
        return q;
    }

    // Every table and the sequence distlock uses must be the connecting role's
    // own, and the schema the role's, a superuser's or the database owner's
    // (checked after CREATE ... IF NOT EXISTS, so that an object another role
    // made first, or meanwhile, is seen). A table of another role could carry
    // triggers, rules or policies that run as this role, and its owner reads
    // and changes every lock; a schema's owner can drop and replace what is in
    // it. Refused with access_denied (failure::access_denied), naming the object.
    void refuse_objects_of_others(s::connection& c, const std::string& table) const {
        const std::string me = "(SELECT oid FROM pg_roles WHERE rolname = current_user)";
        const auto r = c.exec(
            {"SELECT x.what, x.name, x.owner, current_user FROM ("
             " SELECT 'schema' AS what, quote_ident(n.nspname) AS name, pg_get_userbyid(n.nspowner) AS owner,"
             " n.nspowner = " +
                 me +
                 " OR (SELECT rolsuper FROM pg_roles WHERE oid = n.nspowner)"
                 " OR n.nspowner = (SELECT datdba FROM pg_database WHERE datname = current_database())"
                 " OR pg_get_userbyid(n.nspowner) = 'pg_database_owner' AS ok FROM pg_namespace n WHERE n.nspname = $1"
                 " UNION ALL SELECT CASE WHEN c.relkind = 'S' THEN 'sequence' ELSE 'table' END,"
                 " quote_ident(n.nspname) || '.' || quote_ident(c.relname), pg_get_userbyid(c.relowner),"
                 " c.relowner = " +
                 me +
                 " FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
                 " WHERE n.nspname = $1 AND c.relname IN ($2, $3, $4, $5)) x WHERE NOT COALESCE(x.ok, false) ORDER BY "
                 "1, 2 LIMIT 1",
             {0, 1, 2, 3, 4}},
            {ep_.schema, table, table + "_rows", table + "_fence", table + "_permits"});
        if (r.rows.empty() || r.rows[0].size() < 4) return;
        const auto& row = r.rows[0];
        const std::string what = row[0].value_or("?"), name = row[1].value_or("?"), owner = row[2].value_or("?"),
                          me_name = row[3].value_or("?");
        if (what == "schema")
            throw s::sql_error(s::failure::access_denied, 0,
                               "schema " + name + " is owned by role \"" + owner + "\", which is neither \"" + me_name +
                                   "\" (the role distlock connects as), a superuser nor the database owner: refused,"
                                   " since a schema's owner can drop and replace the lock tables in it (use a schema of"
                                   " this role's: schema=)");
        throw s::sql_error(s::failure::access_denied, 0,
                           "the " + what + " " + name + " is owned by role \"" + owner + "\", not by \"" + me_name +
                               "\" (the role distlock connects as): refused, since another role's table can run"
                               " triggers, rules or policies as this role and its owner reads and changes every lock"
                               " (make it this role's, ALTER ... OWNER TO, or use another schema= or table=)");
    }

    // Tables of the earlier layout kept each name's token in its row's version:
    // the sequence is set above the highest one (under a transaction-scoped
    // advisory lock, so that two starting clients do not both set it), then the
    // rows of locks nobody holds are deleted.
    void migrate(s::connection& c, const std::string& table) const override {
        refuse_objects_of_others(c, table);
        const std::string t = object(table), seq = object(table + "_fence");
        c.exec({"BEGIN", {}});
        try {
            const std::string lock_of = ep_.schema == "public" ? table : ep_.schema + "." + table;
            c.exec({"SELECT pg_advisory_xact_lock($1::bigint)", {0}}, {advisory_key("distlock migrate " + lock_of)});
            // A lock table made before holder labels gets its holder_label column,
            // once (looked up first: ALTER TABLE would wait for every statement on
            // the table even when the column is there). Old clients name their
            // columns, so they keep working.
            auto has = c.exec({"SELECT count(*) FROM pg_attribute WHERE attrelid = '" + t +
                                   "'::regclass AND attname = 'holder_label' AND NOT attisdropped",
                               {}});
            if (has.rows.empty() || !has.rows[0][0] || *has.rows[0][0] == "0")
                c.exec({"ALTER TABLE " + t + " ADD COLUMN IF NOT EXISTS holder_label bytea", {}});
            c.exec({"SELECT setval('" + seq + "', x.m) FROM (SELECT COALESCE(MAX(version), 0) AS m FROM " + t +
                        ") x, " + seq + " s WHERE x.m > 0 AND x.m >= s.last_value",
                    {}});
            c.exec({"DELETE FROM " + t + " WHERE owner IS NULL OR expires_at <= now()", {}});
            c.exec({"DELETE FROM " + object(table + "_permits") + " WHERE expires_at <= now()", {}});
            c.exec({"COMMIT", {}});
        } catch (const s::sql_error& e) {
            if (!e.fatal()) c.exec({"ROLLBACK", {}});
            throw;
        }
    }

    // `name IN (...) AND owner IN (...)`: equivalent to matching the pairs, since
    // owner tokens are unique.
    renew_batch lease_renew_batch(const std::string& table, std::size_t n) const override {
        std::string names, owners;
        std::vector<int> args{0};
        for (std::size_t i = 0; i < n; ++i) {
            names += (i ? ", $" : "$") + std::to_string(2 + 2 * i);
            owners += (i ? ", $" : "$") + std::to_string(3 + 2 * i);
            args.push_back(static_cast<int>(1 + 2 * i));
            args.push_back(static_cast<int>(2 + 2 * i));
        }
        return {{"UPDATE " + object(table) +
                     " SET expires_at = now() + $1::bigint * interval '1 millisecond'"
                     " WHERE name IN (" +
                     names + ") AND owner IN (" + owners + ") RETURNING owner",
                 args},
                {}};
    }

    s::value native_key(std::string_view name) const override {
        return advisory_key(key_namespace() + std::string(name));
    }
    std::chrono::milliseconds row_wait_resolution() const noexcept override { return 1ms; }
    std::chrono::milliseconds native_wait_resolution() const noexcept override { return 1ms; }
    bool native_wait_in_call() const noexcept override { return false; }  // lock_timeout bounds the wait
    std::string quote(std::string_view id) const override { return "\"" + std::string(id) + "\""; }
    std::string qualify(std::string_view table) const override { return object(std::string(table)); }
    std::string placeholder(int n) const override { return "$" + std::to_string(n); }

private:
    endpoint ep_;
    s::conn_settings cs_;
    std::string table_;
};

// The URL's TLS parameters as libpq keywords (docs/backends/sql.md, "TLS").
// tls=true means what it means on every backend, sslmode=verify-full: libpq
// then sends nothing of the session (no startup packet, no password) before
// the server's certificate and name have been verified, and it never falls
// back to a connection in clear. Without any, libpq's default (prefer) stays.
void tls_options(spi::url& u, endpoint& ep) {
    const auto t = spi::take_tls(u, kBackend, {"sslrootcert", "sslcert", "sslkey", ""});
    auto mode = u.take("sslmode");
    static constexpr std::string_view modes[] = {"disable", "allow", "prefer", "require", "verify-ca", "verify-full"};
    if (mode && std::find(std::begin(modes), std::end(modes), *mode) == std::end(modes))
        throw_error(errc::invalid_argument, kBackend,
                    "unknown sslmode '" + *mode + "' (known: disable, allow, prefer, require, verify-ca, verify-full)");
    if (t.enabled) {
        const std::string implied = t.verify ? "verify-full" : "require";
        if (mode && *mode != implied)
            spi::tls_conflict(kBackend, t.verify ? "tls=true" : "tls_insecure=true", "sslmode=" + *mode);
        mode = implied;
    }
    spi::tls_file crl;
    if (auto v = u.take("sslcrl")) crl = {*v, "sslcrl"};
    spi::check_tls_files(t, kBackend);
    spi::check_tls_file(crl, kBackend);
    if (mode) ep.tls.emplace_back("sslmode", *mode);
    // tls=true without a CA: the system's bundle, as the HTTP layer's (libpq's
    // own default is ~/.postgresql/root.crt). None with tls_insecure: libpq
    // verifies the chain (verify-ca) at sslmode=require when it has a CA.
    const bool insecure = t.enabled && !t.verify;
    const std::string ca = insecure ? "" : t.ca.given() ? t.ca.path : t.enabled ? X509_get_default_cert_file() : "";
    if (!ca.empty()) ep.tls.emplace_back("sslrootcert", ca);
    if (t.cert.given()) ep.tls.emplace_back("sslcert", t.cert.path);
    if (t.key.given()) ep.tls.emplace_back("sslkey", t.key.path);
    if (crl.given()) ep.tls.emplace_back("sslcrl", crl.path);
    if (!t.server_name.empty()) {
        // libpq verifies (and sends in SNI) `host`, and connects to `hostaddr`
        // when given, which must be a numeric address.
        unsigned char buf[sizeof(in6_addr)];
        if (inet_pton(AF_INET, ep.host.c_str(), buf) != 1 && inet_pton(AF_INET6, ep.host.c_str(), buf) != 1)
            throw_error(errc::unsupported, kBackend,
                        "tls_server_name needs the URL's host as a numeric address (libpq connects to it as hostaddr)");
        ep.tls.emplace_back("hostaddr", ep.host);
        ep.host = t.server_name;
    }
}

}  // namespace

std::shared_ptr<s::dialect> make_dialect(spi::url& u, const s::conn_settings& cs) {
    endpoint ep;
    auto hosts = u.hosts_or_throw(5432);
    if (hosts.size() != 1) throw_error(errc::invalid_argument, kBackend, "postgres:// takes one host");
    ep.host = hosts[0].host;
    ep.port = std::to_string(hosts[0].port);
    ep.user = u.user();
    ep.password = u.password();
    ep.dbname = u.path().empty() ? std::string{} : u.path().substr(1);
    if (ep.dbname.empty() || ep.dbname.find('/') != std::string::npos)
        throw_error(errc::invalid_argument, kBackend, "postgres:// needs a database: postgres://user:pw@host:port/db");
    if (spi::has_dot_segment(ep.dbname))
        throw_error(errc::invalid_argument, kBackend, "the database cannot be '.' or '..'");
    if (ep.user.empty())
        throw_error(errc::invalid_argument, kBackend, "postgres:// needs a user: postgres://user:pw@host/db");
    if (auto schema = u.take("schema")) ep.schema = *schema;
    tls_options(u, ep);
    if (!s::is_identifier(ep.schema, 63))
        throw_error(
            errc::invalid_argument, kBackend,
            "schema '" + ep.schema + "' is not a plain identifier ([A-Za-z_][A-Za-z0-9_]*, at most 63 characters)");
    return std::make_shared<dialect>(std::move(ep), cs, cs.table);
}

void register_backend(spi::registry& r) {
    r.add("postgres", [](spi::url& u) -> std::shared_ptr<spi::backend> {
        auto settings = s::take_settings(u, kBackend, "advisory");
        return s::make_backend(make_dialect(u, settings.conn), settings);
    });
}

}  // namespace distlock::backends::postgres
