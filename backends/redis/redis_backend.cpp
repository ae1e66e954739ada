// redis://[user:password@]host[:port][/db][?strategy=plain|reentrant&...]
// rediss://...: the same over TLS (tls=true and the tls_* parameters on every
//   scheme; redis-client/tls_stream.hpp)
// redis-sentinel://[user:password@]s1,s2,.../<master name>[/db][?...]
// redis-cluster://[user:password@]h1,h2,...[?...]
// The three differ only in where commands go (redis-client/topology.hpp); with
// min_replicas=N every grant and renewal is confirmed by WAIT (context.hpp).
// The URLs are read into settings by redis_url.cpp (settings.hpp); this file is
// the backend of a provider and its mutex handle.
//
// strategy=plain (default, plain_strategy.cpp): a token key set with SET NX PX,
//   owner-checked release and renewal, a FIFO hand-off to one waiting client.
// strategy=reentrant (reentrant_strategy.cpp): Redisson's RLock layout, so that a
//   Java service using Redisson shares the lock.
// On both: read-write locks and semaphores in Redisson's RReadWriteLock and
//   RPermitExpirableSemaphore layouts (rw_lock.cpp and semaphore.cpp over
//   shared_lock.cpp, through context.hpp).
//
// Waiting: subscribe to the lock's channel (one dedicated pub/sub connection per
// provider; in a cluster one per node, SSUBSCRIBE) BEFORE retrying, then wait for a release message, bounded by the
// remaining PTTL (an expiring key publishes nothing) and the caller's deadline.
// Asynchronous waits (watch_releases, wake.cpp): a listener on the same
// channel of the same pub/sub connection; strategy=plain queues the waiter for
// the whole wait, so that a release wakes one waiter, as for synchronous ones.
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
#include "settings.hpp"
#include "strategy.hpp"

namespace distlock::backends::redis {
namespace {

using namespace redis_client;

std::unique_ptr<topology> make_topology(const settings& s) {
    switch (s.where) {
        case deployment::sentinel: return make_sentinel_topology(s.ep, s.pool_size, s.sentinel, s.failover_wait);
        case deployment::cluster: return make_cluster_topology(s.ep, s.pool_size, s.seeds, s.failover_wait);
        case deployment::single: break;
    }
    return make_single_topology(s.ep, s.pool_size);
}

class handle;

// Whether a message on a mutex's channel frees the lock for `waiter` (our id in
// the hand-off queue, "" = not queued): "released" (plain) or "0" (Redisson)
// free it for all; "h <id> <ms>" hands it to that queued waiter only; "t <id>
// <ms>" says a waiter took up its hand-off.
bool frees_for(std::string_view m, const std::string& waiter) {
    const bool handed = m.substr(0, 2) == "h ", taken = m.substr(0, 2) == "t ";
    if (!handed && !taken) return true;
    m.remove_prefix(2);
    return handed && !waiter.empty() && m.substr(0, m.find(' ')) == waiter;
}

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
        caps_.implements = {feature::read_write, feature::semaphore, feature::permit_limit, feature::inspect,
                            feature::inspect_primitives};
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

    // The read-write lock and the semaphore of `lock_name`: one read-only
    // script each, at the master of the object's slot (shared_lock.hpp).
    read_write_info inspect_read_write(std::string_view lock_name) override {
        const auto object = strategy_->object_name(lock_name, "rwlock");
        return call("inspect of the read-write lock '" + std::string(lock_name) + "'", object,
                    [&](connection& c) { return inspect_rw_object(c, object); });
    }
    semaphore_info inspect_semaphore(std::string_view lock_name) override {
        const auto object = strategy_->object_name(lock_name, "semaphore");
        return call("inspect of the semaphore '" + std::string(lock_name) + "'", object,
                    [&](connection& c) { return inspect_semaphore_object(c, object); });
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
        // Our id in the hand-off queue, once we queue (strategy=plain). An
        // asynchronous wait's one-attempt calls all queue under its id, which
        // its subscription takes out of the queue at its end (queued_wait).
        const bool async = !async_waiter_.empty() && until <= clock::now();
        std::string waiter = async ? async_waiter_ : std::string{};
        struct leave_guard {  // leaves the queue on every way out but a grant
            handle* self;
            std::string* waiter;
            bool keep;
            ~leave_guard() {
                if (!waiter->empty() && !keep) self->leave(*waiter);
            }
        } guard{this, &waiter, async};
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
                if (async) async_waiter_.clear();
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
                    if (frees_for(m, waiter)) {
                        retry = true;  // free for all, or handed to us
                        continue;
                    }
                    m.remove_prefix(2);
                    auto space = m.find(' ');
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

    // strategy=plain: the wait queues under one waiter id (each one-attempt
    // acquire() renews its place), so that a release hands the lock to it and
    // wakes it alone; a message that frees the lock for all wakes every waiter.
    std::unique_ptr<spi::wake_subscription> watch_releases(spi::wake_sink wake) override {
        std::string waiter = backend_.strat().queues() ? spi::random_token() : std::string{};
        auto sub = watch_channel(backend_, layout_.channel, std::move(wake),
                                 [waiter](std::string_view m) { return frees_for(m, waiter); });
        async_waiter_ = std::move(waiter);
        return std::make_unique<queued_wait>(*this, std::move(sub));
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
    // An asynchronous wait: its listener, then (unless a grant took it out) its
    // place in the hand-off queue, which it leaves when it ends.
    class queued_wait final : public spi::wake_subscription {
    public:
        queued_wait(handle& h, std::unique_ptr<spi::wake_subscription> sub) : handle_(h), sub_(std::move(sub)) {}
        ~queued_wait() override {
            sub_.reset();
            if (auto waiter = std::exchange(handle_.async_waiter_, std::string{}); !waiter.empty())
                handle_.leave(waiter);
        }

    private:
        handle& handle_;
        std::unique_ptr<spi::wake_subscription> sub_;
    };

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
    std::string owner_;         // token (plain) or hash field (reentrant) of the current grant; "" = none
    std::string async_waiter_;  // the queued id of an asynchronous wait under way ("" = none)
};

std::unique_ptr<spi::lock_handle> backend::make_lock(const spi::lock_request& r) {
    switch (r.kind) {
        // No feature::election: the core asks for `exclusive`; a leader term would
        // be this name's mutex all the same.
        case spi::lock_kind::exclusive:
        case spi::lock_kind::leader: return std::make_unique<handle>(*this, r);
        case spi::lock_kind::read:
        case spi::lock_kind::write: return make_rw_handle(*this, r, strategy_->object_name(r.name, "rwlock"));
        case spi::lock_kind::permit: return make_permit_handle(*this, r, strategy_->object_name(r.name, "semaphore"));
    }
    throw_error(errc::unsupported, kBackend, "unknown lock kind");
}

void backend::keepalive_batch(std::span<spi::lock_handle* const> handles, std::span<spi::keepalive_result> results) {
    // Read-write locks and permits: by their own scripts (shared_lock.cpp).
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

std::shared_ptr<spi::backend> make_backend(settings s) { return std::make_shared<backend>(std::move(s)); }

}  // namespace distlock::backends::redis
