// redis:// read-write lock, on both strategies, in the layout of Redisson's
// RReadWriteLock (RedissonReadLock / RedissonWriteLock), over the engine of
// shared_lock.hpp. Its keys (`object`: the Redisson object name):
//   object                                HASH: mode = read|write; one field per
//                                         reading grant `<uuid>:<n>` = 1; the
//                                         writing grant's field `<uuid>:<n>:write` = 1
//   {object}:<uuid>:<n>:rwlock_timeout:1  STRING "1", PX lease: a reader's own lease
//   redisson_rwlock:{object}              channel: "0" after a read unlock freed
//                                         the lock, "1" after a write unlock
//   {object}:rwlock_write_waiters         ZSET (distlock only): writers waiting,
//                                         scored by when their entry expires
//                                         (server ms); distlock readers do not
//                                         join while a live entry is there
//   {object}:rwlock_fence                 fencing counter (distlock only), INCR per grant
#include "redis-client/lock_scripts.hpp"
#include "shared_lock.hpp"

namespace distlock::backends::redis {
namespace {

using namespace redis_client;

// ---- Lua scripts ------------------------------------------------------------------

// Read acquire. KEYS[1] hash, KEYS[2] our timeout-key prefix
// ({object}:<owner>:rwlock_timeout), KEYS[3] write waiters, KEYS[4] fence;
// ARGV[1] lease ms, ARGV[2] owner field, ARGV[3] owner's write field.
// {1, token} | {0, ms to wait at most: PTTL of the hash, or until the first
// waiting writer's entry expires}.
// A hash without `mode` is a held lock (RLock) of the same name: busy to both
// sides when a field is another client's (Redisson's own scripts would take
// it as free), as a Redisson thread may take both locks of a name. `me`: this
// client's field prefix, "<uuid>:". An RLock has one field per holding
// thread: a hash of more than 16 is not read through (the script would hold
// the server for as long), and counts as another's.
const char* const rlock_of_another_lua = R"lua(
local function rlock_of_another(key, me)
  local fields = redis.call('hlen', key)
  if fields == 0 then
    return false
  end
  if fields > 16 then
    return true
  end
  for _, field in ipairs(redis.call('hkeys', key)) do
    if string.sub(field, 1, #me) ~= me then
      return true
    end
  end
  return false
end
)lua";

const std::string read_acquire_lua = std::string(fence_lua) + now_lua + rlock_of_another_lua + R"lua(
local mode = redis.call('hget', KEYS[1], 'mode')
if mode == false and rlock_of_another(KEYS[1], string.match(ARGV[2], '^(.*:)[^:]*$')) then
  return {0, redis.call('pttl', KEYS[1])}
end
if mode == false or mode == 'read' or (mode == 'write' and redis.call('hexists', KEYS[1], ARGV[3]) == 1) then
  local now = now_ms()
  redis.call('zremrangebyscore', KEYS[3], '-inf', now)
  local first = redis.call('zrange', KEYS[3], 0, 0, 'WITHSCORES')
  if first[1] then
    return {0, math.max(1, tonumber(first[2]) - now)}
  end
  if mode == false then
    redis.call('hset', KEYS[1], 'mode', 'read')
  end
  local n = redis.call('hincrby', KEYS[1], ARGV[2], 1)
  redis.call('set', KEYS[2] .. ':' .. n, 1, 'PX', ARGV[1])
  local pttl = redis.call('pttl', KEYS[1])
  redis.call('pexpire', KEYS[1], math.max(pttl, tonumber(ARGV[1])))
  return {1, next_fence(KEYS[4])}
end
return {0, redis.call('pttl', KEYS[1])}
)lua";

// Write acquire. KEYS[1] hash, KEYS[2] write waiters, KEYS[3] fence; ARGV[1]
// lease ms, ARGV[2] write field, ARGV[3] waiter id ("" = not waiting), ARGV[4]
// liveness slack ms. {1, token} | {0, PTTL of the hash}; a waiting writer
// (re)registers among the write waiters until its entry's expiry.
const std::string write_acquire_lua = std::string(fence_lua) + now_lua + rlock_of_another_lua + R"lua(
local mode = redis.call('hget', KEYS[1], 'mode')
if mode == false and not rlock_of_another(KEYS[1], string.match(ARGV[2], '^(.*:)[^:]*:write$')) then
  redis.call('hset', KEYS[1], 'mode', 'write')
  redis.call('hset', KEYS[1], ARGV[2], 1)
  redis.call('pexpire', KEYS[1], ARGV[1])
  if ARGV[3] ~= '' then
    redis.call('zrem', KEYS[2], ARGV[3])
  end
  return {1, next_fence(KEYS[3])}
end
local pttl = redis.call('pttl', KEYS[1])
if ARGV[3] ~= '' then
  local live = math.max(pttl, 1000) + tonumber(ARGV[4])
  redis.call('zadd', KEYS[2], now_ms() + live, ARGV[3])
  if redis.call('pttl', KEYS[2]) < live then
    redis.call('pexpire', KEYS[2], live)
  end
end
return {0, pttl}
)lua";

