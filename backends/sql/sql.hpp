// The SQL strategy layer shared by mysql:// and postgres://.
//
// The four lock strategies (for-update, lease-table, optimistic, and the
// server's native named lock: get-lock / advisory) are written once
// (backend.hpp, handles.hpp: lease_lock.cpp, session_lock.cpp, permit_lock.cpp) over the small
// interface below. A dialect supplies only
//   - a connection: statements with bound parameters, the server-side session id,
//     errors classified into `failure` kinds;
//   - the SQL texts of each step (sql_texts), built for a validated table name;
//   - a few facts about its server (wait resolution, how native waits are bounded,
//     the native lock key of a name).
// Nothing in here includes a client library.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "distlock/spi/backend.hpp"

namespace distlock::backends::sql {

// ---- values, results, errors --------------------------------------------------

// Raw bytes (lock names: any byte, NUL included), bound as a binary parameter.
struct bytes {
    std::string data;
};
// A bound parameter: SQL NULL, an integer, text (valid UTF-8/ASCII) or bytes.
using value = std::variant<std::nullptr_t, std::int64_t, std::string, bytes>;
using row = std::vector<std::optional<std::string>>;  // nullopt = SQL NULL

struct result {
    std::vector<row> rows;
    std::uint64_t affected = 0;  // rows changed/matched by an INSERT/UPDATE/DELETE; rows returned by a query
    bool query = false;          // the statement returned a result set (maybe with no row)
};

// The first column of the first row of the last statement of `batch` that
// returned a result set: what a batch of steps "returns" (nullopt: no row, or NULL).
std::optional<std::string> batch_value(const std::vector<result>& results);

// An integer the server returned (a token, a session id, a count), read
// strictly and whatever the locale: an optional '-' and decimal digits that fit.
// Anything else is a reply this client cannot trust: sql_error (failure::other),
// never a standard-library exception.
std::int64_t to_int64(std::string_view text);
std::uint64_t to_uint64(std::string_view text);

// The most a reply may be, in both dialects, far above any this client asks for
// (the largest is a renewal's 1024 owner tokens): rows, and bytes, counted as
// the dialect can (MySQL: the cells as this client keeps them, each with its
// slot, row by row as they arrive; PostgreSQL: what the server sends during a
// call, as libpq reads it). Past either, the connection is dropped:
// reply_too_large(). Memory then stays bounded whatever a server sends.
constexpr std::size_t max_reply_rows = 100000, max_reply_bytes = std::size_t{16} << 20;
// What a cell costs as this client keeps it (a result's row).
inline std::size_t kept_bytes(const std::optional<std::string>& cell) {
    return sizeof cell + (cell ? cell->size() : 0);
}

// A message from the server or a client library, bounded (512 bytes): a hostile
// server can send one as large as a reply.
std::string bounded_message(std::string_view what);

// What went wrong, as far as the strategies care.
enum class failure {
    cannot_connect,   // no connection could be made (refused, unreachable, connect timeout)
    connection_lost,  // the connection broke (killed on the server, server gone, reset)
    timed_out,        // no reply within the query timeout: the connection was closed, outcome unknown
    lock_timeout,     // the server's lock wait bound passed (or NOWAIT found the lock taken)
    deadlock,         // the server chose this statement as a deadlock victim
    access_denied,    // bad credentials or missing privileges
    no_database,      // the database in the URL does not exist
    wrong_server,     // the address answers, but not as a server of this dialect (a wrong port)
    no_table,         // a lock table is missing: the database was re-created or restored without it
    other,            // anything else (the native code/message say what)
};

class sql_error : public std::runtime_error {
public:
    sql_error(failure kind, long long code, const std::string& message)
        : std::runtime_error(message), kind_(kind), code_(code) {}
    failure kind() const noexcept { return kind_; }
    long long code() const noexcept { return code_; }
    // The connection can no longer be used.
    bool fatal() const noexcept {
        return kind_ == failure::cannot_connect || kind_ == failure::connection_lost || kind_ == failure::timed_out ||
               kind_ == failure::wrong_server;
    }

private:
    failure kind_;
    long long code_;
};

// A reply over max_reply_rows or max_reply_bytes, of `kind` (connection_lost;
// cannot_connect during a connect): the connection is dropped.
sql_error reply_too_large(failure kind = failure::connection_lost);

// One SQL statement of a dialect. `args[i]` is the index of the logical argument
// bound to the i-th placeholder (so a dialect may use an argument twice or not at
// all); statements without placeholders run as plain text.
struct statement {
    std::string text;
    std::vector<int> args;
};

// One database session. Used by one thread at a time (the pool and the lock
// handles guarantee it).
class connection {
public:
    virtual ~connection() = default;
    // Runs `steps` in order in one round trip (MySQL: one multi-statement query;
    // PostgreSQL: one pipeline), their placeholders bound from `args`, and returns
    // each one's result. The first statement that fails throws sql_error and the
    // ones after it do not run; after a fatal() one the connection is broken()
    // and must be dropped. `affected` is known for the first statement and for
    // queries only (MySQL's client tells no more): what later statements did is
    // read with a query.
    std::vector<result> exec_batch(std::span<const statement> steps, std::span<const value> args) {
        round_trip_counter().fetch_add(1, std::memory_order_relaxed);
        return send(steps, args);
    }
    std::vector<result> exec_batch(const std::vector<statement>& steps, std::initializer_list<value> args) {
        return exec_batch(steps, std::span<const value>(args.begin(), args.size()));
    }
    result exec(const statement& s, std::span<const value> args) {
        return std::move(exec_batch(std::span<const statement>(&s, 1), args).back());
    }
    result exec(const statement& s) { return exec(s, {}); }
    result exec(const statement& s, std::initializer_list<value> args) {
        return exec(s, std::span<const value>(args.begin(), args.size()));
    }
    // Round trips made by every connection of the process so far (what the
    // statement-count tests compare with the server's own counters).
    static std::atomic<std::uint64_t>& round_trip_counter() noexcept;
    // The server's id of this session (MySQL CONNECTION_ID(), PostgreSQL backend
    // pid): what KILL / pg_terminate_backend take.
    virtual std::int64_t session_id() const noexcept = 0;
    virtual bool broken() const noexcept = 0;
    // Payloads of the notifications this session received (see sql_texts::listen),
    // waiting until `until` at most for the first. Only called when the dialect
    // has notifications; the default has none.
    virtual std::vector<std::string> wait_notifications(spi::deadline until) {
        (void)until;
        return {};
    }

