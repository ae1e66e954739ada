// What the lock handles of the SQL backend use of it: the dialect, the URL's
// settings, the SQL texts, the connection pool and the backend's name, and the
// lock tables (made again when they vanish). The backend owns one context
// (context.cpp) and hands it to every handle it makes; a handle reaches
// nothing else of the backend.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "release_listener.hpp"
#include "sql.hpp"

namespace distlock::backends::sql {

// A duration as the milliseconds a statement takes.
inline std::int64_t ms(std::chrono::milliseconds d) { return static_cast<std::int64_t>(d.count()); }

class context {
public:
    context(std::shared_ptr<sql::dialect> d, sql::settings s);
    context(const context&) = delete;
    context& operator=(const context&) = delete;

    const sql::dialect& dialect() const noexcept { return *dialect_; }
    const sql::settings& settings() const noexcept { return settings_; }
    const sql_texts& texts() const noexcept { return q_; }
    // The lock table's lease rows (from texts()).
    const sql_texts::lease_rows& lock_rows() const noexcept { return lock_rows_; }
    sql::pool& pool() noexcept { return pool_; }
    const std::string& name() const noexcept { return name_; }

    // Whether a mutex of the URL's strategy is held by a session (for-update,
    // get-lock / advisory) rather than by a lease row.
    bool session_held() const noexcept {
        return settings_.strategy == strategy::for_update || settings_.strategy == strategy::native;
    }

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

    // A semaphore's serialization key (PostgreSQL: its transaction-scoped
    // advisory lock): bytes 8..15 of SHA-256(key namespace + name), big-endian,
    // signed. A mutex's advisory key (bytes 0..7 of such a SHA-256) equals it
    // only by a 64-bit coincidence, whatever the names.
    std::int64_t permit_key(std::string_view name) const;

    // The provider's shared LISTEN session for asynchronous waiters (made on
    // first use); only where the server notifies releases (texts().listen).
    release_listener& releases();

private:
    std::shared_ptr<sql::dialect> dialect_;
    sql::settings settings_;
    sql_texts q_;
    sql_texts::lease_rows lock_rows_;
    sql::pool pool_;
    std::string name_;
    std::mutex releases_mutex_;
    std::unique_ptr<release_listener> releases_;  // after pool_: gone before it
};

}  // namespace distlock::backends::sql