// A waiting writer that gives up. KEYS[1] write waiters; ARGV[1] waiter id,
// ARGV[2] channel. Readers it held back retry ("1", as after a write unlock).
const char* const write_leave_lua = R"lua(
if redis.call('zrem', KEYS[1], ARGV[1]) == 1 then
  redis.call('publish', ARGV[2], '1')
end
return 1
)lua";

// The start of Redisson's read and write unlock. KEYS[1] hash; ARGV[1] our
// field, ARGV[2] channel. With no lock at all, `message` is published (as
// Redisson does, for waiters that missed an expiry) and the grant is not ours
// (-1); when `not_ours` (a Lua test) holds, -1 too; else our field's count goes
// down by one, to `n` (`mode`: the lock's mode).
std::string unlock_start_lua(std::string_view message, std::string_view not_ours) {
    return "local mode = redis.call('hget', KEYS[1], 'mode')\n"
           "if mode == false then\n"
           "  redis.call('publish', ARGV[2], '" +
           std::string(message) +
           "')\n"
           "  return -1\n"
           "end\n"
           "if " +
           std::string(not_ours) +
           " then\n"
           "  return -1\n"
           "end\n"
           "local n = redis.call('hincrby', KEYS[1], ARGV[1], -1)\n";
}

// Read release, as Redisson's read unlock (without its retry latch). KEYS[1]
// hash, KEYS[2] our timeout-key prefix, KEYS[3] the prefix of every holder's
// timeout keys ({object}); ARGV[1] owner field, ARGV[2] channel.
// -1 not ours, 1 released.
const std::string read_release_lua = unlock_start_lua("0", "redis.call('hexists', KEYS[1], ARGV[1]) == 0") + R"lua(
if n == 0 then
  redis.call('hdel', KEYS[1], ARGV[1])
end
redis.call('del', KEYS[2] .. ':' .. (n + 1))
if redis.call('hlen', KEYS[1]) > 1 then
  local longest = -3
  for _, field in ipairs(redis.call('hkeys', KEYS[1])) do
    local count = tonumber(redis.call('hget', KEYS[1], field))
    if type(count) == 'number' then
      for i = count, 1, -1 do
        longest = math.max(longest, redis.call('pttl', KEYS[3] .. ':' .. field .. ':rwlock_timeout:' .. i))
      end
    end
  end
  if longest > 0 then
    redis.call('pexpire', KEYS[1], longest)
    return 1
  end
  if mode == 'write' then
    return 1
  end
end
redis.call('del', KEYS[1])
redis.call('publish', ARGV[2], '0')
return 1
)lua";

// Write release, as Redisson's write unlock (without its retry latch). KEYS[1]
// hash; ARGV[1] write field, ARGV[2] channel, ARGV[3] lease ms.
// -1 not ours, 0 still held (re-entered), 1 released.
const std::string write_release_lua =
    unlock_start_lua("1", "mode ~= 'write' or redis.call('hexists', KEYS[1], ARGV[1]) == 0") + R"lua(
if n > 0 then
  redis.call('pexpire', KEYS[1], ARGV[3])
  return 0
end
redis.call('hdel', KEYS[1], ARGV[1])
if redis.call('hlen', KEYS[1]) == 1 then
  redis.call('del', KEYS[1])
  redis.call('publish', ARGV[2], '1')
