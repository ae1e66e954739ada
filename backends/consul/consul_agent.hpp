// consul:// internals: the Consul agent's HTTP API as the recipes (the mutex in
// consul_lock.cpp, the semaphore in consul_semaphore.cpp) use it: sessions
// (create, renew, destroy), KV reads, prefix listings and blocking queries,
// acquire/release, check-and-set writes, and the typed error of an unexpected
// reply. Never included outside backends/consul/.
#pragma once

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "distlock/spi/backend.hpp"
#include "http/http_codec.hpp"
#include "http/http_json.hpp"
#include "http/http_multi.hpp"
#include "http/http_options.hpp"
#include "http/http_pool.hpp"
#include "http/http_transfer.hpp"

namespace distlock::backends::consul {

using namespace std::chrono_literals;
using json = nlohmann::json;
using ms = std::chrono::milliseconds;

inline constexpr const char* kBackend = "consul";
inline constexpr std::uint64_t kLockFlag = 0x2ddccbc058a50c18ULL;       // api/lock.go LockFlagValue
inline constexpr std::uint64_t kSemaphoreFlag = 0xe0f69a2baa414de0ULL;  // api/semaphore.go SemaphoreFlagValue
inline constexpr ms kMaxBlockingWait = 15s;                             // api/lock.go DefaultLockWaitTime

struct settings {
    std::string prefix = "distlock";
    ms default_ttl{15s};           // api/lock.go DefaultLockSessionTTL
    std::optional<ms> lock_delay;  // nullopt = the server's default (15 s)
    std::string behavior = "release";
};

inline std::string go_duration(ms d) {
    if (d.count() % 1000 == 0) return std::to_string(d.count() / 1000) + "s";
    return std::to_string(d.count()) + "ms";
}

// One KV entry as returned by GET /v1/kv/<key>.
struct entry {
    bool exists = false;
    std::string key, value;  // value decoded from base64 ("" when null)
    std::string session;
    std::uint64_t flags = 0, modify_index = 0, lock_index = 0;
    std::uint64_t index = 0;  // X-Consul-Index of the reply
};

// The entries under a prefix (GET /v1/kv/<prefix>?recurse), in key order.
struct listing {
    std::vector<entry> entries;
    std::uint64_t index = 0;  // X-Consul-Index of the reply
};

// One Consul agent (and the provider's HTTP loop, for blocking queries and
// concurrent renewals).
class agent {
public:
    // Fails at once when the agent is unreachable or the token is refused.
    agent(http::options o, settings s) : client_(std::move(o)), settings_(std::move(s)), loop_(client_) {
        check(client_.send(get("/v1/kv/" + http::escape_path(settings_.prefix))), "connect", {200, 404});
    }

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
        if (r.resp.status == 404)
            return spi::keepalive_result::lost("the Consul session expired (renew: 404 " + trim(r.resp.body) + ")");
        return spi::keepalive_result::failed("session renew: HTTP " + std::to_string(r.resp.status) + " " +
                                             trim(r.resp.body));
    }

