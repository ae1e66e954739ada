// A fake HTTP/1.1 server for the hostile-server tests of the HTTP layer and of
// the backends on it (consul://, etcd://), on distlock::test::scripted_server:
// each request (request line, headers, Content-Length body) is recorded and
// handed to `answer`, which returns the reply to send (the connection is kept
// for the next request), or writes whatever it likes on the socket itself and
// returns nullopt (the connection is then shut down: the client sees its end):
// an endless body, a line that never ends, a byte a second.
#pragma once

#include <sys/socket.h>

#include <cstdlib>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "distlock/spi/backend.hpp"
#include "tcp_proxy.hpp"

namespace distlock::test {

struct fake_request {
    std::string method, target, body;
    std::map<std::string, std::string> headers;  // names lowercased; the last of a name
    std::vector<std::string> header_lines;       // as received
};

struct fake_reply {
    fake_reply(int s = 200, std::string b = {}, std::vector<std::string> h = {})
        : status(s), body(std::move(b)), headers(std::move(h)) {}
    int status;
    std::string body;
    std::vector<std::string> headers;  // "Name: value"
};

class fake_http_server {
public:
    using handler = std::function<std::optional<fake_reply>(const fake_request&, int fd)>;

    explicit fake_http_server(handler answer) : answer_(std::move(answer)), server_([this](int fd) { serve(fd); }) {}

    // "127.0.0.1:<port>"
    std::string address() const { return server_.address(); }
    // The requests received so far, in order.
    std::vector<fake_request> requests() const {
        std::lock_guard lk(mutex_);
        return requests_;
    }

    // A reply's bytes, with Content-Length.
    static std::string format(const fake_reply& r) {
        std::string out =
            "HTTP/1.1 " + std::to_string(r.status) + " X\r\nContent-Length: " + std::to_string(r.body.size()) + "\r\n";
        for (const auto& h : r.headers) out += h + "\r\n";
        return out + "\r\n" + r.body;
    }

private:
    static std::optional<std::string> line(int fd) {
        auto l = scripted_server::read_line(fd);
        if (l && !l->empty() && l->back() == '\r') l->pop_back();
        return l;
    }

    void serve(int fd) {
        for (;;) {
            auto first = line(fd);
            if (!first || first->empty()) return;
            fake_request rq;
            const auto sp1 = first->find(' '), sp2 = first->rfind(' ');
            if (sp1 == std::string::npos || sp2 == sp1) return;
            rq.method = first->substr(0, sp1);
            rq.target = first->substr(sp1 + 1, sp2 - sp1 - 1);
            for (;;) {
                auto h = line(fd);
                if (!h) return;
                if (h->empty()) break;
                rq.header_lines.push_back(*h);
                auto colon = h->find(':');
                if (colon == std::string::npos) continue;
                std::string name = h->substr(0, colon);
                for (char& c : name) c = spi::ascii_lower(c);
                auto value = h->substr(colon + 1);
                while (!value.empty() && value.front() == ' ') value.erase(0, 1);
                rq.headers[name] = value;
            }
            if (auto it = rq.headers.find("content-length"); it != rq.headers.end()) {
                std::size_t left = std::stoul(it->second);
                char buf[65536];
                while (left > 0) {
                    auto n = ::recv(fd, buf, std::min(left, sizeof buf), 0);
                    if (n <= 0) return;
                    rq.body.append(buf, static_cast<std::size_t>(n));
                    left -= static_cast<std::size_t>(n);
                }
            }
            {
                std::lock_guard lk(mutex_);
                requests_.push_back(rq);
            }
            auto reply = answer_(rq, fd);
            if (!reply) {
                ::shutdown(fd, SHUT_RDWR);
                return;
            }
            if (!scripted_server::send_all(fd, format(*reply))) return;
        }
    }

    handler answer_;
    mutable std::mutex mutex_;
    std::vector<fake_request> requests_;
    scripted_server server_;  // last: its threads stop before the fields above go
};

// For its lifetime, every proxy variable libcurl reads (http_proxy,
// https_proxy, HTTPS_PROXY, all_proxy, ALL_PROXY) names `proxy_url`, and
// no_proxy/NO_PROXY are unset; afterwards the environment is as it was. Make
// it before the clients under test and let it go after they are gone (setenv
// races with a concurrent getenv in another thread).
class proxy_environment {
public:
    explicit proxy_environment(const std::string& proxy_url) {
        for (const char* name :
             {"http_proxy", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY", "no_proxy", "NO_PROXY"}) {
            const char* old = std::getenv(name);
            saved_.emplace_back(name, old == nullptr ? std::nullopt : std::optional<std::string>(old));
            if (std::string_view(name) == "no_proxy" || std::string_view(name) == "NO_PROXY") ::unsetenv(name);
            else ::setenv(name, proxy_url.c_str(), 1);
        }
    }
    ~proxy_environment() {
        for (const auto& [name, value] : saved_) {
            if (value) ::setenv(name, value->c_str(), 1);
            else ::unsetenv(name);
        }
    }
    proxy_environment(const proxy_environment&) = delete;
    proxy_environment& operator=(const proxy_environment&) = delete;

private:
    std::vector<std::pair<const char*, std::optional<std::string>>> saved_;
};

}  // namespace distlock::test