else
  redis.call('hset', KEYS[1], 'mode', 'read')
end
return 1
)lua";

// Renewal of read grants: KEYS[2i-1] hash, KEYS[2i] the grant's timeout-key
// prefix; ARGV[2i-1] owner field, ARGV[2i] lease ms. While the field is in the
// hash, its timeout keys get a new lease and the hash lives at least that long
// (as Redisson's ReadLockTask). 1 renewed, 0 gone.
const std::string read_renew_lua =
    batch_renew_lua("#KEYS / 2",
                    "  local hash, prefix, lease = KEYS[2 * i - 1], KEYS[2 * i], tonumber(ARGV[2 * i])\n"
                    "  local count = tonumber(redis.call('hget', hash, ARGV[2 * i - 1]))\n",
                    "count",
                    "    for k = 1, count do\n"
                    "      redis.call('set', prefix .. ':' .. k, 1, 'PX', lease)\n"
                    "    end\n"
                    "    if redis.call('pttl', hash) < lease then\n"
                    "      redis.call('pexpire', hash, lease)\n"
                    "    end\n");

// Read-only: what inspect shows. KEYS[1] hash, KEYS[2] write waiters; ARGV[1]
// the prefix of the readers' timeout keys ({object}). Reply {state, PTTL of the
// hash, live write waiters, write holds, {each read grant's PTTL, at most
// 1000}, read grants in all}: state 0 none, 1 read, 2 write, -1 the key is
// another type (its name in place of the list), -3 a hash without `mode`
// (Redisson's lock of the same name: its layout keys both by the name).
const std::string rw_inspect_lua = std::string(now_lua) + R"lua(
local now = now_ms()
local waiting = redis.call('zcount', KEYS[2], '(' .. now, '+inf')
local kind = redis.call('type', KEYS[1]).ok
if kind == 'none' then
  return {0, -2, waiting, 0, {}, 0}
end
if kind ~= 'hash' then
  return {-1, 0, waiting, 0, kind, 0}
end
local pttl = redis.call('pttl', KEYS[1])
if not redis.call('hget', KEYS[1], 'mode') then
  return {-3, pttl, waiting, 0, {}, 0}
end
local writes, reads, listed = 0, 0, {}
for _, field in ipairs(redis.call('hkeys', KEYS[1])) do
  local count = tonumber(redis.call('hget', KEYS[1], field))
  if field ~= 'mode' and count then
    if string.sub(field, -6) == ':write' then
      writes = writes + count
    else
      -- A read grant has its timeout key; a field without one is no reader
      -- (an RLock holder's, on a key both layouts share).
      for i = 1, count do
        local left = redis.call('pttl', ARGV[1] .. ':' .. field .. ':rwlock_timeout:' .. i)
        if left ~= -2 then
          reads = reads + 1
          if #listed < 1000 then
            listed[#listed + 1] = left
          end
        end
      end
    end
  end
end
local state = 1
if redis.call('hget', KEYS[1], 'mode') == 'write' then
  state = 2
end
return {state, pttl, waiting, writes, listed, reads}
)lua";

struct scripts {
    script read_acquire{read_acquire_lua}, write_acquire{write_acquire_lua}, write_leave{write_leave_lua},
        read_release{read_release_lua}, write_release{write_release_lua}, read_renew{read_renew_lua},
        write_renew{owner_renew_lua(hash_field_owned)}, inspect{rw_inspect_lua};
};
const scripts& lua() {
    static const scripts s;
    return s;
}

// ---- the handle ---------------------------------------------------------------------

class rw_handle final : public handle_base {
public:
    rw_handle(context& ctx, const spi::lock_request& r, std::string object)
        : handle_base(ctx, r, object, prefix_name("redisson_rwlock", object)),
          hash_(std::move(object)),
          waiters_(suffix_name(hash_, "rwlock_write_waiters")),
          fence_(suffix_name(hash_, "rwlock_fence")),
          root_(braced(hash_) ? hash_ : "{" + hash_ + "}"),
          write_(r.kind == spi::lock_kind::write) {}

    renewal renewal_kind() const noexcept override { return write_ ? renewal::write : renewal::read; }
    // Read grants: the hash and the timeout-key prefix; write grants: the hash.
    void renewal_item(std::vector<std::string_view>& keys, std::vector<std::string_view>& args) const override {
        keys.push_back(hash_);
        if (!write_) keys.push_back(timeout_prefix_);
        args.push_back(field_);
        args.push_back(lease_ms_);
    }
    std::string lost_reason() const override {
        return "read-write lock '" + name() + "' no longer holds our grant (expired or deleted on the server)";
    }

protected:
    void begin() override {
        owner_ = ctx_.next_owner();
        field_ = write_ ? owner_ + ":write" : owner_;
        timeout_prefix_ = root_ + ":" + owner_ + ":rwlock_timeout";
        registered_ = false;
    }

    reply_ptr attempt(connection& c, bool waiting) override {
        if (!write_)
            return lua().read_acquire.run(c, {hash_, timeout_prefix_, waiters_, fence_},
                                          {lease_ms_, owner_, owner_ + ":write"});
        static const std::string slack = std::to_string(liveness_slack.count());
        // Once listed, every later try names us, so that the grant takes us off
        // the list even when it comes from the last try, made at the deadline.
        if (waiting) registered_ = true;
        return lua().write_acquire.run(c, {hash_, waiters_, fence_},
                                       {lease_ms_, field_, registered_ ? owner_ : "", slack});
    }

    reply_ptr run_release(connection& c) override {
        if (write_) return lua().write_release.run(c, {hash_}, {field_, channel_, lease_ms_});
        return lua().read_release.run(c, {hash_, timeout_prefix_, root_}, {owner_, channel_});
    }

    void leave(connection& c) override {
        if (registered_) lua().write_leave.run(c, {waiters_}, {owner_, channel_});
    }

private:
    std::string hash_, waiters_, fence_, root_;
    bool write_;
    std::string owner_, field_, timeout_prefix_;
    bool registered_ = false;  // a waiting writer's entry may be among the write waiters
};

}  // namespace

