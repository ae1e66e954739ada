// Small encoders both backends need: base64 (etcd's JSON gateway carries keys
// and values as base64), lock names as key segments, and URL paths.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace distlock::backends::http {

std::string base64_encode(std::string_view bytes);
// Throws invalid_argument_error-free: returns nullopt on malformed input.
std::optional<std::string> base64_decode(std::string_view text);

// Lock name -> key segment: [A-Za-z0-9._-] kept, every other byte as %XX
// (uppercase hex). Injective, so names never collide and never contain '/'.
std::string encode_name(std::string_view name);

// Percent-encodes a key for a URL path, keeping '/' (curl_easy_escape per segment).
std::string escape_path(std::string_view key);

}  // namespace distlock::backends::http
