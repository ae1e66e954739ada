// redis:// strategy=reentrant: Redisson's RLock layout, so that a Java service
// using Redisson shares the lock: a hash at `<name>`, field `<client uuid>:<thread
// id>` holding the reentrancy count, PEXPIRE lease, release message "0" on
// `redisson_lock__channel:{<name>}`; fencing token INCR `redisson_lock_token:{<name>}`;
// the holder label in distlock's own hash `distlock_holder:{<name>}` (Redisson's
// hash is left exactly as Redisson writes it).
#include <sys/syscall.h>
#include <unistd.h>

#include "redis-client/lock_scripts.hpp"
#include "strategy.hpp"

namespace distlock::backends::redis {
namespace {

// ---- Lua scripts ------------------------------------------------------------------
// Replies: acquire -> {1, fencing token} | {0, PTTL of the holder's key}.

// Redisson layout. KEYS[1] lock hash, KEYS[2] fence key, KEYS[3] holder record;
// ARGV[1] lease ms, ARGV[2] field, ARGV[3] holder label.
const std::string reentrant_acquire_lua = std::string(fence_lua) + R"lua(
if redis.call('exists', KEYS[1]) == 0 or redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
  local count = redis.call('hincrby', KEYS[1], ARGV[2], 1)
  redis.call('pexpire', KEYS[1], ARGV[1])
  local fence
  if count == 1 then
    fence = next_fence(KEYS[2])
    redis.call('hset', KEYS[3], 'owner', ARGV[2], 'token', string.format('%.0f', fence), 'holder', ARGV[3])
  else
    fence = tonumber(redis.call('get', KEYS[2]) or '0')
  end
  return {1, fence}
end
return {0, redis.call('pttl', KEYS[1])}
)lua";

// KEYS[1] lock hash, KEYS[2] holder record; ARGV[1] field, ARGV[2] lease ms,
// ARGV[3] channel. -1 not ours, 0 still held (count > 0), 1 released.
const char* const reentrant_release_lua = R"lua(
if redis.call('hexists', KEYS[1], ARGV[1]) == 0 then
  return -1
end
local count = redis.call('hincrby', KEYS[1], ARGV[1], -1)
if count > 0 then
  redis.call('pexpire', KEYS[1], ARGV[2])
  return 0
end
redis.call('del', KEYS[1], KEYS[2])
redis.call('publish', ARGV[3], '0')
return 1
)lua";

// Read-only: what inspect shows. KEYS[1] lock hash, KEYS[2] holder record.
// Reply {state, PTTL, 0, a, b}: state 0 free; 1 held by the field the holder
// record names (a = label, b = fencing token); 2 the key is not a hash (a = its
// type); 4 held by one field no record names (a Redisson client: a = the field
// "<uuid>:<thread id>"); 5 a hash of several fields (a = their number, b = its
// `mode` field: Redisson's read-write lock of the same name).
const char* const reentrant_inspect_lua = R"lua(
local kind = redis.call('type', KEYS[1]).ok
if kind == 'none' then
  return {0, -2, 0, '', ''}
end
local pttl = redis.call('pttl', KEYS[1])
if kind ~= 'hash' then
  if kind == 'string' and tonumber(redis.call('get', KEYS[1])) then
    return {6, pttl, 0, '', ''}
  end
  return {2, pttl, 0, kind, ''}
end
local mode = redis.call('hget', KEYS[1], 'mode')
if mode then
  return {5, pttl, 0, tostring(redis.call('hlen', KEYS[1])), mode}
end
local rec = redis.call('hmget', KEYS[2], 'owner', 'token', 'holder')
if rec[1] and redis.call('hexists', KEYS[1], rec[1]) == 1 then
  return {1, pttl, 0, rec[3] or '', rec[2] or ''}
end
local n = redis.call('hlen', KEYS[1])
if n == 1 then
  return {4, pttl, 0, redis.call('hkeys', KEYS[1])[1], ''}
end
return {5, pttl, 0, tostring(n), redis.call('hget', KEYS[1], 'mode') or ''}
)lua";

long current_thread_id() { return static_cast<long>(::syscall(SYS_gettid)); }

// Redisson's layout keys a lock by its bare name and derives the other keys of
// name N from it: prefixes `p:{N}` (`p:N` when N has a '{') and suffixes
// `{N}:s` (`N:s`). So a name can be another name's auxiliary key: a lock named
// `distlock_holder:{x}` would be the holder record of `x` (x's release would
// delete it, its grant would block x's), `{x}:timeout` the permit set of the
// semaphore `x`, and `{x}` shares every auxiliary key of `x` (the permit sets of
// both semaphores would reclaim each other's permits). Such names are refused.
// The plain strategy needs no such rule: every key of name N is
// `<prefix>{N}` followed by a suffix without '}', which only N can produce.
void refuse_auxiliary(std::string_view name) {
    auto refuse = [&](const std::string& what) {
        throw_error(errc::invalid_argument, kBackend,
                    "lock name '" + std::string(name) + "' is refused under strategy=reentrant: it is " + what +
                        " (Redisson's layout keys locks by their bare names); choose another name");
    };
    for (std::string_view prefix : {"redisson_lock_token:", "distlock_holder:", "distlock:"})
        if (name.substr(0, prefix.size()) == prefix)
            refuse(prefix == "distlock:"
                       ? std::string("in distlock's own key space (strategy=plain's keys)")
                       : "the " + std::string(prefix == "distlock_holder:" ? "holder record" : "fence key") +
                             " of another lock");
    if (name.find('{') == std::string_view::npos) return;
    if (name.size() >= 2 && name.front() == '{' && name.back() == '}' &&
        name.substr(1, name.size() - 2).find('{') == std::string_view::npos)
        refuse("the name '" + std::string(name.substr(1, name.size() - 2)) +
               "' in braces: both would share the fence key, the holder record and the read-write lock's and "
               "semaphore's keys");
    for (std::string_view suffix : {":timeout", ":rwlock_fence", ":semaphore_fence", ":rwlock_write_waiters"})
        if (name.size() > suffix.size() && name.substr(name.size() - suffix.size()) == suffix)
            refuse("a key of the read-write lock or semaphore '" +
                   std::string(name.substr(0, name.size() - suffix.size())) + "'");
    if (name.find(":rwlock_timeout") != std::string_view::npos) refuse("a reader's lease key of a read-write lock");
}

