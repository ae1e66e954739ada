// redis://[user:password@]host[:port][/db][?strategy=plain|reentrant&...]
//
// strategy=plain (default): a string key `<prefix>{<name>}` set with SET NX PX to a
//   random per-acquisition token; owner-checked Lua scripts release (DEL + PUBLISH
//   on `<prefix>{<name>}:released`) and renew (PEXPIRE); the fencing token is an
//   INCR of `<prefix>{<name>}:fence` (never expires) inside the acquire script.
// strategy=reentrant: Redisson's RLock layout, so that a Java service using
//   Redisson shares the lock: a hash at `<name>`, field `<client uuid>:<thread id>`
//   holding the reentrancy count, PEXPIRE lease, release message "0" on
//   `redisson_lock__channel:{<name>}`; fencing token INCR `redisson_lock_token:{<name>}`.
//
// Waiting: subscribe to the lock's channel (one dedicated pub/sub connection per
// provider) BEFORE retrying, then wait for a release message, bounded by the
// remaining PTTL (an expiring key publishes nothing) and the caller's deadline.
// Renewals of every due lock of a provider go out as one script: one round trip.
#include <sys/syscall.h>
#include <unistd.h>

#include <charconv>

#include "common.hpp"

namespace distlock::backends::redis {
namespace {

enum class strategy { plain, reentrant };

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

// The next fencing token from the fence key `key`. A fence must never go back,
// even when the server lost its data (a restart without persistence, a failover
// to a replica that had not got the key): a missing key starts from the
// server's clock in microseconds, which is past every token handed out before
// as long as fewer than a million grants a second were made and the server's
// clock has not been set back by more than that margin.
const std::string fence_lua = R"lua(
local function next_fence(key)
  if redis.call('exists', key) == 0 then
    local t = redis.call('time')
    redis.call('set', key, t[1] .. string.format('%06d', tonumber(t[2])))
  end
  return redis.call('incr', key)
end
)lua";

// KEYS[1] lock key, KEYS[2] fence key, KEYS[3] queue, KEYS[4] waiters;
// ARGV[1] token, ARGV[2] lease ms, ARGV[3] waiter id ("" = not waiting),
// ARGV[4] liveness slack ms, ARGV[5] channel ("t <waiter id> <lease ms>" when a
// reservation is taken up). Takes the key when free or reserved for us; else
// (when waiting) queues us once and refreshes our liveness deadline.
const std::string plain_acquire_lua = fence_lua + R"lua(
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
  return {1, next_fence(KEYS[2])}
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

// KEYS[1] lock key, KEYS[2] queue, KEYS[3] waiters; ARGV[1] token, ARGV[2]
// channel, ARGV[3] reserve ms. 1 released (handed off or deleted), 0 not ours.
const std::string plain_release_lua = handoff_lua + R"lua(
if redis.call('get', KEYS[1]) ~= ARGV[1] then
  return 0
end
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

// Redisson layout. KEYS[1] lock hash, KEYS[2] fence key; ARGV[1] lease ms, ARGV[2] field.
const std::string reentrant_acquire_lua = fence_lua + R"lua(
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

// KEYS[i] lock hashes; ARGV[2i-1] field, ARGV[2i] lease ms. Reply: 1/0 per key.
const char* const reentrant_renew_lua = R"lua(
local out = {}
for i = 1, #KEYS do
  if redis.call('hexists', KEYS[i], ARGV[2 * i - 1]) == 1 then
    redis.call('pexpire', KEYS[i], ARGV[2 * i])
    out[i] = 1
  else
    out[i] = 0
  end
end
return out
)lua";

struct settings {
    endpoint ep;
    strategy strat = strategy::plain;
    std::string prefix = "distlock:";
    std::size_t pool_size = 8;
};

// Key, fence key and channel of a lock name.
struct layout {
    std::string key, fence, channel;
    std::string queue, waiters;  // plain strategy: the FIFO hand-off (see above)
};

