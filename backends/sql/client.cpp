// What the SQL layer adds around a dialect's connections: the connection pool,
// and the translation of a dialect's sql_error into the distlock error that
// says what to do next (throw_client_error).
#include <charconv>
#include <system_error>
#include <utility>

#include "sql.hpp"

namespace distlock::backends::sql {

std::atomic<std::uint64_t>& connection::round_trip_counter() noexcept {
    static std::atomic<std::uint64_t> n{0};
    return n;
}

std::optional<std::string> batch_value(const std::vector<result>& results) {
    for (auto it = results.rbegin(); it != results.rend(); ++it) {
        if (!it->query) continue;
        if (it->rows.empty() || it->rows[0].empty()) return std::nullopt;
        return it->rows[0][0];
    }
    return std::nullopt;
}

namespace {

template <class T>
T parse_integer(std::string_view text) {
    T v{};
    const auto* end = text.data() + text.size();
    const auto [ptr, ec] = std::from_chars(text.data(), end, v);
    if (ec == std::errc{} && ptr == end && !text.empty()) return v;
    // Shown bounded and printable: the reply may be anything.
    std::string shown;
    for (char c : text.substr(0, 32)) shown += (c >= 0x20 && c <= 0x7e) ? c : '?';
    throw sql_error(failure::other, 0,
                    "the server's reply '" + shown + (text.size() > 32 ? "...'" : "'") + " is not an integer in range");
}

}  // namespace

std::int64_t to_int64(std::string_view text) { return parse_integer<std::int64_t>(text); }
std::uint64_t to_uint64(std::string_view text) { return parse_integer<std::uint64_t>(text); }

std::string bounded_message(std::string_view what) {
    if (what.size() <= 512) return std::string(what);
    return std::string(what.substr(0, 512)) + "...";
}

sql_error reply_too_large(failure kind) {
    return sql_error(kind, 0,
                     "the server's reply is larger than any this client asks for (over " +
                         std::to_string(max_reply_bytes >> 20) + " MiB or " + std::to_string(max_reply_rows) +
                         " rows): the connection was dropped");
}

void throw_client_error(const sql_error& e, std::string_view backend, const std::string& context, bool releasing) {
    errc code = errc::unavailable;
    switch (e.kind()) {
        case failure::access_denied: code = errc::access_denied; break;
        case failure::no_database:
        case failure::wrong_server: code = errc::invalid_argument; break;
        case failure::timed_out:
        case failure::connection_lost: code = releasing ? errc::in_doubt : errc::unavailable; break;
        default: code = errc::unavailable; break;
    }
    throw_error(code, std::string(backend), context + ": " + e.what(), e.code(), e.what());
}

pool::lease pool::take() {
    {
        std::lock_guard lk(mutex_);
        if (!idle_.empty()) {
            auto c = std::move(idle_.back());
            idle_.pop_back();
            return lease(this, std::move(c), true);
        }
    }
    auto c = dialect_->connect();
    set_default_wait(*c);
    return lease(this, std::move(c), false);
}

// No statement may wait for a lock past the client's read timeout.
void pool::set_default_wait(connection& c) {
    c.exec(default_wait_.first, {default_wait_.second});
    c.wait_bound_ms = default_wait_.second;
}

void pool::adopt(std::unique_ptr<connection> c) {
    set_default_wait(*c);
    give_back(std::move(c));
}

void pool::give_back(std::unique_ptr<connection> c) noexcept {
    if (!c || c->broken()) return;
    std::lock_guard lk(mutex_);
    if (idle_.size() < max_idle_) idle_.push_back(std::move(c));
}

}  // namespace distlock::backends::sql
