// redis:// semaphore, on both strategies, in the layout of Redisson's
// RPermitExpirableSemaphore, over the engine of shared_lock.hpp. Its keys
// (`object`: the Redisson object name):
//   object                 STRING: available permits, set to the size when absent
//                          (Redisson's trySetPermits)
//   {object}:timeout       ZSET of permit ids (16 raw random bytes) scored by their
//                          expiry in server ms; an acquirer reclaims expired ones
//   redisson_sc:{object}   channel: the new available count on release / reclaim
//   {object}:semaphore_fence  fencing counter (distlock only), INCR per grant
// The size the semaphore has on the server is Redisson's getPermits(): available
// + acquired (ZCARD); a request of another size is refused.
#include <charconv>

#include "redis-client/lock_scripts.hpp"
#include "shared_lock.hpp"

namespace distlock::backends::redis {
namespace {

using namespace redis_client;

// ---- Lua scripts ------------------------------------------------------------------

// Permit acquire. KEYS[1] available count, KEYS[2] timeout zset, KEYS[3] fence;
// ARGV[1] permit id, ARGV[2] lease ms, ARGV[3] size, ARGV[4] channel.
// {1, token} | {0, ms until the first permit expires, -1 unknown}
// | {-1, the size on the server} (another size) | {-2, 0} (not a count).
const std::string permit_acquire_lua = std::string(fence_lua) + now_lua + R"lua(
local now = now_ms()
if redis.call('exists', KEYS[1]) == 0 then
  redis.call('set', KEYS[1], ARGV[3])
  redis.call('publish', ARGV[4], ARGV[3])
end
local expired = redis.call('zrangebyscore', KEYS[2], 0, now, 'LIMIT', 0, 1000)
if #expired > 0 then
  redis.call('zrem', KEYS[2], unpack(expired))
  local value = redis.call('incrby', KEYS[1], #expired)
  if value > 0 then
    redis.call('publish', ARGV[4], value)
  end
end
local available = tonumber(redis.call('get', KEYS[1]))
if not available then
  return {-2, 0}
end
local size = available + redis.call('zcard', KEYS[2])
if size ~= tonumber(ARGV[3]) then
  return {-1, size}
end
if available >= 1 then
  redis.call('decrby', KEYS[1], 1)
  redis.call('zadd', KEYS[2], now + tonumber(ARGV[2]), ARGV[1])
  local ttl = redis.call('pttl', KEYS[1])
  if ttl > 0 then
    redis.call('pexpire', KEYS[2], ttl)
  end
  return {1, next_fence(KEYS[3])}
end
local first = redis.call('zrange', KEYS[2], 0, 0, 'WITHSCORES')
if first[1] and first[2] ~= '922337203685477' then
  return {0, math.max(1, tonumber(first[2]) - now)}
end
return {0, -1}
)lua";

// Permit release, as Redisson's tryRelease. KEYS[1] available count, KEYS[2]
// timeout zset; ARGV[1] permit id, ARGV[2] channel. 1 released, 0 it had expired
// (given back all the same), -1 not there.
const std::string permit_release_lua = std::string(now_lua) + R"lua(
local expiry = redis.call('zscore', KEYS[2], ARGV[1])
if redis.call('zrem', KEYS[2], ARGV[1]) ~= 1 then
  return -1
end
local value = redis.call('incrby', KEYS[1], 1)
redis.call('publish', ARGV[2], value)
if tonumber(expiry) <= now_ms() then
  return 0
end
return 1
)lua";

// Renewal of permits: KEYS[i] timeout zset; ARGV[2i-1] permit id, ARGV[2i]
// lease ms. A permit not yet expired gets a new expiry (Redisson's
// updateLeaseTime); an expired one may be reclaimed by anyone: gone. 1 | 0.
const std::string permit_renew_lua =
    std::string(now_lua) + "local now = now_ms()\n" +
    batch_renew_lua("#KEYS", "  local expiry = redis.call('zscore', KEYS[i], ARGV[2 * i - 1])\n",
                    "expiry and tonumber(expiry) > now",
                    "    redis.call('zadd', KEYS[i], 'XX', now + tonumber(ARGV[2 * i]), ARGV[2 * i - 1])\n");

// Read-only: what inspect shows. KEYS[1] available count, KEYS[2] timeout
// zset. Reply {state, available, permit ids in the zset, live ones, {each
// live permit's ms left, at most 1000}}: state 0 no semaphore, 1 one, -1 the
// key is another type (its name in place of the list), -2 not a count.
const std::string permit_inspect_lua = std::string(now_lua) + R"lua(
local now = now_ms()
local kind = redis.call('type', KEYS[1]).ok
if kind == 'none' then
  return {0, 0, 0, 0, {}}
end
if kind ~= 'string' then
  return {-1, 0, 0, 0, kind}
end
local available = tonumber(redis.call('get', KEYS[1]))
if not available then
  return {-2, 0, 0, 0, {}}
end
local live = redis.call('zrangebyscore', KEYS[2], '(' .. now, '+inf', 'WITHSCORES', 'LIMIT', 0, 1000)
local left = {}
for i = 2, #live, 2 do
  left[#left + 1] = tonumber(live[i]) - now
end
return {1, available, redis.call('zcard', KEYS[2]), redis.call('zcount', KEYS[2], '(' .. now, '+inf'), left}
)lua";

struct scripts {
    script permit_acquire{permit_acquire_lua}, permit_release{permit_release_lua}, permit_renew{permit_renew_lua},
        inspect{permit_inspect_lua};
};
const scripts& lua() {
    static const scripts s;
    return s;
}

// A new permit id: 16 random bytes, raw (as Redisson stores them since 3.17.0).
std::string new_permit_id() {
    const std::string hex = spi::random_token();
    std::string raw(hex.size() / 2, '\0');
    for (std::size_t i = 0; i < raw.size(); ++i) {
        unsigned v = 0;
        std::from_chars(hex.data() + 2 * i, hex.data() + 2 * i + 2, v, 16);
        raw[i] = static_cast<char>(v);
    }
    return raw;
}

// ---- the handle ---------------------------------------------------------------------

class permit_handle final : public handle_base {
public:
    permit_handle(context& ctx, const spi::lock_request& r, std::string object)
        : handle_base(ctx, r, object, prefix_name("redisson_sc", object)),
          count_(std::move(object)),
          timeouts_(suffix_name(count_, "timeout")),
          fence_(suffix_name(count_, "semaphore_fence")),
          size_(std::to_string(r.permits)) {}