    // The session's lock wait bound last set through sql_texts::set_wait (ms), so
    // that an unchanged bound is not sent again. -1 = unknown.
    std::int64_t wait_bound_ms = -1;
    // The pool has run the dialect's fence guard (sql_texts::fence_guard) on this session.
    bool fence_guarded = false;

protected:
    // One round trip with `steps` (at least one), as exec_batch() says.
    virtual std::vector<result> send(std::span<const statement> steps, std::span<const value> args) = 0;
};

// How far the fence guard moves a sequence past a value it drew: more than the
// tokens a server can hand out between two flushes of its log (a second by
// default, at most innodb_flush_log_at_timeout), so more than any it can lose.
inline constexpr std::int64_t fence_guard_gap = std::int64_t{1} << 32;

// A list of statements sent in one round trip (connection::exec_batch).
using batch = std::vector<statement>;

// The SQL of every step, for one table. Logical arguments per statement are
// listed in brackets; "-> x" is what the strategies read from the result (of a
// batch: batch_value(), the first cell of its last result set).
//
// Fencing tokens come from a counter that never goes back and whose values
// outlive every row (the SEQUENCE <table>_fence on PostgreSQL and MariaDB; on
// MySQL 8, or with fence=table, 1024 counter rows in <table>_fence, a name's
// row chosen by `slot`), so that the row of a released lock is deleted: the
// lease table holds only the leases held now.
struct sql_texts {
    std::vector<statement> create;  // idempotent DDL of the tables and the fence counter
    statement ping;                 // SELECT 1
    statement rollback;