layout layout_for(const settings& s, std::string_view name) {
    layout l;
    if (s.strat == strategy::plain) {
        const std::string base = s.prefix + "{" + std::string(name) + "}";
        l.key = base;
        l.fence = base + ":fence";
        l.channel = base + ":released";
        l.queue = base + ":queue";
        l.waiters = base + ":waiters";
    } else {
        // Redisson: the channel wraps the name in braces unless it already has some.
        const bool braced = name.find('{') != std::string_view::npos;
        l.key = std::string(name);
        l.channel = braced ? "redisson_lock__channel:" + std::string(name)
                           : "redisson_lock__channel:{" + std::string(name) + "}";
        l.fence = braced ? "redisson_lock_token:" + std::string(name) : "redisson_lock_token:{" + std::string(name) + "}";
    }
    return l;
}

long long as_integer(const redisReply* r) {
    if (r == nullptr) return 0;
    if (r->type == REDIS_REPLY_INTEGER) return r->integer;
    if (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS) {
        long long v = 0;
        std::from_chars(r->str, r->str + r->len, v);
        return v;
    }
    return 0;
}

long current_thread_id() { return static_cast<long>(::syscall(SYS_gettid)); }

class handle;

class backend final : public spi::backend {
public:
    // Runs f on a pooled connection; a broken connection becomes unavailable_error.
    template <class F>
    auto call(const std::string& what, F&& f) {
        try {
            return pool_.run(std::forward<F>(f));
        } catch (const connection_failure& e) {
            throw_connection_failure("redis", what + " failed", e);
        }
    }

    explicit backend(settings s)
        : settings_(std::move(s)),
          pool_(settings_.ep, settings_.pool_size),
          uuid_(spi::random_uuid()),
          acquire_(settings_.strat == strategy::plain ? plain_acquire_lua : reentrant_acquire_lua),
          release_(settings_.strat == strategy::plain ? plain_release_lua : std::string(reentrant_release_lua)),
          renew_(settings_.strat == strategy::plain ? owner_renew_lua : reentrant_renew_lua),
          leave_(plain_leave_lua) {
        caps_.crash_release_bound = std::chrono::milliseconds{0};  // the lease itself is the bound
        caps_.reentrant = settings_.strat == strategy::reentrant;
        // Checks the server, the credentials and the database now: connect() fails
        // with a typed error instead of the first lock().
        call("connecting", [](connection& c) {
            auto r = c.command({"PING"});
            if (is_error(r.get())) throw_reply_error("redis", r.get(), "PING at " + c.where().label());
            return 0;
        });
    }

    std::string_view name() const noexcept override { return "redis"; }
    const capabilities& caps() const noexcept override { return caps_; }
    std::unique_ptr<spi::lock_handle> make_lock(const spi::lock_request& r) override;
    std::chrono::milliseconds default_lease() const override { return std::chrono::seconds{30}; }

    std::optional<std::chrono::nanoseconds> round_trip() override {
        return call("PING", [](connection& c) {
            auto t0 = clock::now();
            auto r = c.command({"PING"});
            auto dt = clock::now() - t0;
            if (is_error(r.get())) throw_reply_error("redis", r.get(), "PING");
            return std::chrono::duration_cast<std::chrono::nanoseconds>(dt);
        });
    }

    void keepalive_batch(std::span<spi::lock_handle* const> handles, std::span<spi::keepalive_result> results) override;

    void break_lock(std::string_view lock_name) override {
        auto l = layout_for(settings_, lock_name);
        call("DEL", [&](connection& c) {
            auto r = c.command({"DEL", l.key});
            if (is_error(r.get())) throw_reply_error("redis", r.get(), "DEL");
            return 0;
        });
    }

    // A confirmed subscription kept from a recent wait, without creating the subscriber.
    std::unique_ptr<subscriber::subscription> reuse_subscription(const std::string& channel) {
        std::lock_guard lk(sub_mutex_);
        return subscriber_ ? subscriber_->reuse(channel) : nullptr;
    }

