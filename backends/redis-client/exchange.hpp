// The Redis client layer (redis_client.hpp): one command to several servers at
// once (Redlock).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "pool.hpp"

namespace distlock::backends::redis_client {

// One command to each pool at once; the replies are awaited together until the
// endpoints' command timeout. result[i] is the reply of pools[i], or its error.
struct exchange_result {
    reply_ptr reply;                // null when the node failed
    std::string error;              // why it failed (connect refused, timeout, ...)
    errc code = errc::unavailable;  // for a failure: access_denied when the node refused our credentials
    bool maybe_sent = false;
};
std::vector<exchange_result> exchange_all(const std::vector<pool*>& pools,
                                          const std::vector<std::vector<std::string_view>>& commands);

}  // namespace distlock::backends::redis_client
