// The Redis client layer (redis_client.hpp): a Lua script, run by EVALSHA with
// a fallback to EVAL, in its plain and sharded (SPUBLISH) forms.
#include <openssl/evp.h>

#include "script.hpp"

namespace distlock::backends::redis_client {

namespace {
std::string sha1_hex(const std::string& text) {
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    EVP_Digest(text.data(), text.size(), md, &len, EVP_sha1(), nullptr);
    return spi::to_hex(std::string_view(reinterpret_cast<const char*>(md), len));
}
}  // namespace

script::script(std::string text) : text_(std::move(text)), sharded_text_(text_) {
    constexpr std::string_view plain = "redis.call('publish',", sharded = "redis.call('spublish',";
    for (auto at = sharded_text_.find(plain); at != std::string::npos;
         at = sharded_text_.find(plain, at + sharded.size()))
        sharded_text_.replace(at, plain.size(), sharded);
    sha1_ = sha1_hex(text_);
    sharded_sha1_ = sha1_hex(sharded_text_);
}

std::vector<std::string_view> script::eval_args(const std::vector<std::string_view>& keys,
                                                const std::vector<std::string_view>& args, std::string& numkeys,
                                                bool sharded) const {
    numkeys = std::to_string(keys.size());
    std::vector<std::string_view> cmd{"EVAL", text(sharded), numkeys};
    cmd.insert(cmd.end(), keys.begin(), keys.end());
    cmd.insert(cmd.end(), args.begin(), args.end());
    return cmd;
}

reply_ptr script::run(connection& c, const std::vector<std::string_view>& keys,
                      const std::vector<std::string_view>& args) const {
    std::string numkeys;
    const bool sharded = c.where().sharded;
    auto cmd = eval_args(keys, args, numkeys, sharded);
    if (c.asking()) return c.command(cmd);  // one command: EVAL
    cmd[0] = "EVALSHA";
    cmd[1] = sha1(sharded);
    auto r = c.command(cmd);
    if (!error_starts_with(r.get(), "NOSCRIPT")) return r;
    cmd[0] = "EVAL";
    cmd[1] = text(sharded);
    return c.command(cmd);
}

reply_ptr script::eval(connection& c, const std::vector<std::string_view>& keys,
                       const std::vector<std::string_view>& args) const {
    std::string numkeys;
    return c.command(eval_args(keys, args, numkeys, c.where().sharded));
}

}  // namespace distlock::backends::redis_client
