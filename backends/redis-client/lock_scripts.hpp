// The Redis client layer (redis_client.hpp): the Lua script that redis://'s plain
// strategy and every redlock:// node share.
#pragma once

namespace distlock::backends::redis_client {

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

}  // namespace distlock::backends::redis_client
