// A loopback TCP proxy for fault injection: forwards every connection to one
// target, and can make the connections open now one-way (requests still reach
// the server, its replies are dropped), as when a reply is lost on the network,
// or hold the server's replies back for a while (a slow return path).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace distlock::test {

class tcp_proxy {
public:
    // Listens on 127.0.0.1 (an ephemeral port) and forwards to host:port (IPv4).
    tcp_proxy(const std::string& host, int port);
    ~tcp_proxy();
    tcp_proxy(const tcp_proxy&) = delete;
    tcp_proxy& operator=(const tcp_proxy&) = delete;

    int port() const { return port_; }
    // From now on, what the target sends on the connections open now is read and
    // dropped; connections accepted later are forwarded both ways as usual.
    void drop_replies_on_open_connections();
    // From now on, what the target sends on any connection reaches the client
    // `delay` after it arrived (in order; 0 = at once again).
    void delay_replies(std::chrono::milliseconds delay);
    // Connections accepted so far.
    std::uint64_t accepted() const { return accepted_.load(); }

private:
    void run();
    struct state;
    std::unique_ptr<state> st_;
    int port_ = 0;
    std::atomic<std::uint64_t> accepted_{0};
    std::thread loop_;
};

// `url` with each host:port of its authority replaced by the address of a new
// tcp_proxy to it, appended to `proxies` (map_hosts in support.hpp); destroying
// a proxy closes its connections and its port refuses, as a server gone.
std::string through_proxies(const std::string& url, std::vector<std::unique_ptr<tcp_proxy>>& proxies);

// A free TCP port on 127.0.0.1 (nothing listens there when this returns).
std::uint16_t free_port();

// Reads exactly `n` bytes of `fd` into `out` (for a fake server's handler);
// false when the peer closed or the read failed first.
bool read_exact(int fd, std::string& out, std::size_t n);

// A socket listening on 127.0.0.1 that never accepts: the kernel completes the
// connections (up to its backlog), nothing ever answers, as from a stopped server.
class silent_listener {
public:
    silent_listener();
    ~silent_listener();
    silent_listener(const silent_listener&) = delete;
    silent_listener& operator=(const silent_listener&) = delete;
    int port() const { return port_; }

private:
    int fd_ = -1;
    int port_ = 0;
};

// A loopback server of another kind, for "the URL points at the wrong port":
// writes `banner` to every connection it accepts (nothing when empty: a server
// that waits for the client to speak first) and reads and drops what it gets.
class wrong_server {
public:
    explicit wrong_server(std::string banner);
    ~wrong_server();
    wrong_server(const wrong_server&) = delete;
    wrong_server& operator=(const wrong_server&) = delete;

    int port() const { return port_; }
    // "127.0.0.1:<port>"
    std::string address() const { return "127.0.0.1:" + std::to_string(port_); }

private:
    void run();
    std::string banner_;
    int listen_fd_ = -1;
    int wake_[2] = {-1, -1};
    int port_ = 0;
    std::thread loop_;
};

// A hostile or broken server for tests of what a client does with its replies:
// every connection accepted on 127.0.0.1 is given, on a thread of its own, to
// `serve(fd)`, which reads and writes it as it likes (trickle one byte a second,
// send a 1 GiB bulk length, never answer...). The destructor shuts every
// connection down (a handler blocked in recv/send returns) and joins the threads;
// a handler should return when a read or write fails.
class scripted_server {
public:
    using handler = std::function<void(int fd)>;
    explicit scripted_server(handler serve);
    ~scripted_server();
    scripted_server(const scripted_server&) = delete;
    scripted_server& operator=(const scripted_server&) = delete;

    int port() const { return port_; }
    // "127.0.0.1:<port>"
    std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
    // Connections accepted so far.
    std::uint64_t accepted() const { return accepted_.load(); }

    // Helpers for handlers: all of `data` (false when the peer went away);
    // one line ending in "\n" (without it; nullopt at end of file or error);
    // `data` a byte at a time, `gap` apart (false when the peer went away).
    static bool send_all(int fd, std::string_view data);
    static std::optional<std::string> read_line(int fd);
    static bool trickle(int fd, std::string_view data, std::chrono::milliseconds gap);

private:
    void run();
    handler serve_;
    int listen_fd_ = -1;
    int wake_[2] = {-1, -1};
    int port_ = 0;
    std::atomic<std::uint64_t> accepted_{0};
    std::mutex mutex_;
    std::vector<int> clients_;
    std::vector<std::thread> threads_;
    std::thread loop_;
};

}  // namespace distlock::test
