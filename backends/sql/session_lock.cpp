// for-update, get-lock and advisory: a lock held by a server session on a
// dedicated connection (a row locked FOR UPDATE in an open transaction, or the
// server's named lock), released by the release call or by the session ending;
// fenced by the fence counter. See handles.hpp.
#include <algorithm>
#include <utility>

#include "handles.hpp"

namespace distlock::backends::sql {

using namespace std::chrono_literals;
using std::chrono::duration_cast;
using std::chrono::milliseconds;

session_handle::session_handle(context& c, const spi::lock_request& r, session_kind kind)
    : ctx_(c),
      req_(r),
      row_lock_(kind == session_kind::row),
      name_{r.name},
      key_(c.dialect().native_key(r.name)),
      slot_(fence_slot(r.name)),
      label_suffix_(session_label_suffix(r.holder)),
      row_session_name_(session_name(std::nullopt, r.holder)) {
    const auto& q = c.texts();
    switch (kind) {
        case session_kind::row:
        case session_kind::native: lock_ = &q.native_lock, try_ = &q.native_try, release_ = &q.native_release; break;
        case session_kind::read: lock_ = &q.rw_read_lock, try_ = &q.rw_read_try, release_ = &q.rw_read_release; break;
        case session_kind::write:
            lock_ = &q.rw_write_lock, try_ = &q.rw_write_try, release_ = &q.rw_write_release;
            break;
    }
}

session_handle::~session_handle() { drop_connection(); }

session_handle::attempt_result session_handle::attempt(connection& c, milliseconds wait) {
    const auto& q = ctx_.texts();
    auto set_wait = [&] {
        if (c.wait_bound_ms != ms(wait)) {
            c.exec(q.set_wait, {ms(wait)});
            c.wait_bound_ms = ms(wait);
        }
    };
    if (row_lock_) {
        if (wait.count() > 0) set_wait();
        try {
            const auto locked = batch_value(
                c.exec_batch(wait.count() > 0 ? q.row_lock : q.row_lock_nowait, {name_, row_session_name_}));
            if (!locked) {
                // First use of the name: make its row (autocommit, outside the
                // locking transaction; never before the lock, since an INSERT
                // IGNORE of an existing row waits for its holder on MySQL).
                c.exec(q.rollback);
                c.exec(q.row_ensure, {name_});
                return {outcome::retry};
            }
            if (*locked != "1") {  // the row, but not the holder's mark (MySQL): try again
                c.exec(q.rollback);
                return {outcome::busy};
            }
        } catch (const sql_error& e) {
            if (e.fatal()) throw;
            c.exec(q.rollback);
            if (e.kind() == failure::lock_timeout || e.kind() == failure::deadlock) return {outcome::busy};
            throw;
        }
        // The transaction stays open: that is the lock. Its token must be
        // committed on its own (a crashed holder's token is never handed out
        // again), so it is drawn on another connection.
        auto token = ctx_.pool().run([&](connection& other) { return run_for_token(other, q.fence, {slot_}); });
        if (!token) throw sql_error(failure::other, 0, "the fence counter returned no token");
        return {outcome::granted, *token};
    }
    if (wait.count() > 0 && !ctx_.dialect().native_wait_in_call()) set_wait();
    try {
        auto token = run_for_token(c, wait.count() > 0 ? *lock_ : *try_, {key_, ms(wait), slot_, label_suffix_});
        if (!token) return {outcome::busy};
        return {outcome::granted, *token};
    } catch (const sql_error& e) {
        // The session lock may be held once the statement failed after taking it
        // (a MySQL fence row that could not be locked in time): only ending the
        // session is sure to free it. A PostgreSQL lock_timeout comes from the
        // lock wait itself, which took nothing.
        if (e.fatal()) throw;
        const bool busy = e.kind() == failure::lock_timeout || e.kind() == failure::deadlock;
        if (busy && !ctx_.dialect().native_wait_in_call()) return {outcome::busy};
        if (busy) return {outcome::new_session};
        throw;
    }
}

std::optional<spi::grant> session_handle::acquire(spi::deadline until, const spi::loss_sink&) {
    return ctx_.with_tables("acquire of '" + req_.name + "' failed", [&] { return acquire_once(until); });
}

std::optional<spi::grant> session_handle::acquire_once(spi::deadline until) {
    const auto resolution = row_lock_ ? ctx_.dialect().row_wait_resolution() : ctx_.dialect().native_wait_resolution();
    // Each server-side wait stays well below the client's read timeout.
    const auto chunk = std::max(resolution, std::min<milliseconds>(ctx_.settings().conn.timeout / 2, 10s));
    spi::backoff pause(req_.retry_min, req_.retry_max);
    // The first try never waits, so that a grant knows whether it waited for
    // another holder (grant::waited); the server's queue is joined at once after.
    bool busy_seen = false;
    try {
        auto lease = ctx_.pool().take();
        bool reused = lease.reused();
        conn_ = lease.detach();
        for (;;) {
            const auto left = duration_cast<milliseconds>(until - spi::clock::now());
            milliseconds wait{0};
            const bool could_wait = left >= resolution;
            if (could_wait && busy_seen) wait = std::min(chunk, left / resolution * resolution);
            attempt_result o;
            try {
                o = attempt(*conn_, wait);
            } catch (const sql_error& e) {
                // An idle pooled session may have been closed by the server: one
                // more try on a new one.
                if (!reused || e.kind() != failure::connection_lost) throw;
                reused = false;
                conn_ = ctx_.pool().take().detach();
                continue;
            }
            reused = false;
            if (o.what == outcome::granted)  // no lease: the session holds it
                return spi::grant{o.token, spi::clock::now(), busy_seen};
            if (o.what == outcome::retry) continue;
            const bool first_try = !busy_seen;
            busy_seen = true;
            if (o.what == outcome::new_session) conn_ = ctx_.pool().take().detach();  // the old one is closed here
            if (spi::clock::now() >= until) break;
            if (first_try && could_wait) continue;  // now wait in the server's queue
            if (wait.count() == 0 && !pause.sleep(until)) break;
        }
    } catch (const sql_error& e) {
        drop_connection();
        if (e.kind() == failure::no_table) throw;  // acquire() creates the tables again
        throw_client_error(e, ctx_.name(), "acquire of '" + req_.name + "' failed");
    }
    ctx_.pool().give_back(std::move(conn_));
    return std::nullopt;
}

void session_handle::release() {
    auto c = std::move(conn_);
    if (!c) throw_error(errc::not_owner, ctx_.name(), "lock '" + req_.name + "' is not held by this handle");
    if (c->broken())
        throw_error(errc::not_owner, ctx_.name(),
                    "the session holding '" + req_.name + "' was lost: the server had already released the lock");
    try {
        if (row_lock_) {
            c->exec_batch(ctx_.texts().row_unlock, {name_});
        } else {
            auto r = c->exec(*release_, {key_});
            if (r.rows.empty() || r.rows[0].empty() || !r.rows[0][0] || *r.rows[0][0] != "1")
                throw_error(errc::not_owner, ctx_.name(),
                            "the server says '" + req_.name + "' was not held by this session");
        }
    } catch (const sql_error& e) {
        // The session is gone (killed, server restarted): the server released the
        // lock when it ended, maybe long before this release. That is a loss.
        if (e.kind() == failure::connection_lost)
            throw_error(errc::not_owner, ctx_.name(),
                        "the session holding '" + req_.name +
                            "' was gone at release: the server had released the lock (" + e.what() + ")");
        // Otherwise the session is closed below, which frees the lock once the
        // server sees the connection end.
        throw_client_error(e, ctx_.name(), "release of '" + req_.name + "' failed (closing the session releases it)",
                           true);
    }
    ctx_.pool().give_back(std::move(c));
}

milliseconds session_handle::check_interval() const { return std::max(milliseconds{50}, req_.renew_interval); }

// The lock lives exactly as long as the holding session: check that it does.
spi::keepalive_result session_handle::check() {
    if (!conn_ || conn_->broken()) return spi::keepalive_result::lost("the session holding the lock is gone");
    try {
        conn_->exec(ctx_.texts().ping);
        return spi::keepalive_result::ok();
    } catch (const sql_error& e) {
        if (e.kind() == failure::timed_out) return spi::keepalive_result::failed(e.what());
        if (e.fatal())
            return spi::keepalive_result::lost(std::string("the session holding the lock was lost: ") + e.what());
        return spi::keepalive_result::failed(e.what());
    }
}

}  // namespace distlock::backends::sql
