#include "http_easy.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <cstdlib>
#include <mutex>
#include <set>
#include <utility>

#include "distlock/spi/backend.hpp"

namespace distlock::backends::http::detail {

void global_init() {
    static std::once_flag once;
    std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

curl_socket_t open_socket(void*, curlsocktype, curl_sockaddr* address) {
    return ::socket(address->family, address->socktype | SOCK_CLOEXEC, address->protocol);
}

namespace {

// The open descriptors, without the one this listing itself uses (closed on
// return, its number free for the next descriptor opened).
std::set<int> open_descriptors() {
    std::set<int> out;
    if (DIR* d = ::opendir("/proc/self/fd")) {
        while (const dirent* e = ::readdir(d))
            if (e->d_name[0] != '.') out.insert(std::atoi(e->d_name));
        out.erase(::dirfd(d));
        ::closedir(d);
    }
    return out;
}

// A descriptor curl's wake-up may use: a local socket or a pipe.
bool wakeup_kind(int fd) {
    struct stat st {};
    if (::fstat(fd, &st) != 0) return false;
    if (S_ISFIFO(st.st_mode)) return true;
    if (!S_ISSOCK(st.st_mode)) return false;
    int domain = 0;
    socklen_t len = sizeof domain;
    return ::getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) == 0 && domain == AF_UNIX;
}

}  // namespace

CURLM* new_multi() {
    // One at a time: another thread's multi handle, made between the two
    // listings, would have its descriptors examined here while curl makes them.
    static std::mutex one_at_a_time;
    std::lock_guard lk(one_at_a_time);
    const auto before = open_descriptors();
    CURLM* multi = curl_multi_init();
    if (multi == nullptr) return nullptr;
    for (int fd : open_descriptors()) {
        if (before.count(fd) != 0) continue;
        const int flags = ::fcntl(fd, F_GETFD);
        if (flags >= 0 && (flags & FD_CLOEXEC) == 0 && wakeup_kind(fd)) ::fcntl(fd, F_SETFD, flags | FD_CLOEXEC);
    }
    return multi;
}

CURLcode perform_on(CURLM* multi, CURL* easy) {
    if (curl_multi_add_handle(multi, easy) != CURLM_OK) return CURLE_FAILED_INIT;
    CURLcode rc = CURLE_OK;
    for (int running = 1; running > 0;) {
        if (curl_multi_perform(multi, &running) != CURLM_OK) {
            rc = CURLE_OUT_OF_MEMORY;
            break;
        }
        if (running > 0 && curl_multi_poll(multi, nullptr, 0, 1000, nullptr) != CURLM_OK) {
            rc = CURLE_OUT_OF_MEMORY;
            break;
        }
    }
    int left = 0;
    while (CURLMsg* msg = curl_multi_info_read(multi, &left))
        if (msg->msg == CURLMSG_DONE && msg->easy_handle == easy) rc = msg->data.result;
    curl_multi_remove_handle(multi, easy);
    return rc;
}

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
        s->header_bytes = 0;
        return bytes;
    }
    s->header_bytes += bytes;
    if (s->header_bytes > s->limit) {
        s->over();
        return 0;  // curl ends the transfer
    }
    auto colon = line.find(':');
    if (colon == std::string_view::npos) return bytes;
    std::string name(line.substr(0, colon));
    for (char& c : name) c = spi::ascii_lower(c);
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
        case CURLE_OPERATION_TIMEDOUT: return true;
        default: return false;
    }
}

transfer_result result_of(CURLcode rc, const sink& s, const char* errbuf, response resp) {
    transfer_result out;
    out.curl_code = static_cast<int>(rc);
    out.resp = std::move(resp);
    if (rc == CURLE_OK) {
        out.how = outcome::completed;
    } else if (s.overflow) {
        out.how = outcome::failed;
        out.error = "the reply passed " + std::to_string(s.limit) +
                    " bytes (a body, a stream's line or the headers) and was cut off: a broken or hostile server?";
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

}  // namespace distlock::backends::http::detail
