// etcd's v3 JSON gateway (etcd_gateway.hpp): the readers of its JSON replies, the
// calls and their errors, watch requests, authentication and the sessions' leases.
#include "etcd_gateway.hpp"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <limits>

#include "distlock/error.hpp"
#include "etcd_release_feed.hpp"
#include "http/http_codec.hpp"
#include "http/http_json.hpp"

namespace distlock::backends::etcd {

using namespace std::chrono_literals;
using http::base64_encode;

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

const json& field(const json& j, const char* key) {
    static const json none;
    if (!j.is_object()) return none;
    auto it = j.find(key);
    return it == j.end() ? none : *it;
}

const json& item(const json& j, std::size_t i) {
    static const json none;
    return j.is_array() && i < j.size() ? j[i] : none;
}

const json& list(const json& j, const char* key) {
    static const json none = json::array();
    const json& v = field(j, key);
    return v.is_array() ? v : none;
}

bool flag(const json& j, const char* key) {
    const json& v = field(j, key);
    return v.is_boolean() && v.get<bool>();
}

std::string text(const json& j, const char* key) {
    const json& v = field(j, key);
    return v.is_string() ? v.get<std::string>() : std::string{};
}

std::string error_text(const json& error) {
    std::string out = error.is_string() ? error.get<std::string>() : text(error, "message");
    if (out.empty()) out = "an error reply without a message";
    return out.substr(0, 300);
}

const json& range_kvs(const json& responses, std::size_t i) {
    return list(field(item(responses, i), "response_range"), "kvs");
}

const json& message_result(const json& msg) {
    const json& result = field(msg, "result");
    return result.is_null() ? msg : result;
}

std::chrono::seconds lease_seconds(std::int64_t ttl) {
    return std::chrono::seconds(std::clamp<std::int64_t>(ttl, 0, kMaxLeaseSeconds));
}

std::int64_t after(std::int64_t revision) {
    return revision < std::numeric_limits<std::int64_t>::max() ? revision + 1 : revision;
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

gateway::gateway(http::options o, settings s)
    : client_(std::move(o)), settings_(std::move(s)), releases_(std::make_unique<release_feed>(*this)) {
    if (!settings_.user.empty()) authenticate();
}

gateway::~gateway() {
    std::map<std::int64_t, std::shared_ptr<session>> all;
    {
        std::lock_guard lk(mutex_);
        all.swap(sessions_);
    }
    for (auto& [ttl, s] : all) {
        if (s->dead) continue;
        try {
            call("/v3/lease/revoke", json{{"ID", std::to_string(s->id)}}, 1000ms);
        } catch (...) {}
    }
}

json gateway::call(const std::string& path, const json& body, std::chrono::milliseconds timeout) {
    for (int attempt = 0;; ++attempt) {
        http::request rq;
        rq.method = "POST";
        rq.target = path;
        try {
            rq.body = body.dump();
        } catch (const json::exception&) {
            // A string that is not UTF-8 (nlohmann's message would show its bytes).
            throw_error(errc::invalid_argument, kBackend, path + ": the request holds text that is not UTF-8");
        }
        rq.timeout = timeout;
        ++requests_;
        auto resp = client_.send(rq);
        json j = http::parse_reply(resp.body);
        if (j.is_discarded() || !j.is_object()) throw_not_gateway(path, resp);
        const json& err = field(j, "error");
        if (resp.status == 200 && !err.is_string()) return j;
        int code = static_cast<int>(as_i64(j, "code"));
        std::string message = text(j, "message");
        if (message.empty()) message = err.is_string() ? err.get<std::string>() : std::string("HTTP error");
        message = message.substr(0, 300);
        if (code == 16 && !settings_.user.empty() && attempt == 0 &&
            message.find("invalid auth token") != std::string::npos) {
            authenticate();  // the token expired: once more with a fresh one
            continue;
        }
        throw_grpc(path, code, message, resp.endpoint);
    }
}

void gateway::throw_not_gateway(const std::string& path, const http::response& resp) {
    // Not etcd's JSON gateway answering: a 4xx will not heal by retrying (a wrong
    // port, another server, a path prefix in front of etcd); a 5xx may.
    const bool wrong_server = resp.status >= 400 && resp.status < 500;
    if (!wrong_server) client_.rotate_endpoint(resp.endpoint);
    throw_error(
        wrong_server ? errc::invalid_argument : errc::unavailable, kBackend,
        path + ": unexpected reply (HTTP " + std::to_string(resp.status) + ")" +
            (wrong_server ? ": is " + resp.endpoint + " etcd's client port (2379 by default) with the v3 JSON gateway?"
                          : std::string{}),
        resp.status, resp.body.substr(0, 200));
}

void gateway::throw_grpc(const std::string& path, int code, const std::string& message, const std::string& endpoint) {
    // etcd answers some authentication failures with INVALID_ARGUMENT.
    for (const char* auth : {"user name is empty", "authentication failed", "permission denied", "auth token"})
        if (message.find(auth) != std::string::npos)
            throw_error(errc::access_denied, kBackend, path + ": " + message, code, message);
    switch (code) {
        case 5:  // NOT_FOUND (lease not found)
        case 9:  // FAILED_PRECONDITION
            throw grpc_error(code, message);
        case 3:   // INVALID_ARGUMENT
        case 11:  // OUT_OF_RANGE
            throw_error(errc::invalid_argument, kBackend, path + ": " + message, code, message);
        case 7:   // PERMISSION_DENIED
        case 16:  // UNAUTHENTICATED
            throw_error(errc::access_denied, kBackend, path + ": " + message, code, message);
        default:  // UNAVAILABLE, DEADLINE_EXCEEDED, no leader, ...: another member may do better
            client_.rotate_endpoint(endpoint);
            throw_error(errc::unavailable, kBackend, path + ": " + message, code, message);
    }
}

http::request gateway::watch(const std::string& key, std::int64_t from, std::chrono::milliseconds timeout,
                             const std::string& range_end, bool no_put) {
    json create{{"key", base64_encode(key)}};
    if (!range_end.empty()) create["range_end"] = base64_encode(range_end);
    if (no_put) create["filters"] = json::array({"NOPUT"});
    if (from > 0) create["start_revision"] = std::to_string(from);
    // One revision's events (a delete-range of many large keys) come in
    // several messages, each below the member's request limit, not in one line
    // past the client's reply limit: such a line would break the stream, and
    // the next one, resuming at that revision, again and again.
    create["fragment"] = true;
    http::request rq;
    rq.method = "POST";
    rq.target = "/v3/watch";
    rq.body = json{{"create_request", create}}.dump();
    rq.timeout = timeout;
    return rq;
}

std::shared_ptr<session> gateway::session_for(std::chrono::milliseconds lease, bool shared) {
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
        if (spi::clock::now() - renewed < spi::renewal_period(s->ttl)) return s;
        if (renew(*s).state == spi::keepalive_result::status::ok) return s;
        if (!s->dead) throw_error(errc::unavailable, kBackend, "cannot renew the session lease");
    }
    auto fresh = grant(ttl);
    std::lock_guard m(mutex_);
    sessions_[ttl] = fresh;
    return fresh;
}

std::shared_ptr<session> gateway::grant(std::int64_t ttl) {
    auto sent = spi::clock::now();
    auto reply = call("/v3/lease/grant", json{{"TTL", std::to_string(ttl)}});
    auto fresh = std::make_shared<session>();
    fresh->id = as_i64(reply, "ID");
    // The TTL granted, never more than asked: whatever answers cannot make the
    // session renew less often than its lease needs, nor overflow the renewal
    // arithmetic ("TTL":"9223372036854775807"). etcd grants at least its
    // minimum TTL (2 s with default timings), more than a 1 s lease asks for:
    // renewing as for the asked TTL is only sooner. A grant without a TTL is
    // taken as asked.
    const auto granted = as_i64(reply, "TTL");
    fresh->ttl = std::chrono::seconds(granted > 0 ? std::min(granted, ttl) : ttl);
    fresh->renewed = sent;
    if (fresh->id == 0) throw_error(errc::unavailable, kBackend, "lease grant returned no ID");
    return fresh;
}

void gateway::revoke(session& s) noexcept {
    try {
        call("/v3/lease/revoke", json{{"ID", std::to_string(s.id)}}, 2000ms);
        s.dead = true;
    } catch (...) {}
}

spi::keepalive_result gateway::renew(session& s) noexcept {
    try {
        delete_orphans(s);
        return keepalive(s);
    } catch (const std::exception& e) {
        return spi::keepalive_result::failed(e.what());
    }
}

// Each orphan key, only while it still holds the value of its acquisition.
void gateway::delete_orphans(session& s) {
    std::vector<std::pair<std::string, std::string>> orphans;
    std::unique_lock cleaning(s.cleaning);
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
}

// One keepalive of the session's lease.
spi::keepalive_result gateway::keepalive(session& s) {
    auto sent = spi::clock::now();
    http::request rq;
    rq.method = "POST";
    rq.target = "/v3/lease/keepalive";
    rq.body = json{{"ID", std::to_string(s.id)}}.dump();
    rq.timeout = renewal_timeout(s);
    ++requests_;
    auto resp = client_.send(rq);
    json j = http::parse_reply(resp.body);
    if (j.is_discarded() || !j.is_object() || resp.status != 200)
        return spi::keepalive_result::failed("lease keepalive: unexpected reply (HTTP " + std::to_string(resp.status) +
                                             ")");
    if (j.contains("error")) {
        client_.rotate_endpoint(resp.endpoint);
        return spi::keepalive_result::failed("lease keepalive: " + error_text(field(j, "error")));
    }
    const json& result = j.contains("result") ? field(j, "result") : j;
    if (as_i64(result, "TTL") <= 0) {
        s.dead = true;
        return spi::keepalive_result::lost("the session lease " + lease_hex(s.id) + " has expired");
    }
    std::lock_guard lk(s.mutex);
    s.renewed = sent;
    return spi::keepalive_result::ok();
}

std::chrono::milliseconds gateway::renewal_timeout(const session& s) const {
    return std::clamp<std::chrono::milliseconds>(spi::renewal_period(s.ttl), 300ms, client_.opts().request_timeout);
}

void gateway::add_orphan(session& s, const std::string& key, const std::string& value) {
    std::lock_guard lk(s.mutex);
    s.orphans.emplace_back(key, value);
}

void gateway::forget_orphan(session& s, const std::string& key) {
    std::lock_guard cleaning(s.cleaning);
    std::lock_guard lk(s.mutex);
    std::erase_if(s.orphans, [&](const auto& o) { return o.first == key; });
}

void gateway::authenticate() {
    client_.set_header("Authorization", "");
    try {
        auto reply = call("/v3/auth/authenticate", json{{"name", settings_.user}, {"password", settings_.password}});
        auto token = text(reply, "token");
        if (token.empty()) throw_error(errc::access_denied, kBackend, "authentication returned no token");
        // set_header refuses a token with a control character (it would add headers).
        client_.set_header("Authorization", token);
    } catch (const grpc_error& e) {
        throw_error(errc::access_denied, kBackend, "authentication failed: " + e.reason(), e.code);
    } catch (const invalid_argument_error& e) {
        throw_error(errc::access_denied, kBackend, std::string("authentication failed: ") + e.what(), e.native_code(),
                    e.native_message());
    }
}

}  // namespace distlock::backends::etcd
