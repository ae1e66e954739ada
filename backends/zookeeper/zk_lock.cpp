// zk://h1:2181,h2:2181/base/path: Apache Curator's lock recipes over the
// session layer (zk_session.hpp), so that a C++ process and a Java process
// using Curator share one lock, read-write lock, semaphore or election. This
// file picks a lock kind's recipe.
//
// Layout: a lock "name" lives at <base>/<encoded name> (a CONTAINER node, as
// Curator makes it; persistent when the server has no containers).
//  - mutex, read-write lock and election (zk_queue_lock.cpp): each attempt
//    creates an EPHEMERAL_SEQUENTIAL child "_c_<uuid>-<name><10 digit
//    sequence>". The children sorted as the recipe's driver says
//    (zk_queue_drivers.cpp) form the queue; the first holds the lock, every
//    other one watches (getData) only the node it waits for, so a release wakes
//    one waiter. The queue engine (zk_queue.cpp) does the creates, the waits and
//    the release for every recipe.
//  - semaphore (zk_semaphore.cpp): Curator's InterProcessSemaphoreV2, a lease
//    node under <path>/leases taken while holding the mutex recipe on <path>/locks.
// Every node distlock creates carries the holder label (lock_request::holder:
// the provider's, or an election's id) as its data. Curator's lock recipes
// never read their nodes' data (its own is the local IP address by default);
// LeaderLatch reads the leader's as its participant id.
// The fencing token is the held node's czxid (a global, strictly increasing
// transaction id): the lock node, or the lease node of a permit.
#include "zk_lock.hpp"

#include "zk_queue.hpp"

namespace distlock::backends::zookeeper {

std::unique_ptr<spi::lock_handle> make_lock_handle(session_manager& zk, const spi::lock_request& r) {
    switch (r.kind) {
        case spi::lock_kind::exclusive: return make_queue_lock(zk, r, kMutexDriver);
        case spi::lock_kind::read: return make_queue_lock(zk, r, kReadDriver);
        case spi::lock_kind::write: return make_queue_lock(zk, r, kWriteDriver);
        case spi::lock_kind::leader: return make_queue_lock(zk, r, kLatchDriver);
        case spi::lock_kind::permit: return make_semaphore(zk, r);
    }
    return make_queue_lock(zk, r, kMutexDriver);  // not reached: every kind has its case
}

}  // namespace distlock::backends::zookeeper
