// redlock://[user:password@]h1:p1,h2:p2,h3:p3[/db][?lease=..&timeout=..&retry_delay=..]
//
// The Redlock algorithm over N independent Redis masters (no replication between
// them): the same key `<prefix>{<name>}` and random token are SET NX PX on every
// node at once (one parallel round, each node bounded by `timeout`); the lock is
// held only when a majority (N/2+1) said OK and the validity
//     ttl - elapsed - (ttl * drift_factor + 2 ms)
// is still positive. Otherwise the owner-checked delete goes to ALL nodes (also
// those that seemed to fail), and the next attempt follows a random delay of up to
// `retry_delay`. Renewal is an owner-checked PEXPIRE on every node, counted only
// with a majority. There is no fencing token: see docs/backends/redis.md.
// Each node's grant records the holder label beside it, in the same script:
// `<prefix>{<name>}:holder` (hash: owner = the token, holder = the label), which
// counts only while the key holds that token; inspect asks every node at once.
// Over the Redis client layer (backends/redis-client).
#include <algorithm>
#include <climits>
#include <map>
#include <thread>

#include "redis-client/lock_scripts.hpp"
#include "redis-client/redis_client.hpp"

namespace distlock::backends::redlock {
namespace {

constexpr const char* kBackend = "redlock";

using namespace redis_client;

// KEYS[1] lock key, KEYS[2] holder record; ARGV[1] token, ARGV[2] lease ms,
// ARGV[3] holder label. SET NX PX, and with the grant the holder record; the
// reply is SET's ("OK" or nil), as a plain SET NX PX.
const char* const acquire_lua = R"lua(
local ok = redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])
if ok then
  redis.call('hset', KEYS[2], 'owner', ARGV[1], 'holder', ARGV[3])
end
return ok
)lua";

// KEYS[1] lock key, KEYS[2] holder record; ARGV[1] token. 1 deleted, 0 not ours.
const char* const release_lua = R"lua(
if redis.call('get', KEYS[1]) == ARGV[1] then
  redis.call('del', KEYS[2])
  return redis.call('del', KEYS[1])
end
return 0
)lua";

// Read-only, on each node: KEYS[1] lock key, KEYS[2] holder record. Reply
// {0} free | {1, PTTL, SHA-1 of the value (to compare owners across nodes
// without showing tokens), label or ""} | {2, PTTL, type}: not a string.
const char* const inspect_lua = R"lua(
local kind = redis.call('type', KEYS[1]).ok
if kind == 'none' then
  return {0}
end
local pttl = redis.call('pttl', KEYS[1])
if kind ~= 'string' then
  return {2, pttl, kind}
end
local value = redis.call('get', KEYS[1])
local rec = redis.call('hmget', KEYS[2], 'owner', 'holder')
local label = ''
if rec[1] == value and rec[2] then
  label = rec[2]
end
return {1, pttl, redis.sha1hex(value), label}
)lua";

struct redlock_settings {
    std::vector<endpoint> nodes;
    std::string prefix = "distlock:";
    std::chrono::milliseconds retry_delay{200};
    double drift_factor = 0.01;
    std::size_t pool_size = 4;
};

bool is_ok(const redisReply* r) {
    return r != nullptr && r->type == REDIS_REPLY_STATUS && std::string_view(r->str, r->len) == "OK";
}

class backend;

class redlock_handle final : public spi::lock_handle {
public:
    redlock_handle(backend& b, const spi::lock_request& r);
    std::optional<spi::grant> acquire(deadline until, const spi::loss_sink&) override;
    void release() override;

    const std::string& key() const noexcept { return key_; }
    const std::string& token() const noexcept { return token_; }
    const std::string& lease_ms() const noexcept { return lease_ms_; }

private:
    backend& backend_;
    spi::lock_request request_;
    std::string key_, lease_ms_;
    std::string token_;  // of the current grant; "" = none
};

