// etcd://h1:2379,h2:2379[/prefix][?ttl=...] — the etcd v3 lock recipe (the
// algorithm of Go's clientv3/concurrency.Mutex) over etcd's JSON gateway.
//
//   session   one lease per provider and TTL, granted on first use, renewed by
//             the core scheduler every TTL/3 while a lock is held (and by the
//             waiting thread while it waits)
//   key       <prefix>/<encoded name>/<lease id in lowercase hex>, value = a
//             random token of the acquisition, attached to the lease
//   acquire   one txn: if the key's create revision is 0, put it and range the
//             name's directory sorted by create revision (first = holder)
//   wait      watch the deletion of the key created just before ours (no herd)
//   token     our key's create revision (cluster-wide, strictly increasing)
//   loss      the lease is gone (keepalive without TTL) or our key was deleted
//
// The name's directory is compatible with Go's concurrency.NewMutex(session,
// "<prefix>/<encoded name>"), so Go programs and etcdctl can share a lock.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <map>
#include <thread>

#include "distlock/spi/backend.hpp"
#include "http_codec.hpp"
#include "http_monitor.hpp"
#include "http_multi.hpp"
#include "http_options.hpp"
#include "http_pool.hpp"
#include "http_transfer.hpp"

namespace distlock::backends::etcd {
namespace {

using namespace std::chrono_literals;
using json = nlohmann::json;
using http::base64_encode;

constexpr const char* kName = "etcd";

std::int64_t as_i64(const json& j, const char* key) {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) return 0;
    if (it->is_string()) {
        try {
            return std::stoll(it->get<std::string>());
        } catch (...) {
            return 0;
        }
    }
    if (it->is_number_integer()) return it->get<std::int64_t>();
    return 0;
}

std::string b64d(const json& j, const char* key) {
    auto it = j.find(key);
    if (it == j.end() || !it->is_string()) return {};
    return http::base64_decode(it->get<std::string>()).value_or(std::string{});
}

std::string prefix_end(std::string p) {
    // The smallest key greater than every key starting with p.
    while (!p.empty()) {
        auto& c = p.back();
        if (static_cast<unsigned char>(c) < 0xFF) {
            c = static_cast<char>(static_cast<unsigned char>(c) + 1);
            return p;
        }
        p.pop_back();
    }
    return std::string(1, '\0');  // whole key space
}

std::string lease_hex(std::int64_t id) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%" PRIx64, static_cast<std::uint64_t>(id));
    return buf;
}

// A gRPC status carried by the gateway's error reply.
struct grpc_error : std::runtime_error {
    int code;
    grpc_error(int c, const std::string& m) : std::runtime_error(m), code(c) {}
};

struct settings {
    std::string prefix = "/distlock";
    std::chrono::milliseconds default_ttl{60s};
    std::string user, password;
};

// A lease shared by the locks of one provider that use the same TTL.
struct session {
    std::int64_t id = 0;
    std::chrono::seconds ttl{0};
    std::mutex mutex;                   // guards the fields below
    // Keys of ours whose deletion failed (key, value of that acquisition): deleted
    // before the next renewal, only while they still hold that value.
    std::vector<std::pair<std::string, std::string>> orphans;
    spi::clock::time_point renewed;     // last grant or successful keepalive
    std::atomic<bool> dead{false};      // the server said the lease is gone
};

class backend;

class handle final : public spi::lock_handle {
public:
    handle(backend& b, const spi::lock_request& r);
    std::optional<spi::grant> acquire(spi::deadline until) override;
    void release() override;
    std::chrono::milliseconds keepalive_interval() const override;
    spi::keepalive_result keepalive() override;

    const std::shared_ptr<session>& current_session() const { return session_; }
    const std::string& key() const { return key_; }
    std::int64_t revision() const { return revision_; }

private:
    enum class turn { mine, timed_out, key_lost };
    turn wait_for_turn(spi::deadline until);
    void cleanup() noexcept;
    spi::grant granted();
    http::request watch_request(std::int64_t from) const;
    bool on_monitor_line(std::string_view line);
    void on_monitor_done(const http::transfer_result& r);