    // Lease rows (lease-table, optimistic), judged by the server's clock.
    // lease_acquire [name, owner, lease_ms, slot, label (bytes: holder_label_value)]
    // -> the token when granted, no
    // value when the lease is held by another owner. Re-running with the same
    // owner is harmless (idempotent per owner token).
    batch lease_acquire;
    statement lease_renew;    // [name, owner, lease_ms] -> affected 1 = still ours
    statement lease_release;  // [name, owner] -> affected 1 = was ours; deletes the row
    statement lease_clear;    // [name]: break_lock, deletes the row whoever owns it
    // Release notifications, where the server has them (PostgreSQL LISTEN/NOTIFY;
    // empty texts elsewhere): lease_release and lease_clear notify `listen`'s
    // channel with the lowercase hex SHA-256 of the name as payload.
    statement listen;
    batch
        opt_insert;  // [name, owner, lease_ms, slot, label] -> the token when it made the row, no value when one exists
    statement opt_read;  // [name] -> row (version, free 1/0) or none
    batch opt_update;    // [name, owner, lease_ms, slot, version, label] -> the token when it won the compare-and-set

    // Row locks (for-update) on the second table.
    statement row_ensure;  // [name]: create the lockable row if missing
    // [name, session name (handles.hpp: session_name; PostgreSQL sets it as
    // application_name inside the transaction)]: opens a transaction and locks the row (waiting within the session's
    // bound, or not at all) -> "1" when locked (and marked, where row_break needs
    // a mark), another value when the mark could not be taken, none when there is
    // no row.
    batch row_lock, row_lock_nowait;
    batch row_unlock;    // [name]: releases a row lock (and its mark): ROLLBACK
    statement set_wait;  // [wait_ms]: the session's lock wait bound
    batch fence;         // [slot] -> a new token, committed on its own
    // The fence guard, where drawing a token can commit nothing durable (a
    // MariaDB SEQUENCE drawn by get-lock, for-update or a MEMORY lock table: its
    // reservation of the next cached block is written, but not flushed, unless
    // an InnoDB commit follows; a server crash can then hand the same tokens out
    // again). Run by the pool on every session before its first use; empty
    // texts where every draw is durable (PostgreSQL's nextval() makes its
    // transaction's commit flush the WAL; counter rows are InnoDB commits).
    // fence_guard_probe -> NULL when a guard has already run since the server
    // started, else a value v drawn from the sequence; fence_guard [v + fence_guard_gap]
    // moves the sequence there and commits that durably, then records that the
    // server has been guarded since it started.
    statement fence_guard_probe;
    batch fence_guard;

    // Native named locks (get-lock, advisory) with the token drawn under the lock
    // in the same round trip: [key, wait_ms, slot, label suffix (session_label_suffix:
    // PostgreSQL names the holding session after the grant)] -> the token when
    // granted, no value when not.
    batch native_lock, native_try;
    statement native_release;  // [key] -> "1" released, "0"/NULL not ours
    statement native_plain;    // [key]: the lock alone, as a client without distlock takes it (bench's floor)
    // The doorbell of a lease-table lock (MySQL's wake=bell; empty elsewhere): a
    // named session lock of its own key per name, that a holder keeps on a
    // connection of its own for its grant's life and gives back in the batch
    // that deletes its row, so that a waiter blocked taking it wakes at the
    // release, or when the holder's session ends.
    statement bell_take;       // [name, wait_ms (logical argument 5)] -> "1" taken, "0" not within the wait
    statement bell_release;    // [name]
    batch lease_acquire_rung;  // bell_take, then lease_acquire (their arguments) -> as lease_acquire
    batch lease_release_rung;  // lease_release, then bell_release -> the first result's affected, as lease_release
    // break_lock: the session holding the lock is found and ended by one
    // statement (KILL IS_USED_LOCK(..), pg_terminate_backend(pid) FROM pg_locks
    // ...), never by an id read first and ended later: by then that session may
    // have released the name and hold another lock. A failure that names no
    // session (MySQL 1094, unknown thread) means nobody held it.
    statement native_break;  // [key]: the native lock's holder
    statement row_break;     // [name]: the session whose transaction holds the for-update row

