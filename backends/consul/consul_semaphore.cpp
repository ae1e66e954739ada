// consul:// — the semaphore, with the KV layout of Consul's Go api/semaphore.go
// (and so of `consul lock -n N <prefix>`), over the agent (consul_agent.hpp).
// One handle per permit (a contender, consul_contender.hpp, with this file's
// policy); each permit lives on a session of its own, as each mutex grant does
// (consul_lock.cpp):
//
//   prefix     <URL prefix>/<encoded name>: a Go client with
//              SemaphorePrefix("<URL prefix>/<encoded name>", N) shares it
//   session    PUT /v1/session/create {Name, TTL = the lease, LockDelay,
//              Behavior "delete"} per acquisition (semaphore.go's own sessions
//              are "delete" too: invalidation removes the contender key)
//   contender  PUT <prefix>/<session>?acquire=<session>&flags=<semaphore flag>
//   .lock      <prefix>/.lock = {"Limit":N,"Holders":{"<session>":true,...}},
//              flags 0xe0f69a2baa414de0, written only by check-and-set on its
//              ModifyIndex (?cas=, 0 = create only if absent)
//   acquire    list the prefix (?recurse); prune the holders whose contender
//              key is no longer held by a session; Limit differing from ours
//              while live holders remain = invalid_argument_error naming both;
//              fewer holders than Limit: add our session by check-and-set (a
//              lost race lists again at once); else a blocking query on the
//              prefix (?index=) until it changes
//   token      after admission, the holder re-acquires its own contender key
//              (a write only it makes) and reads it back: that ModifyIndex
//   monitor    blocking queries on the prefix; our session no longer among the
//              (pruned) holders, or .lock gone = the permit is lost
//   release    remove our session from Holders by check-and-set (delete .lock
//              by check-and-set when it was the last holder, as `consul lock`'s
//              cleanup does), delete the contender key, destroy the session
#include <nlohmann/json.hpp>

#include <limits>

#include "consul_contender.hpp"
#include "consul_lock.hpp"
#include "http/http_json.hpp"

namespace distlock::backends::consul {
namespace {

constexpr const char* kCoordinationKey = ".lock";  // api/semaphore.go DefaultSemaphoreKey

// .lock's value: {Limit, Holders}.
struct coordination {
    std::string problem;  // why the value is not a semaphore's {Limit, Holders}; "" = it is
    long long limit = 0;
    std::set<std::string> holders;
};

// An absent or empty .lock takes the caller's limit and no holders, as
// semaphore.go's decodeLock; holders whose session holds no key under the
// prefix any more (its contender key went with its session) are dropped, as
// its pruneDeadHolders.
coordination read_coordination(const document& d, std::uint32_t local_limit) {
    coordination c;
    c.limit = local_limit;
    if (!d.exists || d.value.empty()) return c;
    // Written by anyone with KV write on the prefix: bounded in depth like a reply.
    json j = http::parse_reply(d.value);
    if (j.is_discarded() || !j.is_object()) {
        c.problem = "its value is not a JSON object (of at most " + std::to_string(http::max_json_depth) + " levels)";
        return c;
    }
    c.limit = 0;  // a missing Limit decodes as Go's zero value
    if (j.contains("Limit")) {
        if (!j["Limit"].is_number_integer()) {
            c.problem = "its Limit is not an integer";
            return c;
        }
        c.limit = j["Limit"].get<long long>();
    }
    if (j.contains("Holders") && !j["Holders"].is_null()) {
        if (!j["Holders"].is_object()) {
            c.problem = "its Holders is not an object";
            return c;
        }
        for (const auto& [holder, flag] : j["Holders"].items())  // a set: membership counts
            if (d.live.count(holder)) c.holders.insert(holder);
    }
    return c;
}

// What semaphore.go's encodeLock writes: Limit first, then Holders in key order.
std::string encode(long long limit, const std::set<std::string>& holders) {
    nlohmann::ordered_json holders_json = nlohmann::ordered_json::object();
    for (const auto& h : holders) holders_json[h] = true;
    nlohmann::ordered_json doc;
    doc["Limit"] = limit;
    doc["Holders"] = std::move(holders_json);
    return doc.dump();
}

class semaphore_policy final : public policy {
public:
    semaphore_policy(std::string name, std::string key, std::uint32_t permits)
        : name_(std::move(name)), key_(std::move(key)), permits_(permits) {}