class backend final : public spi::backend {
public:
    explicit backend(redlock_settings s)
        : settings_(std::move(s)),
          acquire_(acquire_lua),
          release_(release_lua),
          inspect_(inspect_lua),
          extend_(owner_renew_lua(plain_key_owned)) {
        for (const auto& ep : settings_.nodes) {
            pools_.push_back(std::make_unique<pool>(ep, settings_.pool_size));
            pool_ptrs_.push_back(pools_.back().get());
        }
        quorum_ = settings_.nodes.size() / 2 + 1;
        caps_.unsupported = {
            {feature::fencing,
             "Redlock has no monotonic fencing token: independent masters cannot agree on one number without "
             "consensus (a majority INCR is not linearizable); use redis:// or a consensus backend when the "
             "protected storage must reject stale writers"},
            {feature::notified_wakeup,
             "the Redlock algorithm retries after a random delay (up to retry_delay) instead of a notification"},
        };
        // After the holder's lease runs out, a waiter retries within retry_delay.
        // Redlock is a mutex algorithm: a majority of SET NX on one key. Shared
        // holders or a counted set of permits would need every node to agree on
        // one set of grants, which independent masters without replication do not
        // (Redisson itself deprecated its RedLock, and offers no multi-master
        // read-write lock or semaphore).
        caps_.unsupported.emplace(
            feature::read_write,
            "Redlock is a mutex algorithm over independent masters: there is no quorum recipe "
            "for shared readers (Redisson deprecated its RedLock); use redis:// for read-write locks");
        caps_.unsupported.emplace(feature::semaphore,
                                  "Redlock is a mutex algorithm over independent masters: there is no quorum recipe "
                                  "for counted permits; use redis:// for semaphores");
        caps_.unsupported.emplace(feature::permit_limit, "no semaphores on redlock:// (a mutex algorithm)");
        caps_.implements = {feature::inspect};
        caps_.crash_release_bound = settings_.retry_delay;
        // Check the nodes now: bad credentials or a server that is not Redis
        // anywhere, or no majority reachable, fail connect() with a typed error.
        std::vector<std::vector<std::string_view>> cmds(pools_.size(), {"PING"});
        auto res = exchange_all(pool_ptrs_, cmds);
        std::size_t ok = 0;
        std::string errors;
        for (std::size_t i = 0; i < res.size(); ++i) {
            if (res[i].reply && !is_error(res[i].reply.get())) {
                ++ok;
                continue;
            }
            std::string why = res[i].reply ? reply_text(res[i].reply.get()) : res[i].error;
            if (res[i].code == errc::access_denied || res[i].code == errc::invalid_argument)
                throw_error(res[i].code, kBackend, why);
            if (res[i].reply) throw_client_error(res[i].reply.get(), kBackend, "PING " + settings_.nodes[i].label());
            errors += (errors.empty() ? "" : "; ") + why;
        }
        if (ok < quorum_) throw_error(errc::unavailable, kBackend, majority_message(ok, errors));
    }

    std::string_view name() const noexcept override { return kBackend; }
    const capabilities& caps() const noexcept override { return caps_; }
    std::unique_ptr<spi::lock_handle> make_lock(const spi::lock_request& r) override {
        return std::make_unique<redlock_handle>(*this, r);
    }

    // One parallel PING round: the floor of a Redlock operation.
    std::optional<std::chrono::nanoseconds> round_trip() override {
        std::vector<std::vector<std::string_view>> cmds(pools_.size(), {"PING"});
        auto t0 = clock::now();
        auto res = exchange_all(pool_ptrs_, cmds);
        auto dt = clock::now() - t0;
        std::size_t ok = 0;
        for (auto& r : res) ok += r.reply ? 1 : 0;
        if (ok < quorum_) throw_error(errc::unavailable, kBackend, majority_message(ok, "PING failed"));
        return std::chrono::duration_cast<std::chrono::nanoseconds>(dt);
    }

    void keepalive_batch(std::span<spi::lock_handle* const> handles, std::span<spi::keepalive_result> results) override;

    lock_info inspect(std::string_view lock_name, spi::lock_kind) override;

    void break_lock(std::string_view lock_name) override {
        auto k = key_for(lock_name);
        const auto rec = k + ":holder";
        std::vector<std::vector<std::string_view>> cmds(pools_.size(), {"DEL", k, rec});
        auto res = exchange_all(pool_ptrs_, cmds);
        std::size_t ok = 0;
        for (auto& r : res) ok += r.reply ? 1 : 0;
        if (ok < quorum_) throw_error(errc::unavailable, kBackend, majority_message(ok, "DEL failed"));
    }

    std::string key_for(std::string_view lock_name) const {
        return settings_.prefix + "{" + std::string(lock_name) + "}";
    }

    std::string majority_message(std::size_t ok, const std::string& errors) const {
        return std::to_string(pools_.size() - ok) + " of " + std::to_string(pools_.size()) +
               " Redlock nodes failed; a majority of " + std::to_string(quorum_) + " is needed: " + errors;
    }