    // ---- read-write locks and semaphores (docs/backends/sql.md, "Read-write lock and semaphore")
    // A lease table other than the lock table, whose rows (name, owner, expires_at)
    // are renewed, released and broken as the lease rows of the lock table are.
    struct lease_rows {
        std::string table;  // the table's name (unquoted); empty: this dialect has no such rows
        statement renew;    // [name, owner, lease_ms] -> affected 1 = still ours
        statement release;  // [name, owner] -> affected >= 1 = was ours; deletes the owner's rows of the name
        statement clear;    // [name]: break_lock, deletes every row of the name
    };
    // Semaphores: a row per permit held, in <table>_permits, its slot 0..permits-1
    // the primary key with the name. permit_acquire [name, owner, lease_ms, slot,
    // permits, serialization key] -> the last result's row: (the token when a
    // permit was taken; the size another holder of the name uses, when it is not
    // `permits` (refused; a taken permit is then given back); a slot that looked
    // free: set when nothing was taken because another client took it first).
    lease_rows permit_rows;
    batch permit_acquire;
    // Read-write locks on lease rows (MySQL: <table>_rw; empty elsewhere): a row
    // per reader, and one writer row per name that a waiting writer holds too,
    // which later readers respect. [name, owner, lease_ms, slot] -> the token
    // when granted.
    lease_rows rw_rows;
    batch rw_read_acquire, rw_write_acquire;
    // Read-write locks on the server's shared/exclusive session locks
    // (PostgreSQL advisory locks; empty elsewhere), as native_lock/native_try/
    // native_release, on the name's native key.
    batch rw_read_lock, rw_read_try, rw_write_lock, rw_write_try;
    statement rw_read_release, rw_write_release;  // [key] -> "1" released
    statement rw_break;                           // [key]: ends every session holding it (as native_break)

