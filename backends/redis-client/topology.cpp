// The Redis client layer (topology.hpp): what every topology shares: a pool
// per node, the pause between tries, and the default grouping and vouching.
#include <algorithm>
#include <thread>

#include "topology.hpp"

namespace distlock::backends::redis_client {

void topology::pause(int hop, deadline until) {
    auto d = std::chrono::milliseconds(std::min(200, 10 << std::min(hop, 5)));
    auto left = until - clock::now();
    if (left <= clock::duration::zero()) return;
    std::this_thread::sleep_for(std::min<clock::duration>(d, left));
}

void topology::suspect(const endpoint& where) noexcept {
    try {
        failed(pool_at(where.host, where.port));
    } catch (...) {}  // no memory for a pool: the next failure looks again
}

pool& topology::pool_at(const std::string& host, std::uint16_t port) {
    std::string label = host + ":" + std::to_string(port);
    std::lock_guard lk(nodes_mutex_);
    auto it = nodes_.find(label);
    if (it == nodes_.end()) {
        endpoint ep = base_;
        ep.host = host;
        ep.port = port;
        it = nodes_.emplace(std::move(label), std::make_unique<pool>(std::move(ep), pool_size_)).first;
    }
    return *it->second;
}

void topology::vouch(const std::string& host, std::uint16_t port, pool& from) {
    throw_error(
        errc::access_denied, base_.backend_name,
        from.where().label() + " sent a command elsewhere (MOVED/ASK " +
            (plausible_host(host) ? host + ":" + std::to_string(port) : std::string("to no valid address")) +
            "): only a cluster redirects, and the data nodes' credentials go to the deployment's own nodes only");
}

std::vector<topology::node_items> topology::by_node(const std::vector<std::string_view>& keys) {
    if (keys.empty()) return {};
    std::vector<std::size_t> all(keys.size());
    for (std::size_t i = 0; i < all.size(); ++i) all[i] = i;
    return {node_items{&pool_for(keys[0]), {std::move(all)}}};
}

}  // namespace distlock::backends::redis_client