    backend& backend_;
    spi::lock_request request_;
    std::string dir_;  // <prefix>/<encoded name>/
    std::shared_ptr<session> session_;
    std::string key_, value_;
    std::int64_t revision_ = 0;

    // The watch of our own key while held (on the provider's loop thread): its
    // deletion is reported as a loss at once, not at the next keepalive.
    std::int64_t monitor_from_ = 0;  // under monitor_'s lock: start revision of the next watch (0 = now)
    std::string monitor_lost_;       // under monitor_'s lock: why, once the watch saw our key deleted
    http::monitor monitor_;          // last: stopped before the fields its callbacks use go
};

class backend final : public spi::backend {
public:
    backend(http::options o, settings s) : client_(std::move(o)), settings_(std::move(s)) {
        caps_.crash_release_bound = 1500ms;  // lease expiry is checked every 500 ms, TTLs are whole seconds
        if (!settings_.user.empty()) authenticate();
        // Fail at once when no member answers (and check the credentials).
        (void)round_trip();
    }

    ~backend() override {
        std::map<std::int64_t, std::shared_ptr<session>> all;
        {
            std::lock_guard lk(mutex_);
            all.swap(sessions_);
        }
        for (auto& [ttl, s] : all) {
            if (s->dead) continue;
            try {
                call("/v3/lease/revoke", json{{"ID", std::to_string(s->id)}}, 1000ms);
            } catch (...) {
            }
        }
    }

    std::string_view name() const noexcept override { return kName; }
    const capabilities& caps() const noexcept override { return caps_; }
    std::chrono::milliseconds default_lease() const override { return settings_.default_ttl; }
    std::unique_ptr<spi::lock_handle> make_lock(const spi::lock_request& r) override {
        return std::make_unique<handle>(*this, r);
    }

    std::optional<std::chrono::nanoseconds> round_trip() override {
        auto t0 = spi::clock::now();
        call("/v3/kv/range", json{{"key", base64_encode(settings_.prefix)}, {"count_only", true}});
        return spi::clock::now() - t0;
    }

    void keepalive_batch(std::span<spi::lock_handle* const> handles, std::span<spi::keepalive_result> results) override;
    void break_lock(std::string_view name) override;

    // ---- used by handles --------------------------------------------------------
    const settings& config() const { return settings_; }
    http::client& client() { return client_; }
    http::loop& events() { return loop_; }

    // POSTs a JSON body and returns the JSON reply. Throws grpc_error for an
    // error reply the caller may want to handle, distlock errors otherwise.
    json call(const std::string& path, const json& body, std::chrono::milliseconds timeout = 0ms) {
        for (int attempt = 0;; ++attempt) {
            http::request rq;
            rq.method = "POST";
            rq.target = path;
            rq.body = body.dump();
            rq.timeout = timeout;
            auto resp = client_.send(rq);
            json j = json::parse(resp.body, nullptr, false);
            if (j.is_discarded() || !j.is_object()) {
                // Not etcd's JSON gateway answering: a 4xx will not heal by retrying (a wrong
                // port, another server, a path prefix in front of etcd); a 5xx may.
                const bool wrong_server = resp.status >= 400 && resp.status < 500;
                if (!wrong_server) client_.rotate_endpoint(resp.endpoint);
                throw_error(wrong_server ? errc::invalid_argument : errc::unavailable, kName,
                            path + ": unexpected reply (HTTP " + std::to_string(resp.status) + ")" +
                                (wrong_server ? ": is " + resp.endpoint +
                                                    " etcd's client port (2379 by default) with the v3 JSON gateway?"
                                              : std::string{}),
                            resp.status, resp.body.substr(0, 200));
            }
            auto err = j.find("error");
            if (resp.status == 200 && (err == j.end() || !err->is_string())) return j;
            int code = static_cast<int>(as_i64(j, "code"));
            std::string message = j.value("message", err != j.end() && err->is_string() ? err->get<std::string>()
                                                                                      : std::string("HTTP error"));
            if (code == 16 && !settings_.user.empty() && attempt == 0 &&
                message.find("invalid auth token") != std::string::npos) {
                authenticate();  // the token expired: once more with a fresh one
                continue;
            }
            throw_grpc(path, code, message, resp.endpoint);
        }
    }