    // Sends the owner-checked delete of `key` to every node; returns how many
    // deleted it and how many could not be asked.
    std::pair<std::size_t, std::size_t> release_all(const std::string& key, const std::string& token) {
        std::string numkeys;
        const auto rec = key + ":holder";
        auto cmd = release_.eval_args({key, rec}, {token}, numkeys);
        std::vector<std::vector<std::string_view>> cmds(pools_.size(), cmd);
        auto res = exchange_all(pool_ptrs_, cmds);
        std::size_t deleted = 0, failed = 0;
        for (auto& r : res) {
            if (!r.reply || is_error(r.reply.get())) ++failed;
            else if (r.reply->type == REDIS_REPLY_INTEGER && r.reply->integer == 1) ++deleted;
        }
        return {deleted, failed};
    }

    const redlock_settings& config() const noexcept { return settings_; }
    const std::vector<pool*>& pools() const noexcept { return pool_ptrs_; }
    std::size_t quorum() const noexcept { return quorum_; }

private:
    redlock_settings settings_;
    capabilities caps_;
    std::vector<std::unique_ptr<pool>> pools_;
    std::vector<pool*> pool_ptrs_;
    std::size_t quorum_ = 1;
    script acquire_, release_, inspect_, extend_;

    friend class redlock_handle;
};

redlock_handle::redlock_handle(backend& b, const spi::lock_request& r)
    : backend_(b), request_(r), key_(b.key_for(r.name)), lease_ms_(std::to_string(r.lease.count())) {}

std::optional<spi::grant> redlock_handle::acquire(deadline until, const spi::loss_sink&) {
    const auto& cfg = backend_.config();
    const auto n = backend_.pools().size();
    const auto quorum = backend_.quorum();
    std::string token = spi::random_token();
    const auto drift = std::chrono::duration_cast<std::chrono::milliseconds>(request_.lease * cfg.drift_factor) + 2ms;
    constexpr int max_failed_rounds = 3;
    int failed_rounds = 0;  // consecutive attempts in which no majority answered
    bool waited = false;    // an earlier round lost to another holder
    const auto record = key_ + ":holder";
    std::string numkeys;
    // SET NX PX and the holder record, one script per node: still one parallel round.
    const auto cmd = backend_.acquire_.eval_args({key_, record}, {token, lease_ms_, request_.holder}, numkeys);
    for (;;) {
        const auto start = clock::now();
        std::vector<std::vector<std::string_view>> cmds(n, cmd);
        auto res = exchange_all(backend_.pools(), cmds);
        std::size_t ok = 0, failed = 0, denied = 0;
        bool held_elsewhere = false;
        std::string errors;
        for (std::size_t i = 0; i < n; ++i) {
            if (res[i].reply && is_ok(res[i].reply.get())) {
                ++ok;
            } else if (res[i].reply && res[i].reply->type == REDIS_REPLY_NIL) {
                held_elsewhere = true;  // held by someone else on this node
            } else {
                ++failed;
                std::string why = res[i].reply ? reply_text(res[i].reply.get()) : res[i].error;
                if (res[i].code == errc::access_denied ||
                    (res[i].reply && (why.rfind("NOAUTH", 0) == 0 || why.rfind("NOPERM", 0) == 0)))
                    ++denied;
                errors += (errors.empty() ? "" : "; ") + cfg.nodes[i].label() + ": " + why;
            }
        }
        const auto elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(clock::now() - start);
        const auto validity = request_.lease - elapsed - drift;
        if (ok >= quorum && validity.count() > 0) {
            token_ = token;
            // No fencing token; the validity runs from the round's start less the drift allowance.
            return spi::grant{0, start - drift, waited};
        }
        waited = waited || held_elsewhere;
        // Not held: undo on every node, including those that seemed to fail.
        if (ok > 0 || failed > 0) backend_.release_all(key_, token);
        if (failed > n - quorum) {
            // No majority could answer. Bad credentials will not heal: fail now. A
            // timeout may be a passing hiccup: give it the reference code's three
            // tries (even for try_lock) before saying the nodes are unavailable.
            if (denied > 0) throw_error(errc::access_denied, kBackend, backend_.majority_message(n - failed, errors));
            if (++failed_rounds >= max_failed_rounds)
                throw_error(errc::unavailable, kBackend, backend_.majority_message(n - failed, errors));
        } else {
            failed_rounds = 0;
            if (clock::now() >= until) return std::nullopt;
        }
        const auto now = clock::now();
        auto delay = spi::random_between(cfg.retry_delay / 10, std::max(cfg.retry_delay, std::chrono::milliseconds{1}));
        if (failed_rounds == 0 && until - now < delay)
            delay = std::chrono::duration_cast<std::chrono::milliseconds>(until - now);
        std::this_thread::sleep_for(delay);
    }
}

