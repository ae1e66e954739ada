// redis:// strategy=plain (the default): a string key `<prefix>{<name>}` set with
// SET NX PX to a random per-acquisition token; owner-checked Lua scripts release
// (DEL + PUBLISH on `<prefix>{<name>}:released`) and renew (PEXPIRE); the fencing
// token is an INCR of `<prefix>{<name>}:fence` (never expires) inside the acquire
// script, which also records the holder label in `<prefix>{<name>}:holder`.
#include "redis-client/lock_scripts.hpp"
#include "strategy.hpp"

namespace distlock::backends::redis {
namespace {

// ---- Lua scripts ------------------------------------------------------------------
// Replies: acquire -> {1, fencing token} | {0, PTTL of the holder's key}.

// Plain strategy: a FIFO hand-off, so that a release wakes ONE waiting client.
// Waiting clients queue their waiter id in `<base>:queue` (a LIST, in arrival
// order) with a liveness deadline in `<base>:waiters` (a ZSET scored by server
// time in ms). A release pops the first live waiter, reserves the key for it
// for a short while (value "r:<waiter id>", PX reserve) and publishes
// "h <waiter id> <reserve ms>": only that waiter retries; the others just move
// their wake-up to the end of the reservation (in case that waiter died). With no
// live waiter, the key is deleted and "released" published.
const std::string handoff_lua = R"lua(
local function handoff(key, queue, alive, channel, reserve)
  local now = nil
  for i = 1, 100 do
    local id = redis.call('lpop', queue)
    if not id then break end
    if not now then
      local t = redis.call('time')
      now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    end
    local expiry = redis.call('zscore', alive, id)
    redis.call('zrem', alive, id)
    if expiry and tonumber(expiry) > now then
      redis.call('set', key, 'r:' .. id, 'PX', reserve)
      redis.call('publish', channel, 'h ' .. id .. ' ' .. reserve)
      return 1
    end
  end
  redis.call('del', key)
  redis.call('publish', channel, 'released')
  return 0
end
)lua";

// KEYS[1] lock key, KEYS[2] fence key, KEYS[3] queue, KEYS[4] waiters,
// KEYS[5] holder record; ARGV[1] token, ARGV[2] lease ms, ARGV[3] waiter id
// ("" = not waiting), ARGV[4] liveness slack ms, ARGV[5] channel ("t <waiter id>
// <lease ms>" when a reservation is taken up), ARGV[6] holder label. Takes the
// key when free or reserved for us (and records token, fence and label in the
// holder record); else (when waiting) queues us once and refreshes our liveness
// deadline.
const std::string plain_acquire_lua = std::string(fence_lua) + R"lua(
local w = ARGV[3]
local got = redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])
if not got and w ~= '' and redis.call('get', KEYS[1]) == 'r:' .. w then
  got = redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2])
  -- the other waiters wait for the new holder's lease, not for the reservation
  redis.call('publish', ARGV[5], 't ' .. w .. ' ' .. ARGV[2])
end
if got then
  if w ~= '' and redis.call('zrem', KEYS[4], w) == 1 then
    redis.call('lrem', KEYS[3], 1, w)
  end
  local fence = next_fence(KEYS[2])
  redis.call('hset', KEYS[5], 'owner', ARGV[1], 'token', string.format('%.0f', fence), 'holder', ARGV[6])
  return {1, fence}
end
local pttl = redis.call('pttl', KEYS[1])
if w ~= '' then
  local t = redis.call('time')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local live = math.max(pttl, 1000) + tonumber(ARGV[4])
  if not redis.call('zscore', KEYS[4], w) then
    redis.call('rpush', KEYS[3], w)
  end
  redis.call('zadd', KEYS[4], now + live, w)
  for _, k in ipairs({KEYS[3], KEYS[4]}) do
    if redis.call('pttl', k) < live then redis.call('pexpire', k, live) end
  end
end
return {0, pttl}
)lua";

// KEYS[1] lock key, KEYS[2] queue, KEYS[3] waiters, KEYS[4] holder record;
// ARGV[1] token, ARGV[2] channel, ARGV[3] reserve ms. 1 released (handed off or
// deleted), 0 not ours.
const std::string plain_release_lua = handoff_lua + R"lua(
if redis.call('get', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('del', KEYS[4])
handoff(KEYS[1], KEYS[2], KEYS[3], ARGV[2], ARGV[3])
return 1
)lua";

// A waiter that gives up: KEYS as release; ARGV[1] waiter id, ARGV[2] channel,
// ARGV[3] reserve ms. Leaves the queue, and passes on a reservation made for it.
const std::string plain_leave_lua = handoff_lua + R"lua(
if redis.call('zrem', KEYS[3], ARGV[1]) == 1 then
  redis.call('lrem', KEYS[2], 1, ARGV[1])