    [[noreturn]] void throw_grpc(const std::string& path, int code, const std::string& message,
                                 const std::string& endpoint) {
        // etcd answers some authentication failures with INVALID_ARGUMENT.
        for (const char* auth : {"user name is empty", "authentication failed", "permission denied", "auth token"})
            if (message.find(auth) != std::string::npos)
                throw_error(errc::access_denied, kName, path + ": " + message, code, message);
        switch (code) {
            case 5:  // NOT_FOUND (lease not found)
            case 9:  // FAILED_PRECONDITION
                throw grpc_error(code, message);
            case 3:   // INVALID_ARGUMENT
            case 11:  // OUT_OF_RANGE
                throw_error(errc::invalid_argument, kName, path + ": " + message, code, message);
            case 7:   // PERMISSION_DENIED
            case 16:  // UNAUTHENTICATED
                throw_error(errc::access_denied, kName, path + ": " + message, code, message);
            default:  // UNAVAILABLE, DEADLINE_EXCEEDED, no leader, ...: another member may do better
                client_.rotate_endpoint(endpoint);
                throw_error(errc::unavailable, kName, path + ": " + message, code, message);
        }
    }

    // The lease for `lease` (rounded up to whole seconds), fresh enough that a
    // key put now outlives the first renewal: renewed when TTL/3 has passed.
    //
    // `shared` = false: a lease of its own (a lock without auto-renewal must not
    // be kept alive by the renewals of the provider's other locks).
    std::shared_ptr<session> session_for(std::chrono::milliseconds lease, bool shared = true) {
        const auto ttl = std::max<std::int64_t>(1, (lease.count() + 999) / 1000);
        if (!shared) return grant(ttl);
        std::lock_guard lk(grant_mutex_);
        std::shared_ptr<session> s;
        {
            std::lock_guard m(mutex_);
            if (auto it = sessions_.find(ttl); it != sessions_.end()) s = it->second;
        }
        if (s && !s->dead) {
            spi::clock::time_point renewed;
            {
                std::lock_guard m(s->mutex);
                renewed = s->renewed;
            }
            if (spi::clock::now() - renewed < s->ttl / 3) return s;
            if (renew(*s).state == spi::keepalive_result::status::ok) return s;
            if (!s->dead) throw_error(errc::unavailable, kName, "cannot renew the session lease");
        }
        auto fresh = grant(ttl);
        std::lock_guard m(mutex_);
        sessions_[ttl] = fresh;
        return fresh;
    }

    std::shared_ptr<session> grant(std::int64_t ttl) {
        auto sent = spi::clock::now();
        auto reply = call("/v3/lease/grant", json{{"TTL", std::to_string(ttl)}});
        auto fresh = std::make_shared<session>();
        fresh->id = as_i64(reply, "ID");
        fresh->ttl = std::chrono::seconds(std::max<std::int64_t>(as_i64(reply, "TTL"), ttl));
        fresh->renewed = sent;
        if (fresh->id == 0) throw_error(errc::unavailable, kName, "lease grant returned no ID");
        return fresh;
    }

    void revoke(session& s) noexcept {
        try {
            call("/v3/lease/revoke", json{{"ID", std::to_string(s.id)}}, 2000ms);
            s.dead = true;
        } catch (...) {
        }
    }

