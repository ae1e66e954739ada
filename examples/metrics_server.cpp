// Serves a provider's lock metrics in the Prometheus text format on
// http://127.0.0.1:PORT/metrics while a few threads take and give back locks.
//
//   distlock-example-metrics-server [URL] [PORT]
//     URL   the lock backend (default memory://example); PORT 0 = any free port
//
// It prints "listening on 127.0.0.1:PORT" and serves until killed; with
// DISTLOCK_EXAMPLE_REQUESTS=N it exits after N requests (the test uses 1; a
// connection that sends nothing is no request).
// Only the standard library and POSIX sockets: the Prometheus rendering needs no
// dependency, and neither does serving it.
//
// This is an example, not a web server: one client at a time, one read per
// request. What it does guard against, because a copy of it meets real
// clients: a connection that sends nothing is dropped after 2 s (any local
// user can open one; without a timeout every later scrape would hang), and a
// client that went away fails the send instead of killing the process with
// SIGPIPE. A production endpoint belongs in your HTTP server or exporter.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "distlock/distlock.hpp"

namespace {
int usage(std::FILE* to, int status) {
    std::fprintf(to,
                 "usage: distlock-example-metrics-server [URL] [PORT]\n"
                 "  URL   the lock backend (default memory://example)\n"
                 "  PORT  the port on 127.0.0.1 (default 9464; 0: any free port)\n");
    return status;
}
}  // namespace

int main(int argc, char** argv) {
    if (argc > 1 && (std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h")) return usage(stdout, 0);
    if (argc > 3 || (argc > 1 && argv[1][0] == '-')) return usage(stderr, 64);
    const std::string url = argc > 1 ? argv[1] : "memory://example";
    char* end = nullptr;
    const long port = argc > 2 ? std::strtol(argv[2], &end, 10) : 9464;
    if (argc > 2 && (end == argv[2] || *end != '\0' || port < 0 || port > 65535)) return usage(stderr, 64);
    const char* limit = std::getenv("DISTLOCK_EXAMPLE_REQUESTS");
    int requests_left = limit != nullptr ? std::atoi(limit) : -1;

    auto metrics = std::make_shared<distlock::metrics>();
    std::optional<distlock::provider> connected;
    try {
        connected = distlock::connect(
            url, {.observer = metrics, .log = [](const distlock::log_record& r) {
                      std::fprintf(stderr, "[%s] %.*s %.*s: %.*s\n", std::string(distlock::to_string(r.level)).c_str(),
                                   int(r.backend.size()), r.backend.data(), int(r.lock.size()), r.lock.data(),
                                   int(r.message.size()), r.message.data());
                  }});
    } catch (const distlock::error& e) {  // its message shows no password
        std::fprintf(stderr, "distlock-example-metrics-server: %s\n", e.what());
        return e.code_value() == distlock::errc::invalid_argument ? 64 : 69;
    }
    auto& locks = *connected;

    // Some traffic: two threads on one name (contended), one on a semaphore.
    std::atomic<bool> stop{false};
    std::vector<std::thread> workers;
    for (int i = 0; i < 2; ++i)
        workers.emplace_back([&] {
            auto m = locks.mutex("stock:item-1");
            while (!stop) {
                std::lock_guard lk(m);
                std::this_thread::sleep_for(std::chrono::milliseconds(5));
            }
        });
    workers.emplace_back([&] {
        auto sem = locks.semaphore("downloads", 2);
        while (!stop) {
            distlock::permit_guard permit(sem);
            std::this_thread::sleep_for(std::chrono::milliseconds(3));
        }
    });

    int server = ::socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    ::setsockopt(server, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<std::uint16_t>(port));
    if (::bind(server, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(server, 16) != 0) {
        std::perror("bind/listen");
        return 1;
    }
    socklen_t len = sizeof addr;
    ::getsockname(server, reinterpret_cast<sockaddr*>(&addr), &len);
    std::printf("listening on 127.0.0.1:%d\n", ntohs(addr.sin_port));
    std::fflush(stdout);

    while (requests_left != 0) {
        int client = ::accept4(server, nullptr, nullptr, SOCK_CLOEXEC);
        if (client < 0) continue;
        // A client that sends (or reads) nothing must not stop the next scrape.
        const timeval patience{2, 0};
        ::setsockopt(client, SOL_SOCKET, SO_RCVTIMEO, &patience, sizeof patience);
        ::setsockopt(client, SOL_SOCKET, SO_SNDTIMEO, &patience, sizeof patience);
        char request[2048];
        const auto n = ::recv(client, request, sizeof request - 1, 0);
        if (n <= 0) {  // silent, or gone: no request to answer (nor to count)
            ::close(client);
            continue;
        }
        const std::string first_line = std::string(request, static_cast<std::size_t>(n)).substr(0, 64);
        std::string body, status = "200 OK", type = "text/plain; version=0.0.4; charset=utf-8";
        if (first_line.rfind("GET /metrics ", 0) == 0) {
            body = distlock::render_prometheus(*metrics);
        } else {
            status = "404 Not Found";
            type = "text/plain";
            body = "try /metrics\n";
        }
        const std::string reply = "HTTP/1.1 " + status + "\r\nContent-Type: " + type +
                                  "\r\nContent-Length: " + std::to_string(body.size()) +
                                  "\r\nConnection: close\r\n\r\n" + body;
        for (std::size_t off = 0; off < reply.size();) {
            const auto w = ::send(client, reply.data() + off, reply.size() - off, MSG_NOSIGNAL);
            if (w <= 0) break;
            off += static_cast<std::size_t>(w);
        }
        ::close(client);
        if (requests_left > 0) --requests_left;
    }
    stop = true;
    for (auto& t : workers) t.join();
    ::close(server);
    return 0;
}
