// The lock handles of the SQL backend's four strategies, written once over
// sql::dialect (see sql.hpp), each given the backend's context (context.hpp)
// and nothing else of it. Internal to the SQL layer:
//   lease_lock.cpp    lease-table and optimistic (lease_handle);
//   session_lock.cpp  for-update and get-lock / advisory (session_handle), and
//                     the PostgreSQL read-write lock on advisory locks;
//   permit_lock.cpp   semaphores (a lease row per permit, permit_handle) and the
//                     MySQL read-write lock on lease rows (rw_lease_handle).
//
//  lease-table  one atomic upsert takes the lease row when it is absent or
//               expired by the server's clock (one round trip, the token drawn
//               from the fence counter in it); renew by the owner token; release
//               deletes the row (one round trip).
//  optimistic   make the row if there is none; else read it and take it by a
//               version-checked UPDATE (compare-and-set), a few tries within a
//               short window; same row, renewal, release and token.
//  for-update   a row of <table>_rows locked by a transaction kept open on a
//               dedicated connection (opened and locked in one round trip);
//               the token is drawn on another connection, since it must be
//               committed on its own while the locking transaction stays open;
//               released by ROLLBACK or by the connection ending.
//  get-lock /   the server's named session lock on a dedicated connection, the
//  advisory     token drawn under it in the same round trip.
// Tokens come from the fence counter (sql_texts): strictly increasing per name
// (a sequence, or the counter row of the name's slot), never stored per name.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "context.hpp"
#include "sql.hpp"

namespace distlock::backends::sql {

// A batch's value (batch_value) as a token: nullopt = no row or NULL.
std::optional<std::uint64_t> run_for_token(connection& c, const batch& steps, std::initializer_list<value> args);

// One try of a lease-row strategy (`run`: its statements; a value = granted,
// nullopt = held by another). A try that the server ended in a deadlock is made
// again at once: InnoDB ends a statement that deadlocks whoever holds the row
// (an upsert beside other sessions' inserts and deletes of neighbouring names),
// so the name may well be free, and try_lock of a free name must be granted.
// Still a deadlock after `deadlock_tries`, or a lock wait timeout (a row held
// by a transaction), is busy: nullopt.
constexpr int deadlock_tries = 3;
template <class F>
auto unless_busy(F&& run) -> decltype(run()) {
    for (int tries = 1;; ++tries) {
        try {
            return run();
        } catch (const sql_error& e) {
            if (e.kind() == failure::deadlock && tries < deadlock_tries) continue;
            if (e.kind() == failure::deadlock || e.kind() == failure::lock_timeout) return std::nullopt;
            throw;
        }
    }
}

// The fence counter row of a name (MySQL's counter rows; PostgreSQL's sequence
// ignores it): the first two bytes of SHA-256(name), big-endian, modulo 1024.
std::int64_t fence_slot(std::string_view name);

// ---- the name of a session holding a lock (PostgreSQL's application_name) ----------
//
// "distlock #<token> <label>" (advisory: the token drawn in the statement that
// takes the lock) or "distlock #- <label>" (for-update: the token is drawn
// later, on another session); the label only when it is printable ASCII and the
// whole fits the 63 bytes the server keeps, else "distlock #<token>" /
// "distlock #-". An idle session, or one of a distlock from before holder
// labels, is "distlock".
constexpr std::size_t session_name_max = 63;
// " <label>" when the label can be part of a session name, else "".
std::string session_label_suffix(const std::string& label);
// The whole name for a token (nullopt: "#-"), the label left out when it does not fit.
std::string session_name(std::optional<std::uint64_t> token, const std::string& label);
struct session_name_parts {
    bool distlock = false;               // a name of this form ("distlock" alone included)
    bool labelled = false;               // "distlock #...": a distlock with holder labels
    std::optional<std::uint64_t> token;  // "#<token>"
    std::optional<std::string> label;    // the label, when it was in the name
};
session_name_parts parse_session_name(std::string_view name);

// How backend::keepalive_batch groups the due handles: lease rows by table and
// lease length (one batched UPDATE each), sessions on their own (one ping
// each). Each handle puts itself in its group (backend_handle::join), so the batch
// needs no cast to find out what a handle is.
struct renewal_groups {
    std::map<std::pair<const sql_texts::lease_rows*, std::chrono::milliseconds>, std::vector<std::size_t>> lease_rows;
    std::vector<std::size_t> sessions;
};

// Every handle of this backend.
class backend_handle : public spi::lock_handle {
public:
    // Adds this handle, at `slot` of the batch, to its group.
    virtual void join(renewal_groups& groups, std::size_t slot) const = 0;
};

// ---- grants that are lease rows ------------------------------------------------

// A grant that is a row of a lease table: the lock table's (a mutex by
// lease-table or optimistic), a permit's (<table>_permits) or a read-write
// lock's (<table>_rw, MySQL). Renewed by its owner token (batched by the
// backend), deleted at release. On a URL of a session strategy (no
// feature::lease_expiry) it is still a lease: checked (renewed) every
// renew_interval and valid for its lease from each confirmation.
class lease_row_handle : public backend_handle {
public:
    lease_row_handle(context& c, const spi::lock_request& r, const sql_texts::lease_rows& rows);
    void join(renewal_groups& groups, std::size_t slot) const override {
        groups.lease_rows[{&rows_, req_.lease}].push_back(slot);
    }
    void release() override;
    std::chrono::milliseconds check_interval() const override;
    std::chrono::milliseconds validity() const override { return req_.lease; }
    // One renewal of the row (backend::keepalive_batch batches several).
    spi::keepalive_result renew();
    // Where the server notifies releases (PostgreSQL): a waiter of the
    // provider's shared LISTEN session (context::releases), woken by each
    // release of the name (of any kind: the payload names only the name).
    // Elsewhere nullptr: the core polls with backoff.
    std::unique_ptr<spi::wake_subscription> watch_releases(spi::wake_sink wake) override;

