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
#pragma once

#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "distlock/spi/backend.hpp"

namespace distlock::backends::etcd {

class gateway;

// Where the keys of one primitive of a name go. `enc` is the name encoded
// ([A-Za-z0-9._-] kept, other bytes as %XX, "." and ".." escaped whole, so
// never ':' nor '/'):
//   mutex      <prefix>/<enc>/<lease hex>
//   rw lock    <prefix>/<enc>:rw/read/<ns>, <prefix>/<enc>:rw/write/<ns>
//   semaphore  <prefix>/<enc>:sem/permit/<ns>, size in <prefix>/<enc>:sem/size
// and <prefix>/<enc>:rw-grant, put (on the reader's lease) when a reader that
// waited is granted: its revision is that grant's token.
// An encoded name has no ':', so no name's mutex directory is a prefix of
// another primitive's keys, and no two primitives share a key.
struct names {
    std::string own;       // the directory our key is created in
    std::string blockers;  // the range whose keys older than ours keep us waiting
    std::string size_key;  // the semaphore's size key (permits only)
    bool unique_keys;      // <own><unique ns> (false: <own><lease hex>, the mutex)
    bool marked;           // a grant that waited is marked by a write (its token): mutexes, reads, permits
    std::string mark_key;  // the key that write puts (empty: our own key)
};
names names_of(const std::string& prefix, std::string_view name, spi::lock_kind kind);

// A lock of the recipe, on the gateway's sessions.
std::unique_ptr<spi::lock_handle> make_lock(gateway& g, const spi::lock_request& r);

// One keepalive per lease, then one txn that checks every held key exists with
// its create revision (a key deleted by an operator = the lock is lost).
// `handles` are make_lock()'s.
void keepalive_batch(gateway& g, std::span<spi::lock_handle* const> handles, std::span<spi::keepalive_result> results);

// The mutex of `name` as the server shows it (spi::backend::inspect): one
// range of its directory (the first key by create revision, and the count),
// then the holder lease's time to live when the holder's key has a lease.
lock_info inspect(gateway& g, std::string_view name);

// Deletes the key of the name's holder (the first by create revision), if any.
void break_lock(gateway& g, std::string_view name);

}  // namespace distlock::backends::etcd
