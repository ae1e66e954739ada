// The four SQL lock strategies, written once over sql::dialect (see sql.hpp).
//
//  lease-table  one atomic upsert takes the lease row when it is absent, released
//               or expired by the server's clock; renew/release only by the owner
//               token; the version column (bumped on every grant) is the token.
//  optimistic   read the row, then a version-checked UPDATE (compare-and-set),
//               a few tries within a short window; same row, renewal and token.
//  for-update   a row of <table>_rows locked FOR UPDATE by a transaction kept
//               open on a dedicated connection; released by ROLLBACK or by the
//               connection ending.
//  get-lock /   the server's named session lock on a dedicated connection.
//  advisory
// The last two bump the lease table's version column (committed on its own,
// under the lock) as their fencing token, recording the holder's session id so
// that break_lock can end that session.
#include <algorithm>
#include <cctype>
#include <map>
#include <thread>
#include <utility>

#include "sql.hpp"

namespace distlock::backends::sql {

using namespace std::chrono_literals;
using std::chrono::duration_cast;
using std::chrono::milliseconds;

// ---- small shared pieces -------------------------------------------------------

bool is_identifier(std::string_view id, std::size_t max) {
    if (id.empty() || id.size() > max) return false;
    if (!(std::isalpha(static_cast<unsigned char>(id[0])) || id[0] == '_')) return false;
    return std::all_of(id.begin(), id.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; });
}

void raise(const sql_error& e, std::string_view backend, const std::string& context, bool releasing) {
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
    // No statement may wait for a lock past the client's read timeout.
    c->exec(default_wait_.first, {default_wait_.second});
    c->wait_bound_ms = default_wait_.second;
    return lease(this, std::move(c), false);
}

void pool::give_back(std::unique_ptr<connection> c) noexcept {
    if (!c || c->broken()) return;
    std::lock_guard lk(mutex_);
    if (idle_.size() < max_idle_) idle_.push_back(std::move(c));
}

namespace {

std::map<std::string, dialect_factory>& dialects() {
    static std::map<std::string, dialect_factory> m;
    return m;
}
std::mutex& dialects_mutex() {
    static std::mutex m;
    return m;
}

// The first column of the last statement's first row, as a token (nullopt = no row).
std::optional<std::uint64_t> run_for_token(connection& c, const std::vector<statement>& steps,
                                           std::initializer_list<value> args) {
    result r;
    for (const auto& s : steps) r = c.exec(s, args);
    if (r.rows.empty() || r.rows[0].empty() || !r.rows[0][0]) return std::nullopt;
    return std::stoull(*r.rows[0][0]);
}

std::int64_t ms(milliseconds d) { return static_cast<std::int64_t>(d.count()); }

}  // namespace

void add_dialect(std::string scheme, dialect_factory f) {
    std::lock_guard lk(dialects_mutex());
    dialects()[std::move(scheme)] = std::move(f);
}

const dialect_factory* find_dialect(const std::string& scheme) {
    std::lock_guard lk(dialects_mutex());
    auto it = dialects().find(scheme);
    return it == dialects().end() ? nullptr : &it->second;
}

settings take_settings(spi::url& u, std::string_view backend, std::string_view native) {
    auto bad = [&](const std::string& m) { throw_error(errc::invalid_argument, std::string(backend), m); };
    settings s;
    if (auto v = u.take("strategy")) {
        if (*v == "lease-table") s.strategy = strategy::lease_table;
        else if (*v == "optimistic") s.strategy = strategy::optimistic;
        else if (*v == "for-update") s.strategy = strategy::for_update;
        else if (*v == native) s.strategy = strategy::native;
        else
            bad("unknown strategy '" + *v + "' (known: for-update, lease-table, optimistic, " + std::string(native) +
                ")");
    }
    if (auto v = u.take("table")) s.table = *v;
    if (!is_identifier(s.table))
        bad("table '" + s.table + "' is not a plain identifier ([A-Za-z_][A-Za-z0-9_]*, at most 48 characters)");
    if (auto v = u.take_duration("connect_timeout")) s.conn.connect_timeout = *v;
    if (auto v = u.take_duration("timeout")) s.conn.timeout = *v;
    if (s.conn.connect_timeout < 1ms || s.conn.timeout < 1s) bad("connect_timeout must be > 0 and timeout >= 1s");
    if (auto v = u.take_int("tries", 1, 1000)) s.tries = static_cast<int>(*v);
    if (auto v = u.take_duration("window")) s.window = *v;
    if (auto v = u.take_int("pool", 0, 1000)) s.max_idle = static_cast<std::size_t>(*v);
    return s;
}

