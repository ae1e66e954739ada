// The SQL lock backend and the lock handles of its four strategies, written
// once over sql::dialect (see sql.hpp). Internal to the SQL layer:
//   backend.cpp       the backend: URL settings, tables, strategy selection,
//                     batch renewal, break_lock;
//   lease_lock.cpp    lease-table and optimistic (lease_handle);
//   session_lock.cpp  for-update and get-lock / advisory (session_handle).
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
#include <initializer_list>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "sql.hpp"

namespace distlock::backends::sql {

// A batch's value (batch_value) as a token: nullopt = no row or NULL.
std::optional<std::uint64_t> run_for_token(connection& c, const batch& steps, std::initializer_list<value> args);

// The fence counter row of a name (MySQL's counter rows; PostgreSQL's sequence
// ignores it): the first two bytes of SHA-256(name), big-endian, modulo 1024.
std::int64_t fence_slot(std::string_view name);

inline std::int64_t ms(std::chrono::milliseconds d) { return static_cast<std::int64_t>(d.count()); }

class sql_backend;

// ---- lease-table and optimistic ------------------------------------------------

class lease_handle final : public spi::lock_handle {
public:
    lease_handle(sql_backend& b, const spi::lock_request& r, bool optimistic);
    std::optional<spi::grant> acquire(spi::deadline until, const spi::loss_sink&) override;
    void release() override;
    // One renewal of the lease row (sql_backend::keepalive_batch batches several).
    spi::keepalive_result renew();

    const bytes& name() const noexcept { return name_; }
    const std::string& owner() const noexcept { return owner_; }
    std::chrono::milliseconds lease() const noexcept { return req_.lease; }

private:
    std::optional<spi::grant> acquire_once(spi::deadline until);
    std::optional<spi::grant> try_upsert();
    std::optional<spi::grant> try_compare_and_set();

    sql_backend& b_;
    spi::lock_request req_;
    bool optimistic_;
    bytes name_;
    std::int64_t slot_;
    std::string owner_;  // this grant's token in the owner column; empty = not held
};

// ---- for-update, get-lock, advisory: a lock held by a session ------------------------

class session_handle final : public spi::lock_handle {
public:
    session_handle(sql_backend& b, const spi::lock_request& r, bool row_lock);
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

    sql_backend& b_;
    spi::lock_request req_;
    bool row_lock_;  // for-update (else native)
    bytes name_;
    value key_;
    std::int64_t slot_;
    std::unique_ptr<connection> conn_;  // the holding session while held
};

class sql_backend final : public spi::backend {
public:
    sql_backend(std::shared_ptr<dialect> d, settings s);

    // Makes the tables (idempotent DDL). Two first users racing on PostgreSQL can
    // collide in CREATE TABLE IF NOT EXISTS: the loser simply tries again.
    void create_tables();

    // Runs an acquisition `f`, which lets only a no_table failure escape as
    // sql_error. The lock tables can vanish under a running provider (a database
    // re-created, or restored from a dump without them): create them again and
    // try once more, instead of failing every acquisition until a restart.
    template <class F>
    auto with_tables(const std::string& context, F&& f) {
        try {
            return f();
        } catch (const sql_error& e) {
            if (e.kind() != failure::no_table) throw_client_error(e, name_, context);
            create_tables();
        }
        try {
            return f();
        } catch (const sql_error& e) {
            throw_client_error(e, name_, context);
        }
    }

    std::string_view name() const noexcept override { return name_; }
    const capabilities& caps() const noexcept override { return caps_; }
    std::unique_ptr<spi::lock_handle> make_lock(const spi::lock_request& r) override;
    void keepalive_batch(std::span<spi::lock_handle* const> handles, std::span<spi::keepalive_result> results) override;
    std::optional<std::chrono::nanoseconds> round_trip() override;
    std::optional<std::chrono::nanoseconds> native_cycle() override;
    void break_lock(std::string_view lock_name) override;

    // The session holding `n` right now, if any (session strategies).
    std::optional<std::int64_t> holder_session(connection& c, const bytes& n);

    bool session_held() const noexcept {
        return settings_.strategy == strategy::for_update || settings_.strategy == strategy::native;
    }

    std::shared_ptr<dialect> dialect_;
    settings settings_;
    sql_texts q_;
    pool pool_;
    std::string name_;
    capabilities caps_;
};

}  // namespace distlock::backends::sql
