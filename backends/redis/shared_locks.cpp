// redis:// read-write lock and semaphore, on both strategies, in the layouts of
// Redisson's RReadWriteLock and RPermitExpirableSemaphore, so that a Java
// service using Redisson on the same object name shares them. `object` is the
// Redisson object name (strategy::object_name); its other keys follow Redisson's
// rules: suffix `s` -> `{object}:s` (or `object:s` when the name already has a
// `{`), prefix `p` -> `p:{object}` (or `p:object`).
//
// Read-write lock (RedissonReadLock / RedissonWriteLock):
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
// Semaphore (RedissonPermitExpirableSemaphore):
//   object                 STRING: available permits, set to the size when absent
//                          (Redisson's trySetPermits)
//   {object}:timeout       ZSET of permit ids (16 raw random bytes) scored by their
//                          expiry in server ms; an acquirer reclaims expired ones
//   redisson_sc:{object}   channel: the new available count on release / reclaim
//   {object}:semaphore_fence  fencing counter (distlock only), INCR per grant
// The size the semaphore has on the server is Redisson's getPermits(): available
// + acquired (ZCARD); a request of another size is refused.
#include <atomic>
#include <charconv>
#include <thread>

#include "context.hpp"
#include "redis-client/lock_scripts.hpp"
#include "strategy.hpp"

