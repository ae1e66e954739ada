// zk:// internals: the registry of held grants (zk_held.hpp), keyed by the
// handles' ids and indexed by their nodes' paths.
#include "zk_held.hpp"

#include <utility>

namespace distlock::backends::zookeeper {

void held_registry::add(grant_id id, held_grant g) {
    remove(id);
    by_node_[g.node] = id;
    by_id_[id] = std::move(g);
}

held_grant held_registry::remove(grant_id id) {
    auto it = by_id_.find(id);
    if (it == by_id_.end()) return {};
    auto g = std::move(it->second);
    by_id_.erase(it);
    if (auto n = by_node_.find(g.node); n != by_node_.end() && n->second == id) by_node_.erase(n);
    return g;
}

held_grant* held_registry::find(grant_id id) {
    auto it = by_id_.find(id);
    return it == by_id_.end() ? nullptr : &it->second;
}

held_grant* held_registry::find_node(const std::string& path) {
    auto it = by_node_.find(path);
    return it == by_node_.end() ? nullptr : find(it->second);
}

}  // namespace distlock::backends::zookeeper
