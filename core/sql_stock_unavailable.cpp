// distlock::sql::optimistic_stock in a build without any SQL backend: open()
// says so with unsupported_error. (With mysql:// or postgres:// built, the SQL
// layer's backends/sql/public_stock.cpp is compiled instead of this file.)
#include "distlock/error.hpp"
#include "distlock/sql.hpp"

namespace distlock::sql {

struct optimistic_stock::impl {};

optimistic_stock optimistic_stock::open(std::string_view, stock_options) {
    throw_error(errc::unsupported, "sql", "this build of distlock has no SQL backend (mysql:// or postgres://)");
}
optimistic_stock::optimistic_stock(std::unique_ptr<impl> p) noexcept : impl_(std::move(p)) {}
optimistic_stock::optimistic_stock(optimistic_stock&&) noexcept = default;
optimistic_stock& optimistic_stock::operator=(optimistic_stock&&) noexcept = default;
optimistic_stock::~optimistic_stock() = default;
void optimistic_stock::create_table() {}
void optimistic_stock::put(std::string_view, std::int64_t) {}
std::optional<std::int64_t> optimistic_stock::stock(std::string_view) { return std::nullopt; }
stock_result optimistic_stock::take(std::string_view, std::int64_t) { return {}; }

}  // namespace distlock::sql