namespace {

class sql_backend;

// ---- lease-table and optimistic ------------------------------------------------

class lease_handle final : public spi::lock_handle {
public:
    lease_handle(sql_backend& b, const spi::lock_request& r, bool optimistic);
    std::optional<spi::grant> acquire(spi::deadline until) override;
    void release() override;
    milliseconds keepalive_interval() const override;
    spi::keepalive_result keepalive() override;

    const bytes& name() const noexcept { return name_; }
    const std::string& owner() const noexcept { return owner_; }
    milliseconds lease() const noexcept { return req_.lease; }

private:
    std::optional<spi::grant> acquire_once(spi::deadline until);
    std::optional<spi::grant> try_upsert();
    std::optional<spi::grant> try_compare_and_set();

    sql_backend& b_;
    spi::lock_request req_;
    bool optimistic_;
    bytes name_;
    std::string owner_;  // this grant's token in the owner column; empty = not held
};

// ---- for-update, get-lock, advisory: a lock held by a session ------------------------

class session_handle final : public spi::lock_handle {
public:
    session_handle(sql_backend& b, const spi::lock_request& r, bool row_lock);
    ~session_handle() override;
    std::optional<spi::grant> acquire(spi::deadline until) override;
    void release() override;
    milliseconds keepalive_interval() const override;
    spi::keepalive_result keepalive() override;

private:
    std::optional<spi::grant> acquire_once(spi::deadline until);
    enum class outcome { granted, busy, retry };
    outcome attempt(connection& c, milliseconds wait);
    std::uint64_t fence(connection& holder);
    void drop_connection() noexcept { conn_.reset(); }  // closing the session frees whatever it held

    sql_backend& b_;
    spi::lock_request req_;
    bool row_lock_;  // for-update (else native)
    bytes name_;
    value key_;
    std::unique_ptr<connection> conn_;  // the holding session while held
};

class sql_backend final : public spi::backend {
public:
    sql_backend(std::shared_ptr<dialect> d, settings s)
        : dialect_(d), settings_(std::move(s)), q_(d->texts(settings_.table)),
          pool_(d, settings_.max_idle, q_.set_wait, ms(settings_.conn.timeout / 2)) {
        name_ = std::string(d->name());
        if (session_held()) {
            caps_.unsupported = {
                {feature::lease_expiry,
                 "no lease: the lock lasts as long as the session that holds it (released when the connection ends)"},
            };
        } else if (q_.listen.text.empty()) {
            caps_.unsupported = {
                {feature::notified_wakeup, "this server has no notifications: waiters poll the lease row with jittered "
                                           "backoff (retry_min..retry_max)"},
            };
        }
        caps_.crash_release_bound = 0ms;  // connection drop: at once; leases: when the lease (added by callers) ends
    }

    // Makes the tables (idempotent DDL). Two first users racing on PostgreSQL can
    // collide in CREATE TABLE IF NOT EXISTS: the loser simply tries again.
    void create_tables() {
        for (int attempt = 0;; ++attempt) {
            try {
                pool_.run([&](connection& c) {
                    for (const auto& s : q_.create) c.exec(s);
                    return 0;
                });
                return;
            } catch (const sql_error& e) {
                // The first statement of a provider: a connection or login failure is that, not a table problem.
                const bool connecting = e.kind() == failure::cannot_connect || e.kind() == failure::access_denied ||
                                        e.kind() == failure::no_database || e.kind() == failure::wrong_server;
                if (e.fatal() || connecting || attempt >= 2)
                    raise(e, name_, connecting ? "cannot connect" : "cannot create the lock tables");
                std::this_thread::sleep_for(20ms);
            }
        }
    }