void redlock_handle::release() {
    std::string token = std::exchange(token_, std::string{});
    if (token.empty()) throw_error(errc::not_owner, kBackend, "lock '" + request_.name + "' is not held");
    auto [deleted, failed] = backend_.release_all(key_, token);
    const auto n = backend_.pools().size();
    if (failed > n - backend_.quorum())
        throw_error(errc::in_doubt, kBackend,
                    "release of '" + request_.name + "' reached only " + std::to_string(n - failed) + " of " +
                        std::to_string(n) + " nodes (the lease will expire on the others)");
    if (deleted == 0 && failed == 0)
        throw_error(errc::not_owner, kBackend,
                    "lock '" + request_.name + "' was no longer ours on any node when released (expired or deleted)");
}

void backend::keepalive_batch(std::span<spi::lock_handle* const> handles, std::span<spi::keepalive_result> results) {
    // One extend script per node over every due key, all nodes at once: one round.
    auto [index, keys, args] = gather_renewals<redlock_handle>(
        handles, results, [](const redlock_handle& h) -> const std::string& { return h.token(); });
    if (index.empty()) return;
    std::string numkeys;
    auto cmd = extend_.eval_args(keys, args, numkeys);
    std::vector<std::vector<std::string_view>> cmds(pools_.size(), cmd);
    const auto start = clock::now();
    auto res = exchange_all(pool_ptrs_, cmds);
    const auto elapsed = clock::now() - start;
    const auto n = pools_.size();
    for (std::size_t j = 0; j < index.size(); ++j) {
        std::size_t ones = 0, zeros = 0;
        std::string errors;
        for (std::size_t node = 0; node < n; ++node) {
            const redisReply* r = res[node].reply.get();
            if (r != nullptr && r->type == REDIS_REPLY_ARRAY && r->elements == index.size()) {
                (r->element[j]->type == REDIS_REPLY_INTEGER && r->element[j]->integer == 1 ? ones : zeros) += 1;
            } else {
                errors += (errors.empty() ? "" : "; ") + settings_.nodes[node].label() + ": " +
                          (r ? reply_text(r) : res[node].error);
            }
        }
        auto* h = static_cast<redlock_handle*>(handles[index[j]]);
        const auto lease = std::chrono::milliseconds(std::stoll(h->lease_ms()));
        if (ones >= quorum_ && elapsed < lease) results[index[j]] = spi::keepalive_result::ok();
        else if (zeros > n - quorum_)
            results[index[j]] = spi::keepalive_result::lost(
                "a majority of Redlock nodes no longer hold our key (expired or deleted): " + std::to_string(zeros) +
                " of " + std::to_string(n));
        else
            results[index[j]] = spi::keepalive_result::failed("extension reached " + std::to_string(ones) + " of " +
                                                              std::to_string(n) + " nodes: " + errors);
    }
}

