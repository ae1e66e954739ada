// The Redis client layer (redis_client.hpp): the plain TCP socket of a
// connection: connecting within a deadline, a command in the Redis protocol,
// and sending it without SIGPIPE.
#include "socket_io.hpp"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <memory>

namespace distlock::backends::redis_client {

// A connected non-blocking TCP socket to ep by `until` (close-on-exec from the
// start: a fork and exec in another thread never inherits it), or unavailable_error.
int connect_socket(const endpoint& ep, clock::time_point until) {
    const auto where = "cannot connect to " + ep.label() + " (connect_timeout " +
                       std::to_string(ep.connect_timeout.count()) + " ms): ";
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    const auto port = std::to_string(ep.port);
    if (int rc = ::getaddrinfo(ep.host.c_str(), port.c_str(), &hints, &found); rc != 0) {
        const std::string why = rc == EAI_SYSTEM ? std::strerror(errno) : ::gai_strerror(rc);
        throw_error(errc::unavailable, ep.backend_name, where + why, rc, why);
    }
    std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> addresses(found, ::freeaddrinfo);
    int err = ECONNREFUSED;
    for (const addrinfo* a = found; a != nullptr; a = a->ai_next) {
        int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
        if (fd < 0) {
            err = errno;
            continue;
        }
        int rc = ::connect(fd, a->ai_addr, a->ai_addrlen);
        if (rc != 0 && errno == EINPROGRESS) {
            pollfd p{fd, POLLOUT, 0};
            do rc = ::poll(&p, 1, poll_ms(until));
            while (rc < 0 && errno == EINTR);
            socklen_t len = sizeof err;
            if (rc == 0) err = ETIMEDOUT;
            else if (rc < 0 || ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
            rc = err == 0 ? 0 : -1;
        } else if (rc != 0) {
            err = errno;
        }
        if (rc == 0) {
            // As hiredis did: no Nagle delay for small commands; keepalive finds a
            // dead peer of an idle pooled connection (idle 15 s, then 3 probes 5 s apart).
            int on = 1, idle = 15, interval = 5, count = 3;
            ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
            ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof on);
            ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
            ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof interval);
            ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof count);
            return fd;
        }
        ::close(fd);
        if (clock::now() >= until) break;
    }
    const std::string why = std::strerror(err);
    throw_error(errc::unavailable, ep.backend_name, where + why, err, why);
}

void append_command(std::string& out, const std::vector<std::string_view>& args) {
    // Sized first (one allocation for a script call of 512 renewals), written
    // in place: no temporary string per command and per argument length.
    std::size_t size = 16;
    for (auto a : args) size += a.size() + 16;
    if (out.capacity() < out.size() + size) out.reserve(std::max(out.size() + size, 2 * out.capacity()));
    auto number = [&](char tag, std::size_t n) {
        char digits[24];
        auto [end, ec] = std::to_chars(digits, digits + sizeof digits, n);
        out += tag;
        out.append(digits, end);
        out += "\r\n";
    };
    number('*', args.size());
    for (auto a : args) {
        number('$', a.size());
        out.append(a);
        out += "\r\n";
    }
}

std::string format_command(const std::vector<std::string_view>& args) {
    std::string out;
    append_command(out, args);
    return out;
}

int send_all(int fd, std::string_view data, std::size_t& sent, clock::time_point until) {
    while (sent < data.size()) {
        const ssize_t n = ::send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
        if (n > 0) {
            sent += static_cast<std::size_t>(n);
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) return errno;
        pollfd p{fd, POLLOUT, 0};
        const int rc = ::poll(&p, 1, poll_ms(until));
        if (rc == 0) return ETIMEDOUT;
        if (rc < 0 && errno != EINTR) return errno;
    }
    return 0;
}

}  // namespace distlock::backends::redis_client
