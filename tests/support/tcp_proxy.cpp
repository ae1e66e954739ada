#include "tcp_proxy.hpp"

#include "support.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace distlock::test {

namespace {

sockaddr_in ipv4(const std::string& host, int port) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<std::uint16_t>(port));
    if (::inet_pton(AF_INET, host.c_str(), &a.sin_addr) != 1)
        throw std::invalid_argument("tcp_proxy: not an IPv4 address: " + host);
    return a;
}

// Writes all of `n` bytes (loopback; the sockets are blocking).
bool write_all(int fd, const char* p, std::size_t n) {
    while (n > 0) {
        auto w = ::send(fd, p, n, MSG_NOSIGNAL);
        if (w <= 0) return false;
        p += w;
        n -= static_cast<std::size_t>(w);
    }
    return true;
}

}  // namespace

struct tcp_proxy::state {
    sockaddr_in target{};
    int listen_fd = -1;
    int wake[2] = {-1, -1};  // a byte wakes the loop; closing the write end stops it
    std::mutex mu;
    std::condition_variable done;
    bool mute_open = false;  // set by drop_replies_on_open_connections, read by the loop
    std::atomic<std::chrono::steady_clock::rep> reply_delay{0};  // set by delay_replies
    struct link {
        int client, server;
        bool muted;
        // The target's bytes held back by delay_replies: when each may go on.
        std::deque<std::pair<std::chrono::steady_clock::time_point, std::string>> held{};
    };
    std::vector<link> links;  // the loop's own
};

tcp_proxy::tcp_proxy(const std::string& host, int port) : st_(std::make_unique<state>()) {
    st_->target = ipv4(host, port);
    st_->listen_fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    auto here = ipv4("127.0.0.1", 0);
    socklen_t len = sizeof here;
    if (st_->listen_fd < 0 || ::bind(st_->listen_fd, reinterpret_cast<sockaddr*>(&here), sizeof here) != 0 ||
        ::listen(st_->listen_fd, 64) != 0 ||
        ::getsockname(st_->listen_fd, reinterpret_cast<sockaddr*>(&here), &len) != 0 ||
        ::pipe2(st_->wake, O_CLOEXEC) != 0) {
        if (st_->listen_fd >= 0) ::close(st_->listen_fd);
        throw std::runtime_error("tcp_proxy: cannot listen on 127.0.0.1");
    }
    port_ = ntohs(here.sin_port);
    loop_ = std::thread([this] { run(); });
}

tcp_proxy::~tcp_proxy() {
    ::close(st_->wake[1]);  // the loop sees end of file and returns
    loop_.join();
    ::close(st_->wake[0]);
    ::close(st_->listen_fd);
}

void tcp_proxy::drop_replies_on_open_connections() {
    {
        std::lock_guard lk(st_->mu);
        st_->mute_open = true;
    }
    char b = 1;
    (void)!::write(st_->wake[1], &b, 1);
    std::unique_lock lk(st_->mu);  // returns once the loop has muted them
    st_->done.wait(lk, [&] { return !st_->mute_open; });
}

void tcp_proxy::delay_replies(std::chrono::milliseconds delay) {
    st_->reply_delay = std::chrono::duration_cast<std::chrono::steady_clock::duration>(delay).count();
    char b = 1;
    (void)!::write(st_->wake[1], &b, 1);
}