std::unique_ptr<spi::lock_handle> make_rw_handle(context& ctx, const spi::lock_request& r, std::string object) {
    return std::make_unique<rw_handle>(ctx, r, std::move(object));
}

read_write_info inspect_rw_object(connection& c, const std::string& object) {
    const std::string root = braced(object) ? object : "{" + object + "}";
    const auto r = lua().inspect.run(c, {object, suffix_name(object, "rwlock_write_waiters")}, {root});
    if (is_error(r.get())) throw_client_error(r.get(), kBackend, "inspect of a read-write lock");
    if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 6)
        throw_error(errc::unavailable, kBackend, "unexpected reply to the inspect script: " + reply_text(r.get()));
    read_write_info info;
    const long long state = as_integer(r->element[0]);
    info.writers_waiting = static_cast<std::uint32_t>(std::max(0LL, as_integer(r->element[2])));
    if (state < 0) {
        const auto why = state == -3
                             ? std::string(
                                   "the key is a lock hash without mode: Redisson's lock (RLock) of the same name "
                                   "holds it (its layout keys both by the name)")
                             : "the key is a " + reply_text(r->element[4]) +
                                   ", not a read-write lock in Redisson's layout (another program's key)";
        for (const char* field : {"write_held", "readers"}) info.unknown.emplace(field, why);
        return info;
    }
    info.write_held = state == 2;
    if (state == 2) {
        grant_info w;
        const long long pttl = as_integer(r->element[1]);
        if (pttl >= 0) w.remaining = server_duration(pttl);
        else info.unknown.emplace("writer.remaining", "the hash has no expiry (set by another client)");
        info.writer = std::move(w);
        info.unknown.emplace("writer.holder",
                             "Redisson's layout keeps no holder label for the writer, only an owner id");
        info.unknown.emplace("writer.token", no_grant_token);
    }
    const long long reads = as_integer(r->element[5]);
    if (reads > 1000) {
        info.unknown.emplace("readers", std::to_string(reads) + " read grants: more than the 1000 inspect lists");
        return info;
    }
    info.readers.emplace();
    grants_from_pttls(r->element[4], *info.readers, info.unknown, "readers");
    return info;
}

const script& read_renew_script() { return lua().read_renew; }
const script& write_renew_script() { return lua().write_renew; }

}  // namespace distlock::backends::redis
