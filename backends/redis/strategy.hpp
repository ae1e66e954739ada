// redis:// internals: what its two lock strategies differ in, so that the lock
// handle (redis_backend.cpp) runs both the same way: the keys of a lock name,
// the Lua scripts and their arguments. Never included outside backends/redis/.
//   strategy=plain      plain_strategy.cpp: SET NX PX token key, FIFO hand-off
//   strategy=reentrant  reentrant_strategy.cpp: Redisson's RLock layout
#pragma once

#include <charconv>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "distlock/inspect.hpp"
#include "redis-client/redis_client.hpp"

namespace distlock::backends::redis {

// The backend's name in errors, whatever the scheme (redis://, redis-sentinel://, redis-cluster://).
inline constexpr const char* kBackend = "redis";

using redis_client::connection;
using redis_client::reply_ptr;
using redis_client::script;

// Key, fence key and channel of a lock name.
struct layout {
    std::string key, fence, channel;
    std::string queue, waiters;  // plain strategy: the FIFO hand-off (see plain_strategy.cpp)
    // The holder record (a hash, no expiry, in the key's hash slot): `owner` (the
    // grant's token or Redisson field), `token` (its fencing token) and `holder`
    // (lock_request::holder), written by the acquire script with the grant and
    // deleted by the release. It counts only while `owner` still holds the key.
    std::string holder;
};

// A queued waiter's entry lives this long past the holder's PTTL on the server;
// the waiter renews it (by trying again) before half of it is left.
inline constexpr auto liveness_slack = std::chrono::milliseconds{2000};

// The next fencing token from the fence key `key`. A fence must never go back,
// even when the server lost its data (a restart without persistence, a failover
// to a replica that had not got the key): a missing key starts from the
// server's clock in microseconds, which is past every token handed out before
// as long as fewer than a million grants a second were made and the server's
// clock has not been set back by more than that margin.
inline constexpr const char* fence_lua = R"lua(
local function next_fence(key)
  if redis.call('exists', key) == 0 then
    local t = redis.call('time')
    redis.call('set', key, t[1] .. string.format('%06d', tonumber(t[2])))
  end
  return redis.call('incr', key)
end
)lua";

// The reply of an inspect script: {state, PTTL, waiters, a, b} (strings a and
// b mean what the strategy's script says).
struct inspect_fields {
    long long state = 0, pttl = -2, waiting = 0;
    std::string a, b;
};

inline inspect_fields inspect_reply(const reply_ptr& r) {
    using namespace redis_client;
    if (is_error(r.get())) throw_client_error(r.get(), kBackend, "inspect");
    if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 5)
        throw_error(errc::unavailable, kBackend, "unexpected reply to the inspect script: " + reply_text(r.get()));
    auto text = [&](std::size_t i) {
        const redisReply* e = r->element[i];
        return e->type == REDIS_REPLY_STRING || e->type == REDIS_REPLY_STATUS ? std::string(e->str, e->len)
                                                                              : std::string();
    };
    return {as_integer(r->element[0]), as_integer(r->element[1]), as_integer(r->element[2]), text(3), text(4)};
}

// A fencing token as the scripts store it (decimal digits), or nullopt.
inline std::optional<std::uint64_t> parse_token(std::string_view s) {
    std::uint64_t v = 0;
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (s.empty() || ec != std::errc{} || end != s.data() + s.size()) return std::nullopt;
    return v;
}

// lock_info::remaining from a held key's PTTL (-1: the key has no expiry).
inline void set_remaining(lock_info& info, long long pttl) {
    if (pttl >= 0)
        info.remaining = redis_client::server_duration(pttl);  // shown to the caller: fit for clock arithmetic
    else info.unknown.emplace("remaining", "the key has no expiry (set without a lease by another client)");
}

// A grant whose holder record names it: the label (a) and fencing token (b)
// the record keeps, each declared unknown when missing.
inline void set_recorded_holder(lock_info& info, const inspect_fields& r) {
    if (!r.a.empty()) info.holder = r.a;
    else info.unknown.emplace("holder", "the holder record has no label");
    if (auto t = parse_token(r.b)) info.token = *t;
    else info.unknown.emplace("token", "the holder record has no fencing token");
}

class strategy {
public:
    virtual ~strategy() = default;

    // Counts re-entries of one owner on the server (capabilities::reentrant).
    virtual bool reentrant() const noexcept = 0;
    // Waiting clients queue for a FIFO hand-off under a waiter id.
    virtual bool queues() const noexcept = 0;

    virtual layout layout_for(std::string_view name) const = 0;
    // The Redisson object name of the read-write lock (`what` = "rwlock") or the
    // semaphore (`what` = "semaphore") of a lock name: the main key of Redisson's
    // layout, from which its other keys and its channel are derived
    // (shared_lock.hpp). strategy=reentrant: the name itself, as in Redisson;
    // strategy=plain: `<prefix>{<name>}:<what>`, beside the mutex's keys.
    virtual std::string object_name(std::string_view name, std::string_view what) const = 0;
    // The owner of a new grant: a random token, or Redisson's "<uuid>:<thread id>"
    // (`client_uuid`: this provider's).
    virtual std::string new_owner(const std::string& client_uuid) const = 0;

    // Runs the acquire script: {1, fencing token} | {0, PTTL of the holder's key}.
    // `waiter`: our id in the hand-off queue ("" = not queued); `holder`: the
    // label the script records beside a grant (layout::holder).
    virtual reply_ptr acquire(connection& c, const layout& l, const std::string& owner, const std::string& lease_ms,
                              const std::string& waiter, const std::string& holder) const = 0;
    // backend::inspect of the mutex: one read-only script on the server of l.key.
    virtual lock_info inspect(connection& c, const layout& l) const = 0;
    // Runs the release script; released() reads its reply (false: not ours).
    virtual reply_ptr release(connection& c, const layout& l, const std::string& owner,
                              const std::string& lease_ms) const = 0;
    virtual bool released(long long reply) const noexcept = 0;
    // A queued waiter that gives up: leaves the queue, and passes on a hand-off
    // made for it.
    virtual void leave(connection& c, const layout& l, const std::string& waiter) const = 0;
    // Renews several grants in one call: KEYS[i] keys, ARGV[2i-1] owner, ARGV[2i]
    // lease ms; reply 1 (renewed) or 0 (not ours any more) per key.
    virtual const script& renew_script() const noexcept = 0;
};

std::unique_ptr<const strategy> make_plain_strategy(std::string prefix);
std::unique_ptr<const strategy> make_reentrant_strategy();

}  // namespace distlock::backends::redis
