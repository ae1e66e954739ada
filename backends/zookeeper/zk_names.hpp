// zk:// internals shared by the backend and its tests: how lock names become
// ZooKeeper paths, how lock nodes are named and ordered (Apache Curator's
// InterProcessMutex layout), and the client-side counters the herd test reads.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace distlock::backends::zookeeper {

// A lock name (arbitrary bytes) as one valid path segment: bytes 0x21..0x7E are
// kept except '/' and '%'; every other byte (NUL, controls, space, '/', '%',
// bytes >= 0x80) becomes %XX (uppercase hex). A segment "." or ".." has its dots
// encoded. The mapping is injective, and a plain name ("orders-42") is itself,
// so a Curator user's lock path "<base>/orders-42" is the same lock.
std::string encode_segment(std::string_view name);

// Checks a base path from the URL ("/a/b"): absolute, no empty, "." or ".."
// segments, no trailing '/', no control bytes. Returns "" when valid, else why.
std::string base_path_problem(std::string_view base);

// Curator's lock node prefix for one attempt: "_c_<uuid>-lock-" (the server
// appends a 10-digit sequence). The protected-mode id is "_c_<uuid>-".
std::string node_prefix(std::string_view uuid);
std::string protected_id(std::string_view uuid);

// Sort key of a child of a lock path, as Curator's StandardLockInternalsDriver
// computes it: the text after the last "lock-"; kazoo's "__lock__" and
// "__rlock__" nodes (which have no "lock-") by the text after those markers, so
// that their sequence orders them too; anything else by its whole name.
std::string_view sort_key(std::string_view child);

// Children sorted by sort_key (stable, ties by name).
void sort_children(std::vector<std::string>& children);

// Process-wide counters of the zk:// backend (every provider of the process), for
// tests and benchmarks: they show that a release wakes one waiter (no herd).
struct counters {
    std::uint64_t sessions_opened = 0;       // zhandles created
    std::uint64_t lock_nodes_created = 0;    // successful creates of lock nodes
    std::uint64_t children_reads = 0;        // getChildren requests on lock paths
    std::uint64_t predecessor_watches = 0;   // getData-with-watch requests on a predecessor
    std::uint64_t predecessor_wakeups = 0;   // watch events on a predecessor that a waiter was waiting for
    std::uint64_t node_events = 0;           // all node watch events delivered (including own-node ones)
    std::uint64_t protected_recoveries = 0;  // connection losses during create resolved by protected mode
    std::uint64_t disconnections = 0;        // connected sessions that lost their connection
};
counters read_counters() noexcept;

}  // namespace distlock::backends::zookeeper
