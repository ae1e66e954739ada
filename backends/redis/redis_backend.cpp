// redis://[user:password@]host[:port][/db][?strategy=plain|reentrant&...]
// rediss://...: the same over TLS (tls=true and the tls_* parameters on every
//   scheme; redis-client/tls_stream.hpp)
// redis-sentinel://[user:password@]s1,s2,.../<master name>[/db][?...]
// redis-cluster://[user:password@]h1,h2,...[?...]
// The three differ only in where commands go (redis-client/topology.hpp); with
// min_replicas=N every grant and renewal is confirmed by WAIT (context.hpp).
//
// strategy=plain (default, plain_strategy.cpp): a token key set with SET NX PX,
//   owner-checked release and renewal, a FIFO hand-off to one waiting client.
// strategy=reentrant (reentrant_strategy.cpp): Redisson's RLock layout, so that a
//   Java service using Redisson shares the lock.
// On both: read-write locks and semaphores in Redisson's RReadWriteLock and
//   RPermitExpirableSemaphore layouts (shared_locks.cpp, through context.hpp).
//
// Waiting: subscribe to the lock's channel (one dedicated pub/sub connection per
// provider; in a cluster one per node, SSUBSCRIBE) BEFORE retrying, then wait for a release message, bounded by the
// remaining PTTL (an expiring key publishes nothing) and the caller's deadline.
// Renewals of every due mutex of a provider go out as one script: one round trip
// (and one more per kind of read-write lock grant and for permits, when due); in
// a cluster one script per hash slot, pipelined per node.
// Holder labels: each strategy's acquire script records the label beside the
// grant (layout::holder, same hash slot); inspect is one read-only script at the
// master of the lock's key (docs/backends/redis.md, "Inspect and holder labels").
// Over the Redis client layer (backends/redis-client).
#include <algorithm>
#include <atomic>
#include <charconv>
#include <map>

#include "context.hpp"
#include "redis-client/lock_scripts.hpp"
#include "redis-client/subscriber.hpp"
#include "strategy.hpp"

namespace distlock::backends::redis {
namespace {

using namespace redis_client;

enum class strategy_name { plain, reentrant };
enum class deployment { single, sentinel, cluster };

struct settings {
    endpoint ep;  // the data nodes' credentials, database and timeouts (and host: redis://)
    deployment where = deployment::single;
    redis_client::sentinel_settings sentinel;  // redis-sentinel://
    std::vector<endpoint> seeds;               // redis-cluster://
    std::chrono::milliseconds failover_wait{10000};
    replica_confirmation confirm;
    strategy_name strat = strategy_name::plain;
    std::string prefix = "distlock:";
    std::size_t pool_size = 8;
};

std::unique_ptr<topology> make_topology(const settings& s) {
    switch (s.where) {
        case deployment::sentinel: return make_sentinel_topology(s.ep, s.pool_size, s.sentinel, s.failover_wait);
        case deployment::cluster: return make_cluster_topology(s.ep, s.pool_size, s.seeds, s.failover_wait);
        case deployment::single: break;
    }
    return make_single_topology(s.ep, s.pool_size);
}

class handle;

class backend final : public spi::backend, public context {
public:
    // Runs f on a connection to the server of `key` ("" = any); a broken
    // connection becomes unavailable_error.
    template <class F>
    auto call(const std::string& what, std::string_view key, F&& f) {
        try {
            return topology_->run(key, std::forward<F>(f));
        } catch (const connection_failure& e) {
            throw_client_error(e, kBackend, what + " failed");
        }
    }

    explicit backend(settings s)
        : settings_(std::move(s)),
          topology_(make_topology(settings_)),
          uuid_(spi::random_uuid()),
          strategy_(settings_.strat == strategy_name::plain ? make_plain_strategy(settings_.prefix)
                                                            : make_reentrant_strategy()) {
        caps_.implements = {feature::read_write, feature::semaphore, feature::permit_limit, feature::inspect};
        caps_.crash_release_bound = std::chrono::milliseconds{0};  // the lease itself is the bound
        caps_.reentrant = strategy_->reentrant();
        // Checks the server (the sentinels, the cluster), the credentials and the
        // database now: connect() fails with a typed error instead of the first lock().
        for (auto* node : topology_->masters()) {
            try {
                node->run([](connection& c) {
                    auto r = c.command({"PING"});
                    if (is_error(r.get())) throw_client_error(r.get(), kBackend, "PING at " + c.where().label());
                    return 0;
                });
            } catch (const connection_failure& e) {
                throw_client_error(e, kBackend, "connecting");
            }
        }
    }

