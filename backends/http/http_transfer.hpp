// One HTTP transfer as the layer's users see it: the request, the response, how
// the transfer ended, and throw_client_error(): a failed transfer as a distlock
// error.
#pragma once

#include <chrono>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace distlock::backends::http {

struct request {
    const char* method = "GET";
    std::string target;                    // path and query, starting with '/'
    std::string body;                      // sent when non-empty or when method is PUT/POST
    std::chrono::milliseconds timeout{0};  // 0 = options::request_timeout; whole transfer
    std::string content_type = "application/json";
};

struct response {
    long status = 0;
    std::string body;
    std::vector<std::pair<std::string, std::string>> headers;  // names lowercased
    std::string endpoint;                                      // base URL that answered

    // Value of the first header `name` (lowercase), "" when absent.
    std::string header(std::string_view name) const;
};

// How a transfer ended when no complete response was the outcome.
enum class outcome {
    completed,  // a full HTTP response was received
    stopped,    // the line callback asked to stop
    timed_out,  // the request's timeout passed (for streams: the normal end of a wait)
    failed,     // transport error (connection refused, reset, TLS failure, ...)
};

struct transfer_result {
    outcome how = outcome::failed;
    int curl_code = 0;  // CURLcode
    std::string error;  // curl's message, for failed
    response resp;      // status and headers (and body unless streamed)
};

// Throws unavailable_error describing a failed transfer; access_denied_error
// when a TLS handshake was refused (the server's certificate by the client, or
// the client's by the server); invalid_argument_error for a TLS file of the
// URL's that cannot be used, or a server that does not speak HTTP.
[[noreturn]] void throw_client_error(const transfer_result& r, const std::string& backend, const std::string& what);

}  // namespace distlock::backends::http
