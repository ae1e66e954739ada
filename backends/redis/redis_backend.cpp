// redis://[user:password@]host[:port][/db][?strategy=plain|reentrant&...]
//
// strategy=plain (default, plain_strategy.cpp): a token key set with SET NX PX,
//   owner-checked release and renewal, a FIFO hand-off to one waiting client.
// strategy=reentrant (reentrant_strategy.cpp): Redisson's RLock layout, so that a
//   Java service using Redisson shares the lock.
// On both: read-write locks and semaphores in Redisson's RReadWriteLock and
//   RPermitExpirableSemaphore layouts (shared_locks.cpp, through context.hpp).
//
// Waiting: subscribe to the lock's channel (one dedicated pub/sub connection per
// provider) BEFORE retrying, then wait for a release message, bounded by the
// remaining PTTL (an expiring key publishes nothing) and the caller's deadline.
// Renewals of every due mutex of a provider go out as one script: one round trip
// (and one more per kind of read-write lock grant and for permits, when due).
// Over the Redis client layer (backends/redis-client).
#include <atomic>
#include <charconv>

#include "context.hpp"
#include "lock_scripts.hpp"
#include "strategy.hpp"
#include "subscriber.hpp"

namespace distlock::backends::redis {
namespace {

using namespace redis_client;

enum class strategy_name { plain, reentrant };

struct settings {
    endpoint ep;
    strategy_name strat = strategy_name::plain;
    std::string prefix = "distlock:";
    std::size_t pool_size = 8;
};

class handle;

class backend final : public spi::backend, public context {
public:
    // Runs f on a pooled connection; a broken connection becomes unavailable_error.
    template <class F>
    auto call(const std::string& what, F&& f) {
        try {
            return pool_.run(std::forward<F>(f));
        } catch (const connection_failure& e) {
            throw_client_error("redis", what + " failed", e);
        }
    }

    explicit backend(settings s)
        : settings_(std::move(s)),
          pool_(settings_.ep, settings_.pool_size),
          uuid_(spi::random_uuid()),
          strategy_(settings_.strat == strategy_name::plain ? make_plain_strategy(settings_.prefix)
                                                            : make_reentrant_strategy()) {
        caps_.implements = {feature::read_write, feature::semaphore, feature::permit_limit};
        caps_.crash_release_bound = std::chrono::milliseconds{0};  // the lease itself is the bound
        caps_.reentrant = strategy_->reentrant();
        // Checks the server, the credentials and the database now: connect() fails
        // with a typed error instead of the first lock().
        call("connecting", [](connection& c) {
            auto r = c.command({"PING"});
            if (is_error(r.get())) throw_client_error("redis", r.get(), "PING at " + c.where().label());
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
            if (is_error(r.get())) throw_client_error("redis", r.get(), "PING");
            return std::chrono::duration_cast<std::chrono::nanoseconds>(dt);
        });
    }

    void keepalive_batch(std::span<spi::lock_handle* const> handles, std::span<spi::keepalive_result> results) override;
    // The mutex handles' part of keepalive_batch.
    void renew_mutexes(std::span<spi::lock_handle* const> handles, std::span<spi::keepalive_result> results);

    void break_lock(std::string_view lock_name) override {
        // Every primitive of the name: the mutex's key, the read-write lock's hash,
        // the semaphore's count and permits.
        auto l = strategy_->layout_for(lock_name);
        auto keys = shared_keys(strategy_->object_name(lock_name, "rwlock"), strategy_->object_name(lock_name, "semaphore"));
        call("DEL", [&](connection& c) {
            std::vector<std::string_view> cmd{"DEL", l.key};
            for (const auto& k : keys)
                if (k != l.key) cmd.push_back(k);
            auto r = c.command(cmd);
            if (is_error(r.get())) throw_client_error("redis", r.get(), "DEL");
            return 0;
        });
    }

    // A confirmed subscription kept from a recent wait, without creating the subscriber.
    std::unique_ptr<subscriber::subscription> reuse_subscription(const std::string& channel) override {
        std::lock_guard lk(sub_mutex_);
        return subscriber_ ? subscriber_->reuse(channel) : nullptr;
    }

    subscriber& sub() override {
        std::lock_guard lk(sub_mutex_);
        if (!subscriber_) subscriber_ = std::make_unique<subscriber>(settings_.ep);
        return *subscriber_;
    }

