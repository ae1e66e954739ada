// The optimistic stock helper's own small database client (optimistic_stock.hpp):
// a connection interface and one implementation per client library,
// optimistic_stock_postgres.cpp (libpq) and optimistic_stock_mysql.cpp
// (mysql-connector-c++), each built when its library is found
// (tools/CMakeLists.txt). Nothing here is libdistlock's SQL layer: only its
// public URL parser, TLS parameters and errors are used.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "distlock/error.hpp"
#include "distlock/spi/url.hpp"
#include "distlock/version.hpp"

namespace distlock::tool::stock_client {

using param = std::variant<std::string, std::int64_t>;
using row = std::vector<std::optional<std::int64_t>>;  // every cell this helper reads is an integer (NULL = nullopt)

// A failure of the database or of its client library, as what to do next. The
// message is the library's or the server's (the caller adds what it was doing).
class db_error : public std::runtime_error {
public:
    db_error(errc code, const std::string& message, long long native = 0, bool lost = false)
        : std::runtime_error(message), code_(code), native_(native), lost_(lost) {}
    errc code() const noexcept { return code_; }
    long long native() const noexcept { return native_; }
    // The connection is gone (broken, or closed after a timeout): it is not reused.
    bool connection_lost() const noexcept { return lost_; }

private:
    errc code_;
    long long native_;
    bool lost_;
};

// One session; used by one thread at a time. A statement's parameters are
// written as the database's placeholder(1..n), in the order of `args`.
class connection {
public:
    virtual ~connection() = default;
    virtual std::vector<row> query(const std::string& text, const std::vector<param>& args) = 0;
    // The rows the statement changed.
    virtual std::uint64_t execute(const std::string& text, const std::vector<param>& args) = 0;
    virtual bool broken() const noexcept = 0;
};

struct timeouts {
    std::chrono::milliseconds connect{5000};  // the whole connection: TCP, TLS, login
    std::chrono::milliseconds call{30000};    // each statement
};

// No statement waits for a row lock longer than this (below the call timeout's default).
inline constexpr std::chrono::milliseconds lock_wait{15000};

class database {
public:
    virtual ~database() = default;
    virtual std::string_view name() const noexcept = 0;  // "postgres", "mysql": the errors' backend
    virtual std::string quote(std::string_view identifier) const = 0;
    // The table's name as statements write it (quoted, and qualified where the URL says where).
    virtual std::string table(std::string_view identifier) const { return quote(identifier); }
    virtual std::string placeholder(int n) const = 0;  // the n-th parameter, from 1
    // Throws db_error.
    virtual std::unique_ptr<connection> connect() = 0;
};

// Where a URL points: its one host, user, password and database (the path).
struct endpoint {
    std::string host;
    std::uint16_t port = 0;
    std::string user, password, database;
};
// Throws invalid_argument_error (for `backend`) when the URL has no host or
// several, no user, or no database (or "." or "..").
endpoint take_endpoint(const spi::url& u, std::string_view backend, std::uint16_t default_port);

// [A-Za-z_][A-Za-z0-9_]*, at most `max` characters.
bool is_identifier(std::string_view id, std::size_t max);

// What each database's client is given: everything it needs from the URL,
// read by the tool (optimistic_stock.cpp) with libdistlock's parser.
struct postgres_settings {
    endpoint ep;
    std::string schema = "public";                         // where the stock table lives (schema=, as the lock tables)
    std::vector<std::pair<std::string, std::string>> tls;  // libpq's keywords, from the URL's TLS parameters
    timeouts t;
};
struct mysql_settings {
    endpoint ep;
    bool tls = false;                       // TLS with the chain and the host name verified (verify_identity)
    std::string tls_ca, tls_cert, tls_key;  // "" = none
    timeouts t;
};

// The databases over their client libraries (optimistic_stock_postgres.cpp,
// optimistic_stock_mysql.cpp). They are linked into the tool, or, in a
// modules build, each is a plugin of the tool of its own
// (distlock-tool-<name>.so, in the package distlock-tools-<name>), so that
// the tool itself links no database client library: its entry point is
// plugin_entry_symbol, a plugin_entry.
std::unique_ptr<database> postgres_database(const postgres_settings& s);
std::unique_ptr<database> mysql_database(const mysql_settings& s);

// A plugin's entry: the database for `settings` (a postgres_settings for
// the plugin named "postgres", a mysql_settings for "mysql"), or nullptr when
// `name` is not the plugin's own or `version` not the DISTLOCK_VERSION_STRING
// it was built with (the layouts shared here are those of one build). It
// never throws.
using plugin_entry = database* (*)(const char* version, const char* name, const void* settings) noexcept;
inline constexpr const char* plugin_entry_symbol = "distlock_tool_stock_database";

// The body of a plugin's entry, over its database's maker.
template <class Settings, std::unique_ptr<database> (*make)(const Settings&)>
database* plugin_database(std::string_view own, const char* version, const char* name, const void* settings) noexcept {
    if (version == nullptr || std::string_view(version) != DISTLOCK_VERSION_STRING || name == nullptr ||
        std::string_view(name) != own || settings == nullptr)
        return nullptr;
    try {
        return make(*static_cast<const Settings*>(settings)).release();
    } catch (...) {
        return nullptr;
    }
}

}  // namespace distlock::tool::stock_client

// Defines a plugin's entry (plugin_entry_symbol): `make` a function of the
// stock_client namespace taking a `settings` of it, `own` the plugin's name.
#define DISTLOCK_TOOL_STOCK_PLUGIN_ENTRY(settings_type, make, own)                                                    \
    extern "C" __attribute__((visibility("default"))) ::distlock::tool::stock_client::database*                       \
    distlock_tool_stock_database(const char* version, const char* name, const void* settings) noexcept {              \
        return ::distlock::tool::stock_client::plugin_database<::distlock::tool::stock_client::settings_type,         \
                                                               ::distlock::tool::stock_client::make>(own, version,    \
                                                                                                     name, settings); \
    }
