// The Redis client layer (redis_client.hpp): a Lua script (EVALSHA, EVAL on
// NOSCRIPT).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "connection.hpp"

namespace distlock::backends::redis_client {

// A Lua script: EVALSHA with a fallback to EVAL when the server does not know it
// (after a restart or SCRIPT FLUSH).
class script {
public:
    // `text` publishes with redis.call('publish', ...); a sharded endpoint
    // (Redis Cluster) runs the same text with 'spublish' instead.
    explicit script(std::string text);
    const std::string& text(bool sharded = false) const noexcept { return sharded ? sharded_text_ : text_; }
    const std::string& sha1(bool sharded = false) const noexcept { return sharded ? sharded_sha1_ : sha1_; }
    reply_ptr run(connection& c, const std::vector<std::string_view>& keys,
                  const std::vector<std::string_view>& args) const;
    // EVAL only (after a NOSCRIPT reply), which also caches the script again.
    reply_ptr eval(connection& c, const std::vector<std::string_view>& keys,
                   const std::vector<std::string_view>& args) const;
    // The EVAL command line (for pipelines and exchange_all()).
    std::vector<std::string_view> eval_args(const std::vector<std::string_view>& keys,
                                            const std::vector<std::string_view>& args, std::string& numkeys,
                                            bool sharded = false) const;

private:
    std::string text_, sha1_, sharded_text_, sharded_sha1_;
};

}  // namespace distlock::backends::redis_client
