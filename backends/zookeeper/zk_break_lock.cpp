// zk:// backend::break_lock: a separate, short-lived session deletes the
// holders of every primitive of a name, as an operator (or a failure) would.
#include <vector>

#include "zk_lock.hpp"
#include "zk_names.hpp"
#include "zk_queue.hpp"

namespace distlock::backends::zookeeper {

void break_lock(session_manager& zk, std::string_view name) {
    with_separate_session(zk.config(), zk.timeout(), "break_lock", [&](zhandle_t* zh) {
        // Every primitive of the name: the holders of its mutex or read-write
        // lock, and every lease of its semaphore.
        const auto dir = dir_of(zk.config(), name);
        auto kids = zk_children(zh, dir, zk.config().max_children);
        if (kids->rc == ZNONODE) return;
        if (kids->rc != ZOK) throw_op_error(*kids, "break_lock: getChildren " + dir + " failed");
        sort_children(kids->children);
        std::vector<std::string> doomed;
        for (const auto& k : holders_of(kids->children)) doomed.push_back(dir + "/" + k);
        // The leader of its election (the first latch node).
        auto latches = kids->children;
        sort_latch_children(latches);
        if (!latches.empty() && is_latch_node(latches.front())) doomed.push_back(dir + "/" + latches.front());
        const auto leases = dir + "/" + std::string(kSemaphoreLeases);
        auto lease_kids = zk_children(zh, leases, zk.config().max_children);
        if (lease_kids->rc == kListingTooLarge) throw_op_error(*lease_kids, "break_lock: getChildren " + leases);
        if (lease_kids->rc == ZOK)
            for (const auto& k : lease_kids->children) doomed.push_back(leases + "/" + k);
        for (const auto& path : doomed) {
            auto o = zk_delete(zh, path);
            if (o->rc != ZOK && o->rc != ZNONODE) throw_client_error(o->rc, kBackend, "break_lock: delete failed");
        }
    });
}

}  // namespace distlock::backends::zookeeper
