// What a test counts of its own process (for the bounds on threads and
// connections of the asynchronous path): the threads, the open descriptors
// and those of them that are sockets, read from /proc/self.
#pragma once

#include <cstddef>
#include <filesystem>
#include <string>
#include <system_error>

namespace distlock::test {

// Entries of `dir` (/proc/self/task or /proc/self/fd); with `link_prefix`,
// only those whose link starts with it ("socket:").
inline std::size_t proc_entries(const char* dir, const char* link_prefix = nullptr) {
    std::size_t n = 0;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
        if (!link_prefix) {
            ++n;
            continue;
        }
        std::error_code gone;  // a descriptor may close between the listing and the read
        if (std::filesystem::read_symlink(e.path(), gone).string().rfind(link_prefix, 0) == 0) ++n;
    }
    return n;
}
inline std::size_t thread_count() { return proc_entries("/proc/self/task"); }
inline std::size_t fd_count() { return proc_entries("/proc/self/fd"); }
inline std::size_t socket_count() { return proc_entries("/proc/self/fd", "socket:"); }

}  // namespace distlock::test