    std::string_view name() const noexcept override { return kBackend; }
    const capabilities& caps() const noexcept override { return caps_; }
    std::unique_ptr<spi::lock_handle> make_lock(const spi::lock_request& r) override;
    std::chrono::milliseconds default_lease() const override { return std::chrono::seconds{30}; }

    std::optional<std::chrono::nanoseconds> round_trip() override {
        return call("PING", "", [](connection& c) {
            auto t0 = clock::now();
            auto r = c.command({"PING"});
            auto dt = clock::now() - t0;
            if (is_error(r.get())) throw_client_error(r.get(), kBackend, "PING");
            return std::chrono::duration_cast<std::chrono::nanoseconds>(dt);
        });
    }

    // The mutex of `lock_name` (a leader term is the same mutex: no
    // feature::election), by one read-only script at the master of its key.
    lock_info inspect(std::string_view lock_name, spi::lock_kind) override {
        const auto l = strategy_->layout_for(lock_name);
        return call("inspect of '" + std::string(lock_name) + "'", l.key,
                    [&](connection& c) { return strategy_->inspect(c, l); });
    }

    void keepalive_batch(std::span<spi::lock_handle* const> handles, std::span<spi::keepalive_result> results) override;
    // The mutex handles' part of keepalive_batch.
    void renew_mutexes(std::span<spi::lock_handle* const> handles, std::span<spi::keepalive_result> results);

    void break_lock(std::string_view lock_name) override {
        // Every primitive of the name: the mutex's key, the read-write lock's hash,
        // the semaphore's count and permits.
        auto l = strategy_->layout_for(lock_name);
        auto keys =
            shared_keys(strategy_->object_name(lock_name, "rwlock"), strategy_->object_name(lock_name, "semaphore"));
        keys.insert(keys.begin(), l.key);
        keys.push_back(l.holder);
        std::sort(keys.begin(), keys.end());  // Redisson's layout names several objects by the name itself
        keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
        // One DEL per key: in a cluster the objects of one name may lie in
        // different slots.
        for (const auto& key : keys) {
            call("DEL", key, [&](connection& c) {
                auto r = c.command({"DEL", key});
                if (is_error(r.get())) throw_client_error(r.get(), kBackend, "DEL");
                return 0;
            });
        }
    }

    // A confirmed subscription kept from a recent wait, without creating the subscriber.
    std::unique_ptr<subscriber::subscription> reuse_subscription(const std::string& channel) override {
        const auto where = subscriber_key(channel);
        std::lock_guard lk(sub_mutex_);
        auto it = subscribers_.find(where);
        return it != subscribers_.end() ? it->second->reuse(channel) : nullptr;
    }

    subscriber& sub(const std::string& channel) override {
        const auto where = subscriber_key(channel);
        std::lock_guard lk(sub_mutex_);
        auto& s = subscribers_[where];
        if (!s) {
            if (settings_.where == deployment::cluster) {
                // A sharded channel is served by the node of its slot.
                s = std::make_unique<subscriber>(
                    [this, channel](bool after_failure) { return topology_->endpoint_for(channel, after_failure); },
                    true, kBackend);
            } else {
                s = std::make_unique<subscriber>(
                    [this](bool after_failure) { return topology_->endpoint_for("", after_failure); }, false, kBackend);
            }
        }
        return *s;
    }

    const settings& config() const noexcept { return settings_; }
    topology& connections() noexcept override { return *topology_; }
    const endpoint& where() const noexcept override { return topology_->base(); }
    const replica_confirmation& confirmation() const noexcept override { return settings_.confirm; }
    std::string next_owner() override { return uuid_ + ":" + std::to_string(++owners_); }
    const std::string& uuid() const noexcept { return uuid_; }
    const strategy& strat() const noexcept { return *strategy_; }

private:
    // Which subscriber carries `channel`: in a cluster, one per node (by the
    // node that serves the channel's slot now); else the provider's one.
    std::string subscriber_key(const std::string& channel) {
        if (settings_.where != deployment::cluster) return {};
        try {
            return topology_->pool_for(channel).where().label();
        } catch (const std::exception&) {
            return {};
        }
    }

