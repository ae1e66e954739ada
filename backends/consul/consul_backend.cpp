// consul://host:8500[/prefix][?token=...&ttl=...&lock_delay=...&behavior=...]
// — the behaviour of Consul's official Go lock recipe (api/lock.go):
//
//   session   one per acquisition: PUT /v1/session/create {Name, TTL, LockDelay,
//             Behavior}; renewed every TTL/2 (the core scheduler while held, the
//             waiting thread while waiting); destroyed after the release
//   acquire   GET the key (a key without the lock flags is someone else's data:
//             refused), then PUT /v1/kv/<key>?flags=<lock flag>&acquire=<session>
//   wait      blocking queries (?index=<X-Consul-Index>&wait=...) until the key's
//             Session is empty; an acquire refused on a free key = lock-delay:
//             sleep and retry
//   monitor   blocking queries on the held key on the provider's HTTP loop
//             thread; Session no longer ours (or the key gone) = lock lost
//   release   PUT ...?flags=<lock flag>&release=<session>, then destroy the session
//   token     the key's ModifyIndex after the acquire (global, strictly increasing)
//   ACL       token= is sent as X-Consul-Token on every request
#include <nlohmann/json.hpp>

#include <algorithm>
#include <thread>

#include "distlock/spi/backend.hpp"
#include "http_codec.hpp"
#include "http_monitor.hpp"
#include "http_multi.hpp"
#include "http_options.hpp"
#include "http_pool.hpp"
#include "http_transfer.hpp"

namespace distlock::backends::consul {
namespace {

using namespace std::chrono_literals;
using json = nlohmann::json;
using ms = std::chrono::milliseconds;

constexpr const char* kName = "consul";
constexpr std::uint64_t kLockFlag = 0x2ddccbc058a50c18ULL;  // api/lock.go LockFlagValue
constexpr ms kMaxBlockingWait = 15s;                        // api/lock.go DefaultLockWaitTime

struct settings {
    std::string prefix = "distlock";
    ms default_ttl{15s};  // api/lock.go DefaultLockSessionTTL
    std::optional<ms> lock_delay;  // nullopt = the server's default (15 s)
    std::string behavior = "release";
};

std::string go_duration(ms d) {
    if (d.count() % 1000 == 0) return std::to_string(d.count() / 1000) + "s";
    return std::to_string(d.count()) + "ms";
}

// One KV entry as returned by GET /v1/kv/<key>.
struct entry {
    bool exists = false;
    std::string session;
    std::uint64_t flags = 0, modify_index = 0, lock_index = 0;
    std::uint64_t index = 0;  // X-Consul-Index of the reply
};

class backend;

class handle final : public spi::lock_handle {
public:
    handle(backend& b, const spi::lock_request& r);
    std::optional<spi::grant> acquire(spi::deadline until, const spi::loss_sink& lost) override;
    void release() override;
    const std::string& session() const { return session_; }

private:
    std::optional<spi::grant> wait_and_acquire(spi::deadline until, spi::deadline created, const spi::loss_sink& lost);
    http::request monitor_request(std::uint64_t index) const;
    void on_monitor(http::transfer_result r);
    void destroy_session() noexcept;

    backend& backend_;
    spi::lock_request request_;
    std::string key_, target_;  // the key, and its /v1/kv/ URL path
    std::string session_;
    std::uint64_t token_ = 0;

    std::string monitored_session_;  // under monitor_'s lock: the session that holds the key
    http::monitor monitor_;          // last: stopped before the fields its callbacks use go
};

class backend final : public spi::backend {
public:
    backend(http::options o, settings s) : client_(std::move(o)), settings_(std::move(s)), loop_(client_) {
        // The server may wait up to 2 x TTL before invalidating a dead holder's
        // session (the suite adds one lease), then the lock-delay runs.
        caps_.crash_release_bound = settings_.default_ttl + settings_.lock_delay.value_or(15s) + 1s;
        // Fail at once when the agent is unreachable or the token is refused.
        check(client_.send(get("/v1/kv/" + http::escape_path(settings_.prefix))), "connect", {200, 404});
    }

    std::string_view name() const noexcept override { return kName; }
    const capabilities& caps() const noexcept override { return caps_; }
    ms default_lease() const override { return settings_.default_ttl; }
    std::unique_ptr<spi::lock_handle> make_lock(const spi::lock_request& r) override {
        return std::make_unique<handle>(*this, r);
    }

    std::optional<std::chrono::nanoseconds> round_trip() override {
        auto t0 = spi::clock::now();
        check(client_.send(get("/v1/status/leader")), "status/leader", {200});
        return spi::clock::now() - t0;
    }

