// The seed's optimistic stock update, for an application's own rows: the
// lock-free comparison point of `distlock flash-sale --strategy optimistic`.
// Application code, not part of the library: it runs on the library's SQL layer
// (backends/sql: the dialects of the mysql:// and postgres:// backends, their
// connection pool, and the compare-and-set retry of the optimistic lock strategy).
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

#include "sql.hpp"

namespace distlock::tool {

struct stock_options {
    // The application's table. Plain identifiers only ([A-Za-z_][A-Za-z0-9_]*).
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

class optimistic_stock {
public:
    // Throws invalid_argument_error for a bad identifier or tries < 1.
    optimistic_stock(std::shared_ptr<backends::sql::dialect> d, stock_options options);

    // Creates the table if missing (for demos and tests).
    void create_table();
    // Sets the stock of `item` (creating its row), bumping its version.
    void put(std::string_view item, std::int64_t stock);
    // The stock of `item`, nullopt when it has no row.
    std::optional<std::int64_t> stock(std::string_view item);
    // Takes `quantity` of `item`. Throws invalid_argument_error when the item has
    // no row, unavailable_error (etc.) when the database fails.
    stock_result take(std::string_view item, std::int64_t quantity = 1);

private:
    std::shared_ptr<backends::sql::dialect> dialect_;
    stock_options options_;
    backends::sql::pool pool_;
    backends::sql::statement create_, read_, update_, set_, insert_;
};

// Opens the helper for a mysql:// or postgres:// URL (the same URL as the lock
// backend's; lock-only parameters are ignored, tries= and window= apply).
// Throws invalid_argument_error (bad or non-SQL URL, bad identifier),
// unsupported_error (that SQL backend is not in this build), unavailable_error,
// access_denied_error.
std::unique_ptr<optimistic_stock> open_optimistic_stock(std::string_view url, stock_options options = {});

}  // namespace distlock::tool
