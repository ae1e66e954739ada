// The Redis client layer (topology.hpp): WAIT for replicas (min_replicas), and
// the words for too few of them.
#include "topology.hpp"

namespace distlock::backends::redis_client {

std::string replica_shortfall(long long acked, int n, std::chrono::milliseconds timeout) {
    return "acknowledged by " + std::to_string(acked) + " of " + std::to_string(n) + " replicas within " +
           std::to_string(timeout.count()) + " ms (min_replicas)";
}

long long wait_replicas(connection& c, int n, std::chrono::milliseconds timeout) {
    const std::string count = std::to_string(n), ms = std::to_string(timeout.count());
    auto r = c.command({"WAIT", count, ms});
    if (is_error(r.get())) throw_client_error(r.get(), c.where().backend_name, "WAIT");
    return as_integer(r.get());
}

}  // namespace distlock::backends::redis_client
