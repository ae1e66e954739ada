// distlock: the seed's optimistic stock update, for an application's own rows.
//
// No lock is taken: read the stock and its version, then
//   UPDATE <table> SET stock = stock - n, version = version + 1
//   WHERE item = ? AND version = <the version read> AND stock >= n
// and retry a lost race at once, at most `tries` times within `window` (the
// seed's defaults: 3 tries or 100 ms). It is the lock-free comparison point of
// `distlock flash-sale --strategy optimistic`. Works over mysql:// and
// postgres:// URLs (the same URLs as the lock backends); in a build without an
// SQL backend, open() throws unsupported_error.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace distlock::sql {

struct stock_options {
    // The application's table: (key VARCHAR(255) PRIMARY KEY, stock BIGINT,
    // version BIGINT). Plain identifiers only ([A-Za-z_][A-Za-z0-9_]*).
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
    // mysql://user:pw@host:port/db or postgres://...; the URL's tries= and window=
    // override the options, lock-only parameters (strategy=, lease=) are ignored.
    // Throws invalid_argument_error (bad or non-SQL URL, bad identifier),
    // unsupported_error (no SQL backend in this build), unavailable_error,
    // access_denied_error.
    [[nodiscard]] static optimistic_stock open(std::string_view url, stock_options options = {});

    optimistic_stock(optimistic_stock&&) noexcept;
    optimistic_stock& operator=(optimistic_stock&&) noexcept;
    ~optimistic_stock();

    // Creates the table if missing (for demos and tests).
    void create_table();
    // Sets the stock of `item` (creating its row), bumping its version.
    void put(std::string_view item, std::int64_t stock);
    // The stock of `item`; nullopt when it has no row.
    [[nodiscard]] std::optional<std::int64_t> stock(std::string_view item);
    // Takes `quantity` of `item`. Throws invalid_argument_error when the item has
    // no row; database failures as unavailable_error etc.
    [[nodiscard]] stock_result take(std::string_view item, std::int64_t quantity = 1);

    struct impl;

private:
    explicit optimistic_stock(std::unique_ptr<impl> p) noexcept;
    std::unique_ptr<impl> impl_;
};

}  // namespace distlock::sql
