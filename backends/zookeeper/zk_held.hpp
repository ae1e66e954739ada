// zk:// internals: the grants held on a provider's sessions, as the session
// layer (zk_session.hpp) watches them for loss. The session manager owns the
// registry and guards it with its mutex; a recipe's handle registers its grant
// under its id once its node holds, and unregisters it on release (or when it
// goes away). Never included outside backends/zookeeper/.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>

#include "distlock/spi/backend.hpp"

namespace distlock::backends::zookeeper {

// A handle's key in the registry: 1, 2, ... per provider (0: none).
using grant_id = std::uint64_t;

// A recipe's grant as the session sees it: the node held on one session, which
// is lost when the node is deleted, the session expires or stays disconnected
// too long.
struct held_grant {
    std::string node;  // full path of the held node (empty: nothing held)
    std::uint64_t gen = 0;
    std::uint64_t czxid = 0;
    bool lost = false;
    spi::loss_sink sink;  // the core's, for this grant
};

// The held grants by id, with their nodes' paths (a watch event names a path).
// Not thread-safe: session_manager::mu_ guards it.
class held_registry {
public:
    grant_id next_id() noexcept { return ++last_id_; }

    // The grant of `id` from now on (replacing the one it had).
    void add(grant_id id, held_grant g);
    // Forgets the grant of `id` and returns it (an empty one when none).
    held_grant remove(grant_id id);
    held_grant* find(grant_id id);
    // The grant whose node is `path`, or nullptr.
    held_grant* find_node(const std::string& path);

    // Calls f(grant) for every grant, in the order of their nodes' paths.
    template <class F>
    void for_each(F&& f) {
        for (const auto& [path, id] : by_node_) f(by_id_.at(id));
    }

private:
    grant_id last_id_ = 0;
    std::unordered_map<grant_id, held_grant> by_id_;
    std::map<std::string, grant_id> by_node_;  // lock node path -> holder
};

}  // namespace distlock::backends::zookeeper
