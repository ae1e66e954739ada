// The seed's optimistic stock update (see optimistic_stock.hpp).
#include "optimistic_stock.hpp"

#include "distlock/error.hpp"
#include "distlock/spi/url.hpp"
#if DISTLOCK_TOOL_MYSQL
#include "mysql_dialect.hpp"
#endif
#if DISTLOCK_TOOL_POSTGRES
#include "postgres_dialect.hpp"
#endif

namespace distlock::tool {

using namespace backends::sql;

optimistic_stock::optimistic_stock(std::shared_ptr<dialect> d, stock_options o)
    : dialect_(d), options_(std::move(o)), pool_(d, 4, d->texts("unused").set_wait, 15000) {
    for (const auto* id : {&options_.table, &options_.key_column, &options_.stock_column, &options_.version_column})
        if (!is_identifier(*id, 60))
            throw_error(errc::invalid_argument, std::string(d->name()), "'" + *id + "' is not a plain identifier");
    if (options_.tries < 1) throw_error(errc::invalid_argument, std::string(d->name()), "tries must be at least 1");
    const auto& q = *dialect_;
    const std::string t = q.qualify(options_.table), k = q.quote(options_.key_column),
                      s = q.quote(options_.stock_column), v = q.quote(options_.version_column);
    auto p = [&](int n) { return q.placeholder(n); };
    create_ = {"CREATE TABLE IF NOT EXISTS " + t + " (" + k + " VARCHAR(255) NOT NULL PRIMARY KEY, " + s +
                   " BIGINT NOT NULL, " + v + " BIGINT NOT NULL DEFAULT 0)",
               {}};
    // Logical arguments: 0 item, 1 quantity/stock, 2 version.
    read_ = {"SELECT " + s + ", " + v + " FROM " + t + " WHERE " + k + " = " + p(1), {0}};
    update_ = {"UPDATE " + t + " SET " + s + " = " + s + " - " + p(1) + ", " + v + " = " + v + " + 1 WHERE " + k +
                   " = " + p(2) + " AND " + v + " = " + p(3),
               {1, 0, 2}};
    set_ = {"UPDATE " + t + " SET " + s + " = " + p(1) + ", " + v + " = " + v + " + 1 WHERE " + k + " = " + p(2), {1, 0}};
    insert_ = {"INSERT INTO " + t + " (" + k + ", " + s + ", " + v + ") VALUES (" + p(1) + ", " + p(2) + ", 0)", {0, 1}};
}

void optimistic_stock::create_table() {
    try {
        pool_.run([&](connection& c) { return c.exec(create_); });
    } catch (const sql_error& e) {
        throw_client_error(e, dialect_->name(), "cannot create table " + options_.table);
    }
}

void optimistic_stock::put(std::string_view item, std::int64_t stock) {
    const std::string key(item);
    try {
        pool_.run([&](connection& c) {
            if (c.exec(set_, {key, stock}).affected == 0) c.exec(insert_, {key, stock});
            return 0;
        });
    } catch (const sql_error& e) {
        throw_client_error(e, dialect_->name(), "cannot set the stock of '" + key + "'");
    }
}

std::optional<std::int64_t> optimistic_stock::stock(std::string_view item) {
    const std::string key(item);
    try {
        auto r = pool_.run([&](connection& c) { return c.exec(read_, {key}); });
        if (r.rows.empty() || !r.rows[0][0]) return std::nullopt;
        return to_int64(*r.rows[0][0]);
    } catch (const sql_error& e) {
        throw_client_error(e, dialect_->name(), "cannot read the stock of '" + key + "'");
    }
}

stock_result optimistic_stock::take(std::string_view item, std::int64_t quantity) {
    const std::string key(item);
    stock_result out;
    const auto start = std::chrono::steady_clock::now();
    try {
        auto c = pool_.take();
        // Per attempt: nullopt = lost the race; a value = done (taken, or sold out).
        auto done = retry_compare_and_set(options_.tries, options_.window, start, [&]() -> std::optional<stock_outcome> {
            auto r = c->exec(read_, {key});
            if (r.rows.empty() || !r.rows[0][0] || !r.rows[0][1])
                throw_error(errc::invalid_argument, std::string(dialect_->name()), "no stock row for '" + key + "'");
            const std::int64_t stock = to_int64(*r.rows[0][0]), version = to_int64(*r.rows[0][1]);
            out.remaining = stock;
            if (stock < quantity) return stock_outcome::sold_out;
            ++out.attempts;
            if (c->exec(update_, {key, quantity, version}).affected == 1) {
                out.remaining = stock - quantity;
                return stock_outcome::taken;
            }
            return std::nullopt;
        });
        out.outcome = done.value_or(stock_outcome::conflict);
    } catch (const sql_error& e) {
        throw_client_error(e, dialect_->name(), "stock update of '" + key + "' failed");
    }
    return out;
}

namespace {

// The dialect of a mysql:// or postgres:// URL, from the backends of this build.
std::shared_ptr<dialect> open_dialect(spi::url& u, const conn_settings& cs) {
    const auto& scheme = u.scheme();
#if DISTLOCK_TOOL_MYSQL
    if (scheme == "mysql") return backends::mysql::make_dialect(u, cs);
#endif
#if DISTLOCK_TOOL_POSTGRES
    if (scheme == "postgres") return backends::postgres::make_dialect(u, cs);
#endif
    (void)cs;
    throw_error(errc::unsupported, "sql", "this build of distlock has no " + scheme + ":// backend");
}

}  // namespace

std::unique_ptr<optimistic_stock> open_optimistic_stock(std::string_view text, stock_options options) {
    auto u = spi::url::parse(text);
    if (u.scheme() != "mysql" && u.scheme() != "postgres")
        throw_error(errc::invalid_argument, "sql", "the optimistic stock helper needs a mysql:// or postgres:// URL");
    // The lock backend's parameters may be present: tries/window apply, the rest is ignored.
    for (const char* ignored : {"strategy", "lease", "table", "pool"}) (void)u.take(ignored);
    conn_settings cs;
    if (auto v = u.take_duration("connect_timeout")) cs.connect_timeout = *v;
    if (auto v = u.take_duration("timeout")) cs.timeout = *v;
    if (auto v = u.take_int("tries", 1, 1000)) options.tries = static_cast<int>(*v);
    if (auto v = u.take_duration("window")) options.window = *v;
    u.expect_all_taken();
    return std::make_unique<optimistic_stock>(open_dialect(u, cs), std::move(options));
}

}  // namespace distlock::tool
