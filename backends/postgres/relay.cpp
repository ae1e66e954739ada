#include "relay.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <memory>

#include "sql/sql.hpp"

namespace distlock::backends::postgres {
namespace {

namespace s = distlock::backends::sql;
using clock = relay::clock;

constexpr std::size_t chunk = 64 << 10;  // the most moved at once; always fits an empty pair

// A buffer for one move, per thread (a connection is used by one thread at a
// time). On the heap: 64 KiB of static TLS would burden every thread.
char* scratch() {
    thread_local std::unique_ptr<char[]> buf;
    if (!buf) buf = std::make_unique<char[]>(chunk);
    return buf.get();
}

ino_t inode_of(int fd) {
    struct stat st {};
    return ::fstat(fd, &st) == 0 ? st.st_ino : 0;
}

bool interrupted() { return errno == EINTR; }
bool would_block() { return errno == EAGAIN || errno == EWOULDBLOCK; }

// Waits until `fd` is ready for `events` (or in error: the next call says
// which); false once `until` has passed.
bool wait_for(int fd, short events, clock::time_point until) {
    for (;;) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - clock::now()).count();
        if (left <= 0) return false;
        pollfd p{fd, events, 0};
        const int rc = ::poll(&p, 1, static_cast<int>(std::min<long long>(left, 60000)));
        if (rc > 0 || (rc < 0 && !interrupted())) return true;
    }
}

}  // namespace

bool relay::owns(int fd) const noexcept { return mine_ >= 0 && fd == theirs_ && inode_of(fd) == theirs_inode_; }

bool relay::take_over(int fd) noexcept {
    reset();
    const int server = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (server < 0) return false;
    int pair[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, pair) != 0) {
        ::close(server);
        return false;
    }
    // Atomic: libpq's descriptor number never refers to nothing, and the
    // server's socket stays open through `server`.
    if (::dup3(pair[1], fd, O_CLOEXEC) < 0) {
        ::close(server);
        ::close(pair[0]);
        ::close(pair[1]);
        return false;
    }
    ::close(pair[1]);
    const int flags = ::fcntl(server, F_GETFL);
    if (flags >= 0 && !(flags & O_NONBLOCK)) (void)::fcntl(server, F_SETFL, flags | O_NONBLOCK);
    server_ = server;
    mine_ = pair[0];
    theirs_ = fd;
    theirs_inode_ = inode_of(fd);
    return true;
}

void relay::reset() noexcept {
    if (server_ >= 0) ::close(server_);
    if (mine_ >= 0) ::close(mine_);
    server_ = mine_ = theirs_ = -1;
    theirs_inode_ = 0;
    to_libpq_.clear();
    fed_ = 0;
    ended_ = false;
}

void relay::finish() noexcept {
    if (mine_ >= 0) {
        char* buf = scratch();
        const auto n = ::recv(mine_, buf, chunk, MSG_DONTWAIT);
        if (n > 0) (void)::send(server_, buf, static_cast<std::size_t>(n), MSG_DONTWAIT | MSG_NOSIGNAL);
    }
    reset();
}

bool relay::forward(clock::time_point until) noexcept {
    if (mine_ < 0) return true;
    char* buf = scratch();
    for (;;) {
        const auto n = ::recv(mine_, buf, chunk, MSG_DONTWAIT);
        if (n < 0 && interrupted()) continue;
        if (n <= 0) return true;  // all of it (or libpq closed its end)
        for (std::size_t off = 0; off < static_cast<std::size_t>(n);) {
            const auto w = ::send(server_, buf + off, static_cast<std::size_t>(n) - off, MSG_DONTWAIT | MSG_NOSIGNAL);
            if (w > 0) {
                off += static_cast<std::size_t>(w);
            } else if (w < 0 && interrupted()) {
            } else if (w < 0 && would_block()) {
                if (!wait_for(server_, POLLOUT, until)) return false;
            } else {
                return true;  // the server is gone: reading says so (feed)
            }
        }
        if (static_cast<std::size_t>(n) < chunk) return true;
    }
}

bool relay::push() noexcept {
    while (!to_libpq_.empty()) {
        const auto w = ::send(mine_, to_libpq_.data(), to_libpq_.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
        if (w < 0 && interrupted()) continue;
        if (w <= 0) return false;
        to_libpq_.erase(0, static_cast<std::size_t>(w));
    }
    return true;
}

relay::fed relay::feed(clock::time_point until) noexcept {
    if (mine_ < 0) return fed::nothing;
    if (ended_) return fed::some;  // libpq reads the end
    int queued = 0;
    if (::ioctl(theirs_, FIONREAD, &queued) == 0 && queued > 0)  // not read by libpq yet
        return clock::now() < until ? fed::some : fed::nothing;
    if (!to_libpq_.empty()) {
        (void)push();
        return fed::some;
    }
    char* buf = scratch();
    for (;;) {
        if (!wait_for(server_, POLLIN, until)) return fed::nothing;
        // Never more than one byte past the cap: that byte says the reply is over it.
        const std::size_t room =
            static_cast<std::size_t>(s::max_reply_bytes - std::min<std::uint64_t>(fed_, s::max_reply_bytes)) + 1;
        const auto n = ::recv(server_, buf, std::min(chunk, room), MSG_DONTWAIT);
        if (n < 0 && (interrupted() || would_block())) continue;
        if (n <= 0) {  // the server closed the connection, or it broke: libpq reads the end
            ended_ = true;
            ::shutdown(mine_, SHUT_WR);
            return fed::some;
        }
        fed_ += static_cast<std::uint64_t>(n);
        if (fed_ > s::max_reply_bytes) return fed::too_much;
        to_libpq_.assign(buf, static_cast<std::size_t>(n));
        (void)push();
        return fed::some;
    }
}

}  // namespace distlock::backends::postgres
