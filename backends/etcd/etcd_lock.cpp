#include "etcd_lock.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <limits>
#include <map>
#include <thread>

#include "distlock/error.hpp"
#include "etcd_gateway.hpp"
#include "http/http_codec.hpp"
#include "http/http_json.hpp"
#include "http/http_monitor.hpp"

namespace distlock::backends::etcd {
namespace {

using namespace std::chrono_literals;
using http::base64_encode;

// A key name of our own for the kinds whose keys are not one per lease (as
// etcd's recipes name them): the wall clock in nanoseconds, in decimal, never
// the same twice in this process. A clash with another process is caught by
// the create-if-absent txn, which then takes another name.
std::string unique_suffix() {
    static std::atomic<std::int64_t> last{0};
    const std::int64_t now =
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
            .count();
    auto prev = last.load();
    std::int64_t mine;
    do {
        mine = std::max(now, prev + 1);
    } while (!last.compare_exchange_weak(prev, mine));
    return std::to_string(mine);
}

// The kvs of the range response at `i` of a txn's responses ([] when absent).
const json& range_kvs(const json& responses, std::size_t i) {
    return list(field(item(responses, i), "response_range"), "kvs");
}

// A watch stream's message: the gateway wraps it in "result" (older ones did not).
const json& message_result(const json& msg) {
    const json& result = field(msg, "result");
    return result.is_null() ? msg : result;
}

class handle final : public spi::lock_handle {
public:
    handle(gateway& g, const spi::lock_request& r);
    std::optional<spi::grant> acquire(spi::deadline until, const spi::loss_sink& lost) override;
    void release() override;

    const std::shared_ptr<session>& current_session() const { return session_; }
    const std::string& key() const { return key_; }
    std::int64_t revision() const { return revision_; }

private:
    enum class turn { mine, timed_out, key_lost };
    turn wait_for_turn(spi::deadline until);
    bool granted_at_once(const json& first) const;
    void settle_size(const json& size_kvs);
    bool mark_granted();
    void cleanup() noexcept;
    void forget_size() noexcept;
    spi::grant granted(const spi::loss_sink& lost, bool waited);
    http::request watch_request(std::int64_t from) const;
    bool on_monitor_line(std::string_view line);
    void on_monitor_done(const http::transfer_result& r);

    gateway& gateway_;
    spi::lock_request request_;
    names where_;  // where the keys of this kind go
    std::shared_ptr<session> session_;
    std::string key_, value_;
    std::int64_t revision_ = 0;  // our key's create revision (0 = not held)
    std::int64_t token_ = 0;     // the store revision when the grant was found ours