lock_info backend::inspect(std::string_view lock_name, spi::lock_kind) {
    // One parallel round: the read-only script on every node.
    const auto key = key_for(lock_name);
    const auto record = key + ":holder";
    std::string numkeys;
    auto cmd = inspect_.eval_args({key, record}, {}, numkeys);
    std::vector<std::vector<std::string_view>> cmds(pools_.size(), cmd);
    auto res = exchange_all(pool_ptrs_, cmds);
    const auto n = pools_.size();
    struct owner_view {
        std::size_t nodes = 0;
        std::vector<long long> pttls;
        std::string label;
    };
    std::map<std::string, owner_view> owners;  // SHA-1 of the value (or "type:<t>") -> its nodes
    std::size_t free = 0, failed = 0;
    std::string errors;
    for (std::size_t i = 0; i < n; ++i) {
        const redisReply* r = res[i].reply.get();
        if (r == nullptr || is_error(r) || r->type != REDIS_REPLY_ARRAY || r->elements == 0) {
            ++failed;
            errors +=
                (errors.empty() ? "" : "; ") + settings_.nodes[i].label() + ": " + (r ? reply_text(r) : res[i].error);
            continue;
        }
        const auto state = as_integer(r->element[0]);
        auto text = [&](std::size_t k) {
            const redisReply* e = k < r->elements ? r->element[k] : nullptr;
            return e && (e->type == REDIS_REPLY_STRING || e->type == REDIS_REPLY_STATUS) ? std::string(e->str, e->len)
                                                                                         : std::string();
        };
        if (state == 0) {
            ++free;
            continue;
        }
        auto& o = owners[state == 1 ? text(2) : "type:" + text(2)];
        ++o.nodes;
        o.pttls.push_back(r->elements > 1 ? as_integer(r->element[1]) : -1);
        if (state == 1 && o.label.empty()) o.label = text(3);
    }
    if (n - failed < quorum_) throw_error(errc::unavailable, kBackend, majority_message(n - failed, errors));
    lock_info info;
    info.unknown.emplace("waiters",
                         "Redlock clients retry after a random delay: no node keeps a queue or a count of them");
    if (free >= quorum_) {
        info.held = false;
        return info;
    }
    for (auto& [id, o] : owners) {
        if (o.nodes < quorum_) continue;
        info.held = true;
        if (!o.label.empty()) info.holder = o.label;
        else
            info.unknown.emplace("holder", id.rfind("type:", 0) == 0
                                               ? "the key is a " + id.substr(5) + " on a majority of nodes, not a lock"
                                               : "the majority's holder records no label (not distlock, or a distlock "
                                                 "older than holder records)");
        info.unknown.emplace("token", "Redlock has no fencing token (feature::fencing is unsupported)");
        // The grant lasts while a majority keeps the key: the quorum-th longest PTTL
        // (-1: no expiry there).
        auto& p = o.pttls;
        std::sort(p.begin(), p.end(),
                  [](long long a, long long b) { return (a < 0 ? LLONG_MAX : a) > (b < 0 ? LLONG_MAX : b); });
        if (p[quorum_ - 1] >= 0) info.remaining = server_duration(p[quorum_ - 1]);  // fit for clock arithmetic
        else info.unknown.emplace("remaining", "the key has no expiry on a majority of nodes (set without a lease)");
        return info;
    }
    // A split view: no majority agrees on free or on one owner.
    std::string why = "no majority of " + std::to_string(quorum_) + " of " + std::to_string(n) +
                      " nodes agrees: " + std::to_string(free) + " free";
    for (const auto& [id, o] : owners) why += ", " + std::to_string(o.nodes) + " held by one owner";
    if (failed > 0) why += ", " + std::to_string(failed) + " unreachable";
    why += " (a grant or release in progress, a lease expiring at different moments, or a minority grant left over)";
    for (const char* field : {"held", "holder", "token", "remaining"}) info.unknown.emplace(field, why);
    return info;
}

std::shared_ptr<spi::backend> make_backend(spi::url& u) {
    redlock_settings s;
    auto base = endpoint_from_url(u, kBackend, std::chrono::milliseconds{250}, std::chrono::milliseconds{250});
    auto hosts = u.hosts_or_throw(6379);
    for (const auto& h : hosts) {
        auto ep = base;
        ep.host = h.host;
        ep.port = h.port;
        for (const auto& other : s.nodes)
            if (other.host == ep.host && other.port == ep.port)
                throw_error(errc::invalid_argument, kBackend,
                            "redlock:// lists " + ep.label() +
                                " twice: its nodes must be independent Redis masters (one vote each)");
        s.nodes.push_back(ep);
    }
    if (s.nodes.size() < 3)
        throw_error(
            errc::invalid_argument, kBackend,
            "redlock:// needs at least 3 independent nodes (h1:p1,h2:p2,h3:p3); got " + std::to_string(s.nodes.size()));
    if (auto prefix = u.take("prefix")) s.prefix = *prefix;
    s.retry_delay = u.take_duration("retry_delay").value_or(s.retry_delay);
    if (s.retry_delay.count() <= 0) throw_error(errc::invalid_argument, kBackend, "retry_delay must be positive");
    if (auto drift = u.take_int("drift_permille", 0, 500)) s.drift_factor = static_cast<double>(*drift) / 1000.0;
    s.pool_size = static_cast<std::size_t>(u.take_int("pool", 1, 1024).value_or(4));
    u.expect_all_taken();  // before anything is sent
    return std::make_shared<backend>(std::move(s));
}

}  // namespace

void register_backend(spi::registry& r) { r.add("redlock", make_backend); }

}  // namespace distlock::backends::redlock
