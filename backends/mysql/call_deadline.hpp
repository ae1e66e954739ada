// Whole-call deadlines for the MySQL client. Connector/C++ 1.1 and the client
// library under it (MariaDB Connector/C, libmysqlclient) bound each read and
// write of a socket on its own (OPT_READ_TIMEOUT, OPT_WRITE_TIMEOUT,
// OPT_CONNECT_TIMEOUT): a server that trickles a byte within each timeout holds
// a call for ever. They expose no socket and no I/O hook, and a KILL QUERY from
// another connection reaches neither a handshake nor a server that is not
// MariaDB at all. So one process-wide watcher thread shuts the socket of a call
// down when the call's deadline passes: the blocked read fails at once, the
// library reports the connection lost, and the caller, seeing the deadline
// fired, reports a timeout.
//
// The socket is found once per connection: the one socket opened by the
// connect (sockets of this process before and after, by inode, under a
// process-wide lock that lets one distlock MySQL connect run at a time) whose
// peer port is the server's. It is dup()ed (close-on-exec): the watcher acts
// on that duplicate, which nobody else closes, so it never touches a
// descriptor number the library has closed and someone has reused meanwhile.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <set>
#include <string>

namespace distlock::backends::mysql {

using deadline_clock = std::chrono::steady_clock;

// The inodes of this process's sockets now.
std::set<ino_t> socket_inodes();

// Lets one connect of distlock's MySQL connections run at a time in the
// process (so that the socket it opens is the only new one), waiting until
// `until` at most; owns() says whether the turn came.
class connect_turn {
public:
    explicit connect_turn(deadline_clock::time_point until);
    ~connect_turn() { release(); }
    connect_turn(const connect_turn&) = delete;
    connect_turn& operator=(const connect_turn&) = delete;
    bool owns() const noexcept { return owns_; }
    void release() noexcept;

private:
    bool owns_ = false;
};

// The socket a connect opened: opened since `before`, not claimed by another
// connection, its peer port `port`. Returns a close-on-exec duplicate of it,
// which is claimed until release_socket(); the library's own descriptor is
// made close-on-exec too. -1 when there is no such socket, or several (a
// client of another library connecting to the same port at that moment): the
// connection's calls are then bounded by the library's per-read timeouts only.
int claim_socket(const std::set<ino_t>& before, std::uint16_t port);
// Closes a claimed duplicate and gives its claim back.
void release_socket(int fd) noexcept;

// One call under a deadline. While it lives, the watcher shuts the socket down
// (SHUT_RDWR) when `at` passes; once destroyed (or disarm()ed), the watcher
// never touches the socket again. A connect in progress has no socket yet: the
// watcher then shuts down the one new unclaimed socket to `port`, found as
// claim_socket() finds it.
class call_deadline {
public:
    call_deadline(int fd, deadline_clock::time_point at);
    call_deadline(const std::set<ino_t>& before, std::uint16_t port, deadline_clock::time_point at);
    ~call_deadline() { disarm(); }
    call_deadline(const call_deadline&) = delete;
    call_deadline& operator=(const call_deadline&) = delete;

    // Stops the watch; true when the deadline had already fired.
    bool disarm() noexcept;
    bool fired() noexcept { return disarm(); }

private:
    std::uint64_t id_ = 0;
    bool done_ = false;
    bool fired_ = false;
};

}  // namespace distlock::backends::mysql
