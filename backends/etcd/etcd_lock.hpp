// The etcd v3 lock recipe (the algorithm of Go's clientv3/concurrency.Mutex)
// over etcd's JSON gateway (etcd_gateway.hpp):
//
//   session   one lease per provider and TTL, granted on first use, renewed by
//             the core scheduler every TTL/3 while a lock is held (and by the
//             waiting thread while it waits)
//   key       <prefix>/<encoded name>/<lease id in lowercase hex>, value = a
//             random token of the acquisition, attached to the lease
//   acquire   one txn: if the key's create revision is 0, put it and range the
//             name's directory sorted by create revision (first = holder)
//   wait      watch the deletion of the key created just before ours (no herd)
//   token     our key's create revision (cluster-wide, strictly increasing)
//   loss      the lease is gone (keepalive without TTL) or our key was deleted
//
// The name's directory is compatible with Go's concurrency.NewMutex(session,
// "<prefix>/<encoded name>"), so Go programs and etcdctl can share a lock.
#pragma once

#include <memory>
#include <span>
#include <string_view>

#include "distlock/spi/backend.hpp"

namespace distlock::backends::etcd {

class gateway;

// A lock of the recipe, on the gateway's sessions.
std::unique_ptr<spi::lock_handle> make_lock(gateway& g, const spi::lock_request& r);

// One keepalive per lease, then one txn that checks every held key exists with
// its create revision (a key deleted by an operator = the lock is lost).
// `handles` are make_lock()'s.
void keepalive_batch(gateway& g, std::span<spi::lock_handle* const> handles, std::span<spi::keepalive_result> results);

// Deletes the key of the name's holder (the first by create revision), if any.
void break_lock(gateway& g, std::string_view name);

}  // namespace distlock::backends::etcd
