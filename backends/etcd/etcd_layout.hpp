// Where the keys of a name go on etcd, one layout per lock kind, and the
// bodies of the ranges the recipes read over a name's keys (etcd_queue.cpp,
// etcd_inspect.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "distlock/spi/backend.hpp"
#include "etcd_gateway.hpp"

namespace distlock::backends::etcd {

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

// A key name of our own for the kinds whose keys are not one per lease (as
// etcd's recipes name them): the wall clock in nanoseconds, in decimal, never
// the same twice in this process. A clash with another process is caught by
// the create-if-absent txn, which then takes another name.
std::string unique_suffix();

// Every key that starts with `p`: a range's "key" and "range_end".
json prefix_range(const std::string& p);
// A txn compare: the create revision of `key` is `revision` (0: no such key).
json created_at(const std::string& key, std::int64_t revision);
// How many keys start with `p` (the range's count alone).
json count_of(const std::string& p);
// The first `limit` keys that start with `p`, by create revision (the oldest
// first). A range's count is of every key in it, whatever its limit.
json oldest_first(const std::string& p, std::size_t limit);

}  // namespace distlock::backends::etcd
