// What the server sends reaches libpq only through distlock, and only so much
// of it. libpq reads a result, an error or a notification whole into memory
// before handing it over, has no limit of its own, and once a message is
// announced long it reads for as long as bytes keep coming (one PQconsumeInput
// or PQconnectPoll can read hundreds of MiB from a fast sender): counting
// between its calls cannot bound it. So, once a connection is made, libpq's
// descriptor is swapped (dup3) for one end of a socket pair, and distlock
// moves the bytes: what libpq writes, to the server, as it is; what the server
// sends, to libpq, at most s::max_reply_bytes per count (a call, a connect).
// libpq can then read no more than it was handed. Costs per round trip: a copy
// each way and four system calls; no round trip.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <string>

namespace distlock::backends::postgres {

class relay {
public:
    using clock = std::chrono::steady_clock;

    relay() = default;
    relay(const relay&) = delete;
    relay& operator=(const relay&) = delete;
    ~relay() { reset(); }

    // Whether libpq's descriptor `fd` is the relay's end now (false when libpq
    // has closed it and made another socket, maybe of the same number).
    bool owns(int fd) const noexcept;
    // Takes libpq's connected socket `fd` over: the socket is kept here, and
    // `fd` becomes libpq's end of a socket pair. The count starts at 0. False
    // (nothing changed) when the system refuses (no descriptors left).
    bool take_over(int fd) noexcept;
    // Forgets the server's socket and the pair (closing them), as after libpq
    // has closed its end.
    void reset() noexcept;
    // After PQfinish: the last bytes libpq wrote (its goodbye) go to the server
    // if they can at once; then reset().
    void finish() noexcept;

    // Sends the server everything libpq has written, waiting until `until` at
    // most; false when the deadline passed first. A server that is gone makes
    // libpq see the end of its stream.
    bool forward(clock::time_point until) noexcept;

    enum class fed { some, nothing, too_much };
    // Gives libpq something to read: what it has not read yet, else what the
    // server sends (or the end of the server's stream), waiting until `until`
    // at most (nothing: the deadline passed). too_much: the server sent more
    // than s::max_reply_bytes since the count started; none of it past the
    // cap was handed over.
    fed feed(clock::time_point until) noexcept;
    // Starts counting the server's bytes afresh.
    void restart_count() noexcept { fed_ = 0; }

private:
    bool push() noexcept;  // to_libpq_ into the pair, what fits now; false when it is full

    int server_ = -1;  // the socket to the server (libpq's, before the swap)
    int mine_ = -1;    // the relay's end of the pair
    int theirs_ = -1;  // libpq's descriptor, its end of the pair
    ino_t theirs_inode_ = 0;
    std::string to_libpq_;   // read from the server, not yet in the pair
    std::uint64_t fed_ = 0;  // bytes read from the server since the count started
    bool ended_ = false;     // the server's stream ended; libpq was told
};

}  // namespace distlock::backends::postgres
