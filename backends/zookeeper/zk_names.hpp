// zk:// internals shared by the backend and its tests: how lock names become
// ZooKeeper paths, how lock nodes are named and ordered (Apache Curator's
// InterProcessMutex layout), and the client-side counters the herd test reads.
#pragma once

#include <cstdint>
#include <optional>
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

// The node names of Curator's recipes (curator-recipes 5.x):
//   InterProcessMutex           <lock path>/_c_<uuid>-lock-<seq>
//   InterProcessReadWriteLock   <lock path>/_c_<uuid>-__READ__<seq>, _c_<uuid>-__WRIT__<seq>
//   InterProcessSemaphoreV2     <path>/locks/_c_<uuid>-lock-<seq> (its internal mutex)
//                               <path>/leases/_c_<uuid>-lease-<seq>
//   LeaderLatch                 <latch path>/_c_<uuid>-latch-<seq> (data: the participant id)
inline constexpr std::string_view kMutexName = "lock-";
inline constexpr std::string_view kLatchName = "latch-";
inline constexpr std::string_view kReadName = "__READ__";
inline constexpr std::string_view kWriteName = "__WRIT__";  // sic: as long as "__READ__"
inline constexpr std::string_view kLeaseName = "lease-";
inline constexpr std::string_view kSemaphoreLocks = "locks";
inline constexpr std::string_view kSemaphoreLeases = "leases";

// Curator's node prefix for one attempt: "_c_<uuid>-" + the recipe's name
// ("lock-" by default; the server appends a 10-digit sequence). The
// protected-mode id is "_c_<uuid>-".
std::string node_prefix(std::string_view uuid, std::string_view lock_name = kMutexName);
std::string protected_id(std::string_view uuid);

// Sort key of a child of a lock path, as Curator's StandardLockInternalsDriver
// computes it: the text after the last "lock-" (or, for the read-write lock's
// nodes, after the last "__READ__" / "__WRIT__", as its SortingLockInternalsDriver
// does); kazoo's "__lock__" and
// "__rlock__" nodes (which have no "lock-") by the text after those markers, so
// that their sequence orders them too; anything else by its whole name.
std::string_view sort_key(std::string_view child);

// Children sorted by sort_key (stable, ties by name).
void sort_children(std::vector<std::string>& children);

// A LeaderLatch's order (its LockInternalsSorter with "latch-"): the text
// after the last "latch-", else the whole name (so the other recipes' nodes of
// the same path sort after every latch node), ties by name. The leader is the
// first latch node.
std::string_view latch_sort_key(std::string_view child);
void sort_latch_children(std::vector<std::string>& children);
bool is_latch_node(std::string_view child);
// A node of a mutex queue (Curator's "_c_<uuid>-lock-<seq>", kazoo's
// "__lock__<seq>"), the nodes provider::inspect looks at.
bool is_mutex_node(std::string_view child);

// Whether a child is a read node (Curator's "__READ__", kazoo's "__rlock__"),
// and whether it is any node of a lock queue (read, write, mutex: Curator's
// "lock-", kazoo's "__lock__"). Children that are neither (the semaphore's
// "locks" and "leases" of the same name) are no part of the queue.
bool is_read_node(std::string_view child);
bool is_queue_node(std::string_view child);

// Where a node stands in the sorted children of its lock path (Curator's
// rules): `held`, or the one child it watches, or `missing` (not listed).
//  - writer (and mutex): held when first; else it watches the child just before it.
//  - reader: held when no write (or mutex) node comes before it; else it watches
//    the nearest such node before it (Curator watches the first one: see
//    docs/backends/zookeeper.md). Read nodes never wait for each other.
// A reader after a waiting writer waits: grants follow the sequence (FIFO).
struct turn {
    enum class state { held, wait, missing } what = state::missing;
    std::string watch;  // for state::wait: the child to watch
};
turn turn_of(const std::vector<std::string>& sorted, std::string_view mine, bool reader);

// The children of a lock path that hold it now (sorted children given): the
// first queue node; when it is a reader, every reader up to the first writer.
std::vector<std::string> holders_of(const std::vector<std::string>& sorted);

// The semaphore's size as distlock keeps it in the data of <path>/leases
// ("distlock permits=<n>"; Curator leaves that node's data empty and never
// reads it), and back (nullopt for anything else, Curator's empty data too).
std::string permits_data(std::uint32_t permits);
std::optional<std::uint32_t> permits_in(std::string_view data);

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
    std::uint64_t inspect_requests = 0;      // requests sent by backend::inspect (each one round trip)
};
counters read_counters() noexcept;

}  // namespace distlock::backends::zookeeper