    renewal renewal_kind() const noexcept override { return renewal::permit; }
    void renewal_item(std::vector<std::string_view>& keys, std::vector<std::string_view>& args) const override {
        keys.push_back(timeouts_);
        args.push_back(id_);
        args.push_back(lease_ms_);
    }
    std::string lost_reason() const override {
        return "permit of semaphore '" + name() + "' is gone (expired or deleted on the server)";
    }

protected:
    void begin() override { id_ = new_permit_id(); }

    reply_ptr attempt(connection& c, bool) override {
        return lua().permit_acquire.run(c, {count_, timeouts_, fence_}, {id_, lease_ms_, size_, channel_});
    }
    outcome read_outcome(long long status) const noexcept override {
        switch (status) {
            case 1: return outcome::granted;
            case -1: return outcome::wrong_size;
            case -2: return outcome::not_a_semaphore;
            default: return outcome::busy;
        }
    }

    reply_ptr run_release(connection& c) override {
        return lua().permit_release.run(c, {count_, timeouts_}, {id_, channel_});
    }
    bool released(long long reply) const noexcept override { return reply == 1; }

private:
    std::string count_, timeouts_, fence_, size_;
    std::string id_;  // of the current or last acquisition
};

}  // namespace

std::unique_ptr<spi::lock_handle> make_permit_handle(context& ctx, const spi::lock_request& r, std::string object) {
    return std::make_unique<permit_handle>(ctx, r, std::move(object));
}

const script& permit_renew_script() { return lua().permit_renew; }

std::string permit_timeouts_key(const std::string& semaphore) { return suffix_name(semaphore, "timeout"); }

semaphore_info inspect_semaphore_object(connection& c, const std::string& object) {
    const auto r = lua().inspect.run(c, {object, permit_timeouts_key(object)}, {});
    if (is_error(r.get())) throw_client_error(r.get(), kBackend, "inspect of a semaphore");
    if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 5)
        throw_error(errc::unavailable, kBackend, "unexpected reply to the inspect script: " + reply_text(r.get()));
    semaphore_info info;
    const long long state = as_integer(r->element[0]);
    if (state < 0) {
        const auto why = state == -1 ? "the key is a " + reply_text(r->element[4]) +
                                           ", not a semaphore in Redisson's layout (another program's key)"
                                     : std::string("the key is a string that is not a count (another program's key)");
        for (const char* field : {"size", "permits", "free"}) info.unknown.emplace(field, why);
        return info;
    }
    info.permits.emplace();
    if (state == 0) {
        const char* why = "no semaphore of this name on the server: its size is set by its first acquirer";
        info.unknown.emplace("size", why);
        info.unknown.emplace("free", why);
        return info;
    }
    // Redisson's getPermits(): the available count and every permit id listed (an
    // expired one comes back to the count at the next acquire).
    const long long available = std::max(0LL, as_integer(r->element[1]));
    const long long listed = std::max(0LL, as_integer(r->element[2]));
    const long long live = std::max(0LL, as_integer(r->element[3]));
    info.size = static_cast<std::uint32_t>(std::min<long long>(available + listed, UINT32_MAX));
    info.free = static_cast<std::uint32_t>(std::min<long long>(available + listed - live, UINT32_MAX));
    if (live > 1000) {
        info.permits.reset();
        info.unknown.emplace("permits", std::to_string(live) + " permits taken: more than the 1000 inspect lists");
        return info;
    }
    grants_from_pttls(r->element[4], *info.permits, info.unknown, "permits");
    return info;
}

}  // namespace distlock::backends::redis