    const settings& config() const noexcept { return settings_; }
    pool& connections() noexcept override { return pool_; }
    const endpoint& where() const noexcept override { return settings_.ep; }
    std::string next_owner() override { return uuid_ + ":" + std::to_string(++owners_); }
    const std::string& uuid() const noexcept { return uuid_; }
    const strategy& strat() const noexcept { return *strategy_; }

private:
    settings settings_;
    capabilities caps_;
    pool pool_;
    std::string uuid_;  // this client's id in Redisson hash fields
    std::unique_ptr<const strategy> strategy_;
    std::atomic<std::uint64_t> owners_{0};  // owner ids handed out by next_owner()
    std::mutex sub_mutex_;
    std::unique_ptr<subscriber> subscriber_;
};

class handle final : public spi::lock_handle {
public:
    handle(backend& b, const spi::lock_request& r)
        : backend_(b),
          request_(r),
          layout_(b.strat().layout_for(r.name)),
          lease_ms_(std::to_string(r.lease.count())) {}

    std::optional<spi::grant> acquire(deadline until, const spi::loss_sink&) override {
        const bool queue = backend_.strat().queues();
        std::string owner = backend_.strat().new_owner(backend_.uuid());
        std::string waiter;  // our id in the hand-off queue, once we queue (strategy=plain)
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
            if (queue) waiter = spi::random_token();
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
                if (queue && sub->confirmed()) waiter = spi::random_token();
                continue;
            }
            if (queue && waiter.empty() && sub->confirmed()) {
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
        run_release_script(
            backend_.connections(), request_.name,
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
            backend_.connections().run([&](connection& c) {
                backend_.strat().leave(c, layout_, waiter);
                return 0;
            });
        } catch (...) {
        }
    }

    // One acquire script: {acquired, fencing token or PTTL}.
    std::pair<bool, long long> attempt(const std::string& owner, const std::string& waiter) {
        auto [status, value] = run_acquire_script(
            backend_.connections(), request_.name,
            [&](connection& c) { return backend_.strat().acquire(c, layout_, owner, lease_ms_, waiter); },
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
        case spi::lock_kind::exclusive: return std::make_unique<handle>(*this, r);
        case spi::lock_kind::read:
        case spi::lock_kind::write: return make_shared_lock(*this, r, strategy_->object_name(r.name, "rwlock"));
        case spi::lock_kind::permit: return make_shared_lock(*this, r, strategy_->object_name(r.name, "semaphore"));
    }
    throw_error(errc::unsupported, "redis", "unknown lock kind");
}

void backend::keepalive_batch(std::span<spi::lock_handle* const> handles, std::span<spi::keepalive_result> results) {
    // Read-write locks and permits: by their own scripts (shared_locks.cpp).
    std::vector<spi::lock_handle*> mutexes;
    std::vector<spi::keepalive_result> mutex_results;
    std::vector<std::size_t> mutex_slots;
    std::vector<shared_handle*> shared;
    std::vector<spi::keepalive_result*> shared_results;
    for (std::size_t i = 0; i < handles.size(); ++i) {
        if (auto* s = dynamic_cast<shared_handle*>(handles[i])) {
            shared.push_back(s);
            shared_results.push_back(&results[i]);
        } else {
            mutexes.push_back(handles[i]);
            mutex_slots.push_back(i);
        }
    }
    if (!shared.empty()) renew_shared(*this, shared, shared_results);
    if (mutexes.empty()) return;
    mutex_results.resize(mutexes.size());
    renew_mutexes(mutexes, mutex_results);
    for (std::size_t k = 0; k < mutexes.size(); ++k) results[mutex_slots[k]] = std::move(mutex_results[k]);
}

void backend::renew_mutexes(std::span<spi::lock_handle* const> handles, std::span<spi::keepalive_result> results) {
    // Every due lock goes into one renew script (chunks of 512 keys, pipelined on one
    // connection): one round trip for all of them.
    constexpr std::size_t chunk = 512;
    auto [index, keys, args] = redis_client::gather_renewals<handle>(
        handles, results, [](const handle& h) -> const std::string& { return h.owner(); });
    if (index.empty()) return;
    try {
        auto replies = pool_.run([&](connection& c) {
            return run_batched(c, strategy_->renew_script(), keys, args, 1, 2, chunk);
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
        if (strat == "plain") s.strat = strategy_name::plain;
        else if (strat == "reentrant") s.strat = strategy_name::reentrant;
        else
            throw_error(errc::invalid_argument, "redis",
                        "unknown strategy '" + strat + "' (redis:// knows plain and reentrant)");
        if (auto prefix = u.take("prefix")) {
            if (s.strat == strategy_name::reentrant)
                throw_error(errc::invalid_argument, "redis",
                            "prefix= does not apply to strategy=reentrant (Redisson's layout uses the lock name as key)");
            s.prefix = *prefix;
        }
        s.pool_size = static_cast<std::size_t>(u.take_int("pool", 1, 1024).value_or(8));
        return std::make_shared<backend>(std::move(s));
    });
}

}  // namespace distlock::backends::redis
