// redis:// strategy=reentrant: Redisson's RLock layout, so that a Java service
// using Redisson shares the lock: a hash at `<name>`, field `<client uuid>:<thread
// id>` holding the reentrancy count, PEXPIRE lease, release message "0" on
// `redisson_lock__channel:{<name>}`; fencing token INCR `redisson_lock_token:{<name>}`.
#include <sys/syscall.h>
#include <unistd.h>

#include "lock_scripts.hpp"
#include "strategy.hpp"

namespace distlock::backends::redis {
namespace {

// ---- Lua scripts ------------------------------------------------------------------
// Replies: acquire -> {1, fencing token} | {0, PTTL of the holder's key}.

// Redisson layout. KEYS[1] lock hash, KEYS[2] fence key; ARGV[1] lease ms, ARGV[2] field.
const std::string reentrant_acquire_lua = std::string(fence_lua) + R"lua(
if redis.call('exists', KEYS[1]) == 0 or redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
  local count = redis.call('hincrby', KEYS[1], ARGV[2], 1)
  redis.call('pexpire', KEYS[1], ARGV[1])
  local fence
  if count == 1 then
    fence = next_fence(KEYS[2])
  else
    fence = tonumber(redis.call('get', KEYS[2]) or '0')
  end
  return {1, fence}
end
return {0, redis.call('pttl', KEYS[1])}
)lua";

// KEYS[1] lock hash; ARGV[1] field, ARGV[2] lease ms, ARGV[3] channel.
// -1 not ours, 0 still held (count > 0), 1 released.
const char* const reentrant_release_lua = R"lua(
if redis.call('hexists', KEYS[1], ARGV[1]) == 0 then
  return -1
end
local count = redis.call('hincrby', KEYS[1], ARGV[1], -1)
if count > 0 then
  redis.call('pexpire', KEYS[1], ARGV[2])
  return 0
end
redis.call('del', KEYS[1])
redis.call('publish', ARGV[3], '0')
return 1
)lua";

long current_thread_id() { return static_cast<long>(::syscall(SYS_gettid)); }

class reentrant_strategy final : public strategy {
public:
    reentrant_strategy()
        : acquire_(reentrant_acquire_lua), release_(reentrant_release_lua), renew_(redis_client::owner_renew_lua(redis_client::hash_field_owned)) {}

    bool reentrant() const noexcept override { return true; }
    bool queues() const noexcept override { return false; }

    layout layout_for(std::string_view name) const override {
        layout l;
        // Redisson: the channel wraps the name in braces unless it already has some.
        const bool braced = name.find('{') != std::string_view::npos;
        l.key = std::string(name);
        l.channel = braced ? "redisson_lock__channel:" + std::string(name)
                           : "redisson_lock__channel:{" + std::string(name) + "}";
        l.fence = braced ? "redisson_lock_token:" + std::string(name) : "redisson_lock_token:{" + std::string(name) + "}";
        return l;
    }

    std::string object_name(std::string_view name, std::string_view) const override { return std::string(name); }

    std::string new_owner(const std::string& client_uuid) const override {
        return client_uuid + ":" + std::to_string(current_thread_id());
    }

    reply_ptr acquire(connection& c, const layout& l, const std::string& owner, const std::string& lease_ms,
                      const std::string&) const override {
        return acquire_.run(c, {l.key, l.fence}, {lease_ms, owner});
    }

    reply_ptr release(connection& c, const layout& l, const std::string& owner,
                      const std::string& lease_ms) const override {
        return release_.run(c, {l.key}, {owner, lease_ms, l.channel});
    }
    bool released(long long reply) const noexcept override { return reply >= 0; }

    // Redisson's layout has no queue: a waiter never queues, so never leaves.
    void leave(connection&, const layout&, const std::string&) const override {}

    const script& renew_script() const noexcept override { return renew_; }

private:
    script acquire_, release_, renew_;
};

}  // namespace

std::unique_ptr<const strategy> make_reentrant_strategy() { return std::make_unique<reentrant_strategy>(); }

}  // namespace distlock::backends::redis