    // Renewals due together go out concurrently on the loop.
    void keepalive_batch(std::span<spi::lock_handle* const> handles, std::span<spi::keepalive_result> results) override {
        if (handles.size() == 1) {
            results[0] = renew(static_cast<handle*>(handles[0])->session());
            return;
        }
        std::vector<http::request> batch;
        for (auto* h : handles) batch.push_back(renew_request(static_cast<handle*>(h)->session()));
        auto replies = loop_.run_all(batch);
        for (std::size_t i = 0; i < handles.size(); ++i) results[i] = renew_result(replies[i]);
    }

    void break_lock(std::string_view name) override {
        auto r = client_.send(del(key_target(key_of(name))));
        check(r, "break_lock", {200});
    }

    // ---- used by handles ------------------------------------------------------------
    const settings& config() const { return settings_; }
    http::client& client() { return client_; }
    http::loop& events() { return loop_; }

    std::string key_of(std::string_view name) const { return settings_.prefix + "/" + http::encode_name(name); }
    static std::string key_target(const std::string& key) { return "/v1/kv/" + http::escape_path(key); }

    static http::request get(std::string target, ms timeout = 0ms) {
        http::request r;
        r.method = "GET";
        r.target = std::move(target);
        r.timeout = timeout;
        r.content_type.clear();
        return r;
    }
    static http::request put(std::string target, std::string body = {}) {
        http::request r;
        r.method = "PUT";
        r.target = std::move(target);
        r.body = std::move(body);
        return r;
    }
    static http::request del(std::string target) {
        http::request r;
        r.method = "DELETE";
        r.target = std::move(target);
        r.content_type.clear();
        return r;
    }
    http::request renew_request(const std::string& session) const { return put("/v1/session/renew/" + session); }

    static spi::keepalive_result renew_result(const http::transfer_result& r) {
        if (r.how != http::outcome::completed) return spi::keepalive_result::failed("session renew: " + r.error);
        if (r.resp.status == 200) return spi::keepalive_result::ok();
        if (r.resp.status == 404) return spi::keepalive_result::lost("the Consul session expired (renew: 404 " + trim(r.resp.body) + ")");
        return spi::keepalive_result::failed("session renew: HTTP " + std::to_string(r.resp.status) + " " + trim(r.resp.body));
    }

    // Throws the typed error for an unexpected status.
    static void check(const http::response& r, const std::string& what, std::initializer_list<long> ok) {
        if (std::find(ok.begin(), ok.end(), r.status) != ok.end()) return;
        const std::string msg = what + ": HTTP " + std::to_string(r.status) + " " + trim(r.body);
        if (r.status == 401 || r.status == 403) throw_error(errc::access_denied, kName, msg, r.status, trim(r.body));
        if (r.status == 400) throw_error(errc::invalid_argument, kName, msg, r.status, trim(r.body));
        // Not the Consul HTTP API answering (a wrong port, another server): retrying cannot help.
        if (r.status == 404 || r.status == 405 || r.status == 501)
            throw_error(errc::invalid_argument, kName,
                        msg + ": is " + r.endpoint + " a Consul agent's HTTP API (port 8500 by default)?", r.status,
                        trim(r.body));
        throw_error(errc::unavailable, kName, msg, r.status, trim(r.body));
    }

    static std::string trim(std::string s) {
        while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
        return s.substr(0, 300);
    }

    // GET of one key; a blocking query when index > 0.
    entry read(const std::string& key, std::uint64_t index = 0, ms wait = 0ms) {
        std::string target = key_target(key);
        ms timeout = 0ms;
        if (index > 0) {
            target += "?index=" + std::to_string(index) + "&wait=" + std::to_string(std::max<long long>(1, wait.count())) + "ms";
            timeout = wait + wait / 16 + client_.opts().request_timeout;  // the server adds up to wait/16
        }
        return parse_entry(client_.send(get(target, timeout)), "read of " + key);
    }

    static entry parse_entry(const http::response& r, const std::string& what) {
        check(r, what, {200, 404});
        entry e;
        try {
            e.index = std::stoull(r.header("x-consul-index"));
        } catch (...) {
            e.index = 0;
        }
        if (r.status == 404) return e;
        json j = json::parse(r.body, nullptr, false);
        if (j.is_discarded() || !j.is_array() || j.empty() || !j[0].is_object())
            throw_error(errc::unavailable, kName, what + ": unexpected reply", r.status, trim(r.body));
        const auto& o = j[0];
        e.exists = true;
        if (o.contains("Session") && o["Session"].is_string()) e.session = o["Session"].get<std::string>();
        e.flags = o.value("Flags", std::uint64_t{0});
        e.modify_index = o.value("ModifyIndex", std::uint64_t{0});
        e.lock_index = o.value("LockIndex", std::uint64_t{0});
        return e;
    }