    // Throws the typed error for an unexpected status.
    static void check(const http::response& r, const std::string& what, std::initializer_list<long> ok) {
        if (std::find(ok.begin(), ok.end(), r.status) != ok.end()) return;
        const std::string msg = what + ": HTTP " + std::to_string(r.status) + " " + trim(r.body);
        if (r.status == 401 || r.status == 403) throw_error(errc::access_denied, kBackend, msg, r.status, trim(r.body));
        if (r.status == 400) throw_error(errc::invalid_argument, kBackend, msg, r.status, trim(r.body));
        // Not the Consul HTTP API answering (a wrong port, another server): retrying cannot help.
        if (r.status == 404 || r.status == 405 || r.status == 501)
            throw_error(errc::invalid_argument, kBackend,
                        msg + ": is " + r.endpoint + " a Consul agent's HTTP API (port 8500 by default)?", r.status,
                        trim(r.body));
        throw_error(errc::unavailable, kBackend, msg, r.status, trim(r.body));
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
            target += "?index=" + std::to_string(index) +
                      "&wait=" + std::to_string(std::max<long long>(1, wait.count())) + "ms";
            timeout = wait + wait / 16 + client_.opts().request_timeout;  // the server adds up to wait/16
        }
        return parse_entry(client_.send(get(target, timeout)), "read of " + key);
    }

    static std::uint64_t index_of(const http::response& r) {
        try {
            return std::stoull(r.header("x-consul-index"));
        } catch (...) {
            return 0;
        }
    }

    static entry parse_entry(const http::response& r, const std::string& what) {
        auto l = parse_list(r, what);
        if (l.entries.empty()) {
            entry none;
            none.index = l.index;
            return none;
        }
        return l.entries.front();
    }

    // A KV reply: 404 = no entry; 200 = a JSON array of entries.
    static listing parse_list(const http::response& r, const std::string& what) {
        check(r, what, {200, 404});
        listing l;
        l.index = index_of(r);
        if (r.status == 404) return l;
        const json j = http::parse_reply(r.body);
        if (j.is_discarded() || !j.is_array() || j.empty())
            throw_error(errc::unavailable, kBackend, what + ": unexpected reply", r.status, trim(r.body));
        for (const auto& o : j) {
            if (!o.is_object())
                throw_error(errc::unavailable, kBackend, what + ": unexpected reply", r.status, trim(r.body));
            entry e;
            e.exists = true;
            e.index = l.index;
            if (auto it = o.find("Key"); it != o.end() && it->is_string()) e.key = it->get<std::string>();
            if (auto it = o.find("Session"); it != o.end() && it->is_string()) e.session = it->get<std::string>();
            if (auto it = o.find("Value"); it != o.end() && it->is_string()) {
                auto v = http::base64_decode(it->get<std::string>());
                if (!v)
                    throw_error(errc::unavailable, kBackend, what + ": a value that is not base64", r.status,
                                trim(r.body));
                e.value = std::move(*v);
            }
            e.flags = unsigned_field(o, "Flags", r, what);
            e.modify_index = unsigned_field(o, "ModifyIndex", r, what);
            e.lock_index = unsigned_field(o, "LockIndex", r, what);
            l.entries.push_back(std::move(e));
        }
        return l;
    }

    // An entry's unsigned field (0 when absent); anything else than an unsigned
    // integer is an unexpected reply (never a JSON library exception).
    static std::uint64_t unsigned_field(const json& o, const char* field, const http::response& r,
                                        const std::string& what) {
        auto it = o.find(field);
        if (it == o.end() || it->is_null()) return 0;
        if (!it->is_number_unsigned())
            throw_error(errc::unavailable, kBackend,
                        what + ": unexpected reply (" + field + " is not an unsigned integer)", r.status, trim(r.body));
        return it->get<std::uint64_t>();
    }

    // GET of every key under `prefix` (which ends with '/'); a blocking query when index > 0.
    http::request list_request(const std::string& prefix, std::uint64_t index, ms wait) const {
        std::string target = key_target(prefix) + "?recurse";
        ms timeout = 0ms;
        if (index > 0) {
            target += "&index=" + std::to_string(index) +
                      "&wait=" + std::to_string(std::max<long long>(1, wait.count())) + "ms";
            timeout = wait + wait / 16 + client_.opts().request_timeout;  // the server adds up to wait/16
        }
        return get(target, timeout);
    }
    listing list(const std::string& prefix, std::uint64_t index = 0, ms wait = 0ms) {
        return parse_list(client_.send(list_request(prefix, index, wait)), "listing of " + prefix);
    }

    // Check-and-set: PUT ...?cas=<modify_index>&flags=<flags> (modify_index 0 =
    // create only if absent); the server's true/false.
    bool cas_put(const std::string& key, std::uint64_t modify_index, std::uint64_t flags, std::string body) {
        auto r = client_.send(
            put(key_target(key) + "?cas=" + std::to_string(modify_index) + "&flags=" + std::to_string(flags),
                std::move(body)));
        check(r, "check-and-set of " + key, {200});
        return trim(r.body) == "true";
    }
    // DELETE ...?cas=<modify_index>: the server's true/false.
    bool cas_delete(const std::string& key, std::uint64_t modify_index) {
        auto r = client_.send(del(key_target(key) + "?cas=" + std::to_string(modify_index)));
        check(r, "check-and-set delete of " + key, {200});
        return trim(r.body) == "true";
    }
    void remove(const std::string& key) { check(client_.send(del(key_target(key))), "delete of " + key, {200}); }

    // PUT with acquire= or release=: the server's true/false; nullopt when the
    // server no longer knows the session ("invalid session"). `value` becomes
    // the key's value when the server says true (Consul's kvsLockTxn and
    // kvsUnlockTxn write the request's value).
    std::optional<bool> lock_op(const std::string& key, const char* op, const std::string& session,
                                std::uint64_t flags = kLockFlag, std::string value = {}) {
        auto r = client_.send(
            put(key_target(key) + "?flags=" + std::to_string(flags) + "&" + op + "=" + session, std::move(value)));
        if (r.status == 500 && r.body.find("invalid session") != std::string::npos) return std::nullopt;
        check(r, std::string(op) + " of " + key, {200});
        return trim(r.body) == "true";
    }

    // `behavior`: "release" or "delete"; empty = the URL's (settings::behavior).
    std::string create_session(ms ttl, const std::string& name, const std::string& behavior = {},
                               const char* what = "distlock: ") {
        json spec{{"Name", what + name.substr(0, 64)},
                  {"TTL", go_duration(ttl)},
                  {"Behavior", behavior.empty() ? settings_.behavior : behavior}};
        if (settings_.lock_delay) spec["LockDelay"] = go_duration(*settings_.lock_delay);
        // Names are arbitrary bytes: bytes that are not UTF-8 go out as U+FFFD.
        auto r = client_.send(put("/v1/session/create", spec.dump(-1, ' ', false, json::error_handler_t::replace)));
        check(r, "session create", {200});
        const json j = http::parse_reply(r.body);
        const auto id = j.is_object() ? j.find("ID") : j.end();
        if (j.is_discarded() || id == j.end() || !id->is_string() || !session_id(id->get<std::string>()))
            throw_error(errc::unavailable, kBackend, "session create: unexpected reply", r.status, trim(r.body));
        return id->get<std::string>();
    }

    // Whether `id` can be a session ID: Consul's are UUIDs. The ID goes into URL
    // paths (/v1/session/renew/<id>), query values (acquire=<id>) and, for the
    // semaphore and the read-write lock, a key (<prefix><id>): from a server
    // that answered something else ("../..", "x&recurse"), nothing is sent.
    static bool session_id(std::string_view id) {
        if (id.empty() || id.size() > 128) return false;
        for (char c : id)
            if (!spi::ascii_alnum(c) && c != '-' && c != '_') return false;
        return true;
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
    http::loop loop_;  // after client_: stopped before it
};

}  // namespace distlock::backends::consul
