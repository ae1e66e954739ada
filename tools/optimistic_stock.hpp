// The seed's optimistic stock update, for an application's own rows: the
// lock-free comparison point of `distlock flash-sale --strategy optimistic`.
// Application code, not part of the library: a small client of its own over
// the database client libraries themselves (libpq for postgres://,
// mysql-connector-c++ for mysql://; optimistic_stock_client.hpp), using only
// libdistlock's public API (its URL parser and its errors).
//
// No lock is taken: read the stock and its version, then
//   UPDATE <table> SET stock = stock - n, version = version + 1
//   WHERE item = ? AND version = <the version read>
// and retry a lost race at once, at most `tries` times within `window` (the
// seed's defaults: 3 tries or 100 ms). The table is the application's: (key
// column VARCHAR(255) PRIMARY KEY, stock BIGINT, version BIGINT);
// create_table() makes it for demos and tests. The same SQL runs on
// MySQL/MariaDB and PostgreSQL (only quoting and placeholders differ).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace distlock::tool {

struct stock_options {
    // The application's table. Plain identifiers only ([A-Za-z_][A-Za-z0-9_]*, at most 60).
    std::string table = "distlock_stock";
    std::string key_column = "item";
    std::string stock_column = "stock";
    std::string version_column = "version";
    int tries = 3;                          // compare-and-set attempts per take() ...
    std::chrono::milliseconds window{100};  // ... within this window (the first one always runs)
};

enum class stock_outcome {
    taken,     // the stock was decremented
    sold_out,  // fewer than `quantity` left: nothing changed
    conflict,  // every try lost its race to a concurrent update: nothing changed
};

struct stock_result {
    stock_outcome outcome = stock_outcome::conflict;
    std::int64_t remaining = 0;  // stock after the update (taken) or as last read
    int attempts = 0;            // compare-and-set statements sent
};

// One table of stock rows in one database; safe to use from several threads
// at once (it keeps a small pool of connections).
class optimistic_stock {
public:
    virtual ~optimistic_stock() = default;

    // Creates the table if missing (for demos and tests).
    virtual void create_table() = 0;
    // Sets the stock of `item` (creating its row), bumping its version.
    virtual void put(std::string_view item, std::int64_t stock) = 0;
    // The stock of `item`, nullopt when it has no row.
    virtual std::optional<std::int64_t> stock(std::string_view item) = 0;
    // Takes `quantity` of `item`. Throws invalid_argument_error when the item has
    // no row, unavailable_error (etc.) when the database fails.
    virtual stock_result take(std::string_view item, std::int64_t quantity = 1) = 0;
};

// Opens the helper for a mysql:// or postgres:// URL (the same URL as the lock
// backend's: tries=, window=, connect_timeout=, timeout=, schema= (postgres) and
// the TLS parameters apply; the lock-only ones (strategy, lease, holder, table,
// pool, fence) are ignored). Connects on first use.
// Throws invalid_argument_error (bad or non-SQL URL, bad identifier, tries < 1),
// unsupported_error (that database's client library is not in this build, or a
// TLS setting its client library cannot honour), and, from the calls,
// unavailable_error and access_denied_error.
std::unique_ptr<optimistic_stock> open_optimistic_stock(std::string_view url, stock_options options = {});

}  // namespace distlock::tool
