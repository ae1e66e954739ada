// The HTTP/JSON layer shared by the consul and etcd backends (internal: never
// included from include/). libcurl does the HTTP, nlohmann-json the JSON; this
// layer adds what both backends need on top:
//   - client: synchronous requests on a pool of easy handles (each keeps its
//     connection alive between requests), failover across several endpoints,
//     per-request timeouts, TLS options, fixed and replaceable auth headers,
//     and streamed responses delivered line by line (etcd watches);
//   - loop: asynchronous transfers on one background thread (curl multi), for
//     requests that run while the caller does something else (Consul's monitor
//     blocking queries, etcd watches of held keys) and for concurrent batches;
//   - monitor: one transfer after another on a loop for as long as a lock is
//     held (what both backends' handles watch their held key with);
//   - options_from_url(): the URL parameters both backends accept (tls, tls_ca,
//     tls_cert, tls_key, tls_insecure, timeout, connect_timeout).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "distlock/spi/url.hpp"

// Compiled once into libdistlock (distlock_add_layer(http ...)) and used by the
// etcd and consul backends.
namespace distlock::backends::http {

struct tls_options {
    bool enabled = false;  // https:// instead of http://
    std::string ca_file;   // "" = the system's CA bundle
    std::string cert_file; // client certificate (PEM) for mutual TLS; "" = none
    std::string key_file;  // its private key (PEM); "" = in cert_file
    bool verify = true;    // false = accept any server certificate (tests only)
};

struct options {
    std::string backend = "http";                      // name used in errors
    std::vector<std::string> endpoints;                 // base URLs: "http://127.0.0.1:2379"
    std::chrono::milliseconds connect_timeout{2000};    // TCP + TLS handshake bound
    std::chrono::milliseconds request_timeout{5000};    // whole-request bound when a request gives none
    tls_options tls;
    std::vector<std::string> headers;                   // sent on every request ("X-Consul-Token: ...")
};

// Reads the shared parameters from the URL and builds one endpoint per host
// (missing ports = default_port).
options options_from_url(spi::url& u, std::string backend, std::uint16_t default_port);

struct request {
    const char* method = "GET";
    std::string target;                     // path and query, starting with '/'
    std::string body;                       // sent when non-empty or when method is PUT/POST
    std::chrono::milliseconds timeout{0};   // 0 = options::request_timeout; whole transfer
    std::string content_type = "application/json";
};

struct response {
    long status = 0;
    std::string body;
    std::vector<std::pair<std::string, std::string>> headers;  // names lowercased
    std::string endpoint;                                       // base URL that answered

    // Value of the first header `name` (lowercase), "" when absent.
    std::string header(std::string_view name) const;
};

// How a transfer ended when no complete response was the outcome.
enum class outcome {
    completed,   // a full HTTP response was received
    stopped,     // the line callback asked to stop
    timed_out,   // the request's timeout passed (for streams: the normal end of a wait)
    failed,      // transport error (connection refused, reset, TLS failure, ...)
};

struct transfer_result {
    outcome how = outcome::failed;
    int curl_code = 0;        // CURLcode
    std::string error;        // curl's message, for failed
    response resp;            // status and headers (and body unless streamed)
};

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
    void* take_handle();
    void give_back(void* easy) noexcept;
    transfer_result perform(const request& r, const std::function<bool(std::string_view)>* on_line);

    options options_;
    mutable std::mutex mutex_;  // guards pool_, dynamic_headers_
    std::vector<void*> pool_;
    std::map<std::string, std::string> dynamic_headers_;
    std::atomic<std::size_t> current_{0};
    void* share_ = nullptr;     // CURLSH: DNS cache and TLS sessions shared by the handles
    std::mutex share_locks_[8];
    friend struct share_access;
};

// Asynchronous transfers on one background thread. Callbacks run on that
// thread: keep them short and never call cancel() of another transfer from
// them while holding a lock that cancel()'s caller may hold.
class loop {
public:
    using id = std::uint64_t;
    using line_fn = std::function<bool(std::string_view)>;  // streamed: each body line; false = stop
    using done_fn = std::function<void(transfer_result)>;

    explicit loop(client& c);
    ~loop();
    loop(const loop&) = delete;
    loop& operator=(const loop&) = delete;

