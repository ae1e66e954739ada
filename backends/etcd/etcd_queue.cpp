// The etcd queue engine (etcd_queue.hpp): acquire() in named steps (our key
// put by a create-if-absent txn, the wait, the mark of a grant that waited),
// the watch of our key while held, the cleanup of a failed acquisition and the
// release. The wait itself is in etcd_wait.cpp.
#include "etcd_queue.hpp"

#include <algorithm>
#include <chrono>
#include <utility>

#include "distlock/error.hpp"
#include "http/http_codec.hpp"
#include "http/http_json.hpp"

namespace distlock::backends::etcd {

using namespace std::chrono_literals;
using http::base64_encode;

queue::queue(gateway& g, const spi::lock_request& r)
    : gateway_(g),
      request_(r),
      where_(names_of(g.config().prefix, r.name, r.kind)),
      monitor_(
          g.events(), [this](std::string_view line) { return on_monitor_line(line); },
          [this](http::transfer_result t) { on_monitor_done(t); }) {}

std::optional<spi::grant> queue::acquire(spi::deadline until, const spi::loss_sink& lost) {
    bool waited = false;  // a round waited for the keys ahead of ours
    for (int round = 0;; ++round) {
        open_round();
        const auto reply = enqueue(round);
        if (!reply || !own_key(*reply, round)) continue;
        if (granted_at_once(range_kvs(list(*reply, "responses"), 1))) return granted(lost, waited);
        waited = true;
        switch (wait_in_line(until)) {
            case turn::mine: return granted(lost, waited);
            case turn::timed_out:
                cleanup();
                blocked(*reply);
                return std::nullopt;
            case turn::key_lost: break;
        }
        // Our key vanished while we waited (lease expired): start again.
        if (spi::clock::now() >= until) return std::nullopt;
    }
}

std::unique_ptr<spi::wake_subscription> queue::watch_releases(spi::wake_sink wake) {
    std::shared_ptr<release_feed::watcher> w;
    auto sub = gateway_.releases().subscribe(std::move(wake), w);
    watcher_ = w;
    return sub;
}

void queue::blocked(const json& reply) const {
    auto w = watcher_.lock();
    if (!w) return;
    std::vector<std::string> keys;
    for (const auto& kv : range_kvs(list(reply, "responses"), 1))
        if (auto k = b64d(kv, "key"); k != key_) keys.push_back(std::move(k));
    gateway_.releases().blocked_by(w, std::move(keys), as_i64(field(reply, "header"), "revision"));
}

// The session, our key and its value for this round.
void queue::open_round() {
    session_ = gateway_.session_for(request_.lease, request_.auto_renew);
    key_ = where_.own + (where_.unique_keys ? unique_suffix() : lease_hex(session_->id));
    // A mutex's key holds the holder label (as Go's concurrency.Election
    // holds its proposal; Go's Mutex ignores values): the same key and value
    // for every acquisition of the name on this lease, so an orphan of an
    // earlier one is dropped first (a stale key is deleted by found_key()).
    // The other kinds' keys hold a random token of the acquisition, by which a
    // key of ours is told from another client's of the same name.
    if (where_.unique_keys) {
        value_ = spi::random_token();
    } else {
        value_ = request_.holder;
        gateway_.forget_orphan(*session_, key_);
    }
}

// One txn: if our key's create revision is 0, put it; either way range the
// head of the deciding range (failure: our key first, then the head).
json queue::enqueue_txn() const {
    json first_range = oldest_first(where_.blockers, first_in_line());
    first_range["keys_only"] = true;
    json compare = json::array({created_at(key_, 0)});
    json success = json::array(
        {{{"request_put",
           {{"key", base64_encode(key_)}, {"value", base64_encode(value_)}, {"lease", std::to_string(session_->id)}}}},
         {{"request_range", first_range}}});
    json failure = json::array({{{"request_range", {{"key", base64_encode(key_)}}}}, {{"request_range", first_range}}});
    guard(compare, failure);
    return json{{"compare", compare}, {"success", success}, {"failure", failure}};
}

// Sends the acquire txn: its reply, or none when the lease expired while
// unused (the next round takes a new one).
std::optional<json> queue::enqueue(int round) {
    const json txn = enqueue_txn();
    json reply;
    try {
        reply = gateway_.call("/v3/kv/txn", txn);
    } catch (const grpc_error& e) {
        if (e.code == 5 && round < 3) {  // lease not found: it expired while unused
            session_->dead = true;
            return std::nullopt;
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
    if (list(reply, "responses").size() < 2) throw_error(errc::unavailable, kBackend, "acquire txn: short reply");
    return reply;
}

// Our key's create revision and the token from the acquire txn's reply; false
// to start a new round.
bool queue::own_key(const json& reply, int round) {
    if (flag(reply, "succeeded")) {
        // Our key was created by this txn: its create revision is the
        // txn's revision, and the store was at it when we found our turn.
        revision_ = token_ = as_i64(field(reply, "header"), "revision");
    } else if (!found_key(reply, round)) {
        return false;
    }
    if (revision_ <= 0) {  // not a revision of etcd's (they start at 1): an unexpected reply
        cleanup();
        throw_error(errc::unavailable, kBackend, "acquire txn: unexpected reply (no revision)");
    }
    return true;
}

// The txn found our key standing (or a guard failed): whether the key is
// ours to keep; false to start a new round.
bool queue::found_key(const json& reply, int round) {
    const auto& responses = list(reply, "responses");
    const auto& kvs = range_kvs(responses, 0);
    if (kvs.empty()) {
        if (guard_failed(responses, round)) return false;
        if (round < 3) return false;  // deleted meanwhile: try again
        throw_error(errc::unavailable, kBackend, "acquire txn: our key vanished repeatedly");
    }
    if (!where_.unique_keys) {
        // The mutex's key on our lease, left by an earlier acquisition
        // (or made by this txn when a lost reply was sent again): it is
        // ours either way; remove it and make it anew, for a create
        // revision of this acquisition.
        gateway_.call("/v3/kv/deleterange", json{{"key", base64_encode(key_)}});
        if (round < 3) return false;
        throw_error(errc::unavailable, kBackend, "cannot replace a stale key " + key_);
    }
    if (b64d(kvs[0], "value") != value_) {  // another client's key of the same name: take another name
        if (!request_.auto_renew) gateway_.revoke(*session_);
        if (round < 3) return false;
        throw_error(errc::unavailable, kBackend, "cannot make a key of its own under " + where_.own);
    }
    revision_ = as_i64(kvs[0], "create_revision");
    token_ = as_i64(field(reply, "header"), "revision");
    return true;
}

// Waits for the keys ahead of ours, then marks the grant; a failed or timed
// out wait leaves nothing of ours behind.
queue::turn queue::wait_in_line(spi::deadline until) {
    turn t;
    try {
        t = spi::clock::now() >= until ? turn::timed_out : wait_for_turn(until);
        if (t == turn::mine && where_.marked && !mark_granted()) t = turn::key_lost;
    } catch (...) {
        cleanup();
        throw;
    }
    if (t == turn::mine) keep_own_lease();
    return t;
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
bool queue::mark_granted() {
    const bool own = where_.mark_key.empty();
    auto reply = gateway_.call("/v3/kv/txn",
                               json{{"compare", json::array({created_at(key_, revision_)})},
                                    {"success", json::array({{{"request_put",
                                                               {{"key", base64_encode(own ? key_ : where_.mark_key)},
                                                                {"value", base64_encode(own ? value_ : std::string{})},
                                                                {"lease", std::to_string(session_->id)}}}}})}});
    if (!flag(reply, "succeeded")) return false;
    token_ = as_i64(field(reply, "header"), "revision");
    return true;
}

// A lease of its own is not renewed from now on: give it its whole TTL from here.
void queue::keep_own_lease() {
    if (!request_.auto_renew && gateway_.renew(*session_).state != spi::keepalive_result::status::ok) {
        cleanup();
        throw_error(errc::unavailable, kBackend, "cannot renew the lease of '" + request_.name + "'");
    }
}

// Our key lives as long as the session's lease: the grant is valid for a lease
// from the last grant or keepalive of that lease the server confirmed.
spi::grant queue::granted(const spi::loss_sink& lost, bool waited) {
    stop_watching();
    if (slot_.take(gateway_.releases())) {
        const auto from = after(revision_);
        auto rq = watch_request(from);
        auto lk = monitor_.lock();
        monitor_from_ = from;
        monitor_lost_.clear();
        monitor_.start(lk, std::move(rq), lost);
    } else {
        held_ = gateway_.releases().hold(key_, revision_, spi::wake_sink([lost, why = lost_reason()] { lost(why); }));
    }
    std::lock_guard renewal(session_->mutex);
    return spi::grant{static_cast<std::uint64_t>(token_), session_->renewed, waited};
}

void queue::stop_watching() {
    monitor_.stop();
    slot_.give_back();
    held_.reset();
}

std::string queue::lost_reason() const {
    return "lock key " + key_ + " was deleted (lease revoked or expired, or the key removed)";
}

// The watch of our key from revision `from` (0 = now).
http::request queue::watch_request(std::int64_t from) const {
    return gateway::watch(key_, from, 60s);  // then watched again from the last revision seen
}

// On the loop thread: one message of the watch stream.
bool queue::on_monitor_line(std::string_view line) {
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
            monitor_lost_ = lost_reason();
            return false;
        }
    }
    return true;
}

void queue::on_monitor_done(const http::transfer_result& r) {
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

void queue::cleanup() noexcept {
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

void queue::release() {
    stop_watching();
    if (revision_ == 0 || !session_) throw_error(errc::not_owner, kBackend, "lock '" + request_.name + "' is not held");
    const auto rev = std::exchange(revision_, 0);
    json reply;
    try {
        // Delete only our grant: the key with our create revision.
        json success = json::array({{{"request_delete_range", {{"key", base64_encode(key_)}}}}});
        if (counts_at_release()) success.push_back({{"request_range", count_of(where_.blockers)}});
        reply =
            gateway_.call("/v3/kv/txn", json{{"compare", json::array({created_at(key_, rev)})}, {"success", success}});
    } catch (const grpc_error& e) {
        gateway_.add_orphan(*session_, key_, value_);
        throw_error(errc::in_doubt, kBackend, "release: " + e.reason(), e.code);
    } catch (const error& e) {
        gateway_.add_orphan(*session_, key_, value_);
        throw_error(errc::in_doubt, kBackend, std::string("release of '") + request_.name + "': " + e.what(),
                    e.native_code(), e.native_message());
    }
    if (!request_.auto_renew) gateway_.revoke(*session_);
    released(list(reply, "responses"));
    if (!flag(reply, "succeeded"))
        throw_error(errc::not_owner, kBackend,
                    "lock '" + request_.name + "' was lost before its release (key " + key_ + " gone)");
}

// The defaults of the driver's hooks: one holder at a time.
void queue::narrow_ahead(json& range) const {
    range["sort_order"] = "DESCEND";
    range["limit"] = "1";
}

queue::place queue::place_of(const json& ahead) const {
    if (ahead.empty()) return {true, {}, false, false};
    return {false, b64d(ahead[ahead.size() - 1], "key"), false, false};
}

void queue::guard(json&, json&) const {}

bool queue::guard_failed(const json&, int) { return false; }

void queue::released(const json&) noexcept {}

}  // namespace distlock::backends::etcd
