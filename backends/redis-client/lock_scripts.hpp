// The Redis client layer (redis_client.hpp): what the renewals of redis:// (both
// strategies, read-write locks and semaphores) and of every redlock:// node
// share: the form of a renewal script for a whole batch of grants, the
// owner-checked one for plain keys and hash fields, and the gathering of a batch
// of keys from the handles.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "distlock/spi/backend.hpp"

namespace distlock::backends::redis_client {

// The Lua test that KEYS[i] is still ours, ARGV[2i-1] being our token: the value
// of a plain key (redis:// plain, redlock://), or a field of Redisson's hash.
inline constexpr std::string_view plain_key_owned = "redis.call('get', KEYS[i]) == ARGV[2 * i - 1]";
inline constexpr std::string_view hash_field_owned = "redis.call('hexists', KEYS[i], ARGV[2 * i - 1]) == 1";

// A renewal script over a batch of grants, in the reply form every renewal of
// both schemes reads (topology::run_items): for i = 1 .. `count` (a Lua expression),
// `locals` (Lua lines, may be empty) run, then, when `held` (a Lua test) is
// true, `renew` (Lua lines) and out[i] = 1, else out[i] = 0. Reply: out, one 1
// (renewed) or 0 (not ours any more) per grant.
inline std::string batch_renew_lua(std::string_view count, std::string_view locals, std::string_view held,
                                   std::string_view renew) {
    return "local out = {}\n"
           "for i = 1, " +
           std::string(count) + " do\n" + std::string(locals) + "  if " + std::string(held) + " then\n" +
           std::string(renew) +
           "    out[i] = 1\n"
           "  else\n"
           "    out[i] = 0\n"
           "  end\n"
           "end\n"
           "return out\n";
}

// Owner-checked renewal of several keys in one script, with `owned` (one of the
// above) as the test. KEYS[i] lock keys; ARGV[2i-1] token, ARGV[2i] lease ms.
// Reply: 1 (extended) or 0 (not ours any more) per key.
inline std::string owner_renew_lua(std::string_view owned) {
    return batch_renew_lua("#KEYS", "", owned, "    redis.call('pexpire', KEYS[i], ARGV[2 * i])\n");
}

// The keys and arguments of one renewal script: for each held handle its key,
// its token and its lease in ms; `index[k]` is the results slot of keys[k].
struct renewal_batch {
    std::vector<std::size_t> index;
    std::vector<std::string_view> keys, args;
};

// Gathers the batch from handles of type Handle (with key(), lease_ms() and the
// token given by `token_of`); a handle that holds nothing gets `lost` in
// `results` at once.
template <class Handle, class TokenOf>
renewal_batch gather_renewals(std::span<spi::lock_handle* const> handles, std::span<spi::keepalive_result> results,
                              TokenOf token_of) {
    renewal_batch b;
    for (std::size_t i = 0; i < handles.size(); ++i) {
        auto* h = static_cast<Handle*>(handles[i]);
        const std::string& token = token_of(*h);
        if (token.empty()) {
            results[i] = spi::keepalive_result::lost("not held");
            continue;
        }
        b.index.push_back(i);
        b.keys.push_back(h->key());
        b.args.push_back(token);
        b.args.push_back(h->lease_ms());
    }
    return b;
}

}  // namespace distlock::backends::redis_client
