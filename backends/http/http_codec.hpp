// Small encoders both backends need: base64 (etcd's JSON gateway carries keys
// and values as base64), lock names as key segments, and URL paths; and the
// checks of what comes in: prefixes, UTF-8, the nesting depth of a reply.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace distlock::backends::http {

std::string base64_encode(std::string_view bytes);
// Throws invalid_argument_error-free: returns nullopt on malformed input.
std::optional<std::string> base64_decode(std::string_view text);

// Lock name -> key segment: [A-Za-z0-9._-] kept, every other byte as %XX
// (uppercase hex), and the names "." and ".." wholly as %2E: those are the only
// segments that URL normalisation removes (RFC 3986 5.2.4, curl, Go's
// path.Clean in Consul's ServeMux), and a name is always exactly one segment
// (its '/' is %2F), so no name can leave the prefix. Injective (every '%' of
// the result starts an escape), byte-exact and independent of the locale.
// Dots elsewhere are kept: "job.nightly" keeps the key it always had.
std::string encode_name(std::string_view name);

// Percent-encodes a key for a URL path, keeping '/' (curl_easy_escape per segment).
std::string escape_path(std::string_view key);

// Throws invalid_argument_error (for `backend`) unless every '/'-separated
// segment of `prefix` (a key prefix from the URL's path, already
// percent-decoded) is non-empty, is not "." or "..", and holds no control
// byte: such a prefix would be normalised away by a client library or the
// server, so its keys would not stay under it. The message names the rule,
// not the bytes.
void check_prefix(const std::string& backend, std::string_view prefix);

// Whether `bytes` is well-formed UTF-8 (no overlong forms, surrogates or code
// points past U+10FFFF): what a JSON string, and so etcd's API, can carry.
bool valid_utf8(std::string_view bytes);

// Whether no array or object in the JSON text `text` nests deeper than `limit`
// (brackets inside strings do not count). Exact for valid JSON; invalid JSON
// may pass, for the parser to refuse. One pass, no recursion, no allocation:
// http_json.hpp's parse_reply() checks every reply with it before parsing.
bool json_depth_within(std::string_view text, int limit) noexcept;

}  // namespace distlock::backends::http