    // Deletes the session's orphan keys, then keeps its lease alive. Never throws.
    spi::keepalive_result renew(session& s) noexcept {
        try {
            std::vector<std::pair<std::string, std::string>> orphans;
            {
                std::lock_guard lk(s.mutex);
                orphans = s.orphans;
            }
            for (const auto& [key, value] : orphans) {
                call("/v3/kv/txn",
                     json{{"compare", json::array({{{"key", base64_encode(key)},
                                                    {"target", "VALUE"},
                                                    {"result", "EQUAL"},
                                                    {"value", base64_encode(value)}}})},
                          {"success", json::array({{{"request_delete_range", {{"key", base64_encode(key)}}}}})}},
                     renewal_timeout(s));
                std::lock_guard lk(s.mutex);
                auto it = std::find(s.orphans.begin(), s.orphans.end(), std::make_pair(key, value));
                if (it != s.orphans.end()) s.orphans.erase(it);
            }
            auto sent = spi::clock::now();
            http::request rq;
            rq.method = "POST";
            rq.target = "/v3/lease/keepalive";
            rq.body = json{{"ID", std::to_string(s.id)}}.dump();
            rq.timeout = renewal_timeout(s);
            auto resp = client_.send(rq);
            json j = json::parse(resp.body, nullptr, false);
            if (j.is_discarded() || !j.is_object() || resp.status != 200)
                return spi::keepalive_result::failed("lease keepalive: HTTP " + std::to_string(resp.status) + " " +
                                                     resp.body.substr(0, 200));
            if (j.contains("error")) {
                client_.rotate_endpoint(resp.endpoint);
                return spi::keepalive_result::failed("lease keepalive: " + j["error"].dump());
            }
            const json& result = j.contains("result") ? j["result"] : j;
            if (as_i64(result, "TTL") <= 0) {
                s.dead = true;
                return spi::keepalive_result::lost("the session lease " + lease_hex(s.id) + " has expired");
            }
            std::lock_guard lk(s.mutex);
            s.renewed = sent;
            return spi::keepalive_result::ok();
        } catch (const std::exception& e) {
            return spi::keepalive_result::failed(e.what());
        }
    }

    // A renewal that waits longer than a third of the TTL on a hung member would
    // cost the lease: give up sooner and let the next request try another member.
    std::chrono::milliseconds renewal_timeout(const session& s) const {
        auto third = std::chrono::duration_cast<std::chrono::milliseconds>(s.ttl) / 3;
        return std::clamp<std::chrono::milliseconds>(third, 300ms, client_.opts().request_timeout);
    }

    void add_orphan(session& s, const std::string& key, const std::string& value) {
        std::lock_guard lk(s.mutex);
        s.orphans.emplace_back(key, value);
    }

private:
    void authenticate() {
        client_.set_header("Authorization", "");
        try {
            auto reply = call("/v3/auth/authenticate", json{{"name", settings_.user}, {"password", settings_.password}});
            auto token = reply.value("token", std::string{});
            if (token.empty()) throw_error(errc::access_denied, kName, "authentication returned no token");
            client_.set_header("Authorization", token);
        } catch (const grpc_error& e) {
            throw_error(errc::access_denied, kName, std::string("authentication failed: ") + e.what(), e.code);
        } catch (const invalid_argument_error& e) {
            throw_error(errc::access_denied, kName, std::string("authentication failed: ") + e.what(),
                        e.native_code(), e.native_message());
        }
    }

    http::client client_;
    settings settings_;
    capabilities caps_;
    http::loop loop_{client_};  // after client_: stopped before it
    std::mutex grant_mutex_;  // one grant at a time
    std::mutex mutex_;        // guards sessions_
    std::map<std::int64_t, std::shared_ptr<session>> sessions_;  // TTL seconds -> lease
};

// ---- handle --------------------------------------------------------------------

handle::handle(backend& b, const spi::lock_request& r)
    : backend_(b),
      request_(r),
      dir_(b.config().prefix + "/" + http::encode_name(r.name) + "/"),
      monitor_(b.events(), [this](std::string_view line) { return on_monitor_line(line); },
               [this](http::transfer_result t) { on_monitor_done(t); }) {}

