// Semaphores and the MySQL read-write lock: grants that are lease rows of
// tables of their own (<table>_permits, <table>_rw), taken in one round trip,
// renewed by their owner token with the lock table's leases, deleted at
// release. See handles.hpp and docs/backends/sql.md ("Read-write lock and
// semaphore").
#include <algorithm>
#include <utility>

#include "handles.hpp"

namespace distlock::backends::sql {

using std::chrono::milliseconds;

namespace {

// The first row of the last result set of a batch (what its last SELECT returned).
const row* last_row(const std::vector<result>& results) {
    for (auto it = results.rbegin(); it != results.rend(); ++it) {
        if (!it->query) continue;
        return it->rows.empty() ? nullptr : &it->rows[0];
    }
    return nullptr;
}

bool has(const row& r, std::size_t i) { return r.size() > i && r[i].has_value(); }

}  // namespace

// ---- semaphore --------------------------------------------------------------------

permit_handle::permit_handle(context& c, const spi::lock_request& r) : lease_row_handle(c, r, c.texts().permit_rows) {}

std::optional<spi::grant> permit_handle::acquire(spi::deadline until, const spi::loss_sink&) {
    return ctx_.with_tables("acquire of a permit of '" + req_.name + "' failed", [&] {
        return acquire_loop(
            until, [&] { return try_take(); }, false, req_.retry_max);
    });
}

// One statement batch takes the lowest slot of the name that no unexpired row
// holds (an expired row's slot is taken over), unless a holder of the name
// uses another size. A slot that another client took between the look and the
// insert (MySQL; PostgreSQL serializes the acquisitions of a name) is a race
// lost to a winner: look again at once.
std::optional<spi::grant> permit_handle::try_take() {
    const auto key = ctx_.permit_key(req_.name);
    const std::int64_t permits = req_.permits;
    for (int race = 0; race < 64; ++race) {
        const auto sent = spi::clock::now();
        const auto r = unless_busy([&]() -> std::optional<row> {
            return ctx_.pool().run([&](connection& c) -> row {
                auto results =
                    c.exec_batch(ctx_.texts().permit_acquire, {name_, owner_, ms(req_.lease), slot_, permits, key});
                const row* last = last_row(results);
                if (!last) throw sql_error(failure::other, 0, "the permit statement returned no row");
                return *last;
            });
        });
        if (!r) return std::nullopt;  // busy
        if (has(*r, 1)) {
            // Another size is in use: refused. A permit taken meanwhile (a holder of
            // another size came at the same moment) is given back first.
            const std::string other = *(*r)[1];
            if (has(*r, 0)) {
                try {
                    ctx_.pool().run([&](connection& c) { return c.exec(rows_.release, {name_, owner_}); });
                } catch (const sql_error&) {  // its lease ends on its own
                }
            }
            throw_error(errc::invalid_argument, ctx_.name(),
                        "semaphore '" + req_.name + "' is held with " + other + " permits; this one asks for " +
                            std::to_string(req_.permits) + " (every user of a semaphore must give the same size)");
        }
        if (has(*r, 0)) return spi::grant{to_uint64(*(*r)[0]), sent};
        if (!has(*r, 2)) return std::nullopt;  // every permit is held
    }
    return std::nullopt;  // lost every race: another try after the backoff
}

// ---- read-write lock on lease rows (MySQL) --------------------------------------------

rw_lease_handle::rw_lease_handle(context& c, const spi::lock_request& r)
    : lease_row_handle(c, r, c.texts().rw_rows), writer_(r.kind == spi::lock_kind::write) {}

// A reader inserts its row, then looks for a writer row: there is one, it
// deletes its row again (busy). A writer takes the name's writer row (unless
// another writer holds it), then looks for reader rows: there are some, it
// keeps its row, which holds later readers back, and waits for them to leave;
// it is granted (and draws its token) once there are none. The row goes first
// and the look comes after, each in a statement of its own (committed), so
// that of a reader and a writer coming together at least one sees the other.
// A waiting writer's row is a lease too: it is refreshed by every try (at most
// lease/3 apart) and deleted when the writer gives up.
std::optional<spi::grant> rw_lease_handle::acquire(spi::deadline until, const spi::loss_sink&) {
    const auto& steps = writer_ ? ctx_.texts().rw_write_acquire : ctx_.texts().rw_read_acquire;
    return ctx_.with_tables("acquire of read-write lock '" + req_.name + "' failed", [&] {
        return acquire_loop(
            until,
            [&] {
                return unless_busy([&]() -> std::optional<spi::grant> {
                    const auto sent = spi::clock::now();
                    auto token = ctx_.pool().run([&](connection& c) {
                        return run_for_token(c, steps, {name_, owner_, ms(req_.lease), slot_});
                    });
                    if (!token) return std::nullopt;
                    return spi::grant{*token, sent};
                });
            },
            writer_, spi::renewal_period(req_.lease));
    });
}

}  // namespace distlock::backends::sql
