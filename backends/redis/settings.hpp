// redis:// internals: what a provider of redis://, rediss://, redis-sentinel://
// or redis-cluster:// is made with: the settings its URL gives (read by
// redis_url.cpp), and the backend made of them (redis_backend.cpp). Never
// included outside backends/redis/.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "context.hpp"  // replica_confirmation
#include "redis-client/topology.hpp"

namespace distlock::backends::redis {

using redis_client::endpoint;

enum class strategy_name { plain, reentrant };
enum class deployment { single, sentinel, cluster };

struct settings {
    endpoint ep;  // the data nodes' credentials, database and timeouts (and host: redis://)
    deployment where = deployment::single;
    redis_client::sentinel_settings sentinel;  // redis-sentinel://
    std::vector<endpoint> seeds;               // redis-cluster://
    std::chrono::milliseconds failover_wait{10000};
    replica_confirmation confirm;
    strategy_name strat = strategy_name::plain;
    std::string prefix = "distlock:";
    std::size_t pool_size = 8;
};

// The backend of a provider (redis_backend.cpp): it connects to the servers of
// `s` now (PING each master) and throws a typed error when it cannot.
std::shared_ptr<spi::backend> make_backend(settings s);

}  // namespace distlock::backends::redis