    // The watch of our own key while held (on the provider's loop thread): its
    // deletion is reported as a loss at once, not at the next keepalive.
    std::int64_t monitor_from_ = 0;  // under monitor_'s lock: start revision of the next watch (0 = now)
    std::string monitor_lost_;       // under monitor_'s lock: why, once the watch saw our key deleted
    http::monitor monitor_;          // last: stopped before the fields its callbacks use go
};

handle::handle(gateway& g, const spi::lock_request& r)
    : gateway_(g),
      request_(r),
      where_(names_of(g.config().prefix, r.name, r.kind)),
      monitor_(
          g.events(), [this](std::string_view line) { return on_monitor_line(line); },
          [this](http::transfer_result t) { on_monitor_done(t); }) {}

std::optional<spi::grant> handle::acquire(spi::deadline until, const spi::loss_sink& lost) {
    const bool permit = request_.kind == spi::lock_kind::permit;
    // The keys ahead of a new one: the first (the first `permits` for a permit)
    // by create revision of the range that decides.
    const json first_range{{"key", base64_encode(where_.blockers)},
                           {"range_end", base64_encode(prefix_end(where_.blockers))},
                           {"sort_order", "ASCEND"},
                           {"sort_target", "CREATE"},
                           {"limit", std::to_string(permit ? request_.permits : 1)},
                           {"keys_only", true}};
    bool waited = false;  // a round waited for the keys ahead of ours
    for (int round = 0;; ++round) {
        session_ = gateway_.session_for(request_.lease, request_.auto_renew);
        key_ = where_.own + (where_.unique_keys ? unique_suffix() : lease_hex(session_->id));
        // A mutex's key holds the holder label (as Go's concurrency.Election
        // holds its proposal; Go's Mutex ignores values): the same key and value
        // for every acquisition of the name on this lease, so an orphan of an
        // earlier one is dropped first (a stale key is deleted below). The
        // other kinds' keys hold a random token of the acquisition, by which a
        // key of ours is told from another client's of the same name.
        if (where_.unique_keys) {
            value_ = spi::random_token();
        } else {
            value_ = request_.holder;
            gateway_.forget_orphan(*session_, key_);
        }
        json compare = json::array(
            {{{"key", base64_encode(key_)}, {"target", "CREATE"}, {"result", "EQUAL"}, {"create_revision", "0"}}});
        json success = json::array({{{"request_put",
                                      {{"key", base64_encode(key_)},
                                       {"value", base64_encode(value_)},
                                       {"lease", std::to_string(session_->id)}}}},
                                    {{"request_range", first_range}}});
        json failure =
            json::array({{{"request_range", {{"key", base64_encode(key_)}}}}, {{"request_range", first_range}}});
        if (permit) {  // our size must be the one the semaphore is held with
            compare.push_back({{"key", base64_encode(where_.size_key)},
                               {"target", "VALUE"},
                               {"result", "EQUAL"},
                               {"value", base64_encode(std::to_string(request_.permits))}});
            failure.push_back({{"request_range", {{"key", base64_encode(where_.size_key)}}}});
        }
        json txn{{"compare", compare}, {"success", success}, {"failure", failure}};
        json reply;
        try {
            reply = gateway_.call("/v3/kv/txn", txn);
        } catch (const grpc_error& e) {
            if (e.code == 5 && round < 3) {  // lease not found: it expired while unused
                session_->dead = true;
                continue;
            }
            throw_error(errc::unavailable, kBackend, "acquire txn: " + e.reason(), e.code);
        } catch (const in_doubt_error&) {
            throw;
        } catch (const unavailable_error&) {
            // The put may have happened: our key, if any, dies with the lease
            // unless deleted; remember it for the next renewal.
            gateway_.add_orphan(*session_, key_, value_);
            throw;
        }
        const auto& responses = list(reply, "responses");
        if (responses.size() < 2) throw_error(errc::unavailable, kBackend, "acquire txn: short reply");
        if (flag(reply, "succeeded")) {
            // Our key was created by this txn: its create revision is the
            // txn's revision, and the store was at it when we found our turn.
            revision_ = token_ = as_i64(field(reply, "header"), "revision");
        } else {
            const auto& kvs = range_kvs(responses, 0);
            if (kvs.empty()) {
                if (permit && responses.size() >= 3) {
                    // No key of ours: the size key is missing or says another size.
                    // A lease of its own (no auto-renewal) has no key: give it back.
                    if (!request_.auto_renew) gateway_.revoke(*session_);
                    settle_size(range_kvs(responses, 2));
                    if (round < 8) continue;
                    throw_error(errc::unavailable, kBackend,
                                "semaphore '" + request_.name + "': its size key keeps changing");
                }
                if (round < 3) continue;  // deleted meanwhile: try again
                throw_error(errc::unavailable, kBackend, "acquire txn: our key vanished repeatedly");
            }
            if (!where_.unique_keys) {
                // The mutex's key on our lease, left by an earlier acquisition
                // (or made by this txn when a lost reply was sent again): it is
                // ours either way; remove it and make it anew, for a create
                // revision of this acquisition.
                gateway_.call("/v3/kv/deleterange", json{{"key", base64_encode(key_)}});
                if (round < 3) continue;
                throw_error(errc::unavailable, kBackend, "cannot replace a stale key " + key_);
            }
            if (b64d(kvs[0], "value") != value_) {  // another client's key of the same name: take another name
                if (!request_.auto_renew) gateway_.revoke(*session_);
                if (round < 3) continue;
                throw_error(errc::unavailable, kBackend, "cannot make a key of its own under " + where_.own);
            }
            revision_ = as_i64(kvs[0], "create_revision");
            token_ = as_i64(field(reply, "header"), "revision");
        }
        if (revision_ <= 0) {  // not a revision of etcd's (they start at 1): an unexpected reply
            cleanup();
            throw_error(errc::unavailable, kBackend, "acquire txn: unexpected reply (no revision)");
        }
        if (granted_at_once(range_kvs(responses, 1))) return granted(lost, waited);
        waited = true;
        turn t;
        try {
            t = spi::clock::now() >= until ? turn::timed_out : wait_for_turn(until);
            if (t == turn::mine && where_.marked && !mark_granted()) t = turn::key_lost;
        } catch (...) {
            cleanup();
            throw;
        }
        if (t == turn::mine) {
            // Not renewed from now on: give the lease its whole TTL from here.
            if (!request_.auto_renew && gateway_.renew(*session_).state != spi::keepalive_result::status::ok) {
                cleanup();
                throw_error(errc::unavailable, kBackend, "cannot renew the lease of '" + request_.name + "'");
            }
            return granted(lost, waited);
        }
        if (t == turn::timed_out) {
            cleanup();
            return std::nullopt;
        }
        // Our key vanished while we waited (lease expired): start again.
        if (spi::clock::now() >= until) return std::nullopt;
    }
}

// Whether the first keys of the deciding range, as the acquire txn saw them
// (ours included), give us the lock without waiting.
bool handle::granted_at_once(const json& first) const {
    switch (request_.kind) {
        case spi::lock_kind::read:  // no writer older than us
            return first.empty() || as_i64(first[0], "create_revision") >= revision_;
        case spi::lock_kind::permit:  // ours among the first `permits`
            for (const auto& kv : first)
                if (as_i64(kv, "create_revision") == revision_) return true;
            return false;
        case spi::lock_kind::exclusive:
        case spi::lock_kind::leader:  // an election is the mutex: its layout is Go's Election's
        case spi::lock_kind::write:   // ours first of all
            break;
    }
    return first.empty() || as_i64(first[0], "create_revision") == revision_;
}

// The semaphore's size key is missing or holds another size than ours: create
// it, or take it over when no permit key (holder or waiter) is left; refuses
// our size while keys of another size stand.
void handle::settle_size(const json& size_kvs) {
    const auto mine = std::to_string(request_.permits);
    const auto size = base64_encode(where_.size_key);
    if (size_kvs.empty()) {
        gateway_.call(
            "/v3/kv/txn",
            json{{"compare",
                  json::array({{{"key", size}, {"target", "CREATE"}, {"result", "EQUAL"}, {"create_revision", "0"}}})},
                 {"success", json::array({{{"request_put", {{"key", size}, {"value", base64_encode(mine)}}}}})}});
        return;
    }
    const auto theirs = b64d(size_kvs[0], "value");
    if (theirs == mine) return;  // changed meanwhile
    auto reply = gateway_.call(
        "/v3/kv/txn",
        json{{"compare",
              json::array({{{"key", size}, {"target", "VALUE"}, {"result", "EQUAL"}, {"value", base64_encode(theirs)}},
                           {{"key", base64_encode(where_.blockers)},
                            {"range_end", base64_encode(prefix_end(where_.blockers))},
                            {"target", "CREATE"},
                            {"result", "EQUAL"},
                            {"create_revision", "0"}}})},
             {"success", json::array({{{"request_put", {{"key", size}, {"value", base64_encode(mine)}}}}})},
             {"failure", json::array({{{"request_range", {{"key", size}}}},
                                      {{"request_range",
                                        {{"key", base64_encode(where_.blockers)},
                                         {"range_end", base64_encode(prefix_end(where_.blockers))},
                                         {"count_only", true}}}}})}});
    if (flag(reply, "succeeded")) return;
    const auto& responses = list(reply, "responses");
    if (responses.size() < 2) return;
    const auto& now = range_kvs(responses, 0);
    const auto holders = as_i64(field(item(responses, 1), "response_range"), "count");
    if (!now.empty() && b64d(now[0], "value") == theirs && holders > 0) {
        std::string shown = theirs.size() > 20 ? theirs.substr(0, 20) + "..." : theirs;
        throw_error(errc::invalid_argument, kBackend,
                    "semaphore '" + request_.name + "' is held with " + shown + " permits; this one asks for " + mine);
    }
}

// A grant that waited (a mutex's, a read grant, a permit): one write, only
// while our key stands, whose revision is the grant's token (several readers or
// permits granted by one deletion would otherwise read the same store
// revision). A mutex and a permit put their own key again (same value and
// lease, same create revision): a mutex's token is then its key's mod
// revision, which inspect() reads; the next permit waiter watches our key and
// learns from this put that it may be first in line now. A reader puts the
// name's grant key (names::mark_key, on our lease): its own key must keep its
// mod revision, by which etcd's Go recipe orders keys.
bool handle::mark_granted() {
    const bool own = where_.mark_key.empty();
    auto reply = gateway_.call("/v3/kv/txn",
                               json{{"compare", json::array({{{"key", base64_encode(key_)},
                                                              {"target", "CREATE"},
                                                              {"result", "EQUAL"},
                                                              {"create_revision", std::to_string(revision_)}}})},
                                    {"success", json::array({{{"request_put",
                                                               {{"key", base64_encode(own ? key_ : where_.mark_key)},
                                                                {"value", base64_encode(own ? value_ : std::string{})},
                                                                {"lease", std::to_string(session_->id)}}}}})}});
    if (!flag(reply, "succeeded")) return false;
    token_ = as_i64(field(reply, "header"), "revision");
    return true;
}

// Waits until every key created before ours is gone. Renews the session while
// waiting. Transient errors are retried for a while (a leader election).
handle::turn handle::wait_for_turn(spi::deadline until) {
    const auto renew_every = spi::renewal_period(session_->ttl, 100ms);
    auto failing_since = spi::clock::time_point{};
    const auto tolerate =
        std::max<std::chrono::milliseconds>(3s, std::chrono::duration_cast<std::chrono::milliseconds>(session_->ttl));
    auto last_renew = spi::clock::now();
    // Watches given up in a row because they were created unsynced (see below).
    // Bounded so that steady writes cannot keep us ranging: after that many,
    // the watch is kept and its events come from etcd's catch-up loop.
    constexpr int max_unsynced_retries = 4;
    int unsynced_retries = 0;
    // Rounds whose watch ended before its wait with nothing new (a canceled
    // watch, a member that ends streams at once) back off: else this loop
    // would range and watch again at round-trip speed until `until`.
    spi::backoff idle(request_.retry_min, request_.retry_max);
    for (;;) {
        auto now = spi::clock::now();
        if (now >= until) return turn::timed_out;
        try {
            if (now - last_renew >= renew_every) {
                auto r = gateway_.renew(*session_);
                if (r.state == spi::keepalive_result::status::lost) return turn::key_lost;
                if (r.state == spi::keepalive_result::status::failed)
                    throw_error(errc::unavailable, kBackend, r.message);
                last_renew = spi::clock::now();
            }
            // The keys ahead of ours in the deciding range: the latest one
            // (all of them for a permit, which must count them).
            const bool permit = request_.kind == spi::lock_kind::permit;
            json ahead{{"key", base64_encode(where_.blockers)},
                       {"range_end", base64_encode(prefix_end(where_.blockers))},
                       {"sort_order", permit ? "ASCEND" : "DESCEND"},
                       {"sort_target", "CREATE"},
                       {"max_create_revision", std::to_string(revision_ - 1)},
                       {"keys_only", true}};
            if (!permit) ahead["limit"] = "1";
            auto reply = gateway_.call("/v3/kv/range", ahead);
            const auto& kvs = list(reply, "kvs");
            if (kvs.size() < (permit ? std::size_t{request_.permits} : std::size_t{1})) {
                if (where_.marked) return turn::mine;  // mark_granted() checks our key and sets the token
                // Our turn: make sure our own key survived the wait.
                auto mine = gateway_.call("/v3/kv/range", json{{"key", base64_encode(key_)}, {"keys_only", true}});
                const auto& own = list(mine, "kvs");
                if (own.empty() || as_i64(own[0], "create_revision") != revision_) return turn::key_lost;
                token_ = as_i64(field(mine, "header"), "revision");
                return turn::mine;
            }
            // What to watch until it changes: the latest key ahead of ours,
            // until it is deleted. A permit waiter right behind the holders
            // (as many keys ahead as permits) watches the range for any
            // deletion; one further back watches the waiter just ahead of it
            // for its deletion or for the put that waiter makes when granted
            // (mark_granted), after which it may be first in line.
            const std::string pred = b64d(kvs[kvs.size() - 1], "key");
            const bool whole_range = permit && kvs.size() == request_.permits;
            const bool wake_on_put = permit && !whole_range;
            const auto at = as_i64(field(reply, "header"), "revision");
            // Watch the predecessor from just after the range's revision: a
            // deletion after the range is in the watch history, so none can be
            // missed. Starting at the current revision + 1 keeps the watcher
            // "synced": etcd delivers its events at once. If any write (to any
            // key) came between the range and the watch's creation, the start
            // is in the past and the watcher is "unsynced": its events then
            // come from etcd's catch-up loop, up to 100 ms late. The creation
            // reply's header.revision shows it; such a watch is dropped and we
            // range again (the range, not the watch, decides).
            now = spi::clock::now();
            auto budget =
                std::min(std::chrono::duration_cast<std::chrono::milliseconds>(until - now),
                         renew_every - std::chrono::duration_cast<std::chrono::milliseconds>(now - last_renew));
            budget = std::max<std::chrono::milliseconds>(budget, 1ms);
            const auto rq = whole_range
                                ? gateway::watch(where_.blockers, after(at), budget, prefix_end(where_.blockers), true)
                                : gateway::watch(pred, after(at), budget);
            std::string error;
            bool unsynced = false, woke = false;
            auto res = gateway_.client().stream_lines(rq, [&](std::string_view line) {
                const json msg = http::parse_reply(line);
                if (msg.is_discarded() || !msg.is_object()) {
                    error = "unexpected reply (a line of the stream that is not a watch message)";
                    return false;
                }
                if (msg.contains("error")) {
                    error = error_text(field(msg, "error"));
                    return false;
                }
                const json& result = message_result(msg);
                if (flag(result, "canceled")) return false;  // compacted etc.: range again
                for (const auto& ev : list(result, "events")) {
                    if (wake_on_put || text(ev, "type") == "DELETE") {
                        woke = true;
                        return false;
                    }
                }
                if (flag(result, "created") && unsynced_retries < max_unsynced_retries &&
                    as_i64(field(result, "header"), "revision") > at) {
                    unsynced = true;
                    return false;
                }
                return true;
            });
            unsynced_retries = unsynced ? unsynced_retries + 1 : 0;
            if (!error.empty()) throw_error(errc::unavailable, kBackend, "watch: " + error);
            if (res.how == http::outcome::failed) {
                gateway_.client().rotate_endpoint(res.resp.endpoint);
                throw_error(errc::unavailable, kBackend, "watch stream broke: " + res.error);
            }
            failing_since = {};
            if (woke || unsynced || res.how == http::outcome::timed_out)
                idle = spi::backoff(request_.retry_min, request_.retry_max);
            else idle.sleep(until);
        } catch (const unavailable_error&) {
            now = spi::clock::now();
            if (failing_since == spi::clock::time_point{}) failing_since = now;
            if (now - failing_since > tolerate) throw;
            std::this_thread::sleep_for(std::min<std::chrono::nanoseconds>(100ms, until - now));
        }
    }
}

// Our key lives as long as the session's lease: the grant is valid for a lease
// from the last grant or keepalive of that lease the server confirmed.
spi::grant handle::granted(const spi::loss_sink& lost, bool waited) {
    const auto from = after(revision_);
    auto rq = watch_request(from);
    auto lk = monitor_.lock();
    monitor_from_ = from;
    monitor_lost_.clear();
    monitor_.start(lk, std::move(rq), lost);
    std::lock_guard renewal(session_->mutex);
    return spi::grant{static_cast<std::uint64_t>(token_), session_->renewed, waited};
}

// The watch of our key from revision `from` (0 = now).
http::request handle::watch_request(std::int64_t from) const {
    return gateway::watch(key_, from, 60s);  // then watched again from the last revision seen
}

// On the loop thread: one message of the watch stream.
bool handle::on_monitor_line(std::string_view line) {
    const json msg = http::parse_reply(line);
    if (msg.is_discarded() || !msg.is_object() || msg.contains("error")) return false;
    const json& result = message_result(msg);
    auto lk = monitor_.lock();
    if (flag(result, "canceled")) {  // compacted past our revision: watch from now on
        monitor_from_ = 0;
        return false;
    }
    for (const auto& ev : list(result, "events")) {
        if (ev.contains("kv")) monitor_from_ = std::max(monitor_from_, after(as_i64(field(ev, "kv"), "mod_revision")));
        if (text(ev, "type") == "DELETE") {
            monitor_lost_ = "lock key " + key_ + " was deleted (lease revoked or expired, or the key removed)";
            return false;
        }
    }
    return true;
}

void handle::on_monitor_done(const http::transfer_result& r) {
    std::int64_t from;
    {
        auto lk = monitor_.lock();
        if (!monitor_.running(lk)) return;
        if (!monitor_lost_.empty()) {
            monitor_.lost(lk, monitor_lost_);
            return;
        }
        from = monitor_from_;
    }
    // The stream ended (its 60 s bound, a member went away, an error): watch
    // again; the keepalives decide about loss while the members are unreachable.
    const bool failed = r.how == http::outcome::failed || r.resp.status != 200;
    if (failed) gateway_.client().rotate_endpoint(r.resp.endpoint);
    // A watch that ran its course (the 60 s bound) starts again at once; one that
    // ended sooner with nothing new (canceled, a member that ends streams at
    // once) waits first, longer each time in a row.
    monitor_.restart(watch_request(from), failed ? 500ms : monitor_.pace(r.how == http::outcome::timed_out, 30s));
}

void handle::cleanup() noexcept {
    revision_ = 0;
    if (!request_.auto_renew) {  // a lease of its own: revoking it deletes the key
        gateway_.revoke(*session_);
        if (session_->dead) return;
    }
    try {
        gateway_.call("/v3/kv/deleterange", json{{"key", base64_encode(key_)}}, 2000ms);
    } catch (...) {
        try {
            gateway_.add_orphan(*session_, key_, value_);
        } catch (...) {}
    }
    revision_ = 0;
}

// The last permit key of a semaphore is gone: delete its size key, unless a
// key came meanwhile (best effort: a size key left behind is taken over by the
// next client of another size, settle_size()).
void handle::forget_size() noexcept {
    try {
        gateway_.call(
            "/v3/kv/txn",
            json{{"compare", json::array({{{"key", base64_encode(where_.blockers)},
                                           {"range_end", base64_encode(prefix_end(where_.blockers))},
                                           {"target", "CREATE"},
                                           {"result", "EQUAL"},
                                           {"create_revision", "0"}},
                                          {{"key", base64_encode(where_.size_key)},
                                           {"target", "VALUE"},
                                           {"result", "EQUAL"},
                                           {"value", base64_encode(std::to_string(request_.permits))}}})},
                 {"success", json::array({{{"request_delete_range", {{"key", base64_encode(where_.size_key)}}}}})}},
            2000ms);
    } catch (...) {}
}

void handle::release() {
    monitor_.stop();
    if (revision_ == 0 || !session_) throw_error(errc::not_owner, kBackend, "lock '" + request_.name + "' is not held");
    const auto rev = std::exchange(revision_, 0);
    json reply;
    try {
        // Delete only our grant: the key with our create revision.
        reply = gateway_.call(
            "/v3/kv/txn", json{{"compare", json::array({{{"key", base64_encode(key_)},
                                                         {"target", "CREATE"},
                                                         {"result", "EQUAL"},
                                                         {"create_revision", std::to_string(rev)}}})},
                               {"success", json::array({{{"request_delete_range", {{"key", base64_encode(key_)}}}},
                                                        {{"request_range",
                                                          {{"key", base64_encode(where_.blockers)},
                                                           {"range_end", base64_encode(prefix_end(where_.blockers))},
                                                           {"count_only", true}}}}})}});
    } catch (const grpc_error& e) {
        gateway_.add_orphan(*session_, key_, value_);
        throw_error(errc::in_doubt, kBackend, "release: " + e.reason(), e.code);
    } catch (const error& e) {
        gateway_.add_orphan(*session_, key_, value_);
        throw_error(errc::in_doubt, kBackend, std::string("release of '") + request_.name + "': " + e.what(),
                    e.native_code(), e.native_message());
    }
    if (!request_.auto_renew) gateway_.revoke(*session_);
    if (request_.kind == spi::lock_kind::permit) {
        const auto& responses = list(reply, "responses");
        if (responses.size() >= 2 && as_i64(field(item(responses, 1), "response_range"), "count") == 0) forget_size();
    }
    if (!flag(reply, "succeeded"))
        throw_error(errc::not_owner, kBackend,
                    "lock '" + request_.name + "' was lost before its release (key " + key_ + " gone)");
}

}  // namespace

std::unique_ptr<spi::lock_handle> make_lock(gateway& g, const spi::lock_request& r) {
    return std::make_unique<handle>(g, r);
}

void keepalive_batch(gateway& g, std::span<spi::lock_handle* const> handles, std::span<spi::keepalive_result> results) {
    std::map<session*, spi::keepalive_result> by_session;
    for (auto* h : handles) {
        auto* s = static_cast<handle*>(h)->current_session().get();
        if (s != nullptr && by_session.find(s) == by_session.end()) by_session.emplace(s, g.renew(*s));
    }
    std::vector<std::size_t> check;
    for (std::size_t i = 0; i < handles.size(); ++i) {
        auto* s = static_cast<handle*>(handles[i])->current_session().get();
        if (s == nullptr) {
            results[i] = spi::keepalive_result::lost("no session");
            continue;
        }
        results[i] = by_session[s];
        if (results[i].state == spi::keepalive_result::status::ok) check.push_back(i);
    }
    for (std::size_t from = 0; from < check.size(); from += 64) {
        const auto to = std::min(check.size(), from + 64);
        json ops = json::array();
        for (auto k = from; k < to; ++k)
            ops.push_back(
                {{"request_range",
                  {{"key", base64_encode(static_cast<handle*>(handles[check[k]])->key())}, {"keys_only", true}}}});
        try {
            auto* s = static_cast<handle*>(handles[check[from]])->current_session().get();
            auto reply = g.call("/v3/kv/txn", json{{"success", ops}}, g.renewal_timeout(*s));
            const auto& responses = list(reply, "responses");
            for (auto k = from; k < to; ++k) {
                auto* h = static_cast<handle*>(handles[check[k]]);
                const auto& kvs = range_kvs(responses, k - from);
                if (kvs.empty() || as_i64(kvs[0], "create_revision") != h->revision())
                    results[check[k]] = spi::keepalive_result::lost("lock key " + h->key() + " was deleted");
            }
        } catch (const std::exception& e) {
            for (auto k = from; k < to; ++k) results[check[k]] = spi::keepalive_result::failed(e.what());
        }
    }
}

names names_of(const std::string& prefix, std::string_view name, spi::lock_kind kind) {
    const auto enc = http::encode_name(name);
    switch (kind) {
        case spi::lock_kind::read:
            return {prefix + "/" + enc + ":rw/read/", prefix + "/" + enc + ":rw/write/", {}, true, true,
                    prefix + "/" + enc + ":rw-grant"};
        case spi::lock_kind::write:
            return {prefix + "/" + enc + ":rw/write/", prefix + "/" + enc + ":rw/", {}, true, false, {}};
        case spi::lock_kind::permit:
            return {prefix + "/" + enc + ":sem/permit/",
                    prefix + "/" + enc + ":sem/permit/",
                    prefix + "/" + enc + ":sem/size",
                    true,
                    true,
                    {}};
        case spi::lock_kind::exclusive:
        case spi::lock_kind::leader: break;  // an election is the mutex: Go's Election layout is the mutex's
    }
    return {prefix + "/" + enc + "/", prefix + "/" + enc + "/", {}, false, true, {}};
}

lock_info inspect(gateway& g, std::string_view name) {
    lock_info info;
    const std::string dir = names_of(g.config().prefix, name, spi::lock_kind::exclusive).own;
    // The holder (the first key by create revision) and how many keys stand:
    // the range's count is of every key in the range, whatever its limit.
    auto reply = g.call("/v3/kv/range", json{{"key", base64_encode(dir)},
                                             {"range_end", base64_encode(prefix_end(dir))},
                                             {"sort_order", "ASCEND"},
                                             {"sort_target", "CREATE"},
                                             {"limit", "1"}});
    const auto& kvs = list(reply, "kvs");
    const auto count = std::max<std::int64_t>(as_i64(reply, "count"), static_cast<std::int64_t>(kvs.size()));
    info.held = !kvs.empty();
    info.waiters =
        static_cast<std::uint32_t>(std::clamp<std::int64_t>(count - 1, 0, std::numeric_limits<std::uint32_t>::max()));
    if (kvs.empty()) return info;
    const auto& holder = kvs[0];
    auto value = b64d(holder, "value");
    if (value.empty()) {
        // Go's concurrency.Mutex (etcdctl lock) puts an empty value.
        info.unknown.emplace("holder",
                             "the holder's key has an empty value: a holder that stores no label "
                             "(Go's concurrency.Mutex, etcdctl lock)");
        info.unknown.emplace("token",
                             "the holder stores no label, so it is not distlock, whose token is its key's "
                             "mod revision; a Go concurrency.Mutex's (etcdctl lock's ETCD_LOCK_REV) is the "
                             "store revision when it found its turn, which etcd does not keep");
    } else {
        info.holder = std::move(value);
        info.token = static_cast<std::uint64_t>(as_i64(holder, "mod_revision"));
    }
    const auto lease = as_i64(holder, "lease");
    if (lease == 0) {
        info.unknown.emplace("remaining", "the holder's key has no lease: it stays until deleted");
        return info;
    }
    // The lease's time to live, in whole seconds rounded down by etcd; -1 once
    // the lease is gone (its keys are being deleted).
    try {
        auto ttl = g.call("/v3/lease/timetolive", json{{"ID", std::to_string(lease)}});
        info.remaining = lease_seconds(as_i64(ttl, "TTL"));
    } catch (const grpc_error& e) {  // lease not found: expired between the two reads
        if (e.code != 5) throw_error(errc::unavailable, kBackend, "lease time to live: " + e.reason(), e.code);
        info.remaining = std::chrono::milliseconds{0};
    }
    return info;
}

void break_lock(gateway& g, std::string_view name) {
    // The mutex: its holder's key (the first by create revision). The
    // read-write lock and the semaphore: every key (holders and waiters; a
    // waiter whose key is gone starts again).
    for (auto kind : {spi::lock_kind::write, spi::lock_kind::permit}) {
        const auto where = names_of(g.config().prefix, name, kind);
        g.call("/v3/kv/deleterange",
               json{{"key", base64_encode(where.blockers)}, {"range_end", base64_encode(prefix_end(where.blockers))}});
    }
    const std::string dir = names_of(g.config().prefix, name, spi::lock_kind::exclusive).own;
    auto reply = g.call("/v3/kv/range", json{{"key", base64_encode(dir)},
                                             {"range_end", base64_encode(prefix_end(dir))},
                                             {"sort_order", "ASCEND"},
                                             {"sort_target", "CREATE"},
                                             {"limit", "1"},
                                             {"keys_only", true}});
    const auto& kvs = list(reply, "kvs");
    if (kvs.empty()) return;
    // Only a key of this name's directory, whatever the reply says.
    const auto key = b64d(kvs[0], "key");
    if (key.compare(0, dir.size(), dir) != 0)
        throw_error(errc::unavailable, kBackend, "break_lock: the range of " + dir + " answered a key outside it");
    g.call("/v3/kv/deleterange", json{{"key", base64_encode(key)}});
}

}  // namespace distlock::backends::etcd
