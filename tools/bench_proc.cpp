// distlock bench --async: the /proc/self readings of bench_proc.hpp.
#include "bench_proc.hpp"

#include <sys/resource.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <thread>

namespace distlock::tool {
namespace {

long count_entries(const char* dir) {
    std::error_code ec;
    long n = 0;
    for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) ++n;
    return n;
}

// The inodes of the established TCP sockets listed in `table` (/proc/self/net/tcp or tcp6).
void established_inodes(const char* table, std::set<unsigned long>& into) {
    std::ifstream in(table);
    std::string line;
    std::getline(in, line);  // the header
    while (std::getline(in, line)) {
        std::istringstream row(line);
        std::string slot, local, remote, state, queues, timer, retransmits, uid, timeout;
        unsigned long inode = 0;
        if (!(row >> slot >> local >> remote >> state >> queues >> timer >> retransmits >> uid >> timeout >> inode))
            continue;
        if (state == "01") into.insert(inode);  // TCP_ESTABLISHED
    }
}

}  // namespace

process_sample sample_process() {
    process_sample s;
    s.threads = count_entries("/proc/self/task");
    std::set<unsigned long> tcp;
    established_inodes("/proc/self/net/tcp", tcp);
    established_inodes("/proc/self/net/tcp6", tcp);
    std::error_code ec;
    for (std::filesystem::directory_iterator it("/proc/self/fd", ec), end; !ec && it != end; it.increment(ec)) {
        ++s.descriptors;
        std::error_code lec;
        const std::string target = std::filesystem::read_symlink(it->path(), lec).string();
        if (lec || target.rfind("socket:[", 0) != 0) continue;
        ++s.sockets;
        if (tcp.count(std::stoul(target.substr(8)))) ++s.tcp_connections;
    }
    --s.descriptors;  // the iterator's own
    std::ifstream statm("/proc/self/statm");
    long size = 0, resident = 0;
    statm >> size >> resident;
    s.rss_bytes = resident * ::sysconf(_SC_PAGESIZE);
    return s;
}

// Under AddressSanitizer every free goes to a quarantine, so the RSS grows by
// what the sampling itself allocates and never settles: there only the threads
// and descriptors are waited for (its figures are not measurements anyway).
#if defined(__SANITIZE_ADDRESS__)
constexpr bool rss_settles = false;
#else
constexpr bool rss_settles = true;
#endif

process_sample settle_process(std::chrono::milliseconds min, std::chrono::milliseconds max,
                              std::chrono::milliseconds& settled) {
    const auto t0 = std::chrono::steady_clock::now();
    auto last = sample_process();
    int quiet = 0;
    for (;;) {
        std::this_thread::sleep_for(std::chrono::milliseconds(250));
        auto now = sample_process();
        const bool still = (!rss_settles || now.rss_bytes - last.rss_bytes < 32 * 1024) &&
                           now.threads == last.threads && now.descriptors == last.descriptors;
        quiet = still ? quiet + 1 : 0;
        last = now;
        const auto spent = std::chrono::steady_clock::now() - t0;
        if ((quiet >= 3 && spent >= min) || spent >= max) {
            settled = std::chrono::duration_cast<std::chrono::milliseconds>(spent);
            return last;
        }
    }
}

void raise_descriptor_limit() noexcept {
    rlimit r{};
    if (::getrlimit(RLIMIT_NOFILE, &r) != 0 || r.rlim_cur == r.rlim_max) return;
    r.rlim_cur = r.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &r);
}

}  // namespace distlock::tool