end
if redis.call('get', KEYS[1]) == 'r:' .. ARGV[1] then
  handoff(KEYS[1], KEYS[2], KEYS[3], ARGV[2], ARGV[3])
end
return 1
)lua";

// Read-only: what inspect shows. KEYS[1] lock key, KEYS[2] holder record,
// KEYS[3] waiters. Reply {state, PTTL, live queued waiters, a, b}: state 0 free;
// 1 held by the grant the holder record names (a = label, b = fencing token);
// 2 the key is not a string (a = its type); 3 reserved for a queued waiter
// during a hand-off; 4 held by a value no holder record names (a client that
// is not distlock, or one older than the records).
const char* const plain_inspect_lua = R"lua(
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local waiting = redis.call('zcount', KEYS[3], '(' .. now, '+inf')
local kind = redis.call('type', KEYS[1]).ok
if kind == 'none' then
  return {0, -2, waiting, '', ''}
end
local pttl = redis.call('pttl', KEYS[1])
if kind ~= 'string' then
  return {2, pttl, waiting, kind, ''}
end
local value = redis.call('get', KEYS[1])
if string.sub(value, 1, 2) == 'r:' then
  return {3, pttl, waiting, '', ''}
end
local rec = redis.call('hmget', KEYS[2], 'owner', 'token', 'holder')
if rec[1] == value then
  return {1, pttl, waiting, rec[3] or '', rec[2] or ''}
end
return {4, pttl, waiting, '', ''}
)lua";

class plain_strategy final : public strategy {
public:
    explicit plain_strategy(std::string prefix)
        : prefix_(std::move(prefix)),
          acquire_(plain_acquire_lua),
          release_(plain_release_lua),
          renew_(redis_client::owner_renew_lua(redis_client::plain_key_owned)),
          leave_(plain_leave_lua),
          inspect_(plain_inspect_lua) {}

    bool reentrant() const noexcept override { return false; }
    bool queues() const noexcept override { return true; }

    layout layout_for(std::string_view name) const override {
        layout l;
        const std::string base = prefix_ + "{" + std::string(name) + "}";
        l.key = base;
        l.fence = base + ":fence";
        l.channel = base + ":released";
        l.queue = base + ":queue";
        l.waiters = base + ":waiters";
        l.holder = base + ":holder";
        return l;
    }

    std::string object_name(std::string_view name, std::string_view what) const override {
        return prefix_ + "{" + std::string(name) + "}:" + std::string(what);
    }

    std::string new_owner(const std::string&) const override { return spi::random_token(); }

    reply_ptr acquire(connection& c, const layout& l, const std::string& owner, const std::string& lease_ms,
                      const std::string& waiter, const std::string& holder) const override {
        static const std::string slack = std::to_string(liveness_slack.count());
        return acquire_.run(c, {l.key, l.fence, l.queue, l.waiters, l.holder},
                            {owner, lease_ms, waiter, slack, l.channel, holder});
    }

    reply_ptr release(connection& c, const layout& l, const std::string& owner, const std::string&) const override {
        return release_.run(c, {l.key, l.queue, l.waiters, l.holder}, {owner, l.channel, reserve_ms});
    }

    lock_info inspect(connection& c, const layout& l) const override {
        const auto r = inspect_reply(inspect_.run(c, {l.key, l.holder, l.waiters}, {}));
        lock_info info;
        info.held = r.state != 0;
        info.waiters = r.waiting;
        if (r.state == 0) return info;
        set_remaining(info, r.pttl);
        switch (r.state) {
            case 1: set_recorded_holder(info, r); break;
            case 2:
                declare(info, "the key is a " + r.a + ", not a lock of strategy=plain (another program's key)");
                break;
            case 3:
                declare(info, "reserved for the first queued waiter during a hand-off (at most " +
                                  std::string(reserve_ms) + " ms): nobody holds it yet");
                break;
            default:
                declare(info,
                        "held by a client that records no holder (not distlock, or a distlock older than "
                        "holder records): its value is a token only");
                break;
        }
        return info;
    }
    bool released(long long reply) const noexcept override { return reply != 0; }

    void leave(connection& c, const layout& l, const std::string& waiter) const override {
        leave_.run(c, {l.key, l.queue, l.waiters}, {waiter, l.channel, reserve_ms});
    }

    const script& renew_script() const noexcept override { return renew_; }

private:
    static constexpr std::string_view reserve_ms = "500";  // a hand-off waits this long for its waiter

    std::string prefix_;
    // holder and token unknown for the same reason.
    static void declare(lock_info& info, const std::string& why) {
        info.unknown.emplace("holder", why);
        info.unknown.emplace("token", why);
    }

    script acquire_, release_, renew_, leave_, inspect_;
};

}  // namespace

std::unique_ptr<const strategy> make_plain_strategy(std::string prefix) {
    return std::make_unique<plain_strategy>(std::move(prefix));
}

}  // namespace distlock::backends::redis