    // Runs an acquisition `f`, which lets only a no_table failure escape as
    // sql_error. The lock tables can vanish under a running provider (a database
    // re-created, or restored from a dump without them): create them again and
    // try once more, instead of failing every acquisition until a restart.
    template <class F>
    auto with_tables(const std::string& context, F&& f) {
        try {
            return f();
        } catch (const sql_error& e) {
            if (e.kind() != failure::no_table) raise(e, name_, context);
            create_tables();
        }
        try {
            return f();
        } catch (const sql_error& e) {
            raise(e, name_, context);
        }
    }

    std::string_view name() const noexcept override { return name_; }
    const capabilities& caps() const noexcept override { return caps_; }

    std::unique_ptr<spi::lock_handle> make_lock(const spi::lock_request& r) override {
        switch (settings_.strategy) {
            case strategy::lease_table: return std::make_unique<lease_handle>(*this, r, false);
            case strategy::optimistic: return std::make_unique<lease_handle>(*this, r, true);
            case strategy::for_update: return std::make_unique<session_handle>(*this, r, true);
            case strategy::native: break;
        }
        return std::make_unique<session_handle>(*this, r, false);
    }

    void keepalive_batch(std::span<spi::lock_handle* const> handles, std::span<spi::keepalive_result> results) override;

    std::optional<std::chrono::nanoseconds> round_trip() override {
        try {
            return pool_.run([&](connection& c) {
                auto t0 = std::chrono::steady_clock::now();
                c.exec(q_.ping);
                return std::chrono::steady_clock::now() - t0;
            });
        } catch (const sql_error& e) {
            raise(e, name_, "SELECT 1 failed");
        }
    }

    // Lease strategies: clear the row's owner (keeping its version, so tokens keep
    // increasing). Session strategies: end the holder's session on the server.
    void break_lock(std::string_view lock_name) override {
        try {
            bytes n{std::string(lock_name)};
            if (!session_held()) {
                pool_.run([&](connection& c) { return c.exec(q_.lease_clear, {n}); });
                return;
            }
            auto holder = pool_.run([&](connection& c) { return holder_session(c, n); });
            if (!holder) return;  // not held: nothing to break
            const std::int64_t id = *holder;
            try {
                pool_.run([&](connection& c) { return c.exec(q_.kill, {id}); });
            } catch (const sql_error& e) {
                if (e.fatal()) throw;  // else: that session is already gone
            }
        } catch (const sql_error& e) {
            raise(e, name_, "break_lock failed");
        }
    }

    // The session holding `n` right now, if any. Native locks: the server's own
    // view (IS_USED_LOCK, pg_locks). Row locks: a NOWAIT probe tells whether the
    // row is locked, and the holder column (written under the lock at each grant)
    // tells by whom. Never a stale id: its session may hold other locks by now.
    std::optional<std::int64_t> holder_session(connection& c, const bytes& n) {
        auto as_id = [](const result& r) -> std::optional<std::int64_t> {
            if (r.rows.empty() || r.rows[0].empty() || !r.rows[0][0]) return std::nullopt;
            return std::stoll(*r.rows[0][0]);
        };
        if (settings_.strategy != strategy::for_update) return as_id(c.exec(q_.native_holder, {dialect_->native_key(n.data)}));
        c.exec(q_.begin);
        bool locked = false;
        try {
            c.exec(q_.row_lock_nowait, {n});
        } catch (const sql_error& e) {
            if (e.kind() != failure::lock_timeout) throw;
            locked = true;
        }
        c.exec(q_.rollback);
        return locked ? as_id(c.exec(q_.holder_of, {n})) : std::nullopt;
    }