    settings settings_;
    capabilities caps_;
    std::unique_ptr<topology> topology_;
    std::string uuid_;  // this client's id in Redisson hash fields
    std::unique_ptr<const strategy> strategy_;
    std::atomic<std::uint64_t> owners_{0};  // owner ids handed out by next_owner()
    std::mutex sub_mutex_;
    std::map<std::string, std::unique_ptr<subscriber>> subscribers_;
};

class handle final : public backend_handle {
public:
    void join(renewal_groups& groups, std::size_t slot) const override { groups.mutexes.push_back(slot); }
    handle(backend& b, const spi::lock_request& r)
        : backend_(b), request_(r), layout_(b.strat().layout_for(r.name)), lease_ms_(std::to_string(r.lease.count())) {}

    std::optional<spi::grant> acquire(deadline until, const spi::loss_sink&) override {
        const bool queue = backend_.strat().queues();
        std::string owner = backend_.strat().new_owner(backend_.uuid());
        std::string waiter;   // our id in the hand-off queue, once we queue (strategy=plain)
        struct leave_guard {  // leaves the queue on every way out but a grant
            handle* self;
            std::string* waiter;
            ~leave_guard() {
                if (!waiter->empty()) self->leave(*waiter);
            }
        } guard{this, &waiter};
        std::unique_ptr<subscriber::subscription> sub;
        retry_pacer pacer(request_);
        deadline alive_until{};  // when the server will consider our queue entry dead
        std::uint64_t seen = 0;
        if (auto lingering = until > clock::now() ? backend_.reuse_subscription(layout_.channel) : nullptr) {
            // Still subscribed from a recent wait: queue with the very first try.
            sub = std::move(lingering);
            if (queue) waiter = spi::random_token();
        }
        for (bool first = true;; first = false) {
            if (sub) seen = sub->messages();
            const auto sent = clock::now();  // the lease runs from when the server ran the script
            auto [got, value] = attempt(owner, waiter, until);
            if (got) {
                waiter.clear();  // the grant took us out of the queue
                owner_ = std::move(owner);
                return spi::grant{static_cast<std::uint64_t>(value), sent, !first};
            }
            auto now = clock::now();
            if (now >= until) return std::nullopt;
            if (!sub) {
                // Subscribe first, then retry (and queue): a release published
                // after the subscription is confirmed cannot be missed.
                auto confirm = std::min(until, now + backend_.config().ep.command_timeout);
                sub = backend_.sub(layout_.channel).subscribe(layout_.channel, confirm);
                if (queue && sub->confirmed()) waiter = spi::random_token();
                continue;
            }
            if (queue && waiter.empty() && sub->confirmed()) {
                waiter = spi::random_token();  // the pub/sub connection is back: queue now
                continue;
            }
            // value = PTTL of the holder's key: -1 no expiry (foreign key), -2 just gone.
            if (!waiter.empty()) alive_until = now + pacer.holder_left(value) + liveness_slack;
            deadline bound = pacer.wait_after(value, until);
            // Wait without sending anything until our turn, a plain release, the
            // end of the holder's lease, or the deadline.
            for (;;) {
                auto woke = sub->wait(seen, bound);
                if (woke == subscriber::wake::broken) {
                    // No pub/sub connection right now: fall back to jittered backoff.
                    std::this_thread::sleep_for(pacer.backoff(bound));
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
                    // Any client that may PUBLISH on the channel writes this number.
                    long long ms_left = 0;
                    if (space != std::string_view::npos)
                        std::from_chars(m.data() + space + 1, m.data() + m.size(), ms_left);
                    bound = std::min(until, clock::now() + pacer.announced(ms_left) + 5ms);
                }
                if (retry || !complete) {
                    pacer.heard();
                    break;
                }
                // Renew our place in the queue before the server drops it.
                if (!waiter.empty() && alive_until - clock::now() < liveness_slack / 2) break;
            }
        }
    }

