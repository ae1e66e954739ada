// What the SQL layer adds around a dialect's connections: the connection pool,
// and the translation of a dialect's sql_error into the distlock error that
// says what to do next (throw_client_error).
#include <charconv>
#include <limits>
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
    std::unique_ptr<connection> c;
    {
        std::lock_guard lk(mutex_);
        if (!idle_.empty()) {
            c = std::move(idle_.back());
            idle_.pop_back();
        }
    }
    if (c) {
        try {
            prepare(*c, false);
            return lease(this, std::move(c), true);
        } catch (const sql_error& e) {
            // An idle session the server closed meanwhile: a new one instead.
            if (e.kind() != failure::connection_lost) throw;
        }
    }
    c = dialect_->connect();
    prepare(*c, true);
    return lease(this, std::move(c), false);
}

// No statement may wait for a lock past the client's read timeout. The fence
// guard goes in the same round trip, and moves the sequence on only when the
// server has had no guard since it started (after a crash, every session is
// new): that commit is durable before this session draws a token.
void pool::prepare(connection& c, bool fresh) {
    const bool guard = !c.fence_guarded && guarding_.load(std::memory_order_acquire);
    std::vector<statement> steps;
    if (fresh) steps.push_back(default_wait_.first);
    if (guard) steps.push_back(guard_probe_);
    if (steps.empty()) return;
    try {
        const auto results = c.exec_batch(steps, {default_wait_.second});
        if (fresh) c.wait_bound_ms = default_wait_.second;
        if (!guard) return;
        if (const auto drawn = batch_value(results)) {
            const auto v = to_int64(*drawn);
            const auto ahead = v > std::numeric_limits<std::int64_t>::max() - fence_guard_gap - 1
                                   ? std::numeric_limits<std::int64_t>::max() - 1
                                   : v + fence_guard_gap;
            c.exec_batch(guard_, {ahead});
        }
        c.fence_guarded = true;
    } catch (const sql_error& e) {
        // The tables dropped under a running provider: the session is guarded
        // at a later take(), once the draw that fails meanwhile has made them
        // again (context::create_tables), with a sequence that starts anew.
        if (!guard || e.kind() != failure::no_table) throw;
        if (fresh && c.wait_bound_ms != default_wait_.second) {
            c.exec(default_wait_.first, {default_wait_.second});
            c.wait_bound_ms = default_wait_.second;
        }
    }
}

void pool::adopt(std::unique_ptr<connection> c) {
    prepare(*c, true);
    give_back(std::move(c));
}

void pool::guard_fences(statement probe, batch guard) {
    if (guard.empty()) return;
    guard_probe_ = std::move(probe);
    guard_ = std::move(guard);
    guarding_.store(true, std::memory_order_release);
}

void pool::give_back(std::unique_ptr<connection> c) noexcept {
    if (!c || c->broken()) return;
    std::lock_guard lk(mutex_);
    if (idle_.size() < max_idle_) idle_.push_back(std::move(c));
}

}  // namespace distlock::backends::sql