    // PUT with acquire= or release=: the server's true/false; nullopt when the
    // server no longer knows the session ("invalid session").
    std::optional<bool> lock_op(const std::string& key, const char* op, const std::string& session) {
        auto r = client_.send(put(key_target(key) + "?flags=" + std::to_string(kLockFlag) + "&" + op + "=" + session));
        if (r.status == 500 && r.body.find("invalid session") != std::string::npos) return std::nullopt;
        check(r, std::string(op) + " of " + key, {200});
        return trim(r.body) == "true";
    }

    std::string create_session(ms ttl, const std::string& name) {
        json spec{{"Name", "distlock: " + name.substr(0, 64)}, {"TTL", go_duration(ttl)}, {"Behavior", settings_.behavior}};
        if (settings_.lock_delay) spec["LockDelay"] = go_duration(*settings_.lock_delay);
        auto r = client_.send(put("/v1/session/create", spec.dump()));
        check(r, "session create", {200});
        json j = json::parse(r.body, nullptr, false);
        if (j.is_discarded() || !j.is_object() || !j.contains("ID") || !j["ID"].is_string())
            throw_error(errc::unavailable, kName, "session create: unexpected reply", r.status, trim(r.body));
        return j["ID"].get<std::string>();
    }

    spi::keepalive_result renew(const std::string& session) noexcept {
        try {
            auto r = client_.send(renew_request(session));
            http::transfer_result t;
            t.how = http::outcome::completed;
            t.resp = std::move(r);
            return renew_result(t);
        } catch (const std::exception& e) {
            return spi::keepalive_result::failed(e.what());
        }
    }

