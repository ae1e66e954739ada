// What the pool (http_pool.cpp) and the loop (http_multi.cpp) both do with a
// curl easy handle: curl's global initialisation, the sink that collects a
// response's body (whole, or line by line for streams) and headers, the
// failures worth trying on the next endpoint, and a transfer's result from its
// CURLcode. Internal to the layer: the only header here that includes curl.
#pragma once

#include <curl/curl.h>

#include <algorithm>
#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

#include "http_options.hpp"
#include "http_transfer.hpp"

namespace distlock::backends::http::detail {

void global_init();

// Collects the body (whole, or line by line for streams) and the headers, each
// bounded by `limit` (options::max_reply_bytes): past it the transfer is cut
// off (`overflow`), so a server cannot make it grow without bound.
struct sink {
    response* resp = nullptr;
    const std::function<bool(std::string_view)>* on_line = nullptr;
    const bool* cancelled = nullptr;  // loop transfers: stop delivering once set
    std::string partial;              // an incomplete last line
    bool stopped = false;
    bool overflow = false;  // the body, a line or the headers passed `limit`
    std::size_t limit = default_max_reply_bytes;
    std::size_t received = 0;
    std::size_t header_bytes = 0;  // of the current response's headers

    // Delivers the complete lines in `data`; false when the callback said stop
    // or the reply passed the limit.
    bool feed(const char* data, std::size_t size) {
        received += size;
        if (on_line == nullptr) {
            if (size > limit - std::min(limit, resp->body.size())) return over();
            resp->body.append(data, size);
            return true;
        }
        partial.append(data, size);
        std::size_t start = 0;
        for (;;) {
            auto nl = partial.find('\n', start);
            if (nl == std::string::npos) break;
            std::string_view line(partial.data() + start, nl - start);
            if (line.size() > limit) return over();
            if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
            start = nl + 1;
            if (line.empty()) continue;
            if (cancelled != nullptr && *cancelled) return false;
            if (!(*on_line)(line)) {
                stopped = true;
                return false;
            }
        }
        partial.erase(0, start);
        return partial.size() <= limit || over();  // a line that never ends
    }

    bool over() {
        overflow = true;
        return false;
    }
};

// CURLOPT_OPENSOCKETFUNCTION: the socket curl asks for, close-on-exec from the
// start (a command the program runs must not inherit its connections).
curl_socket_t open_socket(void* user, curlsocktype purpose, curl_sockaddr* address);

// curl_multi_init(), its wake-up descriptors made close-on-exec: libcurl before
// 8.8 opens them (a socketpair, or a pipe) without the flag and offers no way to
// reach them (curl issue 13618). The descriptors that appear during the call
// and lack the flag, local sockets and pipes only, get it. Every multi handle
// of the layer comes from here: the loop's, and one per pooled easy handle in
// place of curl_easy_perform()'s hidden one. nullptr when curl has no memory.
CURLM* new_multi();

// The transfer of `easy` on `multi` (a handle of new_multi()) to its end, as
// curl_easy_perform() runs it on its own hidden multi handle.
CURLcode perform_on(CURLM* multi, CURL* easy);

std::size_t write_cb(char* data, std::size_t size, std::size_t n, void* user);
std::size_t header_cb(char* data, std::size_t size, std::size_t n, void* user);

bool retryable(CURLcode rc);

transfer_result result_of(CURLcode rc, const sink& s, const char* errbuf, response resp);

}  // namespace distlock::backends::http::detail