    void release() override {
        std::string owner = std::exchange(owner_, std::string{});
        if (owner.empty()) throw_error(errc::not_owner, kBackend, "lock '" + request_.name + "' is not held");
        run_release_script(
            backend_, layout_.key, request_.name,
            [&](connection& c) { return backend_.strat().release(c, layout_, owner, lease_ms_); },
            [&](long long reply) { return backend_.strat().released(reply); });
    }

    const std::string& key() const noexcept { return layout_.key; }
    const std::string& owner() const noexcept { return owner_; }
    const std::string& lease_ms() const noexcept { return lease_ms_; }
    const std::string& name() const noexcept { return request_.name; }

private:
    // Best effort: leave the hand-off queue (and pass on a reservation made for us).
    void leave(const std::string& waiter) noexcept {
        try {
            backend_.connections().run(layout_.key, [&](connection& c) {
                backend_.strat().leave(c, layout_, waiter);
                return 0;
            });
        } catch (...) {}
    }

    // One acquire script: {acquired, fencing token or PTTL}.
    std::pair<bool, long long> attempt(const std::string& owner, const std::string& waiter, deadline until) {
        auto [status, value] = run_acquire_script(
            backend_, layout_.key, request_.name, until,
            [&](connection& c) {
                return backend_.strat().acquire(c, layout_, owner, lease_ms_, waiter, request_.holder);
            },
            [&](connection& c) { backend_.strat().release(c, layout_, owner, lease_ms_); });
        return {status == 1, value};
    }

