// redis:// internals: what the backend (redis_backend.cpp) gives the recipes of
// the read-write lock and the semaphore (shared_lock.hpp): its connections, its
// pub/sub subscriber and the owner ids of new grants; and how every lock handle
// of both (mutex, read-write lock, semaphore) runs its acquire and release
// scripts. Never included outside backends/redis/.
#pragma once

#include <algorithm>
#include <chrono>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <utility>

#include "distlock/spi/backend.hpp"
#include "redis-client/redis_client.hpp"
#include "redis-client/subscriber.hpp"
#include "redis-client/topology.hpp"
#include "strategy.hpp"  // kBackend

namespace distlock::backends::redis {

// Grants confirmed by replicas (?min_replicas=N&replica_timeout=D): after a
// grant and after each renewal, WAIT N D on the same connection.
struct replica_confirmation {
    int min_replicas = 0;  // 0 = no WAIT
    std::chrono::milliseconds timeout{0};
};

class context {
public:
    virtual ~context() = default;
    // Where the commands of a key go (one server, Sentinel's master, the cluster).
    virtual redis_client::topology& connections() noexcept = 0;
    // Credentials and timeouts of the data nodes.
    virtual const redis_client::endpoint& where() const noexcept = 0;
    virtual const replica_confirmation& confirmation() const noexcept = 0;
    // A confirmed subscription kept from a recent wait, or null (no server traffic).
    virtual std::unique_ptr<redis_client::subscriber::subscription> reuse_subscription(const std::string& channel) = 0;
    // The pub/sub connection that carries `channel` (made on first use): the
    // provider's one, or in a cluster the one to the node of the channel's slot.
    virtual redis_client::subscriber& sub(const std::string& channel) = 0;
    // A new owner id in Redisson's form "<client uuid>:<n>": this provider's UUID
    // and a number never used before by it (one per grant, so that two grants of
    // one process never share a hash field).
    virtual std::string next_owner() = 0;
};

// When a waiter tries again after a failed try (every handle's acquire loop).
// The holder's PTTL in the try's reply bounds the wait, clamped to [0, our
// lease]: it goes into clock arithmetic (2^63 - 1 ms overflows), and a key
// deleted without a message is seen again within a lease. A try that found
// nothing to wait for (the key "just went": -2) is repeated at once, but a
// broken or hostile server can say so for ever: from the second wait in a row
// that no message ended, each wait lasts at least a growing backoff
// (retry_min, doubling to retry_max), so no reply makes the loop spin.
class retry_pacer {
public:
    explicit retry_pacer(const spi::lock_request& r) : lease_(r.lease), backoff_(r.retry_min, r.retry_max) {}
    // The holder's time left as the try's reply gave it (-1: no expiry, -2:
    // gone), as a duration safe for clock arithmetic (-1, -2: a second).
    std::chrono::milliseconds holder_left(long long pttl) const noexcept {
        return redis_client::server_duration(pttl >= 0 ? pttl : 1000, lease_);
    }
    // A lease or reservation another client announced on the channel.
    std::chrono::milliseconds announced(long long ms) const noexcept {
        return redis_client::server_duration(ms, lease_);
    }
    // The end of the wait after a try that failed with `pttl`.
    spi::deadline wait_after(long long pttl, spi::deadline until) {
        std::chrono::nanoseconds wait =
            pttl == -2 ? std::chrono::nanoseconds{0} : holder_left(pttl) + std::chrono::milliseconds{1};
        if (std::exchange(quiet_, true)) wait = std::max(wait, backoff_.next(until));
        const auto now = spi::clock::now();
        return until - now < wait ? until : now + wait;
    }
    // A message ended the wait: the next try may follow at once.
    void heard() noexcept { quiet_ = false; }
    // How long to wait when there is no pub/sub connection.
    std::chrono::nanoseconds backoff(spi::deadline until) { return backoff_.next(until); }

private:
    std::chrono::milliseconds lease_;
    spi::backoff backoff_;
    bool quiet_ = false;  // the last wait was not ended by a message
};

class shared_handle;

// How backend::keepalive_batch groups the due handles: mutexes into one
// renewal script per node, read-write locks and permits by their own scripts.
// Each handle puts itself in its group (backend_handle::join), so the batch needs
// no cast to find out what a handle is.
struct renewal_groups {
    std::vector<std::size_t> mutexes;  // slots of the batch
    std::vector<std::size_t> shared;
};

// Every lock handle of this backend.
class backend_handle : public spi::lock_handle {
public:
    // Adds this handle, at `slot` of the batch, to its group.
    virtual void join(renewal_groups& groups, std::size_t slot) const = 0;
};

// The handles of read-write locks and permits (shared_lock.hpp).
class shared_handle : public backend_handle {
public:
    void join(renewal_groups& groups, std::size_t slot) const override { groups.shared.push_back(slot); }
    enum class renewal { read, write, permit };
    virtual renewal renewal_kind() const noexcept = 0;
};

// The read-write lock's handle of `object` (rw_lock.cpp), and a permit's of the
// semaphore `object` (semaphore.cpp).
std::unique_ptr<spi::lock_handle> make_rw_handle(context& ctx, const spi::lock_request& r, std::string object);
std::unique_ptr<spi::lock_handle> make_permit_handle(context& ctx, const spi::lock_request& r, std::string object);

// lock_handle::watch_releases of every handle: `wake` is called for each
// message on `channel` that `wakes(payload)` accepts (null: every message), and
// when the channel is subscribed again after the pub/sub connection broke
// (wake.cpp). A listener on the provider's shared pub/sub connection.
std::unique_ptr<spi::wake_subscription> watch_channel(context& ctx, const std::string& channel, spi::wake_sink wake,
                                                      std::function<bool(std::string_view)> wakes);

// How every lock handle runs its scripts (`name`: the lock's name, for errors).

// Runs one acquire script, `acquire(connection&)` -> reply_ptr, on the server of
// `key`; its reply is {status, value}; returns them. With min_replicas, a grant
// (status 1) is confirmed by WAIT on the same connection; one that too few
// replicas acknowledged is released there (`undo`) and reported unavailable.
// When the connection failed after the script may have run, `undo(connection&)`
// (the release script) is run, best effort, so that nothing is left behind; the
// failure is then unavailable. `until`: the caller's deadline (a failover is
// waited out at most until then).
template <class Acquire, class Undo>
std::pair<long long, long long> run_acquire_script(context& ctx, const std::string& key, const std::string& name,
                                                   spi::deadline until, Acquire&& acquire, Undo&& undo) {
    using namespace redis_client;
    auto& connections = ctx.connections();
    const auto& confirm = ctx.confirmation();
    try {
        return connections.run(
            key,
            [&](connection& c) {
                auto r = acquire(c);
                if (is_error(r.get())) throw_client_error(r.get(), kBackend, "acquire of '" + name + "'");
                if (r->type != REDIS_REPLY_ARRAY || r->elements != 2)
                    throw_error(errc::unavailable, kBackend,
                                "unexpected reply to the acquire script: " + reply_text(r.get()));
                std::pair<long long, long long> result(as_integer(r->element[0]), as_integer(r->element[1]));
                if (result.first == 1 && confirm.min_replicas > 0) {
                    const auto acked = wait_replicas(c, confirm.min_replicas, confirm.timeout);
                    if (acked < confirm.min_replicas) {
                        undo(c);
                        connections.suspect(c.where());  // a master cut off from its replicas: look again
                        throw_error(errc::unavailable, kBackend,
                                    "the grant of '" + name + "' was " +
                                        replica_shortfall(acked, confirm.min_replicas, confirm.timeout) + "; released");
                    }
                }
                return result;
            },
            until);
    } catch (const connection_failure& e) {
        if (e.maybe_sent()) {
            // The script may have run: undo it (best effort) so that nothing is left behind.
            try {
                connections.run(key, [&](connection& c) {
                    undo(c);
                    return 0;
                });
            } catch (...) {}
        }
        throw_error(errc::unavailable, kBackend, "acquire of '" + name + "' failed: " + e.what());
    }
}

// Runs one release script, `release(connection&)` -> reply_ptr, on the server
// of `key`, and judges its integer reply by `released(long long)`: false ->
// not_owner (the grant was no longer ours). A connection that failed: in_doubt
// when the script may have run, else unavailable (the lease expires on the
// server either way).
template <class Release, class Released>
void run_release_script(context& ctx, const std::string& key, const std::string& name, Release&& release,
                        Released&& released) {
    using namespace redis_client;
    long long result = 0;
    try {
        result = ctx.connections().run(key, [&](connection& c) {
            auto r = release(c);
            if (is_error(r.get())) throw_client_error(r.get(), kBackend, "release of '" + name + "'");
            return as_integer(r.get());
        });
    } catch (const connection_failure& e) {
        throw_error(e.maybe_sent() ? errc::in_doubt : errc::unavailable, kBackend,
                    "release of '" + name + "' failed: " + e.what() + " (the lease will expire on the server)");
    }
    if (!released(result))
        throw_error(errc::not_owner, kBackend,
                    "lock '" + name + "' was no longer ours when released (expired or deleted on the server)");
}

// keepalive_batch for shared handles (all of one provider): one pipelined round
// trip per kind.
void renew_shared(context& ctx, std::span<shared_handle* const> handles, std::span<spi::keepalive_result*> results);

// The keys a break_lock of a lock name removes for the read-write lock and the
// semaphore named `rwlock` and `semaphore` (strategy::object_name).
std::vector<std::string> shared_keys(const std::string& rwlock, const std::string& semaphore);
// provider::inspect_read_write / inspect_semaphore: one read-only script on
// the object's keys (rw_lock.cpp, semaphore.cpp), run at the master of its slot.
read_write_info inspect_rw_object(connection& c, const std::string& object);
semaphore_info inspect_semaphore_object(connection& c, const std::string& object);

}  // namespace distlock::backends::redis
