// The etcd v3 lock recipes over etcd's JSON gateway (etcd_gateway.hpp): the
// mutex (the algorithm of Go's clientv3/concurrency.Mutex), the read-write lock
// (the layout and order of Go's experimental recipe.RWMutex) and a semaphore
// on the same principles (etcd has no recipe for one). For the mutex:
//
//   session   one lease per provider and TTL, granted on first use, renewed by
//             the core scheduler every TTL/3 while a lock is held (and by the
//             waiting thread while it waits)
//   key       <prefix>/<encoded name>/<lease id in lowercase hex>, value = the
//             holder label (lock_request::holder), attached to the lease
//   acquire   one txn: if the key's create revision is 0, put it and range the
//             name's directory sorted by create revision (first = holder)
//   wait      watch the deletion of the key created just before ours (no herd)
//   token     the mod revision of our key when the lock was found ours: its
//             create revision when uncontended (the create txn's, as
//             concurrency.Mutex's Header() and etcdctl lock's ETCD_LOCK_REV);
//             after a wait, the revision of a put of our key again (same
//             value and lease) once no key is ahead of it; above the previous
//             holder's, whichever tool held, since it follows that holder's
//             deletion. inspect() reads it back as the holder key's mod revision
//   loss      the lease is gone (keepalive without TTL) or our key was deleted
//
// The name's directory is compatible with Go's concurrency.NewMutex(session,
// "<prefix>/<encoded name>"), so Go programs and etcdctl can share a lock, and
// it is exactly the layout of Go's concurrency.NewElection(session, the same
// prefix) (key <pfx>/<lease hex>, value = the proposal, lowest create revision
// leads): distlock's election (the core's, on this mutex with the election id
// as holder) and `etcdctl elect` campaign for, and observe, the same leader.
//
// Read-write lock: a reader waits for the latest older write key, a writer for
// the latest older key of either kind, one key watched at a time (FIFO by
// create revision: a reader that comes after a waiting writer waits behind it).
// Semaphore: a permit is granted when its key is among the first `permits` by
// create revision; the size is kept in a key and another size is refused while
// any permit key stands. See docs/backends/etcd.md.
//
// The files: the key layout (etcd_layout), the queue engine every recipe runs
// on (etcd_queue, its wait in etcd_wait.cpp), one driver per order
// (etcd_mutex, etcd_rwlock, etcd_semaphore), the renewal of held keys
// (etcd_keepalive), inspect and break_lock (etcd_inspect).
#pragma once

#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "distlock/spi/backend.hpp"

namespace distlock::backends::etcd {

class gateway;

// A lock of the recipe of r.kind, on the gateway's sessions (etcd_lock.cpp).
std::unique_ptr<spi::lock_handle> make_lock(gateway& g, const spi::lock_request& r);
// The drivers over the queue engine (etcd_queue.hpp), one per order: one
// holder at a time, for the mutex, the election and a writer (etcd_mutex.cpp);
// a reader (etcd_rwlock.cpp); a permit of the semaphore (etcd_semaphore.cpp).
std::unique_ptr<spi::lock_handle> make_exclusive(gateway& g, const spi::lock_request& r);
std::unique_ptr<spi::lock_handle> make_read_lock(gateway& g, const spi::lock_request& r);
std::unique_ptr<spi::lock_handle> make_semaphore(gateway& g, const spi::lock_request& r);

// One keepalive per lease, then one txn that checks every held key exists with
// its create revision (a key deleted by an operator = the lock is lost).
// `handles` are make_lock()'s (etcd_keepalive.cpp).
void keepalive_batch(gateway& g, std::span<spi::lock_handle* const> handles, std::span<spi::keepalive_result> results);

// The mutex of `name` as the server shows it (spi::backend::inspect): one
// range of its directory (the first key by create revision, and the count),
// then the holder lease's time to live when the holder's key has a lease
// (etcd_inspect.cpp, as break_lock).
lock_info inspect(gateway& g, std::string_view name);
// spi::backend::inspect_read_write / inspect_semaphore (etcd_inspect.cpp).
read_write_info inspect_read_write(gateway& g, std::string_view name);
semaphore_info inspect_semaphore(gateway& g, std::string_view name);

// Deletes the key of the name's holder (the first by create revision), if any,
// and every key of the name's read-write lock and semaphore.
void break_lock(gateway& g, std::string_view name);

}  // namespace distlock::backends::etcd