    backend& backend_;
    spi::lock_request request_;
    layout layout_;
    std::string lease_ms_;
    std::string owner_;  // token (plain) or hash field (reentrant) of the current grant; "" = none
};

std::unique_ptr<spi::lock_handle> backend::make_lock(const spi::lock_request& r) {
    switch (r.kind) {
        // No feature::election: the core asks for `exclusive`; a leader term would
        // be this name's mutex all the same.
        case spi::lock_kind::exclusive:
        case spi::lock_kind::leader: return std::make_unique<handle>(*this, r);
        case spi::lock_kind::read:
        case spi::lock_kind::write: return make_shared_lock(*this, r, strategy_->object_name(r.name, "rwlock"));
        case spi::lock_kind::permit: return make_shared_lock(*this, r, strategy_->object_name(r.name, "semaphore"));
    }
    throw_error(errc::unsupported, kBackend, "unknown lock kind");
}

void backend::keepalive_batch(std::span<spi::lock_handle* const> handles, std::span<spi::keepalive_result> results) {
    // Read-write locks and permits: by their own scripts (shared_locks.cpp).
    // Every handle given here is one of this backend's.
    renewal_groups groups;
    for (std::size_t i = 0; i < handles.size(); ++i) static_cast<const backend_handle*>(handles[i])->join(groups, i);
    if (!groups.shared.empty()) {
        std::vector<shared_handle*> shared;
        std::vector<spi::keepalive_result*> shared_results;
        for (auto i : groups.shared) {
            shared.push_back(static_cast<shared_handle*>(handles[i]));
            shared_results.push_back(&results[i]);
        }
        renew_shared(*this, shared, shared_results);
    }
    if (groups.mutexes.empty()) return;
    std::vector<spi::lock_handle*> mutexes;
    for (auto i : groups.mutexes) mutexes.push_back(handles[i]);
    std::vector<spi::keepalive_result> mutex_results(mutexes.size());
    renew_mutexes(mutexes, mutex_results);
    for (std::size_t k = 0; k < mutexes.size(); ++k) results[groups.mutexes[k]] = std::move(mutex_results[k]);
}

void backend::renew_mutexes(std::span<spi::lock_handle* const> handles, std::span<spi::keepalive_result> results) {
    // Every due lock goes into one renew script (chunks of 512 keys; in a cluster
    // one script per hash slot), pipelined per node: one round trip a node.
    constexpr std::size_t chunk = 512;
    auto [index, keys, args] = redis_client::gather_renewals<handle>(
        handles, results, [](const handle& h) -> const std::string& { return h.owner(); });
    if (index.empty()) return;
    auto replies = topology_->run_items(strategy_->renew_script(), keys, args, 1, 2, chunk,
                                        settings_.confirm.min_replicas, settings_.confirm.timeout);
    for (std::size_t j = 0; j < index.size(); ++j) {
        const auto slot = index[j];
        auto* h = static_cast<handle*>(handles[slot]);
        if (!replies[j].ok) results[slot] = spi::keepalive_result::failed(replies[j].error);
        else if (replies[j].value == 1) results[slot] = spi::keepalive_result::ok();
        else
            results[slot] = spi::keepalive_result::lost(
                "lock key '" + h->key() + "' no longer holds our grant (expired or deleted on the server)");
    }
}

}  // namespace

namespace {

// The parameters every deployment takes: strategy=, prefix=, pool=,
// min_replicas= and replica_timeout=.
void take_common(spi::url& u, settings& s, const std::string& scheme) {
    auto strat = u.take("strategy").value_or("plain");
    if (strat == "plain") s.strat = strategy_name::plain;
    else if (strat == "reentrant") s.strat = strategy_name::reentrant;
    else
        throw_error(errc::invalid_argument, kBackend,
                    "unknown strategy '" + strat + "' (" + scheme + ":// knows plain and reentrant)");
    if (auto prefix = u.take("prefix")) {
        if (s.strat == strategy_name::reentrant)
            throw_error(errc::invalid_argument, kBackend,
                        "prefix= does not apply to strategy=reentrant (Redisson's layout uses the lock name as key)");
        s.prefix = *prefix;
    }
    s.pool_size = static_cast<std::size_t>(u.take_int("pool", 1, 1024).value_or(8));
    s.confirm.min_replicas = static_cast<int>(u.take_int("min_replicas", 0, 100).value_or(0));
    // WAIT blocks the connection: it must end before the command timeout does.
    const auto given = u.take_duration("replica_timeout");
    s.confirm.timeout = given.value_or(std::min(std::chrono::milliseconds{1000}, s.ep.command_timeout / 2));
    if (given && (s.confirm.timeout.count() <= 0 || s.confirm.timeout >= s.ep.command_timeout))
        throw_error(errc::invalid_argument, kBackend,
                    "replica_timeout must be positive and shorter than timeout (" +
                        std::to_string(s.ep.command_timeout.count()) + " ms): WAIT blocks the connection that long");
    if (scheme != "redis") {
        s.failover_wait = u.take_duration("failover_timeout").value_or(std::chrono::milliseconds{10000});
        if (s.failover_wait.count() < 0)
            throw_error(errc::invalid_argument, kBackend, "failover_timeout must not be negative");
    }
}

// master_hosts= (redis-sentinel://, redis-cluster://): the data nodes the
// URL's credentials may go to, besides `own` (the URL's own data nodes: a
// cluster's seeds); none given: no bound but the deployment's own vouching.
std::shared_ptr<const host_filter> take_master_hosts(spi::url& u, const std::vector<endpoint>& own) {
    auto text = u.take("master_hosts");
    if (!text) return nullptr;
    auto filter = host_filter::parse(*text, kBackend);
    for (const auto& ep : own) filter.allow(ep.host, ep.port);
    return std::make_shared<const host_filter>(std::move(filter));
}

// redis:// and rediss:// (TLS): one server.
std::shared_ptr<spi::backend> open_single(spi::url& u) {
    if (u.hosts().size() != 1)
        throw_error(errc::invalid_argument, kBackend,
                    u.scheme() + ":// takes one host (" + u.scheme() +
                        "://[user:password@]host[:port][/db]); use redlock:// for "
                        "independent masters, redis-sentinel:// or redis-cluster:// for several nodes");
    settings s;
    s.ep = endpoint_from_url(u, kBackend, std::chrono::milliseconds{1000}, std::chrono::milliseconds{2000});
    auto hosts = u.hosts_or_throw(6379);
    s.ep.host = hosts[0].host;
    s.ep.port = hosts[0].port;
    take_common(u, s, kBackend);
    return std::make_shared<backend>(std::move(s));
}

}  // namespace

void register_backend(spi::registry& r) {
    r.add("redis", open_single);
    r.add("rediss", open_single);
    // redis-sentinel://[user:password@]s1[:26379],s2,.../<master name>[/db]
    r.add("redis-sentinel", [](spi::url& u) -> std::shared_ptr<spi::backend> {
        settings s;
        s.where = deployment::sentinel;
        std::string_view path(u.path());
        if (!path.empty()) path.remove_prefix(1);
        const auto slash = path.find('/');
        s.sentinel.master_name = std::string(path.substr(0, slash));
        if (s.sentinel.master_name.empty())
            throw_error(errc::invalid_argument, kBackend,
                        "redis-sentinel:// needs the master's name as its path: "
                        "redis-sentinel://[user:password@]host:26379,.../<master name>[/db]");
        const auto db = slash == std::string_view::npos ? std::string_view{} : path.substr(slash + 1);
        s.ep = endpoint_from_url(u, kBackend, std::chrono::milliseconds{1000}, std::chrono::milliseconds{2000}, db);
        // The sentinels get their own credentials only (sentinel_user=,
        // sentinel_password=; none: no AUTH), never the data nodes' password
        // of the URL: a sentinel is often run by someone else, and one that is
        // not ours must not learn it. sentinel_credentials=data sends the URL's
        // to them as well (for sentinels that share the data nodes' password).
        endpoint sentinel = s.ep;
        sentinel.db = 0;
        sentinel.user.clear();
        sentinel.password.clear();
        const auto credentials = u.take("sentinel_credentials").value_or("own");
        auto user = u.take("sentinel_user");
        auto password = u.take("sentinel_password");
        if (credentials == "data") {
            if (user || password)
                throw_error(errc::invalid_argument, kBackend,
                            "sentinel_credentials=data sends the URL's credentials to the sentinels: drop "
                            "sentinel_user= and sentinel_password=");
            sentinel.user = s.ep.user;
            sentinel.password = s.ep.password;
        } else if (credentials != "own") {
            throw_error(errc::invalid_argument, kBackend,
                        "sentinel_credentials is own (sentinel_user= and sentinel_password=, the default) or data "
                        "(the URL's credentials), not '" +
                            credentials + "'");
        } else if (user && !password) {
            throw_error(errc::invalid_argument, kBackend, "sentinel_user= needs sentinel_password=");
        } else if (password && !password->empty()) {
            sentinel.user = user.value_or("");
            sentinel.password = *password;
        }
        // TLS to the sentinels: the data nodes' settings unless sentinel_tls*= say
        // otherwise (sentinels often have a CA or a client certificate of their own).
        const tls_options data_tls = s.ep.tls ? s.ep.tls->options() : tls_options{};
        const auto sentinel_tls = tls_from_url(u, kBackend, data_tls, "sentinel_tls");
        if (!(sentinel_tls == data_tls))
            sentinel.tls = sentinel_tls.enabled ? tls_context::make(sentinel_tls, kBackend, "sentinel_tls") : nullptr;
        for (const auto& h : u.hosts_or_throw(26379)) {
            sentinel.host = h.host;
            sentinel.port = h.port;
            for (const auto& other : s.sentinel.sentinels)
                if (other.label() == sentinel.label())
                    throw_error(errc::invalid_argument, kBackend,
                                "redis-sentinel:// lists the sentinel " + sentinel.label() +
                                    " twice: a majority of the listed sentinels must name the master (one vote each)");
            s.sentinel.sentinels.push_back(sentinel);
        }
        // Data nodes only: the sentinels are the URL's own, with their own credentials.
        s.ep.allowed = take_master_hosts(u, {});
        take_common(u, s, "redis-sentinel");
        return std::make_shared<backend>(std::move(s));
    });
    // redis-cluster://[user:password@]h1[:6379],h2,...: any nodes of the cluster.
    r.add("redis-cluster", [](spi::url& u) -> std::shared_ptr<spi::backend> {
        settings s;
        s.where = deployment::cluster;
        s.ep = endpoint_from_url(u, kBackend, std::chrono::milliseconds{1000}, std::chrono::milliseconds{2000});
        if (s.ep.db != 0)
            throw_error(errc::invalid_argument, kBackend, "a Redis Cluster has database 0 only: drop the URL's path");
        for (const auto& h : u.hosts_or_throw(6379)) {
            endpoint seed = s.ep;
            seed.host = h.host;
            seed.port = h.port;
            s.seeds.push_back(seed);
        }
        s.ep.allowed = take_master_hosts(u, s.seeds);
        for (auto& seed : s.seeds) seed.allowed = s.ep.allowed;
        take_common(u, s, "redis-cluster");
        return std::make_shared<backend>(std::move(s));
    });
}

}  // namespace distlock::backends::redis