    step decide(const document& d, const std::string& me) const override {
        auto c = read_coordination(d, permits_);
        if (!c.problem.empty())
            throw_error(errc::invalid_argument, kBackend, "key " + key_ + " is not a semaphore's: " + c.problem);
        if (c.holders.count(me)) return {step::kind::held, {}};
        if (c.limit != static_cast<long long>(permits_) && !c.holders.empty())
            throw_error(errc::invalid_argument, kBackend,
                        "semaphore '" + name_ + "' is held with " + std::to_string(c.limit) + " permits (Limit of " +
                            key_ + "); this one has " + std::to_string(permits_) +
                            ": semaphore limit conflict (lock: " + std::to_string(c.limit) +
                            ", local: " + std::to_string(permits_) + ")");
        if (c.holders.size() >= permits_) return {step::kind::wait, {}};
        // A free permit: our session joins Holders (the prune is written with it;
        // with no live holder left, a Limit of another size is replaced by ours).
        c.holders.insert(me);
        return {step::kind::write, encode(permits_, c.holders)};
    }

    bool holds(const document& d, const std::string& me) const override {
        auto c = read_coordination(d, permits_);
        return c.problem.empty() && c.holders.count(me) == 1;
    }

    std::optional<std::string> without(const document& d, const std::string& me) const override {
        auto c = read_coordination(d, permits_);
        if (!c.problem.empty() || !d.exists || !c.holders.count(me)) return std::nullopt;
        c.holders.erase(me);
        return c.holders.empty() ? std::string{} : encode(c.limit, c.holders);
    }

private:
    std::string name_, key_;
    std::uint32_t permits_;
};

layout layout_of(agent& a, std::string_view name) {
    return {a.key_of(name) + "/", kCoordinationKey, kSemaphoreFlag, "semaphore", "distlock semaphore: "};
}

}  // namespace

std::unique_ptr<spi::lock_handle> make_permit(agent& a, const spi::lock_request& r) {
    return make_contender(a, r, layout_of(a, r.name), [&](std::string key) {
        return std::make_unique<semaphore_policy>(r.name, std::move(key), r.permits);
    });
}

// One listing of the prefix: .lock (pruned of dead sessions, as a contender
// reads it) gives the size and the holders; each holder's contender key gives
// its label and token.
semaphore_info inspect_semaphore(agent& a, std::string_view name) {
    semaphore_info info;
    const auto v = look(a, layout_of(a, name));
    const auto c = read_coordination(v.doc, 0);
    if (auto why = v.foreign(); !why.empty() || !c.problem.empty()) {
        if (why.empty()) why = "key " + v.where.doc_key() + " is not a semaphore's: " + c.problem;
        for (const char* field : {"size", "permits", "free"}) info.unknown.emplace(field, why);
        return info;
    }
    const bool sized = v.doc.exists && c.limit > 0 && c.limit <= std::numeric_limits<std::uint32_t>::max();
    if (sized) info.size = static_cast<std::uint32_t>(c.limit);
    else
        info.unknown.emplace(
            "size", v.doc.exists
                        ? "the Limit in " + v.where.doc_key() + " is " + std::to_string(c.limit)
                        : "nobody holds a permit: the size is kept in " + v.where.doc_key() + " with the holders only");
    info.permits = v.grants_of(c.holders, info.unknown, "permits");
    if (info.size)
        info.free = *info.size > c.holders.size() ? static_cast<std::uint32_t>(*info.size - c.holders.size()) : 0u;
    else info.unknown.emplace("free", "the size is not known");
    return info;
}

}  // namespace distlock::backends::consul
