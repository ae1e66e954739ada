#include "http_pool.hpp"

#include <algorithm>
#include <new>
#include <utility>

#include "distlock/error.hpp"
#include "http_easy.hpp"

namespace distlock::backends::http {

using namespace detail;  // the easy-handle helpers of http_easy.hpp

namespace {

// An endpoint's host (an IPv6 address in brackets, as written) and port:
// "https://[::1]:2379" -> {"[::1]", "2379"}.
std::pair<std::string, std::string> host_port(const std::string& endpoint) {
    const auto start = endpoint.find("://") + 3, colon = endpoint.rfind(':');
    return {endpoint.substr(start, colon - start), endpoint.substr(colon + 1)};
}

}  // namespace

// ---- share locking ------------------------------------------------------------
struct share_access {
    static void lock(CURL*, curl_lock_data data, curl_lock_access, void* user) {
        static_cast<client*>(user)->share_locks_[static_cast<int>(data) % 8].lock();
    }
    static void unlock(CURL*, curl_lock_data data, void* user) {
        static_cast<client*>(user)->share_locks_[static_cast<int>(data) % 8].unlock();
    }
};

client::client(options o) : options_(std::move(o)) {
    global_init();
    if (options_.endpoints.empty()) throw_error(errc::invalid_argument, options_.backend, "no endpoint given");
    for (const auto& h : options_.headers) check_header(options_.backend, h);
    CURLSH* sh = curl_share_init();
    if (sh != nullptr) {
        curl_share_setopt(sh, CURLSHOPT_LOCKFUNC, &share_access::lock);
        curl_share_setopt(sh, CURLSHOPT_UNLOCKFUNC, &share_access::unlock);
        curl_share_setopt(sh, CURLSHOPT_USERDATA, this);
        curl_share_setopt(sh, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS);
        curl_share_setopt(sh, CURLSHOPT_SHARE, CURL_LOCK_DATA_SSL_SESSION);
    }
    share_ = sh;
    // curl verifies the name of the URL's host: with tls_server_name, the URL
    // names it and CURLOPT_CONNECT_TO sends the connection to the endpoint.
    // Connections are reused per (name, connect-to) pair.
    if (options_.tls.enabled && !options_.tls.server_name.empty()) {
        for (const auto& endpoint : options_.endpoints) {
            const auto [host, port] = host_port(endpoint);
            const auto entry = url_host(options_.tls.server_name) + ":" + port + ":" + host + ":" + port;
            curl_slist* list = curl_slist_append(nullptr, entry.c_str());
            if (list == nullptr) throw std::bad_alloc();
            connect_to_.push_back(list);
        }
    }
}

client::~client() {
    for (const auto& h : pool_) {
        curl_easy_cleanup(static_cast<CURL*>(h.easy));
        curl_multi_cleanup(static_cast<CURLM*>(h.multi));
    }
    if (share_ != nullptr) curl_share_cleanup(static_cast<CURLSH*>(share_));
    for (void* list : connect_to_) curl_slist_free_all(static_cast<curl_slist*>(list));
}

std::string client::current_endpoint() const { return options_.endpoints[current_.load() % options_.endpoints.size()]; }

void client::rotate_endpoint(const std::string& failed_endpoint) {
    const auto n = options_.endpoints.size();
    auto cur = current_.load();
    if (n > 1 && options_.endpoints[cur % n] == failed_endpoint) current_.compare_exchange_strong(cur, (cur + 1) % n);
}

void client::set_header(const std::string& name, const std::string& value) {
    check_header(options_.backend, name + ": " + value);
    std::lock_guard lk(mutex_);
    if (value.empty()) dynamic_headers_.erase(name);
    else dynamic_headers_[name] = value;
}

client::pooled client::take_handle() {
    {
        std::lock_guard lk(mutex_);
        if (!pool_.empty()) {
            auto h = pool_.back();
            pool_.pop_back();
            return h;
        }
    }
    CURL* e = curl_easy_init();
    CURLM* m = e == nullptr ? nullptr : new_multi();
    if (m == nullptr) {
        curl_easy_cleanup(e);
        throw std::bad_alloc();
    }
    return {e, m};
}

void client::give_back(pooled h) noexcept {
    curl_easy_reset(static_cast<CURL*>(h.easy));  // the connections stay in the multi handle's cache
    std::lock_guard lk(mutex_);
    if (pool_.size() < 32) {
        pool_.push_back(h);
        return;
    }
    curl_easy_cleanup(static_cast<CURL*>(h.easy));
    curl_multi_cleanup(static_cast<CURLM*>(h.multi));
}

void* client::build_headers(const request& r) const {
    curl_slist* list = nullptr;
    auto add = [&](const std::string& h) {
        curl_slist* next = curl_slist_append(list, h.c_str());
        if (next == nullptr) {
            curl_slist_free_all(list);
            throw std::bad_alloc();
        }
        list = next;
    };
    if (!r.content_type.empty()) add("Content-Type: " + r.content_type);
    add("Expect:");  // no 100-continue round trip
    for (const auto& h : options_.headers) add(h);
    std::lock_guard lk(mutex_);
    for (const auto& [k, v] : dynamic_headers_) add(k + ": " + v);
    return list;
}

void client::prepare(void* easy_ptr, const request& r, const std::string& endpoint, void* headers) const {
    CURL* easy = static_cast<CURL*>(easy_ptr);
    std::string url = endpoint + r.target;
    curl_easy_setopt(easy, CURLOPT_CONNECT_TO, nullptr);
    if (!connect_to_.empty()) {
        const auto at = std::find(options_.endpoints.begin(), options_.endpoints.end(), endpoint);
        if (at != options_.endpoints.end()) {
            url = "https://" + url_host(options_.tls.server_name) + ":" + host_port(endpoint).second + r.target;
            curl_easy_setopt(easy, CURLOPT_CONNECT_TO,
                             connect_to_[static_cast<std::size_t>(at - options_.endpoints.begin())]);
        }
    }
    curl_easy_setopt(easy, CURLOPT_URL, url.c_str());  // copied by curl
    // The path as built (keys escaped by http_codec): curl must not remove "." and
    // ".." segments from it, which would send the request to another key.
    curl_easy_setopt(easy, CURLOPT_PATH_AS_IS, 1L);
    // Straight to the server, never through a proxy: libcurl otherwise obeys
    // http_proxy, https_proxy and ALL_PROXY from the environment (127.0.0.1
    // included), and the proxy would read every Consul token header and etcd
    // password, and could answer in the server's place. "" = no proxy, whatever
    // the environment says (there is no proxy= parameter: see http_options.hpp).
    curl_easy_setopt(easy, CURLOPT_PROXY, "");
    // HTTP and HTTPS only (libcurl would fetch a file:// or speak any protocol it
    // was built with), and a redirect is a reply, never followed: a server must
    // not send the request, its token and body, somewhere else.
#if LIBCURL_VERSION_NUM >= 0x075500  // 7.85.0: the _STR forms; the bitmask ones are deprecated
    curl_easy_setopt(easy, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(easy, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
#else
    curl_easy_setopt(easy, CURLOPT_PROTOCOLS, static_cast<long>(CURLPROTO_HTTP | CURLPROTO_HTTPS));
    curl_easy_setopt(easy, CURLOPT_REDIR_PROTOCOLS, static_cast<long>(CURLPROTO_HTTP | CURLPROTO_HTTPS));
#endif
    curl_easy_setopt(easy, CURLOPT_FOLLOWLOCATION, 0L);
    // Connections are close-on-exec from their creation (curl's own are not).
    curl_easy_setopt(easy, CURLOPT_OPENSOCKETFUNCTION, &open_socket);
    // No SIGPIPE handling by curl (not thread-safe): on Linux curl writes with
    // MSG_NOSIGNAL, TLS included, so a peer that closed never raises SIGPIPE.
    curl_easy_setopt(easy, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(easy, CURLOPT_HTTP_VERSION, static_cast<long>(CURL_HTTP_VERSION_1_1));
    curl_easy_setopt(easy, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(options_.connect_timeout.count()));
    auto timeout = r.timeout.count() > 0 ? r.timeout : options_.request_timeout;
    curl_easy_setopt(easy, CURLOPT_TIMEOUT_MS, static_cast<long>(std::max<long long>(1, timeout.count())));
    curl_easy_setopt(easy, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(easy, CURLOPT_TCP_KEEPIDLE, 10L);
    curl_easy_setopt(easy, CURLOPT_TCP_KEEPINTVL, 5L);
    if (share_ != nullptr) curl_easy_setopt(easy, CURLOPT_SHARE, static_cast<CURLSH*>(share_));
    std::string_view method(r.method);
    if (method == "GET") {
        curl_easy_setopt(easy, CURLOPT_HTTPGET, 1L);
    } else {
        if (method == "POST") curl_easy_setopt(easy, CURLOPT_POST, 1L);
        else curl_easy_setopt(easy, CURLOPT_CUSTOMREQUEST, r.method);
        if (method != "DELETE" || !r.body.empty()) {
            curl_easy_setopt(easy, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(r.body.size()));
            curl_easy_setopt(easy, CURLOPT_POSTFIELDS, r.body.data());
        }
    }
    const auto& tls = options_.tls;
    if (tls.enabled) {
        if (!tls.ca_file.empty()) curl_easy_setopt(easy, CURLOPT_CAINFO, tls.ca_file.c_str());
        if (!tls.cert_file.empty()) curl_easy_setopt(easy, CURLOPT_SSLCERT, tls.cert_file.c_str());
        if (!tls.key_file.empty()) curl_easy_setopt(easy, CURLOPT_SSLKEY, tls.key_file.c_str());
        curl_easy_setopt(easy, CURLOPT_SSL_VERIFYPEER, tls.verify ? 1L : 0L);
        curl_easy_setopt(easy, CURLOPT_SSL_VERIFYHOST, tls.verify ? 2L : 0L);
    }
    curl_easy_setopt(easy, CURLOPT_HTTPHEADER, static_cast<curl_slist*>(headers));
}

transfer_result client::perform(const request& r, const std::function<bool(std::string_view)>* on_line) {
    const auto n = options_.endpoints.size();
    const auto first = current_.load() % n;
    transfer_result last;
    for (std::size_t i = 0; i < n; ++i) {
        const auto idx = (first + i) % n;
        const std::string& endpoint = options_.endpoints[idx];
        response resp;
        resp.endpoint = endpoint;
        sink s;
        s.resp = &resp;
        s.on_line = on_line;
        s.limit = options_.max_reply_bytes;
        char errbuf[CURL_ERROR_SIZE] = {};
        const pooled handle = take_handle();
        CURL* easy = static_cast<CURL*>(handle.easy);
        curl_slist* headers = nullptr;
        CURLcode rc;
        try {
            headers = static_cast<curl_slist*>(build_headers(r));
            prepare(easy, r, endpoint, headers);
            curl_easy_setopt(easy, CURLOPT_ERRORBUFFER, errbuf);
            curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, &write_cb);
            curl_easy_setopt(easy, CURLOPT_WRITEDATA, &s);
            curl_easy_setopt(easy, CURLOPT_HEADERFUNCTION, &header_cb);
            curl_easy_setopt(easy, CURLOPT_HEADERDATA, &s);
            rc = perform_on(static_cast<CURLM*>(handle.multi), easy);
            curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &resp.status);
        } catch (...) {
            curl_slist_free_all(headers);
            give_back(handle);
            throw;
        }
        curl_easy_setopt(easy, CURLOPT_ERRORBUFFER, nullptr);
        curl_slist_free_all(headers);
        give_back(handle);
        last = result_of(rc, s, errbuf, std::move(resp));
        if (last.how != outcome::failed) {
            if (idx != first) current_.store(idx);
            return last;
        }
        // Move on only when nothing of this request reached the application.
        if (!retryable(rc) || s.received > 0) return last;
        current_.store((idx + 1) % n);
    }
    return last;
}

response client::send(const request& r) {
    auto res = perform(r, nullptr);
    if (res.how != outcome::completed)
        throw_client_error(res, options_.backend, std::string(r.method) + " " + r.target);
    return std::move(res.resp);
}

transfer_result client::stream_lines(const request& r, const std::function<bool(std::string_view)>& on_line) {
    auto res = perform(r, &on_line);
    if (res.how == outcome::failed && res.resp.status == 0)
        throw_client_error(res, options_.backend, std::string(r.method) + " " + r.target);
    return res;
}

}  // namespace distlock::backends::http
