// lease-table and optimistic: a lease row of the lock table, taken by one
// upsert (lease-table) or by an insert, else the seed's read-then-compare-and-set
// on its version (optimistic), renewed by the owner token and deleted at
// release. See handles.hpp.
#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <utility>

#include "handles.hpp"

namespace distlock::backends::sql {

using std::chrono::milliseconds;

lease_row_handle::lease_row_handle(context& c, const spi::lock_request& r, const sql_texts::lease_rows& rows)
    : ctx_(c), req_(r), rows_(rows), name_{r.name}, slot_(fence_slot(r.name)) {}

milliseconds lease_row_handle::check_interval() const {
    return req_.auto_renew ? std::max(milliseconds{1}, req_.renew_interval) : milliseconds{0};
}

std::optional<spi::grant> lease_row_handle::acquire_loop(spi::deadline until,
                                                         const std::function<std::optional<spi::grant>()>& attempt,
                                                         bool give_back, milliseconds max_pause) {
    std::string owner = spi::random_token();
    owner_ = owner;
    spi::backoff wait(req_.retry_min, std::max(req_.retry_min, std::min(req_.retry_max, max_pause)));
    // Where the server notifies releases, a waiter is woken by the provider's
    // one LISTEN session (release_listener), for its own name only, and tries
    // again then (or after the backoff, which still catches leases that simply
    // expire). No session of its own: a thousand waiting threads are one
    // listening session, and a release wakes the waiters of its name, not all.
    struct doorbell {
        std::mutex m;
        std::condition_variable cv;
        bool rang = false;
    } bell;
    std::unique_ptr<spi::wake_subscription> subscription;  // after bell: gone before it
    const bool notified = !ctx_.texts().listen.text.empty();
    // The last statement may have taken a row before its reply was lost, or a
    // waiting writer holds its row: give it back (best effort; a lease expires anyway).
    auto give_rows_back = [&]() noexcept {
        try {
            ctx_.pool().run([&](connection& c) { return c.exec(rows_.release, {name_, owner}); });
        } catch (...) {}
        owner_.clear();
    };
    try {
        for (bool first = true;; first = false) {
            auto granted = attempt();
            if (granted) {
                granted->waited = !first;  // a try before found it held
                return granted;
            }
            if (spi::clock::now() >= until) break;
            if (notified && !subscription) {
                subscription = ctx_.releases().watch(spi::sha256_hex(req_.name), spi::wake_sink([&bell] {
                                                         {
                                                             std::lock_guard lk(bell.m);
                                                             bell.rang = true;
                                                         }
                                                         bell.cv.notify_one();
                                                     }));
                continue;  // a release between the last try and the LISTEN would be missed: try again now
            }
            if (!subscription) {
                if (!wait.sleep(until)) break;
                continue;
            }
            std::unique_lock lk(bell.m);
            bell.cv.wait_until(lk, spi::clock::now() + wait.next(until), [&] { return bell.rang; });
            bell.rang = false;
        }
    } catch (const sql_error& e) {
        give_rows_back();
        if (e.kind() == failure::no_table) throw;  // acquire() creates the tables again
        throw_client_error(e, ctx_.name(), "acquire of '" + req_.name + "' failed");
    } catch (...) {
        give_rows_back();
        throw;
    }
    if (give_back) give_rows_back();
    owner_.clear();
    return std::nullopt;
}

std::unique_ptr<spi::wake_subscription> lease_row_handle::watch_releases(spi::wake_sink wake) {
    if (ctx_.texts().listen.text.empty()) return nullptr;
    return ctx_.releases().watch(spi::sha256_hex(req_.name), std::move(wake));
}

void lease_row_handle::release() {
    const std::string owner = std::exchange(owner_, {});
    if (owner.empty()) throw_error(errc::not_owner, ctx_.name(), "lock '" + req_.name + "' is not held by this handle");
    std::uint64_t affected = 0;
    try {
        affected = ctx_.pool().run([&](connection& c) { return c.exec(rows_.release, {name_, owner}).affected; });
    } catch (const sql_error& e) {
        throw_client_error(e, ctx_.name(), "release of '" + req_.name + "' failed (the lease expires on its own)",
                           true);
    }
    if (affected == 0)
        throw_error(errc::not_owner, ctx_.name(),
                    "lock '" + req_.name + "' was no longer ours at release (lease expired and taken, or broken)");
}

spi::keepalive_result lease_row_handle::renew() {
    try {
        auto affected = ctx_.pool().run([&](connection& c) {
            return c.exec(rows_.renew, {name_, owner_, ms(req_.lease)}).affected;
        });
        if (affected == 0) return spi::keepalive_result::lost("the lease row of '" + req_.name + "' is no longer ours");
        return spi::keepalive_result::ok();
    } catch (const std::exception& e) {
        return spi::keepalive_result::failed(e.what());
    }
}

lease_handle::lease_handle(context& c, const spi::lock_request& r, bool optimistic)
    : lease_row_handle(c, r, c.lock_rows()), optimistic_(optimistic) {}

std::optional<spi::grant> lease_handle::acquire(spi::deadline until, const spi::loss_sink&) {
    return ctx_.with_tables("acquire of '" + req_.name + "' failed", [&] {
        return acquire_loop(
            until, [&] { return optimistic_ ? try_compare_and_set() : try_upsert(); }, false, req_.retry_max);
    });
}

std::optional<spi::grant> lease_handle::try_upsert() {
    return unless_busy([&]() -> std::optional<spi::grant> {
        const auto sent = spi::clock::now();  // the lease runs from the server's NOW() at best
        auto token = ctx_.pool().run([&](connection& c) {
            return run_for_token(
                c, ctx_.texts().lease_acquire,
                {name_, owner_, ms(req_.lease), slot_, bytes{holder_label_value(owner_, req_.holder)}});
        });
        if (!token) return std::nullopt;
        return spi::grant{*token, sent};
    });
}

// The seed's optimistic update. A name nobody holds has no row: make it (one
// round trip, the common case). Else read the version, then UPDATE ... WHERE the
// version still matches (and the lease is still free); a lost race is retried at
// once, at most `tries` times within `window`. A lease held by someone else is
// "busy".
std::optional<spi::grant> lease_handle::try_compare_and_set() {
    const auto& s = ctx_.settings();
    const auto start = spi::clock::now();
    return ctx_.pool().run([&](connection& c) -> std::optional<spi::grant> {
        // Per attempt: nullopt = lost the race; a value = done (granted, or nullopt when busy).
        auto done = retry_compare_and_set(s.tries, s.window, start, [&]() -> std::optional<std::optional<spi::grant>> {
            try {
                auto sent = spi::clock::now();  // of the statement that takes the lease
                const bytes label{holder_label_value(owner_, req_.holder)};
                if (auto token =
                        run_for_token(c, ctx_.texts().opt_insert, {name_, owner_, ms(req_.lease), slot_, label}))
                    return spi::grant{*token, sent};
                auto r = c.exec(ctx_.texts().opt_read, {name_});
                if (r.rows.empty()) return std::nullopt;  // released meanwhile: try again
                const auto& row = r.rows[0];
                if (!row[1] || *row[1] != "1") return std::optional<spi::grant>{};  // held by its owner
                const auto version = to_int64(*row[0]);
                sent = spi::clock::now();
                if (auto token = run_for_token(c, ctx_.texts().opt_update,
                                               {name_, owner_, ms(req_.lease), slot_, version, label}))
                    return spi::grant{*token, sent};
            } catch (const sql_error& e) {
                if (e.kind() != failure::deadlock && e.kind() != failure::lock_timeout) throw;
            }
            return std::nullopt;
        });
        return done.value_or(std::nullopt);
    });
}

}  // namespace distlock::backends::sql