    subscriber& sub() {
        std::lock_guard lk(sub_mutex_);
        if (!subscriber_) subscriber_ = std::make_unique<subscriber>(settings_.ep);
        return *subscriber_;
    }

    const settings& config() const noexcept { return settings_; }
    pool& connections() noexcept { return pool_; }
    const std::string& uuid() const noexcept { return uuid_; }
    const script& acquire_script() const noexcept { return acquire_; }
    const script& release_script() const noexcept { return release_; }
    const script& leave_script() const noexcept { return leave_; }

private:
    settings settings_;
    capabilities caps_;
    pool pool_;
    std::string uuid_;  // this client's id in Redisson hash fields
    script acquire_, release_, renew_, leave_;
    std::mutex sub_mutex_;
    std::unique_ptr<subscriber> subscriber_;
};

class handle final : public spi::lock_handle {
public:
    handle(backend& b, const spi::lock_request& r)
        : backend_(b),
          request_(r),
          layout_(layout_for(b.config(), r.name)),
          lease_ms_(std::to_string(r.lease.count())) {}

    std::optional<spi::grant> acquire(deadline until) override {
        const bool plain = backend_.config().strat == strategy::plain;
        std::string owner =
            plain ? spi::random_token() : backend_.uuid() + ":" + std::to_string(current_thread_id());
        std::string waiter;  // plain: our id in the hand-off queue, once we queue
        struct leave_guard {  // leaves the queue on every way out but a grant
            handle* self;
            std::string* waiter;
            ~leave_guard() {
                if (!waiter->empty()) self->leave(*waiter);
            }
        } guard{this, &waiter};
        std::unique_ptr<subscriber::subscription> sub;
        spi::backoff fallback(request_.retry_min, request_.retry_max);
        deadline alive_until{};  // when the server will consider our queue entry dead
        std::uint64_t seen = 0;
        if (auto lingering = until > clock::now() ? backend_.reuse_subscription(layout_.channel) : nullptr) {
            // Still subscribed from a recent wait: queue with the very first try.
            sub = std::move(lingering);
            if (plain) waiter = spi::random_token();
        }
        for (;;) {
            if (sub) seen = sub->messages();
            const auto sent = clock::now();  // the lease runs from when the server ran the script
            auto [got, value] = attempt(owner, waiter);
            if (got) {
                waiter.clear();  // the grant took us out of the queue
                owner_ = std::move(owner);
                return spi::grant{static_cast<std::uint64_t>(value), sent};
            }
            auto now = clock::now();
            if (now >= until) return std::nullopt;
            if (!sub) {
                // Subscribe first, then retry (and queue): a release published
                // after the subscription is confirmed cannot be missed.
                auto confirm = std::min(until, now + backend_.config().ep.command_timeout);
                sub = backend_.sub().subscribe(layout_.channel, confirm);
                if (plain && sub->confirmed()) waiter = spi::random_token();
                continue;
            }
            if (plain && waiter.empty() && sub->confirmed()) {
                waiter = spi::random_token();  // the pub/sub connection is back: queue now
                continue;
            }
            // value = PTTL of the holder's key: -1 no expiry (foreign key), -2 just gone.
            if (value == -2) continue;
            const auto pttl = std::chrono::milliseconds(value >= 0 ? value : 1000);
            if (!waiter.empty()) alive_until = now + pttl + liveness_slack;
            deadline bound = std::min(until, now + pttl + 1ms);
            // Wait without sending anything until our turn, a plain release, the
            // end of the holder's lease, or the deadline.
            for (;;) {
                auto woke = sub->wait(seen, bound);
                if (woke == subscriber::wake::broken) {
                    // No pub/sub connection right now: fall back to jittered backoff.
                    std::this_thread::sleep_for(fallback.next(bound));
                    break;
                }
                if (woke == subscriber::wake::timeout) break;
                bool complete = true;
                bool retry = false;
                for (const auto& msg : sub->payloads_since(seen, complete)) {
                    std::string_view m(msg);
                    const bool handed = m.substr(0, 2) == "h ", taken = m.substr(0, 2) == "t ";
                    if (!handed && !taken) {
                        retry = true;  // "released" (plain) or "0" (Redisson): free for all
                        continue;
                    }
                    m.remove_prefix(2);
                    auto space = m.find(' ');
                    if (handed && m.substr(0, space) == waiter) {
                        retry = true;  // handed to us
                        continue;
                    }
                    // Handed to another waiter (if it died, the reservation runs out),
                    // or taken up by it (then its lease bounds our wait).
                    long long ms_left = 0;
                    if (space != std::string_view::npos)
                        std::from_chars(m.data() + space + 1, m.data() + m.size(), ms_left);
                    bound = std::min(until, clock::now() + std::chrono::milliseconds(ms_left) + 5ms);
                }
                if (retry || !complete) break;
                // Renew our place in the queue before the server drops it.
                if (!waiter.empty() && alive_until - clock::now() < liveness_slack / 2) break;
            }
        }
    }

