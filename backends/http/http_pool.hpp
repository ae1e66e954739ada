// The synchronous client: requests on a pool of curl easy handles (each keeps
// its connection alive between requests), failover across several endpoints,
// per-request timeouts, TLS options, fixed and replaceable auth headers, and
// streamed responses delivered line by line (etcd watches).
#pragma once

#include <atomic>
#include <cstddef>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "http_options.hpp"
#include "http_transfer.hpp"

namespace distlock::backends::http {

class client {
public:
    explicit client(options o);
    ~client();
    client(const client&) = delete;
    client& operator=(const client&) = delete;

    // One request and its whole response. Tries the endpoints in turn (starting
    // with the last one that answered) when one cannot be reached. Throws
    // unavailable_error when none answered, access_denied_error on TLS
    // verification failures. Any HTTP status is returned, not thrown.
    response send(const request& r);

    // A streamed request: `on_line` gets each line of the body as it arrives
    // (without the newline) and returns false to stop the transfer. Fails over
    // like send() only while nothing has been received. Throws like send() when
    // no endpoint can be reached; otherwise returns how the stream ended.
    transfer_result stream_lines(const request& r, const std::function<bool(std::string_view)>& on_line);

    // Sets (or with an empty value removes) a header sent on every request from
    // now on, e.g. etcd's "Authorization" token after a re-authentication.
    void set_header(const std::string& name, const std::string& value);

    const options& opts() const noexcept { return options_; }
    // The endpoint requests go to first.
    std::string current_endpoint() const;
    // Marks the current endpoint as failing so that the next request starts
    // with the next one (used when an endpoint answers but cannot serve, e.g. an
    // etcd member without a leader).
    void rotate_endpoint(const std::string& failed_endpoint);

    // Internal: applies method, URL, body, timeouts, TLS and headers to an easy
    // handle (also used by loop).
    void prepare(void* easy, const request& r, const std::string& endpoint, void* header_list_out) const;
    void* build_headers(const request& r) const;  // a curl_slist*

private:
    // An easy handle and the multi handle it runs on (see http_easy's new_multi).
    struct pooled {
        void* easy = nullptr;
        void* multi = nullptr;
    };
    pooled take_handle();
    void give_back(pooled h) noexcept;
    transfer_result perform(const request& r, const std::function<bool(std::string_view)>* on_line);

    options options_;
    // tls.server_name given: per endpoint, the curl_slist of CURLOPT_CONNECT_TO
    // that sends a request for https://<server_name>:<port> to the endpoint.
    std::vector<void*> connect_to_;
    mutable std::mutex mutex_;  // guards pool_, dynamic_headers_
    std::vector<pooled> pool_;
    std::map<std::string, std::string> dynamic_headers_;
    std::atomic<std::size_t> current_{0};
    void* share_ = nullptr;  // CURLSH: DNS cache and TLS sessions shared by the handles
    std::mutex share_locks_[8];
    friend struct share_access;
};

}  // namespace distlock::backends::http
