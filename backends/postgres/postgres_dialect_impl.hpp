// The PostgreSQL dialect of the SQL layer (sql::dialect), made by make_dialect
// (postgres_dialect.hpp): its connections (postgres_connection.hpp), its SQL
// texts (postgres_texts.cpp), the check and migration of the lock tables
// (postgres_migrate.cpp) and the advisory-lock key of a name
// (postgres_backend.cpp).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "postgres_connection.hpp"
#include "sql/sql.hpp"

namespace distlock::backends::postgres {

namespace s = distlock::backends::sql;
using namespace std::chrono_literals;

constexpr const char* kBackend = "postgres";

// The advisory-lock key of a name in its namespace (dialect::key_namespace():
// empty for the default lock table): the first 8 bytes of SHA-256(namespace +
// name), read as a big-endian two's-complement signed 64-bit integer.
std::int64_t advisory_key(std::string_view name);

class dialect final : public s::dialect {
public:
    dialect(endpoint ep, s::conn_settings cs, std::string table)
        : ep_(std::move(ep)), cs_(cs), table_(std::move(table)) {}

    std::string_view name() const noexcept override { return kBackend; }
    std::string_view native_strategy() const noexcept override { return "advisory"; }
    std::unique_ptr<s::connection> connect() override { return open_connection(ep_, cs_); }

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

    // postgres_texts.cpp.
    s::sql_texts texts(const std::string& table) const override;
    renew_batch lease_renew_batch(const std::string& table, std::size_t n) const override;

    // postgres_migrate.cpp.
    void refuse_objects_of_others(s::connection& c, const std::string& table) const;
    void migrate(s::connection& c, const std::string& table) const override;

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

}  // namespace distlock::backends::postgres