    void release() override {
        std::string owner = std::exchange(owner_, std::string{});
        if (owner.empty()) throw_error(errc::not_owner, "redis", "lock '" + request_.name + "' is not held");
        long long result = 0;
        try {
            result = backend_.connections().run([&](connection& c) {
                auto r = backend_.release_script().run(c, release_keys(), release_args(owner));
                if (is_error(r.get())) throw_reply_error("redis", r.get(), "release of '" + request_.name + "'");
                return as_integer(r.get());
            });
        } catch (const connection_failure& e) {
            throw_error(e.maybe_sent() ? errc::in_doubt : errc::unavailable, "redis",
                        "release of '" + request_.name + "' failed: " + e.what() +
                            " (the lease will expire on the server)");
        }
        const bool plain = backend_.config().strat == strategy::plain;
        if ((plain && result == 0) || (!plain && result < 0))
            throw_error(errc::not_owner, "redis",
                        "lock '" + request_.name + "' was no longer ours when released (expired or deleted on the server)");
    }

    std::chrono::milliseconds keepalive_interval() const override {
        return request_.auto_renew ? std::max(request_.lease / 3, std::chrono::milliseconds{1})
                                   : std::chrono::milliseconds{0};
    }

    spi::keepalive_result keepalive() override {
        spi::lock_handle* self = this;
        spi::keepalive_result result;
        backend_.keepalive_batch(std::span<spi::lock_handle* const>(&self, 1), std::span<spi::keepalive_result>(&result, 1));
        return result;
    }

    const std::string& key() const noexcept { return layout_.key; }
    const std::string& owner() const noexcept { return owner_; }
    const std::string& lease_ms() const noexcept { return lease_ms_; }
    const std::string& name() const noexcept { return request_.name; }

private:
    static constexpr auto liveness_slack = std::chrono::milliseconds{2000};
    static constexpr std::string_view reserve_ms = "500";  // a hand-off waits this long for its waiter

    std::vector<std::string_view> release_keys() const {
        if (backend_.config().strat == strategy::plain) return {layout_.key, layout_.queue, layout_.waiters};
        return {layout_.key};
    }
    std::vector<std::string_view> release_args(const std::string& owner) const {
        if (backend_.config().strat == strategy::plain) return {owner, layout_.channel, reserve_ms};
        return {owner, lease_ms_, layout_.channel};
    }

    // Best effort: leave the hand-off queue (and pass on a reservation made for us).
    void leave(const std::string& waiter) noexcept {
        try {
            backend_.connections().run([&](connection& c) {
                backend_.leave_script().run(c, release_keys(), {waiter, layout_.channel, reserve_ms});
                return 0;
            });
        } catch (...) {
        }
    }