    // ---- inspect (docs/backends/sql.md, "Inspect"): one statement each, reading only.
    // The lock table's lease row [name] -> no row (free), or (1 when held now by
    // the server's clock else 0, the holder_label column in hex or NULL, version,
    // microseconds of lease left, owner).
    statement inspect_lease;
    // The session holding a native lock [key] / a for-update row [name] -> one
    // row: (the holding session or NULL, that session's label (PostgreSQL:
    // application_name) or NULL where the server keeps none, the sessions queued
    // for it or NULL where the server does not count them).
    statement inspect_native, inspect_row;
    // The live permits of a semaphore [name] -> rows (its size, version, µs of
    // lease left) by slot, at most 1001.
    statement inspect_permits;
    // The read-write lock on lease rows (MySQL) [name] -> rows (holder: 'w'
    // for the writer row else a reader's, version: 0 while its writer waits,
    // µs of lease left) of the live rows, at most 1002.
    statement inspect_rw_rows;
    // The read-write lock on session locks (PostgreSQL) [key] -> rows (mode:
    // ExclusiveLock the writer, ShareLock a reader; granted, 1 or 0; the
    // session's application_name), at most 1002.
    statement inspect_rw_locks;
    // Why a field is unknown where the statements above return NULL for it.
    std::string no_session_label;  // the holder's label of a session lock
    std::string no_native_waiters, no_row_waiters;
};

// The holder_label column of a lease row: the grant's owner token, then the
// holder's label (1..255 bytes), so that a label left by an earlier grant of
// the row is never shown as a later one's.
inline std::string holder_label_value(const std::string& owner, const std::string& label) { return owner + label; }

struct conn_settings {
    std::chrono::milliseconds connect_timeout{5000};  // the whole connection: TCP, handshake, login
    std::chrono::milliseconds timeout{30000};  // every call, whole (not per read); lock waits are chunked below it
    // The lock table (settings::table), whose namespace a name's server-wide
    // keys are put in (dialect::key_namespace).
    std::string table = "distlock_locks";
};

class dialect {
public:
    virtual ~dialect() = default;
    virtual std::string_view name() const noexcept = 0;             // "mysql", "postgres"
    virtual std::string_view native_strategy() const noexcept = 0;  // "get-lock", "advisory"
    // A new session: autocommit on, read committed, client-side timeouts set.
    // Throws sql_error (cannot_connect, access_denied, no_database, ...).
    virtual std::unique_ptr<connection> connect() = 0;
    virtual sql_texts texts(const std::string& table) const = 0;
    // Brings tables of an earlier layout up to date and the fence counter above
    // every token they handed out (their version column), then deletes their
    // rows of locks nobody holds. Idempotent; runs after `create` on every start.
    virtual void migrate(connection& c, const std::string& table) const = 0;
    // The native lock's key for a lock name (documented in docs/backends/sql.md),
    // derived from key_namespace() + name.
    virtual value native_key(std::string_view name) const = 0;
    // What a name's server-wide keys (GET_LOCK names and for-update marks,
    // advisory keys) are derived from besides the name, so that two lock
    // tables never share a lock: MySQL, the database and the table; PostgreSQL,
    // the schema and the table (nothing for the default "public"."distlock_locks",
    // whose keys are those of earlier versions). Fixed once connected.
    virtual std::string key_namespace() const = 0;
    // Smallest lock wait the server can bound for row locks / native locks; a
    // shorter remaining wait is done as NOWAIT attempts with backoff.
    virtual std::chrono::milliseconds row_wait_resolution() const noexcept = 0;
    virtual std::chrono::milliseconds native_wait_resolution() const noexcept = 0;
    // true: native_lock takes the wait in the call (GET_LOCK(name, s)); false: the
    // session's set_wait bound applies (lock_timeout).
    virtual bool native_wait_in_call() const noexcept = 0;
    // Renewal of n leases of one length in one statement: logical arguments
    // [lease_ms, name1, owner1, name2, owner2, ...]. `renew` -> affected = the
    // leases renewed, and where the server can return them its rows are their
    // owners; otherwise `which` (same arguments, empty text where `renew` returns
    // rows) lists them, needed only when fewer than n were renewed.
    struct renew_batch {
        statement renew, which;
    };
    virtual renew_batch lease_renew_batch(const std::string& table, std::size_t n) const = 0;
    // For SQL written once for both servers (the SQL layer's tests): an
    // identifier quoted for this server, and the text of the n-th placeholder (1-based).
    virtual std::string quote(std::string_view identifier) const = 0;
    virtual std::string placeholder(int n) const = 0;
    // A table in the URL's namespace, quoted: PostgreSQL qualifies it with the
    // schema (sessions resolve unqualified names in pg_catalog only).
    virtual std::string qualify(std::string_view table) const { return quote(table); }
};

// ---- connection pool ------------------------------------------------------------

class pool {
public:
    // Every new connection gets `set_wait` with `wait_ms` as its lock wait bound.
    pool(std::shared_ptr<dialect> d, std::size_t max_idle, statement set_wait, std::int64_t wait_ms)
        : dialect_(std::move(d)), max_idle_(max_idle), default_wait_(std::move(set_wait), wait_ms) {}

    // A connection taken from the pool; given back on destruction unless broken.
    class lease {
    public:
        lease(pool* p, std::unique_ptr<connection> c, bool reused) : pool_(p), conn_(std::move(c)), reused_(reused) {}
        lease(lease&&) noexcept = default;
        lease& operator=(lease&&) noexcept = default;
        ~lease() {
            if (pool_ && conn_) pool_->give_back(std::move(conn_));
        }
        connection& operator*() const noexcept { return *conn_; }
        connection* operator->() const noexcept { return conn_.get(); }
        bool reused() const noexcept { return reused_; }
        // Keeps the connection for good (a lock held by the session).
        std::unique_ptr<connection> detach() noexcept { return std::move(conn_); }

    private:
        pool* pool_;
        std::unique_ptr<connection> conn_;
        bool reused_;
    };

    lease take();
    void give_back(std::unique_ptr<connection> c) noexcept;
    // A connection made elsewhere joins the pool, its lock wait bound set as take() sets it.
    void adopt(std::unique_ptr<connection> c);
    // From now on, every session is fence-guarded before take() hands it out
    // (sql_texts::fence_guard; nothing when `guard` is empty). Called once the
    // lock tables exist, before the pool is shared between threads.
    void guard_fences(statement probe, batch guard);