void tcp_proxy::run() {
    using clock = std::chrono::steady_clock;
    auto& s = *st_;
    auto close_link = [](state::link& l) {
        ::close(l.client);
        ::close(l.server);
    };
    for (;;) {
        std::vector<pollfd> fds{{s.wake[0], POLLIN, 0}, {s.listen_fd, POLLIN, 0}};
        auto next = clock::time_point::max();  // when the first held-back reply is due
        for (auto& l : s.links) {
            fds.push_back({l.client, POLLIN, 0});
            fds.push_back({l.server, POLLIN, 0});
            if (!l.held.empty()) next = std::min(next, l.held.front().first);
        }
        int timeout = -1;
        if (next != clock::time_point::max()) {
            auto left = std::chrono::ceil<std::chrono::milliseconds>(next - clock::now()).count();
            timeout = static_cast<int>(std::max<long long>(left, 0));
        }
        if (::poll(fds.data(), fds.size(), timeout) < 0) continue;
        if (fds[0].revents) {
            char b;
            if (::read(s.wake[0], &b, 1) <= 0) break;  // the destructor closed the pipe
            std::lock_guard lk(s.mu);
            if (s.mute_open) {
                for (auto& l : s.links) l.muted = true;
                s.mute_open = false;
                s.done.notify_all();
            }
        }
        std::vector<bool> dead(s.links.size(), false);
        char buf[65536];
        for (std::size_t i = 0; i < s.links.size(); ++i) {
            auto& l = s.links[i];
            for (int side = 0; side < 2 && !dead[i]; ++side) {
                if (!fds[2 + 2 * i + side].revents) continue;
                int from = side == 0 ? l.client : l.server, to = side == 0 ? l.server : l.client;
                auto n = ::recv(from, buf, sizeof buf, 0);
                const auto delay = clock::duration(s.reply_delay.load());
                if (n <= 0) {
                    dead[i] = true;
                } else if (side == 1 && !l.muted && (delay.count() > 0 || !l.held.empty())) {
                    l.held.emplace_back(clock::now() + delay, std::string(buf, static_cast<std::size_t>(n)));
                } else if (side == 0 || !l.muted) {
                    dead[i] = !write_all(to, buf, static_cast<std::size_t>(n));
                }
            }
            const auto now = clock::now();
            while (!dead[i] && !l.held.empty() && l.held.front().first <= now) {
                dead[i] = !write_all(l.client, l.held.front().second.data(), l.held.front().second.size());
                l.held.pop_front();
            }
        }
        for (std::size_t i = s.links.size(); i-- > 0;) {
            if (!dead[i]) continue;
            close_link(s.links[i]);
            s.links.erase(s.links.begin() + static_cast<std::ptrdiff_t>(i));
        }
        if (fds[1].revents) {
            int c = ::accept4(s.listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
            if (c < 0) continue;
            int t = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
            if (t < 0 || ::connect(t, reinterpret_cast<const sockaddr*>(&s.target), sizeof s.target) != 0) {
                ::close(c);
                if (t >= 0) ::close(t);
                continue;
            }
            s.links.push_back({c, t, false});
            accepted_++;
        }
    }
    for (auto& l : s.links) close_link(l);
}

// ---- free_port, silent_listener ---------------------------------------------------

namespace {
// A socket bound to an ephemeral 127.0.0.1 port; `listening` also listens.
int bound_socket(bool listening, int& port) {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    auto here = ipv4("127.0.0.1", 0);
    socklen_t len = sizeof here;
    if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&here), sizeof here) != 0 ||
        (listening && ::listen(fd, 16) != 0) || ::getsockname(fd, reinterpret_cast<sockaddr*>(&here), &len) != 0) {
        if (fd >= 0) ::close(fd);
        throw std::runtime_error("cannot bind a socket on 127.0.0.1");
    }
    port = ntohs(here.sin_port);
    return fd;
}
}  // namespace

bool read_exact(int fd, std::string& out, std::size_t n) {
    out.resize(n);
    for (std::size_t got = 0; got < n;) {
        const auto r = ::recv(fd, out.data() + got, n - got, 0);
        if (r <= 0) return false;
        got += static_cast<std::size_t>(r);
    }
    return true;
}

std::string through_proxies(const std::string& url, std::vector<std::unique_ptr<tcp_proxy>>& proxies) {
    return map_hosts(url, [&](const std::string& host_port) {
        const auto colon = host_port.rfind(':');
        proxies.push_back(
            std::make_unique<tcp_proxy>(host_port.substr(0, colon), std::stoi(host_port.substr(colon + 1))));
        return "127.0.0.1:" + std::to_string(proxies.back()->port());
    });
}

std::uint16_t free_port() {
    int port = 0;
    ::close(bound_socket(false, port));
    return static_cast<std::uint16_t>(port);
}

