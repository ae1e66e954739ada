// A server's reply as JSON, bounded in depth: what both backends parse every
// reply with (etcd's bodies and watch lines, Consul's bodies and the KV
// documents anyone with write access on the prefix can write). Header-only:
// the backends bring nlohmann-json, the layer itself does not link it.
//
// Why: nlohmann's parser and destructor are iterative, but dump(), copies and
// operator== recurse once per level, and a reply within the 16 MiB cap can
// nest 8 million levels: one dump() of `{"error":[[[[...]]]]}` exhausted the
// stack (SIGSEGV). A reply deeper than max_json_depth is not JSON the API
// sends: it is refused before nlohmann builds anything of it.
#pragma once

#include <nlohmann/json.hpp>

#include <string_view>

#include "http_codec.hpp"

namespace distlock::backends::http {

// Deeper than any reply of the APIs (etcd's txn replies nest 6 levels, Consul's
// listings 3), far below what could hurt a stack.
inline constexpr int max_json_depth = 64;

// `text` as JSON; discarded (is_discarded()) when it is not JSON or nests
// arrays and objects deeper than max_json_depth. Never throws.
inline nlohmann::json parse_reply(std::string_view text) {
    if (!json_depth_within(text, max_json_depth)) return nlohmann::json(nlohmann::json::value_t::discarded);
    return nlohmann::json::parse(text, nullptr, false);
}

}  // namespace distlock::backends::http