    // One acquire script: {acquired, fencing token or PTTL}.
    std::pair<bool, long long> attempt(const std::string& owner, const std::string& waiter) {
        const bool plain = backend_.config().strat == strategy::plain;
        static const std::string slack = std::to_string(liveness_slack.count());
        std::vector<std::string_view> keys, args;
        if (plain) {
            keys = {layout_.key, layout_.fence, layout_.queue, layout_.waiters};
            args = {owner, lease_ms_, waiter, slack, layout_.channel};
        } else {
            keys = {layout_.key, layout_.fence};
            args = {lease_ms_, owner};
        }
        try {
            return backend_.connections().run([&](connection& c) {
                auto r = backend_.acquire_script().run(c, keys, args);
                if (is_error(r.get())) throw_reply_error("redis", r.get(), "acquire of '" + request_.name + "'");
                if (r->type != REDIS_REPLY_ARRAY || r->elements != 2)
                    throw_error(errc::unavailable, "redis", "unexpected reply to the acquire script: " + reply_text(r.get()));
                return std::pair<bool, long long>(as_integer(r->element[0]) == 1, as_integer(r->element[1]));
            });
        } catch (const connection_failure& e) {
            if (e.maybe_sent()) {
                // The script may have run: undo it (best effort) so that nothing is left behind.
                try {
                    backend_.connections().run([&](connection& c) {
                        backend_.release_script().run(c, release_keys(), release_args(owner));
                        return 0;
                    });
                } catch (...) {
                }
            }
            throw_error(errc::unavailable, "redis", "acquire of '" + request_.name + "' failed: " + e.what());
        }
    }

    backend& backend_;
    spi::lock_request request_;
    layout layout_;
    std::string lease_ms_;
    std::string owner_;  // token (plain) or hash field (reentrant) of the current grant; "" = none
};

std::unique_ptr<spi::lock_handle> backend::make_lock(const spi::lock_request& r) {
    return std::make_unique<handle>(*this, r);
}

void backend::keepalive_batch(std::span<spi::lock_handle* const> handles, std::span<spi::keepalive_result> results) {
    // Every due lock goes into one renew script (chunks of 512 keys, pipelined on one
    // connection): one round trip for all of them.
    constexpr std::size_t chunk = 512;
    std::vector<std::size_t> index;  // results slot of each key sent
    std::vector<std::string_view> keys, args;
    for (std::size_t i = 0; i < handles.size(); ++i) {
        auto* h = static_cast<handle*>(handles[i]);
        if (h->owner().empty()) {
            results[i] = spi::keepalive_result::lost("not held");
            continue;
        }
        index.push_back(i);
        keys.push_back(h->key());
        args.push_back(h->owner());
        args.push_back(h->lease_ms());
    }
    if (index.empty()) return;
    try {
        auto replies = pool_.run([&](connection& c) {
            std::vector<std::string> numkeys((keys.size() + chunk - 1) / chunk);
            for (std::size_t start = 0, n = 0; start < keys.size(); start += chunk, ++n) {
                auto end = std::min(keys.size(), start + chunk);
                std::vector<std::string_view> k(keys.begin() + static_cast<long>(start), keys.begin() + static_cast<long>(end));
                std::vector<std::string_view> a(args.begin() + static_cast<long>(2 * start),
                                                args.begin() + static_cast<long>(2 * end));
                auto cmd = renew_.eval_args(k, a, numkeys[n]);
                cmd[0] = "EVALSHA";
                cmd[1] = renew_.sha1();
                c.append(cmd);
            }
            c.flush();
            std::vector<reply_ptr> out;
            for (std::size_t n = 0; n < numkeys.size(); ++n) out.push_back(c.read_reply());
            // A server that forgot the script (restart, SCRIPT FLUSH): once more with EVAL.
            for (std::size_t start = 0, n = 0; start < keys.size(); start += chunk, ++n) {
                if (!is_error(out[n].get()) || std::string_view(out[n]->str, out[n]->len).substr(0, 8) != "NOSCRIPT")
                    continue;
                auto end = std::min(keys.size(), start + chunk);
                std::vector<std::string_view> k(keys.begin() + static_cast<long>(start), keys.begin() + static_cast<long>(end));
                std::vector<std::string_view> a(args.begin() + static_cast<long>(2 * start),
                                                args.begin() + static_cast<long>(2 * end));
                out[n] = renew_.eval(c, k, a);
            }
            return out;
        });
        for (std::size_t n = 0; n < replies.size(); ++n) {
            const redisReply* r = replies[n].get();
            const std::size_t start = n * chunk, end = std::min(keys.size(), start + chunk);
            for (std::size_t j = start; j < end; ++j) {
                auto slot = index[j];
                auto* h = static_cast<handle*>(handles[slot]);
                if (is_error(r) || r->type != REDIS_REPLY_ARRAY || r->elements != end - start) {
                    results[slot] = spi::keepalive_result::failed("renewal script failed: " + reply_text(r));
                } else if (as_integer(r->element[j - start]) == 1) {
                    results[slot] = spi::keepalive_result::ok();
                } else {
                    results[slot] = spi::keepalive_result::lost("lock key '" + h->key() +
                                                                "' no longer holds our grant (expired or deleted on the server)");
                }
            }
        }
    } catch (const connection_failure& e) {
        for (auto i : index) results[i] = spi::keepalive_result::failed(e.what());
    } catch (const std::exception& e) {
        for (auto i : index) results[i] = spi::keepalive_result::failed(e.what());
    }
}

}  // namespace

