// distlock bench --async: what this process holds, read from /proc/self: its
// threads, descriptors, sockets, TCP connections and resident memory.
#pragma once

#include <chrono>

namespace distlock::tool {

struct process_sample {
    long threads = 0;      // entries of /proc/self/task
    long descriptors = 0;  // entries of /proc/self/fd
    long sockets = 0;      // descriptors that are sockets (TCP, Unix, ...)
    // Sockets of this process that are established TCP connections: their
    // inode is in /proc/self/net/tcp or tcp6 in state ESTABLISHED. The bench
    // connects to nothing but the backend, so these are its connections to
    // the server(s).
    long tcp_connections = 0;
    long rss_bytes = 0;  // resident set, /proc/self/statm
};

process_sample sample_process();

// Samples every 250 ms until three intervals in a row each grew the resident
// set by less than 32 KiB and changed neither the threads nor the descriptors
// (so the acquisitions just started have been tried and are waiting), waiting
// at least `min` and at most `max`. Returns the last sample; `settled` gets
// the time taken.
process_sample settle_process(std::chrono::milliseconds min, std::chrono::milliseconds max,
                              std::chrono::milliseconds& settled);

// Raises the soft limit of open descriptors to the hard limit (a backend may
// keep descriptors per waiting handle: the figures say how many).
void raise_descriptor_limit() noexcept;

}  // namespace distlock::tool