    const bytes& name() const noexcept { return name_; }
    const std::string& owner() const noexcept { return owner_; }
    std::chrono::milliseconds lease() const noexcept { return req_.lease; }
    const sql_texts::lease_rows& rows() const noexcept { return rows_; }

protected:
    // Calls `attempt` (one try: a grant, or nullopt when the lock is taken) with a
    // new owner token until it grants or `until` passes. Between tries a waiter
    // waits for the release notification of the name where the server has them
    // (PostgreSQL: the provider's one LISTEN session, release_listener), and a
    // jittered backoff of at most `max_pause` in any case.
    // When it does not grant, or throws, nothing of this acquisition is left:
    // its rows are deleted (`give_back`: always; else only after an error).
    std::optional<spi::grant> acquire_loop(spi::deadline until,
                                           const std::function<std::optional<spi::grant>()>& attempt, bool give_back,
                                           std::chrono::milliseconds max_pause);

    context& ctx_;
    spi::lock_request req_;
    const sql_texts::lease_rows& rows_;
    bytes name_;
    std::int64_t slot_;
    std::string owner_;  // this grant's token in the owner column; empty = not held
    // wake=bell (lease_handle): the connection whose session holds the name's
    // doorbell for this grant (none: the grant has no doorbell). release()
    // deletes the row and gives the doorbell back on it in one round trip;
    // closing it frees the doorbell.
    std::unique_ptr<connection> bell_conn_;

    // Deletes the rows this acquisition may hold (its owner token), best effort:
    // after an error, where a statement may have taken a row before its reply
    // was lost (a lease expires anyway).
    void give_rows_back() noexcept;
};

// lease-table and optimistic: the lease row of the lock table.
class lease_handle final : public lease_row_handle {
public:
    lease_handle(context& c, const spi::lock_request& r, bool optimistic);
    std::optional<spi::grant> acquire(spi::deadline until, const spi::loss_sink&) override;

private:
    std::optional<spi::grant> try_upsert();
    std::optional<spi::grant> try_compare_and_set();
    // wake=bell: the upsert on a connection of this acquisition's own, the
    // name's doorbell taken in the same round trip (waiting for it once the
    // name was found held), kept with the grant (lease_lock.cpp).
    std::optional<spi::grant> acquire_rung(spi::deadline until);

    bool optimistic_;
};

// A permit of a semaphore: a row of <table>_permits in one of the slots
// 0..permits-1 of the name (permit_lock.cpp).
class permit_handle final : public lease_row_handle {
public:
    permit_handle(context& c, const spi::lock_request& r);
    std::optional<spi::grant> acquire(spi::deadline until, const spi::loss_sink&) override;

private:
    std::optional<spi::grant> try_take();
};

// A side of a read-write lock on lease rows (MySQL, <table>_rw; permit_lock.cpp).
class rw_lease_handle final : public lease_row_handle {
public:
    rw_lease_handle(context& c, const spi::lock_request& r);
    std::optional<spi::grant> acquire(spi::deadline until, const spi::loss_sink&) override;

private:
    bool writer_;
};

// ---- for-update, get-lock, advisory: a lock held by a session ------------------------

// What a session holds: a row lock (for-update), the server's named lock
// (get-lock / advisory), or a side of a read-write lock on the server's shared
// and exclusive session locks (PostgreSQL advisory locks, whatever the URL's strategy).
enum class session_kind { row, native, read, write };

class session_handle final : public backend_handle {
public:
    session_handle(context& c, const spi::lock_request& r, session_kind kind);
    void join(renewal_groups& groups, std::size_t slot) const override { groups.sessions.push_back(slot); }
    ~session_handle() override;
    std::optional<spi::grant> acquire(spi::deadline until, const spi::loss_sink&) override;
    void release() override;
    // The session is checked as often as a lease would be renewed.
    std::chrono::milliseconds check_interval() const override;
    // Whether the holding session is still there (one ping).
    spi::keepalive_result check();

private:
    std::optional<spi::grant> acquire_once(spi::deadline until);
    // One try on the holding session, waiting at most `wait` (0: not at all).
    enum class outcome { granted, busy, retry, new_session };
    struct attempt_result {
        outcome what;
        std::uint64_t token = 0;  // when granted
    };
    attempt_result attempt(connection& c, std::chrono::milliseconds wait);
    void drop_connection() noexcept { conn_.reset(); }  // closing the session frees whatever it held

    context& ctx_;
    spi::lock_request req_;
    bool row_lock_;      // for-update (else a session lock of the server)
    const batch* lock_;  // session locks: take, waiting (native_lock, rw_*_lock) ...
    const batch* try_;   // ... not waiting
    const statement* release_;
    bytes name_;
    value key_;
    std::int64_t slot_;
    std::string label_suffix_;          // native locks: " <label>" for the session's name, or "" (session_label_suffix)
    std::string row_session_name_;      // for-update: the session's name while it holds the row
    std::unique_ptr<connection> conn_;  // the holding session while held
};

}  // namespace distlock::backends::sql
