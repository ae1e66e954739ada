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
#include <variant>
#include <vector>

#include "distlock/error.hpp"
#include "distlock/spi/url.hpp"

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

// Each takes its own parameters (schema=, TLS) from `u` and leaves the rest;
// throws invalid_argument_error / unsupported_error for what it cannot honour.
std::unique_ptr<database> open_postgres(spi::url& u, const timeouts& t);
std::unique_ptr<database> open_mysql(spi::url& u, const timeouts& t);

}  // namespace distlock::tool::stock_client
