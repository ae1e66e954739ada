// The ZooKeeper C client's descriptors and sends as zk:// uses it, against the
// standalone server (DISTLOCK_TEST_ZK_URL): its socket and pipe are
// close-on-exec, and it never sends without MSG_NOSIGNAL.
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <filesystem>
#include <map>

#include "distlock/distlock.hpp"
#include "support.hpp"

using distlock::test::unique_name;

// ---- every send() of the process, for the MSG_NOSIGNAL check -----------------
// Defined in the executable, this send() is the one the ZooKeeper C client's
// calls resolve to (the executable comes first in the lookup scope); it forwards
// to sendto(), a different symbol, and counts sends without MSG_NOSIGNAL.
namespace {
std::atomic<long> g_sends{0}, g_sends_without_nosignal{0};
}
extern "C" ssize_t send(int fd, const void* buf, size_t len, int flags) {
    g_sends++;
    if (!(flags & MSG_NOSIGNAL)) g_sends_without_nosignal++;
    return ::sendto(fd, buf, len, flags, nullptr, 0);
}

namespace {

std::string url() { return distlock::test::env("DISTLOCK_TEST_ZK_URL"); }

}  // namespace

namespace {

// Open descriptors of this process: fd -> (device, inode).
std::map<int, std::pair<dev_t, ino_t>> open_fds() {
    std::map<int, std::pair<dev_t, ino_t>> out;
    for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) {
        int fd = std::stoi(e.path().filename().string());
        struct stat st {};
        if (::fstat(fd, &st) == 0) out[fd] = {st.st_dev, st.st_ino};
    }
    return out;
}

}  // namespace

TEST_CASE("the C client's socket and wake-up pipe are close-on-exec", "[zookeeper][fd]") {
    const auto before = open_fds();
    auto p = distlock::connect(url());
    auto m = p.mutex(unique_name("cloexec"));
    REQUIRE(m.try_lock());
    int socks = 0, checked = 0;
    for (const auto& [fd, id] : open_fds()) {
        auto it = before.find(fd);
        if (it != before.end() && it->second == id) continue;
        struct stat st {};
        if (::fstat(fd, &st) != 0) continue;  // the directory iterator's own
        if (S_ISSOCK(st.st_mode)) ++socks;
        if (!S_ISSOCK(st.st_mode) && !S_ISFIFO(st.st_mode)) continue;
        ++checked;
        INFO("fd " << fd << (S_ISSOCK(st.st_mode) ? " (socket)" : " (pipe)"));
        CHECK((::fcntl(fd, F_GETFD) & FD_CLOEXEC) != 0);
    }
    CHECK(socks >= 1);
    CHECK(checked >= 3);  // the session's socket and the two ends of its pipe
    m.unlock();
}

TEST_CASE("the C client sends with MSG_NOSIGNAL: a peer that went away cannot raise SIGPIPE", "[zookeeper][fd]") {
    const auto sends = g_sends.load();
    const auto bare = g_sends_without_nosignal.load();
    auto p = distlock::connect(url());
    auto m = p.mutex(unique_name("nosignal"));
    REQUIRE(m.try_lock());
    m.unlock();
    CHECK(g_sends.load() > sends + 3);  // the interposed send() saw the client's sends
    CHECK(g_sends_without_nosignal.load() == bare);
}