endpoint endpoint_from_url(spi::url& u, const std::string& backend_name, std::chrono::milliseconds connect_default,
                           std::chrono::milliseconds command_default) {
    endpoint ep;
    ep.backend_name = backend_name;
    ep.user = u.user();
    ep.password = u.password();
    if (!u.path().empty() && u.path() != "/") {
        std::string_view db(u.path());
        db.remove_prefix(1);
        int value = -1;
        auto [p, ec] = std::from_chars(db.data(), db.data() + db.size(), value);
        if (ec != std::errc{} || p != db.data() + db.size() || value < 0)
            throw_error(errc::invalid_argument, backend_name,
                        "the URL path must be a database number (/0, /1, ...), not '" + u.path() + "'");
        ep.db = value;
    }
    ep.connect_timeout = u.take_duration("connect_timeout").value_or(connect_default);
    ep.command_timeout = u.take_duration("timeout").value_or(command_default);
    if (ep.connect_timeout.count() <= 0 || ep.command_timeout.count() <= 0)
        throw_error(errc::invalid_argument, backend_name, "connect_timeout and timeout must be positive");
    return ep;
}

void register_backend(spi::registry& r) {
    r.add("redis", [](spi::url& u) -> std::shared_ptr<spi::backend> {
        if (u.hosts().size() != 1)
            throw_error(errc::invalid_argument, "redis",
                        "redis:// takes one host (redis://[user:password@]host[:port][/db]); use redlock:// for several");
        settings s;
        s.ep = endpoint_from_url(u, "redis", std::chrono::milliseconds{1000}, std::chrono::milliseconds{2000});
        auto hosts = u.hosts_or_throw(6379);
        s.ep.host = hosts[0].host;
        s.ep.port = hosts[0].port;
        auto strat = u.take("strategy").value_or("plain");
        if (strat == "plain") s.strat = strategy::plain;
        else if (strat == "reentrant") s.strat = strategy::reentrant;
        else
            throw_error(errc::invalid_argument, "redis",
                        "unknown strategy '" + strat + "' (redis:// knows plain and reentrant)");
        if (auto prefix = u.take("prefix")) {
            if (s.strat == strategy::reentrant)
                throw_error(errc::invalid_argument, "redis",
                            "prefix= does not apply to strategy=reentrant (Redisson's layout uses the lock name as key)");
            s.prefix = *prefix;
        }
        s.pool_size = static_cast<std::size_t>(u.take_int("pool", 1, 1024).value_or(8));
        return std::make_shared<backend>(std::move(s));
    });
    r.add("redlock", [](spi::url& u) { return make_redlock(u); });
}

}  // namespace distlock::backends::redis
