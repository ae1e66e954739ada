// Whole-call deadlines for the MySQL client (see call_deadline.hpp).
#include "call_deadline.hpp"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

namespace distlock::backends::mysql {

namespace {

std::optional<ino_t> socket_inode(int fd) {
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) return std::nullopt;
    return st.st_ino;
}

// The port of a socket's peer, IPv4 or IPv6.
std::optional<std::uint16_t> peer_port(int fd) {
    sockaddr_storage a{};
    socklen_t len = sizeof a;
    if (::getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) return std::nullopt;
    if (a.ss_family == AF_INET) return ntohs(reinterpret_cast<sockaddr_in*>(&a)->sin_port);
    if (a.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6*>(&a)->sin6_port);
    return std::nullopt;
}

// Descriptors of this process that are sockets, with their inodes, read from
// the links in /proc/self/fd ("socket:[<inode>]"): no call on the descriptors
// themselves, which other threads (the client library's) own.
std::vector<std::pair<int, ino_t>> sockets() {
    std::vector<std::pair<int, ino_t>> out;
    DIR* d = ::opendir("/proc/self/fd");
    if (d == nullptr) return out;
    const int own = ::dirfd(d);
    while (const dirent* e = ::readdir(d)) {
        char* end = nullptr;
        const long fd = std::strtol(e->d_name, &end, 10);
        if (end == e->d_name || *end != '\0' || fd == own) continue;
        char link[64];
        const auto n = ::readlinkat(own, e->d_name, link, sizeof link - 1);
        if (n <= 0) continue;
        link[n] = '\0';
        constexpr std::string_view prefix = "socket:[";
        if (std::string_view(link, static_cast<std::size_t>(n)).substr(0, prefix.size()) != prefix) continue;
        const unsigned long long ino = std::strtoull(link + prefix.size(), &end, 10);
        if (*end == ']') out.emplace_back(static_cast<int>(fd), static_cast<ino_t>(ino));
    }
    ::closedir(d);
    return out;
}

struct watch;

// What the process keeps: the sockets of live connections (their duplicates
// keep the inodes alive) and the watcher. Never destroyed (connections may
// outlive static destruction); a forked child starts afresh (the parent's
// watcher thread did not come along, and a mutex may have been held at the
// fork; the child does not use the parent's connections).
struct process_state {
    std::mutex m;
    std::set<ino_t> claimed;
    watch* watcher = nullptr;  // leaked on purpose: its thread runs until the process ends
};

process_state* state = nullptr;

process_state& the_state() {
    static std::once_flag once;
    std::call_once(once, [] {
        state = new process_state;
        ::pthread_atfork(nullptr, nullptr, [] { state = new process_state; });
    });
    return *state;
}

// New since `before`, unclaimed, to `port`: the descriptors of the candidates.
std::vector<int> new_sockets(const std::set<ino_t>& before, std::uint16_t port) {
    std::vector<int> out;
    auto& st = the_state();
    std::lock_guard lk(st.m);
    for (const auto& [fd, ino] : sockets())
        if (!before.count(ino) && !st.claimed.count(ino) && peer_port(fd) == port) out.push_back(fd);
    return out;
}

// The watcher: one thread for the process, started at the first call, never
// stopped (it sleeps while nothing is armed).
struct watch {
    struct entry {
        int fd = -1;             // the call's socket (a claimed duplicate) ...
        std::set<ino_t> before;  // ... or, for a connect, how to find it
        std::uint16_t port = 0;
        deadline_clock::time_point at;
        bool fired = false;
    };
    std::mutex m;
    std::condition_variable cv;
    std::map<std::uint64_t, entry> entries;
    std::set<std::pair<deadline_clock::time_point, std::uint64_t>> due;
    std::uint64_t next = 0;

