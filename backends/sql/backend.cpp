// The SQL lock backend (see backend.hpp): the URL's settings, the lock tables,
// the strategy chosen per lock, the batch renewal of lease rows, break_lock.
#include <algorithm>
#include <map>
#include <utility>

#include "backend.hpp"

namespace distlock::backends::sql {

using namespace std::chrono_literals;
using std::chrono::milliseconds;

// ASCII only, whatever the process locale (std::isalpha would take a Latin-1
// letter under a Latin-1 locale, and the name would then depend on it).
bool is_identifier(std::string_view id, std::size_t max) {
    if (id.empty() || id.size() > max) return false;
    if (!(spi::ascii_alpha(id[0]) || id[0] == '_')) return false;
    return std::all_of(id.begin(), id.end(), [](char c) { return spi::ascii_alnum(c) || c == '_'; });
}

std::optional<std::uint64_t> run_for_token(connection& c, const batch& steps, std::initializer_list<value> args) {
    auto v = batch_value(c.exec_batch(steps, args));
    if (!v) return std::nullopt;
    return to_uint64(*v);
}

std::string session_label_suffix(const std::string& label) {
    const bool ascii = std::all_of(label.begin(), label.end(), [](char c) { return c >= 0x20 && c <= 0x7e; });
    if (!ascii || label.empty() || label.size() > session_name_max) return {};
    return " " + label;
}

std::string session_name(std::optional<std::uint64_t> token, const std::string& label) {
    const std::string head = "distlock #" + (token ? std::to_string(*token) : std::string("-"));
    const std::string whole = head + session_label_suffix(label);
    return whole.size() <= session_name_max ? whole : head;
}

session_name_parts parse_session_name(std::string_view name) {
    session_name_parts p;
    constexpr std::string_view plain = "distlock", labelled = "distlock #";
    if (name == plain) {
        p.distlock = true;
        return p;
    }
    if (name.substr(0, labelled.size()) != labelled) return p;
    name.remove_prefix(labelled.size());
    const auto space = name.find(' ');
    const auto token = name.substr(0, space);
    if (token.empty() || (token != "-" && !std::all_of(token.begin(), token.end(), spi::ascii_digit)) ||
        token.size() > 19)
        return p;
    p.distlock = p.labelled = true;
    if (token != "-") p.token = to_uint64(token);
    if (space != std::string_view::npos && space + 1 < name.size()) p.label = std::string(name.substr(space + 1));
    return p;
}

std::int64_t fence_slot(std::string_view name) {
    const std::string d = spi::sha256(name);
    return ((static_cast<unsigned char>(d[0]) << 8) | static_cast<unsigned char>(d[1])) % 1024;
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
    s.conn.table = s.table;
    if (auto v = u.take_duration("connect_timeout")) s.conn.connect_timeout = *v;
    if (auto v = u.take_duration("timeout")) s.conn.timeout = *v;
    if (s.conn.connect_timeout < 1ms || s.conn.timeout < 1s) bad("connect_timeout must be > 0 and timeout >= 1s");
    if (auto v = u.take_int("tries", 1, 1000)) s.tries = static_cast<int>(*v);
    if (auto v = u.take_duration("window")) s.window = *v;
    if (auto v = u.take_int("pool", 0, 1000)) s.max_idle = static_cast<std::size_t>(*v);
    if (auto v = u.take("wake")) {
        if (*v == "bell") s.wake = wake::bell;
        else if (*v != "poll") bad("unknown wake '" + *v + "' (known: poll, bell)");
    }
    if (s.wake == wake::bell && backend != "mysql")
        bad("wake=bell is MySQL's: " + std::string(backend) + " wakes lease-table waiters by its notifications");
    if (s.wake == wake::bell && s.strategy != strategy::lease_table)
        bad("wake=bell applies to strategy=lease-table only (the session strategies wait in the server's own queue)");
    return s;
}

backend::backend(std::shared_ptr<dialect> d, settings s) : ctx_(std::move(d), std::move(s)) {
    if (ctx_.session_held()) {
        caps_.unsupported = {
            {feature::lease_expiry,
             "no lease: the lock lasts as long as the session that holds it (released when the connection ends)"},
        };
    } else if (ctx_.texts().listen.text.empty()) {
        caps_.unsupported = {
            {feature::notified_wakeup,
             "this server has no notifications: waiters poll the lease row with jittered "
             "backoff (retry_min..retry_max)"},
        };
    }
    // Read-write locks (PostgreSQL: advisory shared/exclusive locks; MySQL: lease
    // rows) and semaphores (lease rows, their size kept in them) on every strategy.
    caps_.implements = {feature::read_write, feature::semaphore, feature::permit_limit, feature::inspect,
                        feature::inspect_primitives};
    caps_.crash_release_bound = 0ms;  // connection drop: at once; leases: when the lease (added by callers) ends
}

// The mutex by the URL's strategy; the read-write lock on the server's shared
// locks where it has them (PostgreSQL), else on lease rows; the semaphore on
// lease rows. Each primitive of a name is a lock of its own (its own key or table).
std::unique_ptr<spi::lock_handle> backend::make_lock(const spi::lock_request& r) {
    switch (r.kind) {
        case spi::lock_kind::exclusive:
        case spi::lock_kind::leader: break;  // no feature::election: never asked; else as a mutex
        case spi::lock_kind::permit: return std::make_unique<permit_handle>(ctx_, r);
        case spi::lock_kind::read:
        case spi::lock_kind::write:
            if (!ctx_.texts().rw_rows.table.empty()) return std::make_unique<rw_lease_handle>(ctx_, r);
            return std::make_unique<session_handle>(
                ctx_, r, r.kind == spi::lock_kind::read ? session_kind::read : session_kind::write);
    }
    switch (ctx_.settings().strategy) {
        case strategy::lease_table: return std::make_unique<lease_handle>(ctx_, r, false);
        case strategy::optimistic: return std::make_unique<lease_handle>(ctx_, r, true);
        case strategy::for_update: return std::make_unique<session_handle>(ctx_, r, session_kind::row);
        case strategy::native: break;
    }
    return std::make_unique<session_handle>(ctx_, r, session_kind::native);
}

std::optional<std::chrono::nanoseconds> backend::round_trip() {
    try {
        return ctx_.pool().run([&](connection& c) {
            auto t0 = std::chrono::steady_clock::now();
            c.exec(ctx_.texts().ping);
            return std::chrono::steady_clock::now() - t0;
        });
    } catch (const sql_error& e) {
        throw_client_error(e, ctx_.name(), "SELECT 1 failed");
    }
}

// The server's named lock taken and released as a plain client does, on a key
// of its own (no waiting, no token): the floor of `distlock bench`.
std::optional<std::chrono::nanoseconds> backend::native_cycle() {
    const auto key = ctx_.dialect().native_key("distlock-bench-floor/" + spi::random_token());
    try {
        return ctx_.pool().run([&](connection& c) {
            auto t0 = std::chrono::steady_clock::now();
            c.exec(ctx_.texts().native_plain, {key});
            c.exec(ctx_.texts().native_release, {key});
            return std::chrono::steady_clock::now() - t0;
        });
    } catch (const sql_error& e) {
        throw_client_error(e, ctx_.name(), "the native lock pair failed");
    }
}

// Lease strategies: delete the lease row (tokens live in the fence counter).
// Session strategies: end the holder's session on the server, found and ended
// in one statement (sql_texts::native_break). And the name's read-write lock
// and semaphore: their rows deleted, or the sessions holding the read-write
// lock (PostgreSQL) ended.
void backend::break_lock(std::string_view lock_name) {
    auto end_holder = [&](const statement& s, const value& v) {
        try {
            ctx_.pool().run([&](connection& c) { return c.exec(s, {v}); });
        } catch (const sql_error& e) {
            if (e.fatal() || e.kind() == failure::access_denied) throw;  // else: nobody held it
        }
    };
    try {
        bytes n{std::string(lock_name)};
        if (!ctx_.session_held()) ctx_.pool().run([&](connection& c) { return c.exec(ctx_.texts().lease_clear, {n}); });
        else if (ctx_.settings().strategy == strategy::for_update) end_holder(ctx_.texts().row_break, n);
        else end_holder(ctx_.texts().native_break, ctx_.dialect().native_key(n.data));
        ctx_.pool().run([&](connection& c) { return c.exec(ctx_.texts().permit_rows.clear, {n}); });
        if (!ctx_.texts().rw_rows.table.empty())
            ctx_.pool().run([&](connection& c) { return c.exec(ctx_.texts().rw_rows.clear, {n}); });
        else if (!ctx_.texts().rw_break.text.empty())
            end_holder(ctx_.texts().rw_break, ctx_.dialect().native_key(n.data));
    } catch (const sql_error& e) {
        throw_client_error(e, ctx_.name(), "break_lock failed");
    }
}

namespace {

std::string from_hex(std::string_view hex) {
    auto nibble = [](char c) -> int {
        if (c >= '0' && c <= '9') return c - '0';
        if (c >= 'a' && c <= 'f') return c - 'a' + 10;
        if (c >= 'A' && c <= 'F') return c - 'A' + 10;
        return -1;
    };
    std::string out;
    for (std::size_t i = 0; i + 1 < hex.size(); i += 2) {
        const int hi = nibble(hex[i]), lo = nibble(hex[i + 1]);
        if (hi < 0 || lo < 0) return {};
        out += static_cast<char>(hi * 16 + lo);
    }
    return out;
}

// µs of lease left, as the server computed it, in ms (a live row: at least 1).
std::optional<milliseconds> lease_left(const std::optional<std::string>& micros) {
    if (!micros) return std::nullopt;
    return std::max(milliseconds{1}, milliseconds{(to_int64(*micros) + 999) / 1000});
}
}  // namespace

// One statement (docs/backends/sql.md, "Inspect"). Lease strategies: the lease
// row, judged by the server's clock. Session strategies: the session holding
// the native lock or the for-update row, as the server names it, and what
// that session's name carries (PostgreSQL's application_name).
lock_info backend::inspect(std::string_view lock_name, spi::lock_kind kind) {
    (void)kind;  // exclusive, or leader (asked only with feature::election, which is not claimed): the name's mutex
    lock_info info;
    const bytes n{std::string(lock_name)};
    const std::string what = "inspect of '" + n.data + "' failed";
    try {
        if (!ctx_.session_held()) {
            info.unknown.emplace("waiters", ctx_.texts().listen.text.empty()
                                                ? "waiters poll the lease row with backoff: the server keeps no count"
                                                : "waiters LISTEN on the lock table's channel, shared by every name:"
                                                  " the server keeps no count per lock");
            const auto r = ctx_.pool().run([&](connection& c) { return c.exec(ctx_.texts().inspect_lease, {n}); });
            if (r.rows.empty() || r.rows[0].size() < 5 || !r.rows[0][0] || *r.rows[0][0] != "1") {
                info.held = false;  // no row, or its lease has ended
                return info;
            }
            const auto& row = r.rows[0];
            info.held = true;
            if (row[2]) info.token = to_uint64(*row[2]);
            else info.unknown.emplace("token", "the lease row has no version");
            info.remaining = lease_left(row[3]).value_or(milliseconds{1});
            const std::string owner = row[4].value_or("");
            // Labels are 1 to 255 bytes: a longer column was not written by distlock, and is not passed on.
            const bool too_long = row[1] && row[1]->size() > 2 * (owner.size() + 255);
            const std::string stored = row[1] && !too_long ? from_hex(*row[1]) : std::string{};
            if (!row[1])
                info.unknown.emplace("holder",
                                     "the lease row has no label: its holder is a distlock from before holder"
                                     " labels, or a client that writes none");
            else if (too_long)
                info.unknown.emplace("holder",
                                     "the lease row's label is longer than any a holder can have (255 bytes):"
                                     " not written by distlock");
            else if (stored.size() <= owner.size() || stored.compare(0, owner.size(), owner) != 0)
                info.unknown.emplace("holder",
                                     "the lease row's label was written by an earlier grant: its holder is a"
                                     " distlock from before holder labels, which leaves the label alone");
            else info.holder = stored.substr(owner.size());
            return info;
        }
        const bool row_lock = ctx_.settings().strategy == strategy::for_update;
        const auto r = ctx_.pool().run([&](connection& c) {
            return row_lock ? c.exec(ctx_.texts().inspect_row, {n})
                            : c.exec(ctx_.texts().inspect_native, {ctx_.dialect().native_key(n.data)});
        });
        const row none{std::nullopt, std::nullopt, std::nullopt};
        const row& got = r.rows.empty() || r.rows[0].size() < 3 ? none : r.rows[0];
        if (got[2]) info.waiters = static_cast<std::uint32_t>(std::min<std::uint64_t>(to_uint64(*got[2]), UINT32_MAX));
        else info.unknown.emplace("waiters", row_lock ? ctx_.texts().no_row_waiters : ctx_.texts().no_native_waiters);
        if (!got[0]) {
            info.held = false;
            return info;
        }
        info.held = true;
        info.unknown.emplace("remaining", "no lease: the lock lasts as long as the session that holds it");
        const std::string session = *got[0];
        const std::string no_token =
            row_lock ? "for-update draws the token on another connection once the row is locked, and stores it nowhere"
                     : "";
        if (!ctx_.texts().no_session_label.empty()) {
            info.unknown.emplace("holder", ctx_.texts().no_session_label + " (connection " + session + ")");
            info.unknown.emplace("token", row_lock ? no_token
                                                   : "the native lock keeps no data beside it: the token is drawn from"
                                                     " the fence counter and stored nowhere per name");
            return info;
        }
        const std::string app = got[1].value_or("");
        const auto parts = parse_session_name(app);
        if (parts.label) info.holder = *parts.label;
        if (parts.token && !row_lock) info.token = *parts.token;
        std::string why;
        if (!parts.distlock)
            why = "the holding session (" + session + ") is not distlock's (application_name '" + app +
                  "'), and another client stores no label beside the lock";
        else if (!parts.labelled) why = "the holding session (" + session + ") is a distlock from before holder labels";
        if (!info.holder)
            info.unknown.emplace("holder", !why.empty() ? why
                                                        : "the holder's label is not printable ASCII or does not fit"
                                                          " the 63 bytes of application_name");
        if (!info.token)
            info.unknown.emplace("token", row_lock       ? no_token
                                          : !why.empty() ? why
                                                         : "the holding session's name carries no token");
    } catch (const sql_error& e) {
        if (e.kind() != failure::no_table) throw_client_error(e, ctx_.name(), what);
        lock_info gone;  // the lock tables are gone: nothing of this layout is held
        gone.held = false;
        gone.unknown.emplace("waiters", "the lock tables do not exist (yet)");
        return gone;
    }
    return info;
}

namespace {
// At most this many grants are listed (the statements fetch one more, to tell).
constexpr std::size_t max_grants_listed = 1000;

}  // namespace

read_write_info backend::inspect_read_write(std::string_view lock_name) {
    read_write_info info;
    const bytes n{std::string(lock_name)};
    const std::string what = "inspect of the read-write lock '" + n.data + "' failed";
    try {
        info.write_held = false;
        info.readers.emplace();
        std::size_t readers = 0;
        if (!ctx_.texts().rw_rows.table.empty()) {  // lease rows (MySQL)
            const auto r = ctx_.pool().run([&](connection& c) { return c.exec(ctx_.texts().inspect_rw_rows, {n}); });
            bool writer_waits = false;
            for (const auto& row : r.rows) {
                if (row.size() < 3 || !row[0] || !row[1]) continue;
                grant_info g;
                g.token = to_uint64(*row[1]);
                g.remaining = lease_left(row[2]);
                if (*row[0] != "w") {
                    if (++readers <= max_grants_listed) info.readers->push_back(g);
                } else if (*g.token == 0) {
                    writer_waits = true;  // the writer row of a writer that waits for the readers
                } else {
                    info.write_held = true;
                    info.writer = g;
                }
            }
            info.unknown.emplace("writers_waiting",
                                 writer_waits ? "one writer row per name: it shows that a writer waits, not how many"
                                              : "writers that wait without the writer row (another holds it) leave no"
                                                " row");
            const char* no_label = "the read-write rows keep the grant's owner token, no label";
            if (info.writer) info.unknown.emplace("writer.holder", no_label);
            if (readers > 0) info.unknown.emplace("readers.holder", no_label);
        } else {  // session locks (PostgreSQL advisory locks): who holds and who waits
            const auto key = ctx_.dialect().native_key(n.data);
            const auto r = ctx_.pool().run([&](connection& c) { return c.exec(ctx_.texts().inspect_rw_locks, {key}); });
            std::uint32_t waiting = 0;
            bool unlabelled = false;
            for (const auto& row : r.rows) {
                if (row.size() < 3 || !row[0] || !row[1]) continue;
                const bool exclusive = *row[0] == "ExclusiveLock";
                if (*row[1] != "1") {
                    waiting += exclusive ? 1 : 0;
                    continue;
                }
                grant_info g;
                const auto parts = parse_session_name(row[2].value_or(""));
                if (parts.label) g.holder = *parts.label;
                else unlabelled = true;
                if (exclusive) {
                    info.write_held = true;
                    info.writer = g;
                } else if (++readers <= max_grants_listed) {
                    info.readers->push_back(g);
                }
            }
            info.writers_waiting = waiting;
            const char* no_token = "the token is drawn once the session lock is held, and stored nowhere";
            const char* no_lease = "no lease: the lock lasts as long as the session that holds it";
            const char* no_label = "the holding session's application_name carries no distlock label";
            for (const std::string prefix : {"writer", "readers"}) {
                if (prefix == "writer" ? !info.writer : readers == 0) continue;
                info.unknown.emplace(prefix + ".token", no_token);
                info.unknown.emplace(prefix + ".remaining", no_lease);
                if (unlabelled) info.unknown.emplace(prefix + ".holder", no_label);
            }
        }
        if (readers > max_grants_listed) {
            info.readers.reset();
            info.unknown.emplace("readers", std::to_string(readers) + " read grants or more: more than inspect lists");
        }
    } catch (const sql_error& e) {
        if (e.kind() != failure::no_table) throw_client_error(e, ctx_.name(), what);
        read_write_info gone;  // the tables are gone: nothing of this layout is held
        gone.write_held = false;
        gone.readers.emplace();
        gone.writers_waiting = 0;
        return gone;
    }
    return info;
}

semaphore_info backend::inspect_semaphore(std::string_view lock_name) {
    semaphore_info info;
    const bytes n{std::string(lock_name)};
    const std::string what = "inspect of the semaphore '" + n.data + "' failed";
    try {
        const auto r = ctx_.pool().run([&](connection& c) { return c.exec(ctx_.texts().inspect_permits, {n}); });
        info.permits.emplace();
        std::optional<std::uint64_t> size;
        for (const auto& row : r.rows) {
            if (row.size() < 3 || !row[0] || !row[1]) continue;
            if (!size) size = to_uint64(*row[0]);
            grant_info g;
            g.token = to_uint64(*row[1]);
            g.remaining = lease_left(row[2]);
            info.permits->push_back(g);
        }
        if (info.permits->size() > max_grants_listed) {
            info.permits.reset();
            info.unknown.emplace(
                "permits", "more than the " + std::to_string(max_grants_listed) + " permits inspect lists are taken");
        } else if (!info.permits->empty()) {
            info.unknown.emplace("permits.holder", "the permit rows keep the grant's owner token, no label");
        }
        if (size && *size <= UINT32_MAX) {
            info.size = static_cast<std::uint32_t>(*size);
            if (info.permits)
                info.free = *info.size - std::min(*info.size, static_cast<std::uint32_t>(info.permits->size()));
            else info.unknown.emplace("free", "the permits taken are not listed");
        } else {
            const char* why = "no permit is held: the size is kept only in the rows of the permits held";
            info.unknown.emplace("size", why);
            info.unknown.emplace("free", why);
        }
    } catch (const sql_error& e) {
        if (e.kind() != failure::no_table) throw_client_error(e, ctx_.name(), what);
        semaphore_info gone;
        gone.permits.emplace();
        gone.unknown.emplace("size", "the permit table does not exist (yet)");
        gone.unknown.emplace("free", "the permit table does not exist (yet)");
        return gone;
    }
    return info;
}

// The renewals that fall due together: one statement per table (the lock
// table, permits, read-write rows), lease length and chunk of up to 1024 locks,
// whatever their number (PostgreSQL: UPDATE ... RETURNING owner; MySQL: UPDATE,
// and only when it renewed fewer than all, a SELECT of the owners still there).
// Locks held by a session (session strategies, PostgreSQL's read-write lock)
// check each session on its own.
void backend::keepalive_batch(std::span<spi::lock_handle* const> handles, std::span<spi::keepalive_result> results) {
    constexpr std::size_t chunk = 1024;
    // Lease rows by table and lease length; sessions (one ping each: each holds
    // its own connection). Every handle given here is one of this backend's.
    renewal_groups groups;
    for (std::size_t i = 0; i < handles.size(); ++i) static_cast<const backend_handle*>(handles[i])->join(groups, i);
    for (auto i : groups.sessions) results[i] = static_cast<session_handle*>(handles[i])->check();
    for (const auto& [group, all] : groups.lease_rows) {
        const auto& [rows, lease] = group;
        if (all.size() == 1) {  // one plain UPDATE
            results[all[0]] = static_cast<lease_row_handle*>(handles[all[0]])->renew();
            continue;
        }
        for (std::size_t from = 0; from < all.size(); from += chunk) {
            const std::span<const std::size_t> part(all.data() + from, std::min(chunk, all.size() - from));
            std::vector<value> args{ms(lease)};
            for (auto i : part) {
                const auto* h = static_cast<lease_row_handle*>(handles[i]);
                args.emplace_back(h->name());
                args.emplace_back(h->owner());
            }
            const auto q = ctx_.dialect().lease_renew_batch(rows->table, part.size());
            try {
                // nullopt: every one was renewed; else the owners that were.
                auto renewed = ctx_.pool().run([&](connection& c) -> std::optional<std::vector<std::string>> {
                    auto r = c.exec(q.renew, args);
                    if (r.affected == part.size()) return std::nullopt;
                    if (!q.which.text.empty()) r = c.exec(q.which, args);
                    std::vector<std::string> owners;
                    for (const auto& row : r.rows)
                        if (!row.empty() && row[0]) owners.push_back(*row[0]);
                    return owners;
                });
                for (auto i : part) {
                    const auto* h = static_cast<lease_row_handle*>(handles[i]);
                    const bool ok =
                        !renewed || std::find(renewed->begin(), renewed->end(), h->owner()) != renewed->end();
                    results[i] = ok ? spi::keepalive_result::ok()
                                    : spi::keepalive_result::lost("the lease row is no longer ours");
                }
            } catch (const std::exception& e) {
                for (auto i : part) results[i] = spi::keepalive_result::failed(e.what());
            }
        }
    }
}

std::shared_ptr<spi::backend> make_backend(std::shared_ptr<dialect> d, const settings& s) {
    // Connected first: a dialect's SQL texts may depend on the server it meets
    // (MariaDB has sequences, MySQL 8 has not). The connection joins the pool.
    std::shared_ptr<backend> b;
    try {
        auto first = d->connect();
        b = std::make_shared<backend>(d, s);
        b->ctx_.pool().adopt(std::move(first));
    } catch (const sql_error& e) {
        throw_client_error(e, d->name(), "cannot connect");
    }
    b->ctx_.create_tables();
    return b;
}

}  // namespace distlock::backends::sql