namespace distlock::backends::redis {
namespace {

using namespace redis_client;

// ---- Lua scripts ------------------------------------------------------------------

// Server time in ms: leases and expiries are judged by the server's clock only.
constexpr const char* now_lua = R"lua(
local function now_ms()
  local t = redis.call('time')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
)lua";

// Read acquire. KEYS[1] hash, KEYS[2] our timeout-key prefix
// ({object}:<owner>:rwlock_timeout), KEYS[3] write waiters, KEYS[4] fence;
// ARGV[1] lease ms, ARGV[2] owner field, ARGV[3] owner's write field.
// {1, token} | {0, ms to wait at most: PTTL of the hash, or until the first
// waiting writer's entry expires}.
const std::string read_acquire_lua = std::string(fence_lua) + now_lua + R"lua(
local mode = redis.call('hget', KEYS[1], 'mode')
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
const std::string write_acquire_lua = std::string(fence_lua) + now_lua + R"lua(
local mode = redis.call('hget', KEYS[1], 'mode')
if mode == false then
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

struct scripts {
    script read_acquire{read_acquire_lua}, write_acquire{write_acquire_lua}, write_leave{write_leave_lua},
        read_release{read_release_lua}, write_release{write_release_lua}, read_renew{read_renew_lua},
        write_renew{owner_renew_lua(hash_field_owned)}, permit_acquire{permit_acquire_lua},
        permit_release{permit_release_lua}, permit_renew{permit_renew_lua};
};
const scripts& lua() {
    static const scripts s;
    return s;
}

// ---- Redisson's key names -----------------------------------------------------------

bool braced(const std::string& object) { return object.find('{') != std::string::npos; }
std::string suffix_name(const std::string& object, const std::string& s) {
    return braced(object) ? object + ":" + s : "{" + object + "}:" + s;
}
std::string prefix_name(const std::string& p, const std::string& object) {
    return braced(object) ? p + ":" + object : p + ":{" + object + "}";
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

// ---- handles ------------------------------------------------------------------------

// What one acquire script said: the grant (value = token), or to wait at most
// `value` ms (-1: no bound known), or that the request is refused.
enum class outcome { granted, busy, wrong_size, not_a_semaphore };

class handle_base : public shared_handle {
public:
    // `key`: the object's main key (every key of the object shares its hash slot).
    handle_base(context& ctx, const spi::lock_request& r, std::string key, std::string channel)
        : ctx_(ctx),
          request_(r),
          key_(std::move(key)),
          channel_(std::move(channel)),
          lease_ms_(std::to_string(r.lease.count())) {}

    std::optional<spi::grant> acquire(deadline until, const spi::loss_sink&) override {
        begin();
        bool granted = false;
        struct give_up_guard {  // on every way out but a grant
            handle_base* self;
            bool* granted;
            ~give_up_guard() {
                if (!*granted) self->give_up();
            }
        } guard{this, &granted};
        std::unique_ptr<subscriber::subscription> sub;
        if (until > clock::now()) sub = ctx_.reuse_subscription(channel_);
        retry_pacer pacer(request_);
        for (bool first = true;; first = false) {
            const std::uint64_t seen = sub ? sub->messages() : 0;
            const auto sent = clock::now();  // the lease runs from when the server ran the script
            auto [what, value] = run_attempt(until);
            if (what == outcome::granted) {
                granted = true;
                return spi::grant{static_cast<std::uint64_t>(value), sent, !first};
            }
            if (what == outcome::wrong_size)
                throw_error(errc::invalid_argument, kBackend,
                            "semaphore '" + request_.name + "' has " + std::to_string(value) +
                                " permits on the server; this one asks for " + std::to_string(request_.permits));
            if (what == outcome::not_a_semaphore)
                throw_error(errc::invalid_argument, kBackend,
                            "the key of semaphore '" + request_.name + "' holds something else than a permit count");
            auto now = clock::now();
            if (now >= until) return std::nullopt;
            if (!sub) {
                // Subscribe first, then retry: a release published after the
                // subscription is confirmed cannot be missed.
                sub = ctx_.sub(channel_).subscribe(channel_, std::min(until, now + ctx_.where().command_timeout));
                continue;
            }
            // value: the holder's PTTL (-1 no expiry, -2 the key just went).
            const deadline bound = pacer.wait_after(value, until);
            // Any message on the channel (a release, a reclaim, a writer giving
            // up) is worth a retry; else the end of the holder's lease.
            const auto woke = sub->wait(seen, bound);
            if (woke == subscriber::wake::message) pacer.heard();
            if (woke == subscriber::wake::broken)
                std::this_thread::sleep_for(pacer.backoff(bound));  // no pub/sub connection: back off
        }
    }

    void release() override {
        if (!holding_) throw_error(errc::not_owner, kBackend, "lock '" + request_.name + "' is not held");
        holding_ = false;
        run_release_script(
            ctx_, key_, request_.name, [&](connection& c) { return run_release(c); },
            [&](long long reply) { return released(reply); });
    }

    bool holding() const noexcept { return holding_; }
    const std::string& lease_ms() const noexcept { return lease_ms_; }
    const std::string& name() const noexcept { return request_.name; }

protected:
    // A new owner / permit id for this acquisition.
    virtual void begin() = 0;
    // One acquire script; `waiting`: the caller will wait if it fails.
    virtual reply_ptr attempt(connection& c, bool waiting) = 0;
    virtual outcome read_outcome(long long status) const noexcept {
        return status == 1 ? outcome::granted : outcome::busy;
    }
    virtual reply_ptr run_release(connection& c) = 0;
    virtual bool released(long long reply) const noexcept { return reply >= 0; }
    // Leaves what a failed acquisition left (a waiting writer's entry).
    virtual void leave(connection&) {}

    context& ctx_;
    spi::lock_request request_;
    std::string key_, channel_, lease_ms_;

private:
    std::pair<outcome, long long> run_attempt(deadline until) {
        const bool waiting = until > clock::now();
        auto [status, value] = run_acquire_script(
            ctx_, key_, request_.name, until, [&](connection& c) { return attempt(c, waiting); },
            [&](connection& c) { run_release(c); });
        auto what = read_outcome(status);
        if (what == outcome::granted) holding_ = true;
        return {what, value};
    }

    void give_up() noexcept {
        try {
            ctx_.connections().run(key_, [&](connection& c) {
                leave(c);
                return 0;
            });
        } catch (...) {}
    }

    bool holding_ = false;
};

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
    const std::string& key() const noexcept { return hash_; }
    const std::string& field() const noexcept { return field_; }
    const std::string& timeout_prefix() const noexcept { return timeout_prefix_; }

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

class permit_handle final : public handle_base {
public:
    permit_handle(context& ctx, const spi::lock_request& r, std::string object)
        : handle_base(ctx, r, object, prefix_name("redisson_sc", object)),
          count_(std::move(object)),
          timeouts_(suffix_name(count_, "timeout")),
          fence_(suffix_name(count_, "semaphore_fence")),
          size_(std::to_string(r.permits)) {}

    renewal renewal_kind() const noexcept override { return renewal::permit; }
    const std::string& timeouts() const noexcept { return timeouts_; }
    const std::string& id() const noexcept { return id_; }

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

std::unique_ptr<spi::lock_handle> make_shared_lock(context& ctx, const spi::lock_request& r, std::string object) {
    if (r.kind == spi::lock_kind::permit) return std::make_unique<permit_handle>(ctx, r, std::move(object));
    return std::make_unique<rw_handle>(ctx, r, std::move(object));
}

std::vector<std::string> shared_keys(const std::string& rwlock, const std::string& semaphore) {
    return {rwlock, semaphore, suffix_name(semaphore, "timeout")};
}

void renew_shared(context& ctx, std::span<shared_handle* const> handles, std::span<spi::keepalive_result*> results) {
    constexpr std::size_t per_call = 256;
    using renewal = shared_handle::renewal;
    for (auto kind : {renewal::read, renewal::write, renewal::permit}) {
        std::vector<std::size_t> index;
        std::vector<std::string_view> keys, args;
        for (std::size_t i = 0; i < handles.size(); ++i) {
            if (handles[i]->renewal_kind() != kind) continue;
            if (kind == renewal::permit) {
                auto* h = static_cast<permit_handle*>(handles[i]);
                if (!h->holding()) {
                    *results[i] = spi::keepalive_result::lost("not held");
                    continue;
                }
                keys.push_back(h->timeouts());
                args.push_back(h->id());
                args.push_back(h->lease_ms());
            } else {
                auto* h = static_cast<rw_handle*>(handles[i]);
                if (!h->holding()) {
                    *results[i] = spi::keepalive_result::lost("not held");
                    continue;
                }
                keys.push_back(h->key());
                if (kind == renewal::read) keys.push_back(h->timeout_prefix());
                args.push_back(h->field());
                args.push_back(h->lease_ms());
            }
            index.push_back(i);
        }
        if (index.empty()) continue;
        const script& s = kind == renewal::read    ? lua().read_renew
                          : kind == renewal::write ? lua().write_renew
                                                   : lua().permit_renew;
        const std::size_t keys_per = kind == renewal::read ? 2 : 1;
        const auto& confirm = ctx.confirmation();
        auto replies =
            ctx.connections().run_items(s, keys, args, keys_per, 2, per_call, confirm.min_replicas, confirm.timeout);
        for (std::size_t j = 0; j < index.size(); ++j) {
            const auto slot = index[j];
            if (!replies[j].ok) *results[slot] = spi::keepalive_result::failed(replies[j].error);
            else if (replies[j].value == 1) *results[slot] = spi::keepalive_result::ok();
            else
                *results[slot] = spi::keepalive_result::lost(
                    kind == renewal::permit
                        ? "permit of semaphore '" + static_cast<permit_handle*>(handles[slot])->name() +
                              "' is gone (expired or deleted on the server)"
                        : "read-write lock '" + static_cast<rw_handle*>(handles[slot])->name() +
                              "' no longer holds our grant (expired or deleted on the server)");
        }
    }
}

}  // namespace distlock::backends::redis
