// zk:// the orderings that drive the queue engine (Curator's
// LockInternalsDrivers, zk_queue.hpp): the node name of each queue recipe and
// how its queue sorts (zk_names.hpp).
//  - mutex (InterProcessMutex): "_c_<uuid>-lock-<seq>"; the first node holds.
//  - read-write lock (InterProcessReadWriteLock): "_c_<uuid>-__READ__<seq>" and
//    "_c_<uuid>-__WRIT__<seq>" under the same path (one sequence for both); a
//    writer holds when first, a reader when no write node comes before it. A
//    mutex node of the same name counts as a writer for readers.
//  - election (LeaderLatch): "_c_<uuid>-latch-<seq>", sorted by the text after
//    "latch-"; the first leads.
#include "zk_names.hpp"
#include "zk_queue.hpp"

namespace distlock::backends::zookeeper {

const queue_driver kMutexDriver{kMutexName, sort_children, false};
const queue_driver kReadDriver{kReadName, sort_children, true};
const queue_driver kWriteDriver{kWriteName, sort_children, false};
const queue_driver kLatchDriver{kLatchName, sort_latch_children, false};

}  // namespace distlock::backends::zookeeper