    void destroy(const std::string& session) {
        check(client_.send(put("/v1/session/destroy/" + session)), "session destroy", {200});
    }

private:
    http::client client_;
    settings settings_;
    capabilities caps_;
    http::loop loop_;  // after client_: stopped before it
};

// ---- handle ------------------------------------------------------------------------

handle::handle(backend& b, const spi::lock_request& r)
    : backend_(b),
      request_(r),
      key_(b.key_of(r.name)),
      target_(backend::key_target(key_)),
      monitor_(b.events(), nullptr, [this](http::transfer_result t) { on_monitor(std::move(t)); }) {}

std::optional<spi::grant> handle::acquire(spi::deadline until, const spi::loss_sink& lost) {
    const auto created = spi::clock::now();
    session_ = backend_.create_session(request_.lease, request_.name);
    std::optional<spi::grant> granted;
    try {
        granted = wait_and_acquire(until, created, lost);
    } catch (...) {
        destroy_session();
        throw;
    }
    if (!granted) destroy_session();
    return granted;
}

// `created`: when the session was asked for. The grant lives as long as the
// session, whose TTL runs from its last create or renew request at the latest.
std::optional<spi::grant> handle::wait_and_acquire(spi::deadline until, spi::deadline created, const spi::loss_sink& lost) {
    const ms renew_every = std::max<ms>(50ms, request_.lease / 2);
    auto renewed = created;
    spi::backoff lock_delay_wait(request_.retry_min, request_.retry_max);
    std::uint64_t index = 0;
    for (;;) {
        auto now = spi::clock::now();
        if (now - renewed >= renew_every) {  // waiting longer than TTL/2: keep the session alive
            auto r = backend_.renew(session_);
            if (r.state == spi::keepalive_result::status::lost) {
                now = spi::clock::now();
                session_ = backend_.create_session(request_.lease, request_.name);
            } else if (r.state == spi::keepalive_result::status::failed) {
                throw_error(errc::unavailable, kName, r.message);
            }
            renewed = now;
            now = spi::clock::now();
        }
        ms wait = 0ms;
        if (index > 0) {
            wait = std::min({std::chrono::duration_cast<ms>(until - now), kMaxBlockingWait,
                             renew_every - std::chrono::duration_cast<ms>(now - renewed)});
            if (wait <= 0ms) {
                if (now >= until) return std::nullopt;
                continue;  // time to renew
            }
        }
        entry e = backend_.read(key_, index, wait);
        if (e.exists && e.flags != kLockFlag)
            throw_error(errc::invalid_argument, kName,
                        "key " + key_ + " exists and is not a lock (flags " + std::to_string(e.flags) + ")");
        if (e.exists && !e.session.empty() && e.session != session_) {
            if (spi::clock::now() >= until) return std::nullopt;
            index = e.index < index ? 0 : e.index;  // an index going backwards restarts the query
            continue;
        }
        if (!e.exists || e.session.empty()) {
            auto acquired = backend_.lock_op(key_, "acquire", session_);
            if (!acquired) {  // our session is gone (expired while we waited, agent restarted)
                renewed = spi::clock::now();
                session_ = backend_.create_session(request_.lease, request_.name);
                index = 0;
                continue;
            }
            if (!*acquired) {
                if (spi::clock::now() >= until) return std::nullopt;
                entry again = backend_.read(key_);
                if (again.exists && !again.session.empty()) {
                    index = again.index;  // someone else got it: wait for them
                    continue;
                }
                // Free but refused: a lock-delay is in effect. Sleep and retry.
                if (!lock_delay_wait.sleep(until)) return std::nullopt;
                index = 0;
                continue;
            }
        }
        // Ours: the ModifyIndex of the acquire is the fencing token.
        entry mine = backend_.read(key_);
        if (!mine.exists || mine.session != session_) {
            index = 0;  // lost at once (session invalidated meanwhile): start over
            continue;
        }
        token_ = mine.modify_index;
        auto rq = monitor_request(mine.index);
        auto lk = monitor_.lock();
        monitored_session_ = session_;
        monitor_.start(lk, std::move(rq), lost);
        return spi::grant{token_, renewed};
    }
}

// The monitor's blocking query on the key: answered once its index passes `index`.
http::request handle::monitor_request(std::uint64_t index) const {
    const ms wait = kMaxBlockingWait;
    return backend::get(target_ + "?index=" + std::to_string(std::max<std::uint64_t>(1, index)) + "&wait=" +
                            std::to_string(wait.count()) + "ms",
                        wait + wait / 16 + backend_.client().opts().request_timeout);
}

// On the loop thread: the key changed, or the blocking query timed out/failed.
void handle::on_monitor(http::transfer_result r) {
    std::string lost;
    std::uint64_t next_index = 0;
    ms delay = 0ms;
    if (r.how == http::outcome::completed && (r.resp.status == 200 || r.resp.status == 404)) {
        try {
            entry e = backend::parse_entry(r.resp, "monitor");
            auto lk = monitor_.lock();
            if (!monitor_.running(lk)) return;
            if (!e.exists) lost = "lock key " + key_ + " was deleted";
            else if (e.session != monitored_session_)
                lost = e.session.empty() ? "lock key " + key_ + " was released by the server (session invalidated)"
                                         : "lock key " + key_ + " is held by another session";
            next_index = e.index;
        } catch (const std::exception&) {
            delay = 1s;
        }
    } else {
        delay = 1s;  // agent unreachable or refusing: the renewals decide about loss; look again soon
        backend_.client().rotate_endpoint(r.resp.endpoint);
    }
    if (!lost.empty()) {
        monitor_.lost(monitor_.lock(), lost);
        return;
    }
    monitor_.restart(monitor_request(next_index), delay);
}

void handle::destroy_session() noexcept {
    if (session_.empty()) return;
    try {
        backend_.destroy(session_);
    } catch (...) {
        // The TTL removes it.
    }
    session_.clear();
}

void handle::release() {
    monitor_.stop();
    if (session_.empty()) throw_error(errc::not_owner, kName, "lock '" + request_.name + "' is not held");
    bool released = false;
    std::optional<error> failure;
    try {
        released = backend_.lock_op(key_, "release", session_).value_or(false);
    } catch (const error& e) {
        failure = e;
    }
    destroy_session();  // also releases the key (Behavior release) when the release above failed
    token_ = 0;
    // A transport failure leaves the outcome unknown; any other keeps its kind (a
    // token without the right to release, a server that is not Consul's API).
    if (failure)
        throw_error(failure->code_value() == errc::unavailable ? errc::in_doubt : failure->code_value(), kName,
                    "release of '" + request_.name + "': " + failure->reason(), failure->native_code(),
                    failure->native_message());
    if (!released)
        throw_error(errc::not_owner, kName, "lock '" + request_.name + "' was lost before its release");
}


}  // namespace

void register_backend(spi::registry& r) {
    r.add("consul", [](spi::url& u) -> std::shared_ptr<spi::backend> {
        settings s;
        if (!u.path().empty()) {
            std::string p = u.path();
            while (!p.empty() && p.front() == '/') p.erase(0, 1);
            while (!p.empty() && p.back() == '/') p.pop_back();
            if (!p.empty()) s.prefix = p;
        }
        if (auto ttl = u.take_duration("ttl")) {
            if (ttl->count() <= 0) throw_error(errc::invalid_argument, kName, "ttl must be positive");
            s.default_ttl = *ttl;
        }
        if (auto d = u.take_duration("lock_delay")) s.lock_delay = *d;
        if (auto b = u.take("behavior")) {
            if (*b != "release" && *b != "delete")
                throw_error(errc::invalid_argument, kName, "behavior must be release or delete");
            s.behavior = *b;
        }
        auto token = u.take("token");
        auto o = http::options_from_url(u, kName, 8500);
        if (token && !token->empty()) o.headers.push_back("X-Consul-Token: " + *token);
        return std::make_shared<backend>(std::move(o), std::move(s));
    });
}

}  // namespace distlock::backends::consul