    // Starts `r` on the current endpoint, not before `delay` has passed. With
    // `on_line`, the body is delivered line by line and not kept; `on_done` gets
    // the end (completed, stopped, timed_out or failed).
    id start(request r, line_fn on_line, done_fn on_done,
             std::chrono::milliseconds delay = std::chrono::milliseconds{0});

    // Stops a transfer. When it returns, no callback of `which` runs or will run
    // (it waits for one under way, except when called from the loop thread).
    // Unknown or finished ids are ignored.
    void cancel(id which);

    // Runs the requests concurrently and returns their results in order.
    std::vector<transfer_result> run_all(const std::vector<request>& requests);

private:
    struct transfer;
    void run();
    void finish(transfer& t, transfer_result res);

    client& client_;
    void* multi_ = nullptr;  // CURLM*
    std::thread thread_;
    std::thread::id thread_id_;
    std::mutex mutex_;
    std::condition_variable cv_;
    bool stop_ = false;
    id next_id_ = 1;
    std::map<id, std::unique_ptr<transfer>> pending_;   // waiting to be added (delay)
    std::map<id, std::unique_ptr<transfer>> active_;    // added to the multi handle
    std::vector<id> cancels_;                           // requested, not yet processed
    id running_callback_ = 0;                           // id whose callback runs now
};

// Watches a held lock on a loop: one transfer at a time, each started again from
// the previous one's on_done (etcd: a watch of the key; Consul: a blocking query
// on it) until the lock is released or the monitor sees it lost. Thread-safe.
// Its mutex also guards the state the owner keeps between transfers (the
// revision or session to compare with): lock() it to read or change that state,
// and to start().
class monitor {
public:
    using guard = std::unique_lock<std::mutex>;

    // `on_line` (empty = whole responses) and `on_done` serve every transfer and
    // run on the loop thread; on_done calls restart() or end().
    monitor(loop& l, loop::line_fn on_line, loop::done_fn on_done);
    ~monitor() { stop(); }  // declare it after the fields its callbacks use
    monitor(const monitor&) = delete;
    monitor& operator=(const monitor&) = delete;

    [[nodiscard]] guard lock() { return guard(mutex_); }

    // Starts monitoring with the transfer `r`; `held` is lock(), under which the
    // owner has set its state for the transfer.
    void start(const guard& held, request r);

    // Between start() and end() or stop().
    bool running(const guard& held) const noexcept;

    // From on_done: the next transfer, unless the monitor has been stopped or
    // ended meanwhile.
    void restart(request r, std::chrono::milliseconds delay);

    // From on_done, when its transfer showed the lock lost: ends the monitoring.
    // True when this call ended it, and so the caller reports the loss (once,
    // after unlocking); false when it had been stopped or ended already.
    [[nodiscard]] bool end(const guard& held) noexcept;
    [[nodiscard]] bool end() noexcept { return end(lock()); }

    // Ends the monitoring (the lock is released or its handle destroyed) and
    // cancels the transfer: when it returns, no callback runs or will run,
    // including one that called end() and is still reporting the loss, except
    // when called from that callback itself on the loop thread (see
    // loop::cancel). Never call it holding lock().
    void stop() noexcept;

private:
    loop& loop_;
    loop::line_fn on_line_;
    loop::done_fn on_done_;
    std::mutex mutex_;  // guards the fields below (and the owner's state)
    bool running_ = false;
    loop::id current_ = 0;  // the transfer under way (after end(), the one that ended it), 0 = none
};

// ---- small shared helpers ---------------------------------------------------

std::string base64_encode(std::string_view bytes);
// Throws invalid_argument_error-free: returns nullopt on malformed input.
std::optional<std::string> base64_decode(std::string_view text);

// Lock name -> key segment: [A-Za-z0-9._-] kept, every other byte as %XX
// (uppercase hex). Injective, so names never collide and never contain '/'.
std::string encode_name(std::string_view name);

// Percent-encodes a key for a URL path, keeping '/' (curl_easy_escape per segment).
std::string escape_path(std::string_view key);

// Throws unavailable_error (or access_denied_error for TLS/certificate
// problems) describing a failed transfer.
[[noreturn]] void throw_transport(const std::string& backend, const std::string& what, const transfer_result& r);

}  // namespace distlock::backends::http