class reentrant_strategy final : public strategy {
public:
    reentrant_strategy()
        : acquire_(reentrant_acquire_lua),
          release_(reentrant_release_lua),
          renew_(redis_client::owner_renew_lua(redis_client::hash_field_owned)),
          inspect_(reentrant_inspect_lua) {}

    bool reentrant() const noexcept override { return true; }
    bool queues() const noexcept override { return false; }

    layout layout_for(std::string_view name) const override {
        refuse_auxiliary(name);
        layout l;
        // Redisson: the channel wraps the name in braces unless it already has some.
        const bool braced = name.find('{') != std::string_view::npos;
        l.key = std::string(name);
        l.channel = braced ? "redisson_lock__channel:" + std::string(name)
                           : "redisson_lock__channel:{" + std::string(name) + "}";
        l.fence =
            braced ? "redisson_lock_token:" + std::string(name) : "redisson_lock_token:{" + std::string(name) + "}";
        l.holder = braced ? "distlock_holder:" + std::string(name) : "distlock_holder:{" + std::string(name) + "}";
        return l;
    }

    std::string object_name(std::string_view name, std::string_view) const override {
        refuse_auxiliary(name);
        return std::string(name);
    }

    std::string new_owner(const std::string& client_uuid) const override {
        return client_uuid + ":" + std::to_string(current_thread_id());
    }

    reply_ptr acquire(connection& c, const layout& l, const std::string& owner, const std::string& lease_ms,
                      const std::string&, const std::string& holder) const override {
        return acquire_.run(c, {l.key, l.fence, l.holder}, {lease_ms, owner, holder});
    }

    reply_ptr release(connection& c, const layout& l, const std::string& owner,
                      const std::string& lease_ms) const override {
        return release_.run(c, {l.key, l.holder}, {owner, lease_ms, l.channel});
    }

    lock_info inspect(connection& c, const layout& l) const override {
        const auto r = inspect_reply(inspect_.run(c, {l.key, l.holder}, {}));
        lock_info info;
        info.held = r.state != 0;
        info.unknown.emplace("waiters",
                             "Redisson's RLock layout keeps no queue: waiters only subscribe to the release channel, "
                             "and PUBSUB NUMSUB would count subscribed connections (one per client, shared by its "
                             "waiting threads and kept after a wait), not waiters");
        if (r.state == 0) return info;
        set_remaining(info, r.pttl);
        const std::string no_token =
            "held by a client that is not distlock: no fencing token is recorded with its grant (the counter at "
            "redisson_lock_token is not tied to a holder)";
        switch (r.state) {
            case 1: set_recorded_holder(info, r); break;
            case 4:
                info.holder = r.a;  // Redisson's "<client uuid>:<thread id>"
                info.unknown.emplace("token", no_token);
                break;
            case 6: {
                const auto why = std::string(
                    "the key is the available count of Redisson's semaphore of the same name (Redisson's layout "
                    "keys every object of a name by the name): the mutex of this name fails with WRONGTYPE while it "
                    "exists");
                info.unknown.emplace("holder", why);
                info.unknown.emplace("token", why);
                break;
            }
            case 2: {
                const auto why = "the key is a " + r.a + ", not a Redisson lock hash (another program's key)";
                info.unknown.emplace("holder", why);
                info.unknown.emplace("token", why);
                break;
            }
            default: {
                const auto why = "the hash has " + r.a + " fields" +
                                 (r.b.empty() ? std::string(": not one RLock holder")
                                              : ", mode=" + r.b + ": Redisson's read-write lock of the same name") +
                                 " (shared with the mutex in Redisson's layout)";
                info.unknown.emplace("holder", why);
                info.unknown.emplace("token", why);
                break;
            }
        }
        return info;
    }
    bool released(long long reply) const noexcept override { return reply >= 0; }

    // Redisson's layout has no queue: a waiter never queues, so never leaves.
    void leave(connection&, const layout&, const std::string&) const override {}

    const script& renew_script() const noexcept override { return renew_; }

private:
    script acquire_, release_, renew_, inspect_;
};

}  // namespace

std::unique_ptr<const strategy> make_reentrant_strategy() { return std::make_unique<reentrant_strategy>(); }

}  // namespace distlock::backends::redis
