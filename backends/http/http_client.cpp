#include "http_client.hpp"

#include <curl/curl.h>

#include <algorithm>
#include <cctype>
#include <utility>

#include "distlock/error.hpp"

namespace distlock::backends::http {
namespace {

void global_init() {
    static std::once_flag once;
    std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

// Collects the body (whole, or line by line for streams) and the headers.
struct sink {
    response* resp = nullptr;
    const std::function<bool(std::string_view)>* on_line = nullptr;
    const bool* cancelled = nullptr;  // loop transfers: stop delivering once set
    std::string partial;              // an incomplete last line
    bool stopped = false;
    std::size_t received = 0;

    // Delivers the complete lines in `data`; false when the callback said stop.
    bool feed(const char* data, std::size_t size) {
        received += size;
        if (on_line == nullptr) {
            resp->body.append(data, size);
            return true;
        }
        partial.append(data, size);
        std::size_t start = 0;
        for (;;) {
            auto nl = partial.find('\n', start);
            if (nl == std::string::npos) break;
            std::string_view line(partial.data() + start, nl - start);
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
        return true;
    }
};

std::size_t write_cb(char* data, std::size_t size, std::size_t n, void* user) {
    auto* s = static_cast<sink*>(user);
    std::size_t bytes = size * n;
    if (s->cancelled != nullptr && *s->cancelled) return 0;
    try {
        return s->feed(data, bytes) ? bytes : 0;
    } catch (...) {
        s->stopped = true;
        return 0;
    }
}

std::size_t header_cb(char* data, std::size_t size, std::size_t n, void* user) {
    auto* s = static_cast<sink*>(user);
    std::size_t bytes = size * n;
    std::string_view line(data, bytes);
    while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.remove_suffix(1);
    if (line.rfind("HTTP/", 0) == 0) {
        s->resp->headers.clear();  // a new response (after a redirect or 100-continue)
        return bytes;
    }
    auto colon = line.find(':');
    if (colon == std::string_view::npos) return bytes;
    std::string name(line.substr(0, colon));
    for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    auto value = line.substr(colon + 1);
    while (!value.empty() && value.front() == ' ') value.remove_prefix(1);
    s->resp->headers.emplace_back(std::move(name), std::string(value));
    return bytes;
}

bool retryable(CURLcode rc) {
    switch (rc) {
        case CURLE_COULDNT_CONNECT:
        case CURLE_COULDNT_RESOLVE_HOST:
        case CURLE_GOT_NOTHING:
        case CURLE_SEND_ERROR:
        case CURLE_RECV_ERROR:
        case CURLE_OPERATION_TIMEDOUT:
            return true;
        default:
            return false;
    }
}

bool tls_problem(int rc) {
    switch (static_cast<CURLcode>(rc)) {
        case CURLE_PEER_FAILED_VERIFICATION:
        case CURLE_SSL_CERTPROBLEM:
        case CURLE_SSL_CACERT_BADFILE:
        case CURLE_SSL_CIPHER:
        case CURLE_SSL_ISSUER_ERROR:
        case CURLE_SSL_CRL_BADFILE:
            return true;
        default:
            return false;
    }
}

transfer_result result_of(CURLcode rc, const sink& s, const char* errbuf, response resp) {
    transfer_result out;
    out.curl_code = static_cast<int>(rc);
    out.resp = std::move(resp);
    if (rc == CURLE_OK) {
        out.how = outcome::completed;
    } else if (s.stopped) {
        out.how = outcome::stopped;
    } else if (rc == CURLE_OPERATION_TIMEDOUT && (s.received > 0 || out.resp.status != 0)) {
        out.how = outcome::timed_out;  // the stream was open: its wait simply ended
    } else {
        out.how = outcome::failed;
        out.error = errbuf[0] != '\0' ? std::string(errbuf) : std::string(curl_easy_strerror(rc));
    }
    return out;
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

std::string response::header(std::string_view name) const {
    for (const auto& [k, v] : headers)
        if (k == name) return v;
    return {};
}

client::client(options o) : options_(std::move(o)) {
    global_init();
    if (options_.endpoints.empty()) throw_error(errc::invalid_argument, options_.backend, "no endpoint given");
    CURLSH* sh = curl_share_init();
    if (sh != nullptr) {
        curl_share_setopt(sh, CURLSHOPT_LOCKFUNC, &share_access::lock);
        curl_share_setopt(sh, CURLSHOPT_UNLOCKFUNC, &share_access::unlock);
        curl_share_setopt(sh, CURLSHOPT_USERDATA, this);
        curl_share_setopt(sh, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS);
        curl_share_setopt(sh, CURLSHOPT_SHARE, CURL_LOCK_DATA_SSL_SESSION);
    }
    share_ = sh;
}

client::~client() {
    for (void* e : pool_) curl_easy_cleanup(static_cast<CURL*>(e));
    if (share_ != nullptr) curl_share_cleanup(static_cast<CURLSH*>(share_));
}

std::string client::current_endpoint() const {
    return options_.endpoints[current_.load() % options_.endpoints.size()];
}

void client::rotate_endpoint(const std::string& failed_endpoint) {
    const auto n = options_.endpoints.size();
    auto cur = current_.load();
    if (n > 1 && options_.endpoints[cur % n] == failed_endpoint) current_.compare_exchange_strong(cur, (cur + 1) % n);
}

void client::set_header(const std::string& name, const std::string& value) {
    std::lock_guard lk(mutex_);
    if (value.empty()) dynamic_headers_.erase(name);
    else dynamic_headers_[name] = value;
}

void* client::take_handle() {
    {
        std::lock_guard lk(mutex_);
        if (!pool_.empty()) {
            void* e = pool_.back();
            pool_.pop_back();
            return e;
        }
    }
    CURL* e = curl_easy_init();
    if (e == nullptr) throw std::bad_alloc();
    return e;
}

void client::give_back(void* easy) noexcept {
    curl_easy_reset(static_cast<CURL*>(easy));  // keeps the connection cache
    std::lock_guard lk(mutex_);
    if (pool_.size() < 32) pool_.push_back(easy);
    else curl_easy_cleanup(static_cast<CURL*>(easy));
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
    curl_easy_setopt(easy, CURLOPT_URL, url.c_str());  // copied by curl
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
        char errbuf[CURL_ERROR_SIZE] = {};
        CURL* easy = static_cast<CURL*>(take_handle());
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
            rc = curl_easy_perform(easy);
            curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &resp.status);
        } catch (...) {
            curl_slist_free_all(headers);
            give_back(easy);
            throw;
        }
        curl_easy_setopt(easy, CURLOPT_ERRORBUFFER, nullptr);
        curl_slist_free_all(headers);
        give_back(easy);
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
        throw_transport(options_.backend, std::string(r.method) + " " + r.target, res);
    return std::move(res.resp);
}

transfer_result client::stream_lines(const request& r, const std::function<bool(std::string_view)>& on_line) {
    auto res = perform(r, &on_line);
    if (res.how == outcome::failed && res.resp.status == 0)
        throw_transport(options_.backend, std::string(r.method) + " " + r.target, res);
    return res;
}

void throw_transport(const std::string& backend, const std::string& what, const transfer_result& r) {
    std::string msg = what + " failed";
    if (r.how == outcome::timed_out || r.curl_code == CURLE_OPERATION_TIMEDOUT) msg += ": timed out";
    if (!r.error.empty()) msg += ": " + r.error;
    // Bytes that are not HTTP (HTTP/0.9 is refused): a server of another kind at
    // this address, which no retry fixes.
    const bool not_http = r.curl_code == CURLE_UNSUPPORTED_PROTOCOL || r.curl_code == CURLE_WEIRD_SERVER_REPLY;
    if (!r.resp.endpoint.empty())
        msg += not_http ? " (is " + r.resp.endpoint + " the " + backend + " HTTP API?)" : " (" + r.resp.endpoint + ")";
    const errc code = not_http ? errc::invalid_argument : tls_problem(r.curl_code) ? errc::access_denied : errc::unavailable;
    throw_error(code, backend, msg, r.curl_code, curl_easy_strerror(static_cast<CURLcode>(r.curl_code)));
}

// ---- loop -----------------------------------------------------------------------

struct loop::transfer {
    id which = 0;
    request req;
    line_fn on_line;
    done_fn on_done;
    CURL* easy = nullptr;
    curl_slist* headers = nullptr;
    response resp;
    sink s;
    char errbuf[CURL_ERROR_SIZE] = {};
    std::chrono::steady_clock::time_point due;
    bool cancelled = false;

    ~transfer() {
        if (easy != nullptr) curl_easy_cleanup(easy);
        curl_slist_free_all(headers);
    }
};

loop::loop(client& c) : client_(c) {
    global_init();
    multi_ = curl_multi_init();
    if (multi_ == nullptr) throw std::bad_alloc();
    thread_ = std::thread([this] { run(); });
    thread_id_ = thread_.get_id();
}

loop::~loop() {
    {
        std::lock_guard lk(mutex_);
        stop_ = true;
    }
    curl_multi_wakeup(static_cast<CURLM*>(multi_));
    if (thread_.joinable()) thread_.join();
    for (auto& [k, t] : active_) curl_multi_remove_handle(static_cast<CURLM*>(multi_), t->easy);
    active_.clear();
    pending_.clear();
    curl_multi_cleanup(static_cast<CURLM*>(multi_));
}

loop::id loop::start(request r, line_fn on_line, done_fn on_done, std::chrono::milliseconds delay) {
    auto t = std::make_unique<transfer>();
    t->req = std::move(r);
    t->on_line = std::move(on_line);
    t->on_done = std::move(on_done);
    t->due = std::chrono::steady_clock::now() + delay;
    id which;
    {
        std::lock_guard lk(mutex_);
        which = next_id_++;
        t->which = which;
        pending_.emplace(which, std::move(t));
    }
    curl_multi_wakeup(static_cast<CURLM*>(multi_));
    return which;
}

void loop::cancel(id which) {
    std::unique_lock lk(mutex_);
    if (std::this_thread::get_id() == thread_id_) {
        // From a callback: mark it so no callback of it runs; removed next turn.
        if (auto it = pending_.find(which); it != pending_.end()) pending_.erase(it);
        if (auto it = active_.find(which); it != active_.end()) it->second->cancelled = true;
        cancels_.push_back(which);
        return;
    }
    if (pending_.erase(which) > 0 && running_callback_ != which) return;
    if (active_.find(which) == active_.end() && running_callback_ != which) return;
    cancels_.push_back(which);
    lk.unlock();
    curl_multi_wakeup(static_cast<CURLM*>(multi_));
    lk.lock();
    cv_.wait(lk, [&] {
        return stop_ || (running_callback_ != which &&
                         std::find(cancels_.begin(), cancels_.end(), which) == cancels_.end());
    });
}

std::vector<transfer_result> loop::run_all(const std::vector<request>& requests) {
    std::vector<transfer_result> results(requests.size());
    std::mutex m;
    std::condition_variable cv;
    std::size_t left = requests.size();
    std::vector<id> ids;
    for (std::size_t i = 0; i < requests.size(); ++i) {
        ids.push_back(start(requests[i], nullptr, [&, i](transfer_result r) {
            std::lock_guard lk(m);
            results[i] = std::move(r);
            if (--left == 0) cv.notify_all();
        }));
    }
    std::unique_lock lk(m);
    cv.wait(lk, [&] { return left == 0; });
    return results;
}

void loop::finish(transfer& t, transfer_result res) {
    if (t.cancelled || !t.on_done) return;
    try {
        t.on_done(std::move(res));
    } catch (...) {
    }
}

void loop::run() {
    CURLM* multi = static_cast<CURLM*>(multi_);
    std::unique_lock lk(mutex_);
    while (!stop_) {
        // Cancellations.
        if (!cancels_.empty()) {
            for (id which : cancels_) {
                pending_.erase(which);
                if (auto it = active_.find(which); it != active_.end()) {
                    curl_multi_remove_handle(multi, it->second->easy);
                    active_.erase(it);
                }
            }
            cancels_.clear();
            cv_.notify_all();
        }
        // Start the transfers that are due.
        auto now = std::chrono::steady_clock::now();
        auto next_due = now + std::chrono::seconds(1);
        for (auto it = pending_.begin(); it != pending_.end();) {
            if (it->second->due > now) {
                next_due = std::min(next_due, it->second->due);
                ++it;
                continue;
            }
            auto t = std::move(it->second);
            it = pending_.erase(it);
            try {
                t->easy = curl_easy_init();
                if (t->easy == nullptr) throw std::bad_alloc();
                std::string endpoint = client_.current_endpoint();
                t->resp.endpoint = endpoint;
                t->headers = static_cast<curl_slist*>(client_.build_headers(t->req));
                client_.prepare(t->easy, t->req, endpoint, t->headers);
                t->s.resp = &t->resp;
                t->s.on_line = t->on_line ? &t->on_line : nullptr;
                t->s.cancelled = &t->cancelled;
                curl_easy_setopt(t->easy, CURLOPT_ERRORBUFFER, t->errbuf);
                curl_easy_setopt(t->easy, CURLOPT_WRITEFUNCTION, &write_cb);
                curl_easy_setopt(t->easy, CURLOPT_WRITEDATA, &t->s);
                curl_easy_setopt(t->easy, CURLOPT_HEADERFUNCTION, &header_cb);
                curl_easy_setopt(t->easy, CURLOPT_HEADERDATA, &t->s);
                curl_easy_setopt(t->easy, CURLOPT_PRIVATE, reinterpret_cast<void*>(static_cast<std::uintptr_t>(t->which)));
                if (curl_multi_add_handle(multi, t->easy) != CURLM_OK) throw std::runtime_error("curl_multi_add_handle failed");
                active_.emplace(t->which, std::move(t));
            } catch (const std::exception& e) {
                transfer_result res;
                res.how = outcome::failed;
                res.error = e.what();
                running_callback_ = t->which;
                lk.unlock();
                finish(*t, std::move(res));
                lk.lock();
                running_callback_ = 0;
                cv_.notify_all();
            }
        }
        lk.unlock();
        int running = 0;
        curl_multi_perform(multi, &running);
        int left = 0;
        while (CURLMsg* msg = curl_multi_info_read(multi, &left)) {
            if (msg->msg != CURLMSG_DONE) continue;
            void* priv = nullptr;
            curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, &priv);
            const id which = static_cast<id>(reinterpret_cast<std::uintptr_t>(priv));
            CURLcode rc = msg->data.result;
            lk.lock();
            auto it = active_.find(which);
            if (it == active_.end()) {
                lk.unlock();
                continue;
            }
            auto t = std::move(it->second);
            active_.erase(it);
            curl_multi_remove_handle(multi, t->easy);
            curl_easy_getinfo(t->easy, CURLINFO_RESPONSE_CODE, &t->resp.status);
            running_callback_ = which;
            lk.unlock();
            finish(*t, result_of(rc, t->s, t->errbuf, std::move(t->resp)));
            lk.lock();
            running_callback_ = 0;
            cv_.notify_all();
            lk.unlock();
        }
        auto wait_ms = std::chrono::duration_cast<std::chrono::milliseconds>(next_due - std::chrono::steady_clock::now());
        int timeout = static_cast<int>(std::clamp<long long>(wait_ms.count(), 0, 1000));
        curl_multi_poll(multi, nullptr, 0, timeout, nullptr);
        lk.lock();
    }
    cv_.notify_all();
}

// ---- monitor ----------------------------------------------------------------------

monitor::monitor(loop& l, loop::line_fn on_line, loop::done_fn on_done)
    : loop_(l), on_line_(std::move(on_line)), on_done_(std::move(on_done)) {}

void monitor::start(const guard&, request r) {
    running_ = true;
    current_ = loop_.start(std::move(r), on_line_, on_done_);
}

bool monitor::running(const guard&) const noexcept { return running_; }

void monitor::restart(request r, std::chrono::milliseconds delay) {
    std::lock_guard lk(mutex_);
    if (!running_) return;
    current_ = loop_.start(std::move(r), on_line_, on_done_, delay);
}

bool monitor::end(const guard&) noexcept {
    if (!running_) return false;
    running_ = false;
    // current_ stays: the caller reports the loss from that transfer's callback,
    // and stop() (unlock, the handle's destructor) must wait for it to finish.
    return true;
}

void monitor::stop() noexcept {
    loop::id which;
    {
        std::lock_guard lk(mutex_);
        running_ = false;
        which = std::exchange(current_, 0);
    }
    // Outside the mutex: cancel() waits for a callback under way, which takes it.
    if (which != 0) loop_.cancel(which);
}

// ---- URL parameters ------------------------------------------------------------

options options_from_url(spi::url& u, std::string backend, std::uint16_t default_port) {
    options o;
    o.backend = std::move(backend);
    o.tls.enabled = u.take_bool("tls").value_or(false);
    if (auto v = u.take("tls_ca")) o.tls.ca_file = *v;
    if (auto v = u.take("tls_cert")) o.tls.cert_file = *v;
    if (auto v = u.take("tls_key")) o.tls.key_file = *v;
    if (auto v = u.take_bool("tls_insecure")) o.tls.verify = !*v;
    if (!o.tls.enabled && (!o.tls.ca_file.empty() || !o.tls.cert_file.empty() || !o.tls.key_file.empty() || !o.tls.verify))
        throw_error(errc::invalid_argument, o.backend, "tls_ca/tls_cert/tls_key/tls_insecure need tls=true");
    if (auto v = u.take_duration("timeout")) {
        if (v->count() <= 0) throw_error(errc::invalid_argument, o.backend, "timeout must be positive");
        o.request_timeout = *v;
    }
    if (auto v = u.take_duration("connect_timeout")) {
        if (v->count() <= 0) throw_error(errc::invalid_argument, o.backend, "connect_timeout must be positive");
        o.connect_timeout = *v;
    }
    for (const auto& hp : u.hosts_or_throw(default_port)) {
        std::string host = hp.host.find(':') != std::string::npos ? "[" + hp.host + "]" : hp.host;
        o.endpoints.push_back(std::string(o.tls.enabled ? "https://" : "http://") + host + ":" + std::to_string(hp.port));
    }
    return o;
}

// ---- helpers ----------------------------------------------------------------------

std::string base64_encode(std::string_view in) {
    static constexpr char table[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    std::string out;
    out.reserve((in.size() + 2) / 3 * 4);
    std::size_t i = 0;
    for (; i + 2 < in.size(); i += 3) {
        unsigned v = (static_cast<unsigned char>(in[i]) << 16) | (static_cast<unsigned char>(in[i + 1]) << 8) |
                     static_cast<unsigned char>(in[i + 2]);
        out += table[(v >> 18) & 63];
        out += table[(v >> 12) & 63];
        out += table[(v >> 6) & 63];
        out += table[v & 63];
    }
    if (i < in.size()) {
        unsigned v = static_cast<unsigned char>(in[i]) << 16;
        if (i + 1 < in.size()) v |= static_cast<unsigned char>(in[i + 1]) << 8;
        out += table[(v >> 18) & 63];
        out += table[(v >> 12) & 63];
        out += i + 1 < in.size() ? table[(v >> 6) & 63] : '=';
        out += '=';
    }
    return out;
}

std::optional<std::string> base64_decode(std::string_view in) {
    auto value = [](char c) -> int {
        if (c >= 'A' && c <= 'Z') return c - 'A';
        if (c >= 'a' && c <= 'z') return c - 'a' + 26;
        if (c >= '0' && c <= '9') return c - '0' + 52;
        if (c == '+' || c == '-') return 62;
        if (c == '/' || c == '_') return 63;
        return -1;
    };
    while (!in.empty() && in.back() == '=') in.remove_suffix(1);
    std::string out;
    unsigned acc = 0;
    int bits = 0;
    for (char c : in) {
        int v = value(c);
        if (v < 0) return std::nullopt;
        acc = (acc << 6) | static_cast<unsigned>(v);
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out += static_cast<char>((acc >> bits) & 0xFF);
        }
    }
    return out;
}

std::string encode_name(std::string_view name) {
    static constexpr char digits[] = "0123456789ABCDEF";
    std::string out;
    out.reserve(name.size());
    for (unsigned char c : name) {
        if (std::isalnum(c) || c == '.' || c == '_' || c == '-') {
            out += static_cast<char>(c);
        } else {
            out += '%';
            out += digits[c >> 4];
            out += digits[c & 15];
        }
    }
    return out;
}

namespace {
std::string curl_escape(std::string_view s) {
    char* e = curl_easy_escape(nullptr, s.data(), static_cast<int>(s.size()));
    if (e == nullptr) throw std::bad_alloc();
    std::string out(e);
    curl_free(e);
    return out;
}
}  // namespace

std::string escape_path(std::string_view key) {
    std::string out;
    std::size_t start = 0;
    for (;;) {
        auto slash = key.find('/', start);
        out += curl_escape(key.substr(start, slash == std::string_view::npos ? std::string_view::npos : slash - start));
        if (slash == std::string_view::npos) break;
        out += '/';
        start = slash + 1;
    }
    return out;
}

}  // namespace distlock::backends::http
