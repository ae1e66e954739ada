// distlock::sql::optimistic_stock (include/distlock/sql.hpp) over the SQL layer's helper.
#include "distlock/sql.hpp"
#include "stock.hpp"

namespace distlock::sql {

struct optimistic_stock::impl {
    std::unique_ptr<backends::sql::optimistic_stock> helper;
};

optimistic_stock optimistic_stock::open(std::string_view url, stock_options options) {
    return optimistic_stock(
        std::make_unique<impl>(impl{backends::sql::open_optimistic_stock(url, std::move(options))}));
}

optimistic_stock::optimistic_stock(std::unique_ptr<impl> p) noexcept : impl_(std::move(p)) {}
optimistic_stock::optimistic_stock(optimistic_stock&&) noexcept = default;
optimistic_stock& optimistic_stock::operator=(optimistic_stock&&) noexcept = default;
optimistic_stock::~optimistic_stock() = default;

void optimistic_stock::create_table() { impl_->helper->create_table(); }
void optimistic_stock::put(std::string_view item, std::int64_t stock) { impl_->helper->put(item, stock); }
std::optional<std::int64_t> optimistic_stock::stock(std::string_view item) { return impl_->helper->stock(item); }
stock_result optimistic_stock::take(std::string_view item, std::int64_t quantity) {
    return impl_->helper->take(item, quantity);
}

}  // namespace distlock::sql