    // Runs f(connection&) on a pooled connection; a reused idle connection that
    // turns out to be dead (closed by the server while idle) is replaced once.
    template <class F>
    auto run(F&& f) {
        for (int attempt = 0;; ++attempt) {
            auto c = take();
            try {
                return f(*c);
            } catch (const sql_error& e) {
                if (e.kind() != failure::connection_lost || !c.reused() || attempt > 0) throw;
            }
        }
    }

private:
    // A new session's lock wait bound and, once guard_fences() ran, any session's fence guard.
    void prepare(connection& c, bool fresh);

    std::shared_ptr<dialect> dialect_;
    std::size_t max_idle_;
    std::pair<statement, std::int64_t> default_wait_;
    std::atomic<bool> guarding_{false};
    statement guard_probe_;
    batch guard_;
    std::mutex mutex_;
    std::vector<std::unique_ptr<connection>> idle_;
};

// ---- the seed's optimistic update ------------------------------------------------

// Retries a compare-and-set as the seed does: `attempt` reads a row's version and
// sends an UPDATE that applies only while that version still matches, and
// returns nullopt when it lost that race. It is then called again at once: at
// most `tries` times in all, and again only while less than `window` has passed
// since `start` (the first attempt always runs). Returns the first value an
// attempt returned; nullopt when every attempt lost its race. The optimistic
// lock strategy (lease_lock.cpp) runs on it.
template <class F>
auto retry_compare_and_set(int tries, std::chrono::milliseconds window, std::chrono::steady_clock::time_point start,
                           F&& attempt) -> decltype(attempt()) {
    for (int i = 0; i < tries && (i == 0 || std::chrono::steady_clock::now() - start < window); ++i)
        if (auto done = attempt()) return done;
    return std::nullopt;
}

// ---- backend construction ----------------------------------------------------------

// The URL's strategy=: lease-table, optimistic, for-update, or the dialect's
// native lock (get-lock on MySQL, advisory on PostgreSQL).
enum class strategy { lease_table, optimistic, for_update, native };

// How a blocking waiter of a lease-table lock learns of a release: by the
// server's notifications where it has them (PostgreSQL), else by polling with
// backoff (`poll`), or (MySQL, wake=bell) by blocking on the holder's doorbell:
// a named session lock the holder keeps for its grant's life (sql_texts::bell_take).
enum class wake { poll, bell };

struct settings {
    sql::strategy strategy = strategy::lease_table;
    std::string table = "distlock_locks";  // a plain identifier; "<table>_rows" holds for-update's rows
    conn_settings conn;
    int tries = 3;                          // optimistic: compare-and-set attempts per try ...
    std::chrono::milliseconds window{100};  // ... within this window (the seed's defaults)
    std::size_t max_idle = 8;               // idle connections kept per provider
    sql::wake wake = wake::poll;            // lease-table's blocking waiters (wake=bell: MySQL)
};

// Takes the SQL layer's URL parameters (strategy, table, connect_timeout,
// timeout, tries, window, pool, wake). `native` is the dialect's native strategy name.
settings take_settings(spi::url& u, std::string_view backend, std::string_view native);

// Validates `s` (the table name as an identifier), makes the tables (idempotent
// DDL) over a first connection, and returns the backend. Throws distlock errors
// (unavailable, access_denied, invalid_argument).
std::shared_ptr<spi::backend> make_backend(std::shared_ptr<dialect> d, const settings& s);

// Maps an sql_error to the distlock error that says what to do next. While
// `releasing`, a connection that broke or timed out after the statement was
// sent leaves the outcome unknown: in_doubt_error; otherwise unavailable_error.
[[noreturn]] void throw_client_error(const sql_error& e, std::string_view backend, const std::string& context,
                                     bool releasing = false);

// True when `id` is a plain SQL identifier: [A-Za-z_][A-Za-z0-9_]*, at most `max` bytes.
bool is_identifier(std::string_view id, std::size_t max = 48);

}  // namespace distlock::backends::sql