    bool session_held() const noexcept {
        return settings_.strategy == strategy::for_update || settings_.strategy == strategy::native;
    }

    std::shared_ptr<dialect> dialect_;
    settings settings_;
    sql_texts q_;
    pool pool_;
    std::string name_;
    capabilities caps_;
};

// ---- lease_handle ------------------------------------------------------------------

lease_handle::lease_handle(sql_backend& b, const spi::lock_request& r, bool optimistic)
    : b_(b), req_(r), optimistic_(optimistic), name_{r.name} {}

std::optional<spi::grant> lease_handle::acquire(spi::deadline until) {
    return b_.with_tables("acquire of '" + req_.name + "' failed", [&] { return acquire_once(until); });
}

std::optional<spi::grant> lease_handle::acquire_once(spi::deadline until) {
    std::string owner = spi::random_token();
    owner_ = owner;
    spi::backoff wait(req_.retry_min, req_.retry_max);
    // Where the server notifies releases, a waiter listens on a session of its own
    // and tries again when the name is released (or after the backoff, which
    // still catches leases that simply expire).
    std::unique_ptr<connection> listener;
    const std::string my_payload = b_.q_.listen.text.empty() ? std::string{} : spi::sha256_hex(req_.name);
    auto stop_listening = [&]() noexcept {
        if (!listener) return;
        try {
            listener->exec(b_.q_.unlisten);
            (void)listener->wait_notifications(spi::clock::now());  // drop what came meanwhile
            b_.pool_.give_back(std::move(listener));
        } catch (...) {
        }
        listener.reset();
    };
    try {
        for (;;) {
            auto granted = optimistic_ ? try_compare_and_set() : try_upsert();
            if (granted) {
                stop_listening();
                return granted;
            }
            if (spi::clock::now() >= until) break;
            if (!my_payload.empty() && !listener) {
                listener = b_.pool_.take().detach();
                listener->exec(b_.q_.listen);
                continue;  // a release between the last try and LISTEN would be missed: try again now
            }
            if (!listener) {
                if (!wait.sleep(until)) break;
                continue;
            }
            const auto wake_at = spi::clock::now() + wait.next(until);
            for (bool ours = false; !ours && spi::clock::now() < wake_at;)
                for (const auto& p : listener->wait_notifications(wake_at)) ours = ours || p == my_payload;
        }
    } catch (const sql_error& e) {
        stop_listening();
        // The last statement may have taken the row before its reply was lost:
        // give it back (best effort; the lease expires anyway).
        try {
            b_.pool_.run([&](connection& c) { return c.exec(b_.q_.lease_release, {name_, owner}); });
        } catch (...) {
        }
        owner_.clear();
        if (e.kind() == failure::no_table) throw;  // acquire() creates the tables again
        raise(e, b_.name_, "acquire of '" + req_.name + "' failed");
    }
    stop_listening();
    owner_.clear();
    return std::nullopt;
}

std::optional<spi::grant> lease_handle::try_upsert() {
    try {
        const auto sent = spi::clock::now();  // the lease runs from the server's NOW() at best
        auto token = b_.pool_.run(
            [&](connection& c) { return run_for_token(c, b_.q_.lease_acquire, {name_, owner_, ms(req_.lease)}); });
        if (!token) return std::nullopt;
        return spi::grant{*token, sent};
    } catch (const sql_error& e) {
        if (e.kind() == failure::deadlock || e.kind() == failure::lock_timeout) return std::nullopt;  // busy: retry
        throw;
    }
}

// The seed's optimistic update: read the version, then UPDATE ... WHERE version
// still matches (and the lease is still free); a lost race is retried at once, at
// most `tries` times within `window`. A lease held by someone else is "busy".
std::optional<spi::grant> lease_handle::try_compare_and_set() {
    const auto& s = b_.settings_;
    const auto start = spi::clock::now();
    return b_.pool_.run([&](connection& c) -> std::optional<spi::grant> {
        for (int i = 0; i < s.tries && (i == 0 || spi::clock::now() - start < s.window); ++i) {
            try {
                auto r = c.exec(b_.q_.opt_read, {name_});
                auto sent = spi::clock::now();  // of the statement that takes the lease
                if (r.rows.empty()) {
                    if (c.exec(b_.q_.opt_insert, {name_, owner_, ms(req_.lease)}).affected == 1)
                        return spi::grant{1, sent};
                    continue;  // another client created it first
                }
                const auto& row = r.rows[0];
                if (!row[1] || *row[1] != "1") return std::nullopt;  // held by its owner
                const auto version = static_cast<std::int64_t>(std::stoll(*row[0]));
                sent = spi::clock::now();
                if (c.exec(b_.q_.opt_update, {name_, owner_, ms(req_.lease), version}).affected == 1)
                    return spi::grant{static_cast<std::uint64_t>(version + 1), sent};
            } catch (const sql_error& e) {
                if (e.kind() != failure::deadlock && e.kind() != failure::lock_timeout) throw;
            }
        }
        return std::nullopt;
    });
}

void lease_handle::release() {
    const std::string owner = std::exchange(owner_, {});
    if (owner.empty()) throw_error(errc::not_owner, b_.name_, "lock '" + req_.name + "' is not held by this handle");
    std::uint64_t affected = 0;
    try {
        affected = b_.pool_.run([&](connection& c) { return c.exec(b_.q_.lease_release, {name_, owner}).affected; });
    } catch (const sql_error& e) {
        raise(e, b_.name_, "release of '" + req_.name + "' failed (the lease expires on its own)", true);
    }
    if (affected == 0)
        throw_error(errc::not_owner, b_.name_,
                    "lock '" + req_.name + "' was no longer ours at release (lease expired and taken, or broken)");
}

milliseconds lease_handle::keepalive_interval() const {
    return req_.auto_renew ? std::max(milliseconds{1}, req_.lease / 3) : milliseconds{0};
}

spi::keepalive_result lease_handle::keepalive() {
    try {
        auto affected = b_.pool_.run(
            [&](connection& c) { return c.exec(b_.q_.lease_renew, {name_, owner_, ms(req_.lease)}).affected; });
        if (affected == 0) return spi::keepalive_result::lost("the lease row of '" + req_.name + "' is no longer ours");
        return spi::keepalive_result::ok();
    } catch (const std::exception& e) {
        return spi::keepalive_result::failed(e.what());
    }
}

// The renewals that fall due together: one statement per lease length and chunk
// (PostgreSQL: UPDATE ... RETURNING owner; MySQL: UPDATE, then SELECT owner),
// whatever the number of locks. Session strategies check each session on its own.
void sql_backend::keepalive_batch(std::span<spi::lock_handle* const> handles, std::span<spi::keepalive_result> results) {
    if (session_held() || handles.size() < 2) {
        spi::backend::keepalive_batch(handles, results);
        return;
    }
    constexpr std::size_t chunk = 256;
    std::map<milliseconds, std::vector<std::size_t>> by_lease;
    for (std::size_t i = 0; i < handles.size(); ++i)
        by_lease[static_cast<lease_handle*>(handles[i])->lease()].push_back(i);
    for (const auto& [lease, all] : by_lease) {
        for (std::size_t from = 0; from < all.size(); from += chunk) {
            const std::span<const std::size_t> part(all.data() + from, std::min(chunk, all.size() - from));
            std::vector<value> args{ms(lease)};
            for (auto i : part) {
                const auto* h = static_cast<lease_handle*>(handles[i]);
                args.emplace_back(h->name());
                args.emplace_back(h->owner());
            }
            const auto steps = dialect_->lease_renew_batch(settings_.table, part.size());
            try {
                auto r = pool_.run([&](connection& c) {
                    result last;
                    for (const auto& st : steps) last = c.exec(st, args);
                    return last;
                });
                std::vector<std::string> renewed;
                for (const auto& row : r.rows)
                    if (!row.empty() && row[0]) renewed.push_back(*row[0]);
                for (auto i : part) {
                    const auto* h = static_cast<lease_handle*>(handles[i]);
                    const bool ok = std::find(renewed.begin(), renewed.end(), h->owner()) != renewed.end();
                    results[i] = ok ? spi::keepalive_result::ok()
                                    : spi::keepalive_result::lost("the lease row is no longer ours");
                }
            } catch (const std::exception& e) {
                for (auto i : part) results[i] = spi::keepalive_result::failed(e.what());
            }
        }
    }
}

// ---- session_handle -------------------------------------------------------------------

session_handle::session_handle(sql_backend& b, const spi::lock_request& r, bool row_lock)
    : b_(b), req_(r), row_lock_(row_lock), name_{r.name}, key_(b.dialect_->native_key(r.name)) {}

session_handle::~session_handle() { drop_connection(); }

// One try on the holding session, waiting at most `wait` (0 = NOWAIT / try form).
session_handle::outcome session_handle::attempt(connection& c, milliseconds wait) {
    const auto& q = b_.q_;
    auto set_wait = [&] {
        if (c.wait_bound_ms != ms(wait)) {
            c.exec(q.set_wait, {ms(wait)});
            c.wait_bound_ms = ms(wait);
        }
    };
    if (row_lock_) {
        if (wait.count() > 0) set_wait();
        c.exec(q.begin);
        try {
            auto r = c.exec(wait.count() > 0 ? q.row_lock : q.row_lock_nowait, {name_});
            if (r.rows.empty()) {
                // First use of the name: make its row (autocommit, outside the
                // locking transaction; never before the SELECT, since an INSERT
                // IGNORE of an existing row waits for its holder on MySQL).
                c.exec(q.rollback);
                c.exec(q.row_ensure, {name_});
                return outcome::retry;
            }
            return outcome::granted;  // the transaction stays open: that is the lock
        } catch (const sql_error& e) {
            if (e.fatal()) throw;
            c.exec(q.rollback);
            if (e.kind() == failure::lock_timeout || e.kind() == failure::deadlock) return outcome::busy;
            throw;
        }
    }
    if (wait.count() > 0 && !b_.dialect_->native_wait_in_call()) set_wait();
    try {
        auto r = c.exec(wait.count() > 0 ? q.native_lock : q.native_try, {key_, ms(wait)});
        if (r.rows.empty() || r.rows[0].empty() || !r.rows[0][0])
            throw sql_error(failure::other, 0, "the native lock function returned NULL");
        return *r.rows[0][0] == "1" ? outcome::granted : outcome::busy;
    } catch (const sql_error& e) {
        if (e.kind() == failure::lock_timeout || e.kind() == failure::deadlock) return outcome::busy;
        throw;
    }
}

std::uint64_t session_handle::fence(connection& holder) {
    auto bump = [&](connection& c) {
        auto token = run_for_token(c, b_.q_.fence_bump, {name_, holder.session_id()});
        if (!token) throw sql_error(failure::other, 0, "the fencing counter row returned no version");
        return *token;
    };
    // for-update's session is inside its locking transaction: the counter must be
    // committed on its own (a crashed holder's token must never be handed out
    // again), so it goes through another connection.
    return row_lock_ ? b_.pool_.run(bump) : bump(holder);
}

std::optional<spi::grant> session_handle::acquire(spi::deadline until) {
    return b_.with_tables("acquire of '" + req_.name + "' failed", [&] { return acquire_once(until); });
}

std::optional<spi::grant> session_handle::acquire_once(spi::deadline until) {
    const auto resolution = row_lock_ ? b_.dialect_->row_wait_resolution() : b_.dialect_->native_wait_resolution();
    // Each server-side wait stays well below the client's read timeout.
    const auto chunk = std::max(resolution, std::min<milliseconds>(b_.settings_.conn.timeout / 2, 10s));
    spi::backoff pause(req_.retry_min, req_.retry_max);
    try {
        auto lease = b_.pool_.take();
        bool reused = lease.reused();
        conn_ = lease.detach();
        for (;;) {
            const auto left = duration_cast<milliseconds>(until - spi::clock::now());
            milliseconds wait{0};
            if (left >= resolution) wait = std::min(chunk, left / resolution * resolution);
            outcome o;
            try {
                o = attempt(*conn_, wait);
            } catch (const sql_error& e) {
                // An idle pooled session may have been closed by the server: one
                // more try on a new one.
                if (!reused || e.kind() != failure::connection_lost) throw;
                reused = false;
                conn_ = b_.pool_.take().detach();
                continue;
            }
            reused = false;
            if (o == outcome::granted) {
                try {
                    return spi::grant{fence(*conn_), spi::clock::now()};  // no lease: the session holds it
                } catch (...) {
                    drop_connection();  // leave nothing behind: ending the session frees the lock
                    throw;
                }
            }
            if (o == outcome::retry) continue;
            if (spi::clock::now() >= until) break;
            if (wait.count() == 0 && !pause.sleep(until)) break;
        }
    } catch (const sql_error& e) {
        drop_connection();
        if (e.kind() == failure::no_table) throw;  // acquire() creates the tables again
        raise(e, b_.name_, "acquire of '" + req_.name + "' failed");
    }
    b_.pool_.give_back(std::move(conn_));
    return std::nullopt;
}

void session_handle::release() {
    auto c = std::move(conn_);
    if (!c) throw_error(errc::not_owner, b_.name_, "lock '" + req_.name + "' is not held by this handle");
    if (c->broken())
        throw_error(errc::not_owner, b_.name_,
                    "the session holding '" + req_.name + "' was lost: the server had already released the lock");
    try {
        if (row_lock_) {
            c->exec(b_.q_.rollback);
        } else {
            auto r = c->exec(b_.q_.native_release, {key_});
            if (r.rows.empty() || r.rows[0].empty() || !r.rows[0][0] || *r.rows[0][0] != "1")
                throw_error(errc::not_owner, b_.name_, "the server says '" + req_.name + "' was not held by this session");
        }
    } catch (const sql_error& e) {
        // The session is gone (killed, server restarted): the server released the
        // lock when it ended, maybe long before this release. That is a loss.
        if (e.kind() == failure::connection_lost)
            throw_error(errc::not_owner, b_.name_,
                        "the session holding '" + req_.name + "' was gone at release: the server had released the lock (" +
                            e.what() + ")");
        // Otherwise the session is closed below, which frees the lock once the
        // server sees the connection end.
        raise(e, b_.name_, "release of '" + req_.name + "' failed (closing the session releases it)", true);
    }
    b_.pool_.give_back(std::move(c));
}

milliseconds session_handle::keepalive_interval() const { return std::max(milliseconds{50}, req_.lease / 3); }

// The lock lives exactly as long as the holding session: check that it does.
spi::keepalive_result session_handle::keepalive() {
    if (!conn_ || conn_->broken()) return spi::keepalive_result::lost("the session holding the lock is gone");
    try {
        conn_->exec(b_.q_.ping);
        return spi::keepalive_result::ok();
    } catch (const sql_error& e) {
        if (e.kind() == failure::timed_out) return spi::keepalive_result::failed(e.what());
        if (e.fatal())
            return spi::keepalive_result::lost(std::string("the session holding the lock was lost: ") + e.what());
        return spi::keepalive_result::failed(e.what());
    }
}

}  // namespace

std::shared_ptr<spi::backend> make_backend(std::shared_ptr<dialect> d, const settings& s) {
    auto b = std::make_shared<sql_backend>(std::move(d), s);
    b->create_tables();
    return b;
}

}  // namespace distlock::backends::sql
