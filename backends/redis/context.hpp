// redis:// internals: what the backend (redis_backend.cpp) gives the recipes of
// the read-write lock and the semaphore (shared_locks.cpp): its connections, its
// pub/sub subscriber and the owner ids of new grants. Never included outside
// backends/redis/.
#pragma once

#include <memory>
#include <span>
#include <string>

#include "distlock/spi/backend.hpp"
#include "redis_client.hpp"
#include "subscriber.hpp"

namespace distlock::backends::redis {

class context {
public:
    virtual ~context() = default;
    virtual redis_client::pool& connections() noexcept = 0;
    virtual const redis_client::endpoint& where() const noexcept = 0;
    // A confirmed subscription kept from a recent wait, or null (no server traffic).
    virtual std::unique_ptr<redis_client::subscriber::subscription> reuse_subscription(const std::string& channel) = 0;
    // The provider's pub/sub connection, made on first use.
    virtual redis_client::subscriber& sub() = 0;
    // A new owner id in Redisson's form "<client uuid>:<n>": this provider's UUID
    // and a number never used before by it (one per grant, so that two grants of
    // one process never share a hash field).
    virtual std::string next_owner() = 0;
};

// The handles of read-write locks and permits (shared_locks.cpp).
class shared_handle : public spi::lock_handle {
public:
    enum class renewal { read, write, permit };
    virtual renewal renewal_kind() const noexcept = 0;
};

// A lock handle of lock_kind read, write or permit for the Redisson object
// `object` (strategy::object_name).
std::unique_ptr<spi::lock_handle> make_shared_lock(context& ctx, const spi::lock_request& r, std::string object);

// keepalive_batch for shared handles (all of one provider): one pipelined round
// trip per kind.
void renew_shared(context& ctx, std::span<shared_handle* const> handles, std::span<spi::keepalive_result*> results);

// The keys a break_lock of a lock name removes for the read-write lock and the
// semaphore named `rwlock` and `semaphore` (strategy::object_name).
std::vector<std::string> shared_keys(const std::string& rwlock, const std::string& semaphore);

}  // namespace distlock::backends::redis