    void run() {
        std::unique_lock lk(m);
        for (;;) {
            if (due.empty()) {
                cv.wait(lk);
                continue;
            }
            const auto [at, id] = *due.begin();
            if (deadline_clock::now() < at) {
                cv.wait_until(lk, at);
                continue;
            }
            due.erase(due.begin());
            auto& e = entries.at(id);
            e.fired = true;
            // Under the lock: the call cannot disarm meanwhile, so its socket is still its own.
            if (e.fd >= 0) {
                ::shutdown(e.fd, SHUT_RDWR);
            } else if (auto found = new_sockets(e.before, e.port); found.size() == 1) {
                ::shutdown(found[0], SHUT_RDWR);  // several: not ours to choose, the library's timeouts remain
            }
        }
    }

    std::uint64_t arm(entry e) {
        std::lock_guard lk(m);
        const auto id = ++next;
        const bool earliest = due.empty() || e.at < due.begin()->first;
        due.emplace(e.at, id);
        entries.emplace(id, std::move(e));
        if (earliest) cv.notify_one();
        return id;
    }

    bool disarm(std::uint64_t id) {
        std::lock_guard lk(m);
        auto it = entries.find(id);
        if (it == entries.end()) return false;
        const bool fired = it->second.fired;
        if (!fired) due.erase({it->second.at, id});
        entries.erase(it);
        return fired;
    }
};

watch& the_watch() {
    auto& st = the_state();
    std::lock_guard lk(st.m);
    if (st.watcher == nullptr) {
        auto* w = new watch;
        std::thread([w] { w->run(); }).detach();
        st.watcher = w;
    }
    return *st.watcher;
}

}  // namespace

std::set<ino_t> socket_inodes() {
    std::set<ino_t> out;
    for (const auto& s : sockets()) out.insert(s.second);
    return out;
}

namespace {

struct turns {
    std::mutex m;
    std::condition_variable cv;
    bool busy = false;
};

turns& the_turns() {
    static auto* t = new turns;  // never destroyed: connections may be made during static destruction
    return *t;
}

}  // namespace

connect_turn::connect_turn(deadline_clock::time_point until) {
    auto& t = the_turns();
    std::unique_lock lk(t.m);
    owns_ = t.cv.wait_until(lk, until, [&] { return !t.busy; });
    if (owns_) t.busy = true;
}

void connect_turn::release() noexcept {
    if (!owns_) return;
    owns_ = false;
    auto& t = the_turns();
    {
        std::lock_guard lk(t.m);
        t.busy = false;
    }
    t.cv.notify_one();
}

int claim_socket(const std::set<ino_t>& before, std::uint16_t port) {
    const auto found = new_sockets(before, port);
    if (found.size() != 1) return -1;
    (void)::fcntl(found[0], F_SETFD, ::fcntl(found[0], F_GETFD) | FD_CLOEXEC);  // the library's own descriptor
    const int dup = ::fcntl(found[0], F_DUPFD_CLOEXEC, 3);
    const auto ino = dup >= 0 ? socket_inode(dup) : std::nullopt;
    if (!ino) {
        if (dup >= 0) ::close(dup);
        return -1;
    }
    auto& st = the_state();
    std::lock_guard lk(st.m);
    st.claimed.insert(*ino);
    return dup;
}

void release_socket(int fd) noexcept {
    if (fd < 0) return;
    const auto ino = socket_inode(fd);
    ::close(fd);
    if (!ino) return;
    auto& st = the_state();
    std::lock_guard lk(st.m);
    st.claimed.erase(*ino);
}

call_deadline::call_deadline(int fd, deadline_clock::time_point at) {
    if (fd < 0) {  // no socket known: the library's per-read timeouts only
        done_ = true;
        return;
    }
    watch::entry e;
    e.fd = fd;
    e.at = at;
    id_ = the_watch().arm(std::move(e));
}

call_deadline::call_deadline(const std::set<ino_t>& before, std::uint16_t port, deadline_clock::time_point at) {
    watch::entry e;
    e.before = before;
    e.port = port;
    e.at = at;
    id_ = the_watch().arm(std::move(e));
}

bool call_deadline::disarm() noexcept {
    if (!done_) {
        done_ = true;
        try {
            fired_ = the_watch().disarm(id_);
        } catch (...) {  // a mutex that cannot be locked: nothing else to do
        }
    }
    return fired_;
}

}  // namespace distlock::backends::mysql
