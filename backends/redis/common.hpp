// Internal to backends/redis/: what redis:// and redlock:// share (URL parameters, scripts).
#pragma once

#include <memory>

#include "client.hpp"

namespace distlock::backends::redis {

// Fills an endpoint from the URL's user info, database path and the connect_timeout=
// and timeout= parameters (taken from `u`). Throws invalid_argument_error.
endpoint endpoint_from_url(spi::url& u, const std::string& backend_name, std::chrono::milliseconds connect_default,
                           std::chrono::milliseconds command_default);

// The Redlock backend (redlock_backend.cpp).
std::shared_ptr<spi::backend> make_redlock(spi::url& u);

// Owner-checked renewal of several plain keys in one script (redis:// plain
// strategy and each redlock:// node). KEYS[i] lock keys; ARGV[2i-1] token,
// ARGV[2i] lease ms. Reply: 1 (extended) or 0 (not ours any more) per key.
inline const char* const owner_renew_lua = R"lua(
local out = {}
for i = 1, #KEYS do
  if redis.call('get', KEYS[i]) == ARGV[2 * i - 1] then
    redis.call('pexpire', KEYS[i], ARGV[2 * i])
    out[i] = 1
  else
    out[i] = 0
  end
end
return out
)lua";

}  // namespace distlock::backends::redis