std::chrono::milliseconds handle::keepalive_interval() const {
    if (!request_.auto_renew || !session_) return 0ms;
    return std::max<std::chrono::milliseconds>(50ms, std::chrono::duration_cast<std::chrono::milliseconds>(session_->ttl) / 3);
}

std::optional<spi::grant> handle::acquire(spi::deadline until) {
    const auto range_first = [&] {
        return json{{"key", base64_encode(dir_)},
                    {"range_end", base64_encode(prefix_end(dir_))},
                    {"sort_order", "ASCEND"},
                    {"sort_target", "CREATE"},
                    {"limit", "1"},
                    {"keys_only", true}};
    };
    for (int round = 0;; ++round) {
        session_ = backend_.session_for(request_.lease, request_.auto_renew);
        key_ = dir_ + lease_hex(session_->id);
        value_ = spi::random_token();
        json txn{{"compare", json::array({{{"key", base64_encode(key_)},
                                            {"target", "CREATE"},
                                            {"result", "EQUAL"},
                                            {"create_revision", "0"}}})},
                 {"success", json::array({{{"request_put", {{"key", base64_encode(key_)},
                                                            {"value", base64_encode(value_)},
                                                            {"lease", std::to_string(session_->id)}}}},
                                          {{"request_range", range_first()}}})},
                 {"failure", json::array({{{"request_range", {{"key", base64_encode(key_)}}}},
                                          {{"request_range", range_first()}}})}};
        json reply;
        try {
            reply = backend_.call("/v3/kv/txn", txn);
        } catch (const grpc_error& e) {
            if (e.code == 5 && round < 3) {  // lease not found: it expired while unused
                session_->dead = true;
                continue;
            }
            throw_error(errc::unavailable, kName, std::string("acquire txn: ") + e.what(), e.code);
        } catch (const in_doubt_error&) {
            throw;
        } catch (const unavailable_error&) {
            // The put may have happened: our key, if any, dies with the lease
            // unless deleted; remember it for the next renewal.
            backend_.add_orphan(*session_, key_, value_);
            throw;
        }
        const auto& responses = reply.value("responses", json::array());
        if (responses.size() < 2) throw_error(errc::unavailable, kName, "acquire txn: short reply");
        if (reply.value("succeeded", false)) {
            revision_ = as_i64(reply["header"], "revision");
        } else {
            const auto kvs = responses[0]["response_range"].value("kvs", json::array());
            if (kvs.empty()) {  // deleted meanwhile: try again
                if (round < 3) continue;
                throw_error(errc::unavailable, kName, "acquire txn: our key vanished repeatedly");
            }
            if (b64d(kvs[0], "value") != value_) {
                // A key of ours left by an earlier acquisition: remove it, try again.
                backend_.call("/v3/kv/deleterange", json{{"key", base64_encode(key_)}});
                if (round < 3) continue;
                throw_error(errc::unavailable, kName, "cannot replace a stale key " + key_);
            }
            revision_ = as_i64(kvs[0], "create_revision");
        }
        const auto owners = responses[1]["response_range"].value("kvs", json::array());
        std::int64_t first = owners.empty() ? 0 : as_i64(owners[0], "create_revision");
        if (first == revision_) return granted();
        turn t;
        try {
            t = spi::clock::now() >= until ? turn::timed_out : wait_for_turn(until);
        } catch (...) {
            cleanup();
            throw;
        }
        if (t == turn::mine) {
            // Not renewed from now on: give the lease its whole TTL from here.
            if (!request_.auto_renew && backend_.renew(*session_).state != spi::keepalive_result::status::ok) {
                cleanup();
                throw_error(errc::unavailable, kName, "cannot renew the lease of '" + request_.name + "'");
            }
            return granted();
        }
        if (t == turn::timed_out) {
            cleanup();
            return std::nullopt;
        }
        // Our key vanished while we waited (lease expired): start again.
        if (spi::clock::now() >= until) return std::nullopt;
    }
}

