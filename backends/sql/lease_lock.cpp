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

using namespace std::chrono_literals;
using std::chrono::milliseconds;

lease_row_handle::lease_row_handle(context& c, const spi::lock_request& r, const sql_texts::lease_rows& rows)
    : ctx_(c), req_(r), rows_(rows), name_{r.name}, slot_(fence_slot(r.name)) {}

milliseconds lease_row_handle::check_interval() const {
    return req_.auto_renew ? std::max(milliseconds{1}, req_.renew_interval) : milliseconds{0};
}

void lease_row_handle::give_rows_back() noexcept {
    try {
        ctx_.pool().run([&](connection& c) { return c.exec(rows_.release, {name_, owner_}); });
    } catch (...) {}
    owner_.clear();
}

std::optional<spi::grant> lease_row_handle::acquire_loop(spi::deadline until,
                                                         const std::function<std::optional<spi::grant>()>& attempt,
                                                         bool give_back, milliseconds max_pause) {
    owner_ = spi::random_token();
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
    // waiting writer holds its row: give_rows_back().
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
    auto bell = std::move(bell_conn_);
    if (owner.empty()) throw_error(errc::not_owner, ctx_.name(), "lock '" + req_.name + "' is not held by this handle");
    const std::string failed = "release of '" + req_.name + "' failed (the lease expires on its own)";
    auto delete_pooled = [&] {
        return ctx_.pool().run([&](connection& c) { return c.exec(rows_.release, {name_, owner}).affected; });
    };
    std::uint64_t affected = 0;
    try {
        if (bell) {
            try {
                affected = bell->exec_batch(ctx_.texts().lease_release_rung, {name_, owner}).front().affected;
                ctx_.pool().give_back(std::move(bell));
            } catch (const sql_error& e) {
                bell.reset();  // its session ends: the doorbell is free
                if (!e.fatal()) throw;
                // The doorbell's session was lost (killed, the server restarted):
                // the row may be ours still. Deleted on a pooled session; if it
                // is gone already, the lost statement may have deleted it: in doubt.
                affected = delete_pooled();
                if (affected == 0) throw_client_error(e, ctx_.name(), failed, true);
            }
        } else {
            affected = delete_pooled();
        }
    } catch (const sql_error& e) {
        throw_client_error(e, ctx_.name(), failed, true);
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
        if (ctx_.settings().wake == wake::bell && !optimistic_) return acquire_rung(until);
        return acquire_loop(
            until, [&] { return optimistic_ ? try_compare_and_set() : try_upsert(); }, false, req_.retry_max);
    });
}

// wake=bell. Each try is one round trip on this acquisition's connection: the
// upsert, after taking the name's doorbell (GET_LOCK of its bell key) while it
// is not this session's. A holder that took it keeps it, and gives it back in
// the round trip that deletes its row; a waiter's try blocks on it in the
// server (for at most half a lease), so it wakes at the release, or when the
// holder's session ends, and its upsert follows at once. Whoever holds the
// doorbell without the row (the row's holder has none: it was taken without
// wake=bell, or by a fresh try between a woken waiter's wake-up and its
// upsert) polls with backoff; the other waiters wait on it, so there is at
// most one poller.
std::optional<spi::grant> lease_handle::acquire_rung(spi::deadline until) {
    const auto& q = ctx_.texts();
    const auto resolution = ctx_.dialect().native_wait_resolution();
    // A server-side wait stays well below the client's read timeout, and within
    // half a lease: a holder paused past its lease keeps its doorbell.
    const milliseconds longest =
        std::max(resolution, std::min({ctx_.settings().conn.timeout / 2, milliseconds{10s}, req_.lease / 2}));
    // The poller (the doorbell's holder while the row is another's) is one per
    // name, and most often it waits for a grant that went to a fresh try
    // between its wake-up and its upsert, held as briefly as any: it starts
    // at a fifth of retry_min (1 ms by default), doubling up to retry_max.
    spi::backoff pause(req_.retry_min / 5, req_.retry_max);
    owner_ = spi::random_token();
    const bytes label{holder_label_value(owner_, req_.holder)};
    bool rung = false;  // this session holds the doorbell
    bool busy_seen = false;
    try {
        auto taken = ctx_.pool().take();
        bool reused = taken.reused();
        bell_conn_ = taken.detach();
        for (;;) {
            const auto left = std::chrono::duration_cast<milliseconds>(until - spi::clock::now());
            milliseconds wait{0};
            if (busy_seen && !rung && left >= resolution) wait = std::min(longest, left / resolution * resolution);
            const auto sent = spi::clock::now();  // the lease runs from the server's NOW() at best
            std::vector<result> r;
            try {
                r = bell_conn_->exec_batch(rung ? q.lease_acquire : q.lease_acquire_rung,
                                           {name_, owner_, ms(req_.lease), slot_, label, ms(wait)});
            } catch (const sql_error& e) {
                if (reused && e.kind() == failure::connection_lost) {  // an idle session the server closed
                    reused = false;
                    bell_conn_ = ctx_.pool().take().detach();
                    continue;
                }
                if (e.kind() != failure::deadlock && e.kind() != failure::lock_timeout) throw;
                // The upsert was ended (busy, or a deadlock among neighbouring
                // names); the doorbell may be this session's by now. Given back,
                // and tried again, waiting on the doorbell.
                bell_conn_->exec(q.bell_release, {name_});
                rung = false;
                busy_seen = true;
                if (spi::clock::now() >= until) break;
                continue;
            }
            reused = false;
            bool woke_by_error = false;
            if (!rung) {
                const auto& bell = r.front().rows;
                const auto answer = bell.empty() || bell.front().empty() ? std::nullopt : bell.front().front();
                rung = answer == std::optional<std::string>("1");
                woke_by_error = wait.count() > 0 && answer != std::optional<std::string>("0") && !rung;
            }
            if (auto token = batch_value(r)) {
                if (!rung) ctx_.pool().give_back(std::move(bell_conn_));  // a grant without a doorbell
                return spi::grant{to_uint64(*token), sent, busy_seen};
            }
            busy_seen = true;
            if (spi::clock::now() >= until) break;
            // Wait on the doorbell in the next try; poll where it is this
            // session's, the time left is below what the server can wait, or
            // the wait ended without an answer (GET_LOCK's NULL).
            if (!rung && !woke_by_error && until - spi::clock::now() >= resolution) continue;
            if (!pause.sleep(until)) break;
        }
        if (rung) bell_conn_->exec(q.bell_release, {name_});
    } catch (const sql_error& e) {
        bell_conn_.reset();  // its session ends: the doorbell is free
        give_rows_back();
        if (e.kind() == failure::no_table) throw;  // acquire() creates the tables again
        throw_client_error(e, ctx_.name(), "acquire of '" + req_.name + "' failed");
    }
    ctx_.pool().give_back(std::move(bell_conn_));
    owner_.clear();
    return std::nullopt;
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
