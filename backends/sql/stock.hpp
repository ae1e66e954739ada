// The seed's optimistic stock update, for an application's own rows: read the
// stock and its version, then UPDATE ... SET stock = stock - n, version =
// version + 1 WHERE the version still matches; a lost race is retried at once,
// at most `tries` times within `window` (the seed: 3 tries or 100 ms). No lock is
// taken: it is the lock-free comparison point of `distlock flash-sale`.
//
// The table is the application's: (key column VARCHAR(255) PRIMARY KEY, stock
// BIGINT, version BIGINT); create_table() makes it for demos and tests. The same
// SQL runs on MySQL/MariaDB and PostgreSQL (only quoting and placeholders differ).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "distlock/sql.hpp"
#include "sql.hpp"

namespace distlock::backends::sql {

// The option and result types are the public ones (include/distlock/sql.hpp).
using distlock::sql::stock_options;
using distlock::sql::stock_outcome;
using distlock::sql::stock_result;

class optimistic_stock {
public:
    // Throws invalid_argument_error for a bad identifier or tries < 1.
    optimistic_stock(std::shared_ptr<dialect> d, stock_options options);

    void create_table();
    // Sets the stock of `item` (creating its row), bumping its version.
    void put(std::string_view item, std::int64_t stock);
    // The stock of `item`, nullopt when it has no row.
    std::optional<std::int64_t> stock(std::string_view item);
    // Takes `quantity` of `item`. Throws invalid_argument_error when the item has
    // no row, unavailable_error (etc.) when the database fails.
    stock_result take(std::string_view item, std::int64_t quantity = 1);

private:
    std::shared_ptr<dialect> dialect_;
    stock_options options_;
    pool pool_;
    statement create_, read_, update_, set_, insert_;
};

// Opens the helper for a mysql:// or postgres:// URL (the same URL as the lock
// backend's; lock-only parameters are ignored, tries= and window= apply).
std::unique_ptr<optimistic_stock> open_optimistic_stock(std::string_view url, stock_options options = {});

}  // namespace distlock::backends::sql