// Waits until every key created before ours is gone. Renews the session while
// waiting. Transient errors are retried for a while (a leader election).
handle::turn handle::wait_for_turn(spi::deadline until) {
    const auto renew_every = std::max<std::chrono::milliseconds>(
        100ms, std::chrono::duration_cast<std::chrono::milliseconds>(session_->ttl) / 3);
    auto failing_since = spi::clock::time_point{};
    const auto tolerate = std::max<std::chrono::milliseconds>(3s, std::chrono::duration_cast<std::chrono::milliseconds>(session_->ttl));
    auto last_renew = spi::clock::now();
    // Watches given up in a row because they were created unsynced (see below).
    // Bounded so that steady writes cannot keep us ranging: after that many,
    // the watch is kept and its events come from etcd's catch-up loop.
    constexpr int max_unsynced_retries = 4;
    int unsynced_retries = 0;
    for (;;) {
        auto now = spi::clock::now();
        if (now >= until) return turn::timed_out;
        try {
            if (now - last_renew >= renew_every) {
                auto r = backend_.renew(*session_);
                if (r.state == spi::keepalive_result::status::lost) return turn::key_lost;
                if (r.state == spi::keepalive_result::status::failed) throw_error(errc::unavailable, kName, r.message);
                last_renew = spi::clock::now();
            }
            auto reply = backend_.call("/v3/kv/range", json{{"key", base64_encode(dir_)},
                                                           {"range_end", base64_encode(prefix_end(dir_))},
                                                           {"sort_order", "DESCEND"},
                                                           {"sort_target", "CREATE"},
                                                           {"max_create_revision", std::to_string(revision_ - 1)},
                                                           {"limit", "1"},
                                                           {"keys_only", true}});
            const auto kvs = reply.value("kvs", json::array());
            if (kvs.empty()) {
                // Nobody before us: make sure our own key survived the wait.
                auto mine = backend_.call("/v3/kv/range", json{{"key", base64_encode(key_)}, {"keys_only", true}});
                const auto own = mine.value("kvs", json::array());
                if (own.empty() || as_i64(own[0], "create_revision") != revision_) return turn::key_lost;
                return turn::mine;
            }
            const std::string pred = b64d(kvs[0], "key");
            const auto at = as_i64(reply["header"], "revision");
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
            auto budget = std::min(std::chrono::duration_cast<std::chrono::milliseconds>(until - now),
                                   renew_every - std::chrono::duration_cast<std::chrono::milliseconds>(now - last_renew));
            budget = std::max<std::chrono::milliseconds>(budget, 1ms);
            http::request rq;
            rq.method = "POST";
            rq.target = "/v3/watch";
            rq.body = json{{"create_request", {{"key", base64_encode(pred)}, {"start_revision", std::to_string(at + 1)}}}}.dump();
            rq.timeout = budget;
            std::string error;
            bool unsynced = false;
            auto res = backend_.client().stream_lines(rq, [&](std::string_view line) {
                json msg = json::parse(line, nullptr, false);
                if (msg.is_discarded()) return true;
                if (msg.contains("error")) {
                    error = msg["error"].dump();
                    return false;
                }
                const json& result = msg.contains("result") ? msg["result"] : msg;
                if (result.value("canceled", false)) return false;  // compacted etc.: range again
                for (const auto& ev : result.value("events", json::array()))
                    if (ev.value("type", std::string{}) == "DELETE") return false;
                if (result.value("created", false) && unsynced_retries < max_unsynced_retries &&
                    result.contains("header") && as_i64(result["header"], "revision") > at) {
                    unsynced = true;
                    return false;
                }
                return true;
            });
            unsynced_retries = unsynced ? unsynced_retries + 1 : 0;
            if (!error.empty()) throw_error(errc::unavailable, kName, "watch: " + error);
            if (res.how == http::outcome::failed) {
                backend_.client().rotate_endpoint(res.resp.endpoint);
                throw_error(errc::unavailable, kName, "watch stream broke: " + res.error);
            }
            failing_since = {};
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
spi::grant handle::granted() {
    const auto from = revision_ + 1;
    auto rq = watch_request(from);
    auto lk = monitor_.lock();
    monitor_from_ = from;
    monitor_lost_.clear();
    monitor_.start(lk, std::move(rq));
    std::lock_guard renewal(session_->mutex);
    return spi::grant{static_cast<std::uint64_t>(revision_), session_->renewed};
}

// The watch of our key from revision `from` (0 = now).
http::request handle::watch_request(std::int64_t from) const {
    json create{{"key", base64_encode(key_)}};
    if (from > 0) create["start_revision"] = std::to_string(from);
    http::request rq;
    rq.method = "POST";
    rq.target = "/v3/watch";
    rq.body = json{{"create_request", create}}.dump();
    rq.timeout = 60s;  // then watched again from the last revision seen
    return rq;
}

// On the loop thread: one message of the watch stream.
bool handle::on_monitor_line(std::string_view line) {
    json msg = json::parse(line, nullptr, false);
    if (msg.is_discarded() || !msg.is_object() || msg.contains("error")) return false;
    const json& result = msg.contains("result") ? msg["result"] : msg;
    auto lk = monitor_.lock();
    if (result.value("canceled", false)) {  // compacted past our revision: watch from now on
        monitor_from_ = 0;
        return false;
    }
    for (const auto& ev : result.value("events", json::array())) {
        if (ev.contains("kv")) monitor_from_ = std::max(monitor_from_, as_i64(ev["kv"], "mod_revision") + 1);
        if (ev.value("type", std::string{}) == "DELETE") {
            monitor_lost_ = "lock key " + key_ + " was deleted (lease revoked or expired, or the key removed)";
            return false;
        }
    }
    return true;
}

void handle::on_monitor_done(const http::transfer_result& r) {
    std::string lost;
    std::int64_t from;
    {
        auto lk = monitor_.lock();
        if (!monitor_.running(lk)) return;
        lost = monitor_lost_;
        from = monitor_from_;
        if (!lost.empty() && !monitor_.end(lk)) return;
    }
    if (!lost.empty()) {
        report_lost(lost);
        return;
    }
    // The stream ended (its 60 s bound, a member went away, an error): watch
    // again; the keepalives decide about loss while the members are unreachable.
    const bool failed = r.how == http::outcome::failed || r.resp.status != 200;
    if (failed) backend_.client().rotate_endpoint(r.resp.endpoint);
    monitor_.restart(watch_request(from), failed ? 500ms : 0ms);
}

void handle::cleanup() noexcept {
    revision_ = 0;
    if (!request_.auto_renew) {  // a lease of its own: revoking it deletes the key
        backend_.revoke(*session_);
        if (session_->dead) return;
    }
    try {
        backend_.call("/v3/kv/deleterange", json{{"key", base64_encode(key_)}}, 2000ms);
    } catch (...) {
        try {
            backend_.add_orphan(*session_, key_, value_);
        } catch (...) {
        }
    }
    revision_ = 0;
}

void handle::release() {
    monitor_.stop();
    if (revision_ == 0 || !session_) throw_error(errc::not_owner, kName, "lock '" + request_.name + "' is not held");
    const auto rev = std::exchange(revision_, 0);
    json reply;
    try {
        // Delete only our grant: the key with our create revision.
        reply = backend_.call(
            "/v3/kv/txn",
            json{{"compare", json::array({{{"key", base64_encode(key_)},
                                           {"target", "CREATE"},
                                           {"result", "EQUAL"},
                                           {"create_revision", std::to_string(rev)}}})},
                 {"success", json::array({{{"request_delete_range", {{"key", base64_encode(key_)}}}}})}});
    } catch (const grpc_error& e) {
        backend_.add_orphan(*session_, key_, value_);
        throw_error(errc::in_doubt, kName, std::string("release: ") + e.what(), e.code);
    } catch (const error& e) {
        backend_.add_orphan(*session_, key_, value_);
        throw_error(errc::in_doubt, kName, std::string("release of '") + request_.name + "': " + e.what(),
                    e.native_code(), e.native_message());
    }
    if (!request_.auto_renew) backend_.revoke(*session_);
    if (!reply.value("succeeded", false))
        throw_error(errc::not_owner, kName, "lock '" + request_.name + "' was lost before its release (key " + key_ + " gone)");
}

spi::keepalive_result handle::keepalive() {
    spi::lock_handle* self = this;
    spi::keepalive_result r;
    backend_.keepalive_batch(std::span<spi::lock_handle* const>(&self, 1), std::span<spi::keepalive_result>(&r, 1));
    return r;
}

// One keepalive per lease, then one txn that checks every held key exists with
// its create revision (a key deleted by an operator = the lock is lost).
void backend::keepalive_batch(std::span<spi::lock_handle* const> handles, std::span<spi::keepalive_result> results) {
    std::map<session*, spi::keepalive_result> by_session;
    for (auto* h : handles) {
        auto* s = static_cast<handle*>(h)->current_session().get();
        if (s != nullptr && by_session.find(s) == by_session.end()) by_session.emplace(s, renew(*s));
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
            ops.push_back({{"request_range", {{"key", base64_encode(static_cast<handle*>(handles[check[k]])->key())},
                                              {"keys_only", true}}}});
        try {
            auto* s = static_cast<handle*>(handles[check[from]])->current_session().get();
            auto reply = call("/v3/kv/txn", json{{"success", ops}}, renewal_timeout(*s));
            const auto responses = reply.value("responses", json::array());
            for (auto k = from; k < to; ++k) {
                auto* h = static_cast<handle*>(handles[check[k]]);
                const auto idx = k - from;
                const auto kvs = idx < responses.size() ? responses[idx]["response_range"].value("kvs", json::array())
                                                        : json::array();
                if (kvs.empty() || as_i64(kvs[0], "create_revision") != h->revision())
                    results[check[k]] = spi::keepalive_result::lost("lock key " + h->key() + " was deleted");
            }
        } catch (const std::exception& e) {
            for (auto k = from; k < to; ++k) results[check[k]] = spi::keepalive_result::failed(e.what());
        }
    }
}

void backend::break_lock(std::string_view name) {
    const std::string dir = settings_.prefix + "/" + http::encode_name(name) + "/";
    auto reply = call("/v3/kv/range", json{{"key", base64_encode(dir)},
                                          {"range_end", base64_encode(prefix_end(dir))},
                                          {"sort_order", "ASCEND"},
                                          {"sort_target", "CREATE"},
                                          {"limit", "1"},
                                          {"keys_only", true}});
    const auto kvs = reply.value("kvs", json::array());
    if (kvs.empty()) return;
    call("/v3/kv/deleterange", json{{"key", kvs[0]["key"]}});
}

}  // namespace

void register_backend(spi::registry& r) {
    r.add("etcd", [](spi::url& u) -> std::shared_ptr<spi::backend> {
        settings s;
        if (!u.path().empty() && u.path() != "/") {
            s.prefix = u.path();
            while (s.prefix.size() > 1 && s.prefix.back() == '/') s.prefix.pop_back();
        }
        if (auto ttl = u.take_duration("ttl")) {
            if (ttl->count() <= 0) throw_error(errc::invalid_argument, kName, "ttl must be positive");
            s.default_ttl = *ttl;
        }
        s.user = u.user();
        s.password = u.password();
        auto o = http::options_from_url(u, kName, 2379);
        return std::make_shared<backend>(std::move(o), std::move(s));
    });
}

}  // namespace distlock::backends::etcd
