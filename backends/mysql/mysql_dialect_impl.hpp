// The MySQL / MariaDB dialect of the SQL layer (sql::dialect), made by
// make_dialect (mysql_dialect.hpp): its connections (mysql_connection.hpp),
// its SQL texts (mysql_texts.cpp), the migration of earlier tables
// (mysql_migrate.cpp) and the GET_LOCK key of a name (mysql_backend.cpp).
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "mysql_connection.hpp"
#include "sql/sql.hpp"

namespace distlock::backends::mysql {

namespace s = distlock::backends::sql;
using namespace std::chrono_literals;

constexpr const char* kBackend = "mysql";

// GET_LOCK names are server-wide: a name's key is put in its lock table's
// namespace (dialect::key_namespace(): the database, as the server names it,
// NUL, the table, NUL), so that two databases, or two tables of one, never
// share a lock. Every name is hashed, whatever it is: "distlock:" + the first
// 55 hex digits of SHA-256(namespace + name), 64 characters (the longest
// GET_LOCK name MySQL takes). No name is used as it is, so no name can be
// chosen to meet another's key (finding one is a SHA-256 preimage). The
// for-update marks are "distlock#row:" + 51 hex digits of the same digest:
// '#' is in no key. The server can compute both (docs/backends/sql.md).
std::string get_lock_key(std::string_view name_space, std::string_view name);

enum class fence_kind { automatic, sequence, table };

// The storage engine of the lock table (engine=): InnoDB, or MEMORY, whose
// leases are never written to disk (they vanish with the server; the fence
// counter stays InnoDB, so tokens never repeat).
enum class lock_engine { innodb, memory };

class dialect final : public s::dialect {
public:
    dialect(endpoint ep, s::conn_settings cs, fence_kind f, lock_engine e)
        : ep_(std::move(ep)), cs_(cs), fence_(f), engine_(e) {}

    std::string_view name() const noexcept override { return kBackend; }
    std::string_view native_strategy() const noexcept override { return "get-lock"; }

    // A new session; the first one also fixes the namespace of the server's
    // names for this database (key_namespace()).
    std::unique_ptr<s::connection> connect() override;

    std::string key_namespace() const override { return namespace_; }

    // The fence counter: a SEQUENCE on MariaDB (NEXTVAL() writes only once per
    // cached block of 1000 values, and a crash skips the rest of the block), 1024
    // counter rows on MySQL 8, which has no sequences (each token is then a
    // committed row update), or where fence=table asks for them.
    bool sequence() const noexcept {
        return fence_ == fence_kind::sequence || (fence_ == fence_kind::automatic && mariadb_);
    }

    // mysql_migrate.cpp.
    void migrate(s::connection& c, const std::string& table) const override;

    // mysql_texts.cpp.
    s::sql_texts texts(const std::string& table) const override;
    renew_batch lease_renew_batch(const std::string& table, std::size_t n) const override;

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
    lock_engine engine_;
    std::atomic<bool> mariadb_{false};
    std::once_flag namespace_once_;
    std::string namespace_;  // set by the first connection, then fixed
};

}  // namespace distlock::backends::mysql