silent_listener::silent_listener() { fd_ = bound_socket(true, port_); }
silent_listener::~silent_listener() { ::close(fd_); }

// ---- wrong_server -----------------------------------------------------------------

wrong_server::wrong_server(std::string banner) : banner_(std::move(banner)) {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    auto here = ipv4("127.0.0.1", 0);
    socklen_t len = sizeof here;
    if (listen_fd_ < 0 || ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&here), sizeof here) != 0 ||
        ::listen(listen_fd_, 64) != 0 || ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&here), &len) != 0 ||
        ::pipe2(wake_, O_CLOEXEC) != 0) {
        if (listen_fd_ >= 0) ::close(listen_fd_);
        throw std::runtime_error("wrong_server: cannot listen on 127.0.0.1");
    }
    port_ = ntohs(here.sin_port);
    loop_ = std::thread([this] { run(); });
}

wrong_server::~wrong_server() {
    ::close(wake_[1]);  // the loop sees end of file and returns
    loop_.join();
    ::close(wake_[0]);
    ::close(listen_fd_);
}

void wrong_server::run() {
    std::vector<int> clients;
    for (;;) {
        std::vector<pollfd> fds{{wake_[0], POLLIN, 0}, {listen_fd_, POLLIN, 0}};
        for (int c : clients) fds.push_back({c, POLLIN, 0});
        if (::poll(fds.data(), fds.size(), -1) < 0) continue;
        if (fds[0].revents != 0) break;
        std::vector<int> open;
        for (std::size_t i = 2; i < fds.size(); ++i) {
            char buf[4096];
            if (fds[i].revents != 0 && ::recv(fds[i].fd, buf, sizeof buf, 0) <= 0) {
                ::close(fds[i].fd);
                continue;
            }
            open.push_back(fds[i].fd);
        }
        if (fds[1].revents & POLLIN) {
            int c = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
            if (c >= 0) {
                write_all(c, banner_.data(), banner_.size());
                open.push_back(c);
            }
        }
        clients.swap(open);
    }
    for (int c : clients) ::close(c);
}

// ---- scripted_server ---------------------------------------------------------------

scripted_server::scripted_server(handler serve) : serve_(std::move(serve)) {
    listen_fd_ = bound_socket(true, port_);
    if (::pipe2(wake_, O_CLOEXEC) != 0) {
        ::close(listen_fd_);
        throw std::runtime_error("scripted_server: pipe2 failed");
    }
    loop_ = std::thread([this] { run(); });
}

scripted_server::~scripted_server() {
    ::close(wake_[1]);  // the accept loop sees end of file and returns
    loop_.join();
    {
        std::lock_guard lk(mutex_);
        for (int c : clients_) ::shutdown(c, SHUT_RDWR);  // handlers' reads and writes fail now
    }
    for (auto& t : threads_) t.join();
    for (int c : clients_) ::close(c);
    ::close(wake_[0]);
    ::close(listen_fd_);
}

void scripted_server::run() {
    for (;;) {
        pollfd fds[2] = {{wake_[0], POLLIN, 0}, {listen_fd_, POLLIN, 0}};
        if (::poll(fds, 2, -1) < 0) continue;
        if (fds[0].revents != 0) return;
        if (!(fds[1].revents & POLLIN)) continue;
        int c = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
        if (c < 0) continue;
        ++accepted_;
        std::lock_guard lk(mutex_);
        clients_.push_back(c);
        threads_.emplace_back([this, c] { serve_(c); });
    }
}

bool scripted_server::send_all(int fd, std::string_view data) { return write_all(fd, data.data(), data.size()); }

std::optional<std::string> scripted_server::read_line(int fd) {
    std::string line;
    for (char c;;) {
        if (::recv(fd, &c, 1, 0) != 1) return std::nullopt;
        if (c == '\n') return line;
        line += c;
    }
}

bool scripted_server::trickle(int fd, std::string_view data, std::chrono::milliseconds gap) {
    for (char c : data) {
        if (!write_all(fd, &c, 1)) return false;
        std::this_thread::sleep_for(gap);
    }
    return true;
}

}  // namespace distlock::test
