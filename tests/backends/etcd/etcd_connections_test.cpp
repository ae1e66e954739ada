// etcd:// the connections of one provider to the member under test
// (DISTLOCK_TEST_ETCD_URL), counted: locks held from many threads add no
// connection per held lock (their keys' deletions come on the provider's one
// release stream, etcd_release_feed.hpp), and requests reuse the client's
// pooled connections instead of closing one per request (no TIME_WAIT storm);
// a held lock whose deletion comes on that stream is still reported lost.
#include <catch2/catch.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "../wake_support.hpp"
#include "etcd_support.hpp"

using distlock::test::unique_name;
using namespace std::chrono_literals;

namespace {

std::string url() { return distlock::test::env("DISTLOCK_TEST_ETCD_URL"); }

// TCP sockets of the network namespace in TIME_WAIT with the member's port at
// either end (the tests run in a namespace of their own).
int time_waits(const std::string& port_hex) {
    int n = 0;
    for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
        std::ifstream in(table);
        std::string line;
        std::getline(in, line);  // the header
        while (std::getline(in, line)) {
            std::istringstream f(line);
            std::string slot, local, remote, state;
            f >> slot >> local >> remote >> state;
            const bool ours = local.size() > 4 && (local.substr(local.size() - 4) == port_hex ||
                                                   remote.substr(remote.size() - 4) == port_hex);
            if (ours && state == "06") ++n;
        }
    }
    return n;
}

// This process's established TCP connections (the process's socket
// descriptors found established in /proc/self/net/tcp{,6}; curl's wake-up
// socket pairs are not TCP).
int tcp_connections() {
    std::set<std::string> established;
    for (const char* table : {"/proc/self/net/tcp", "/proc/self/net/tcp6"}) {
        std::ifstream in(table);
        std::string line;
        std::getline(in, line);
        while (std::getline(in, line)) {
            std::istringstream f(line);
            std::string col[10];
            for (auto& c : col) f >> c;
            if (col[3] == "01") established.insert("socket:[" + col[9] + "]");
        }
    }
    int n = 0;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd", ec)) {
        std::error_code gone;
        if (established.count(std::filesystem::read_symlink(e.path(), gone).string())) ++n;
    }
    return n;
}

std::string port_hex() {
    const auto u = url();
    const auto colon = u.find(':', u.find("://") + 3);
    const int port = std::stoi(u.substr(colon + 1));
    char buf[8];
    std::snprintf(buf, sizeof buf, "%04X", port);
    return buf;
}

// Runs work(t) on `threads` threads.
template <class F>
void on_threads(int threads, F work) {
    std::vector<std::thread> ts;
    for (int t = 0; t < threads; ++t) ts.emplace_back([&, t] { work(t); });
    for (auto& t : ts) t.join();
}

}  // namespace

TEST_CASE("etcd: 320 locks held from 32 threads add no connection per held lock", "[etcd][connections]") {
    auto p = distlock::connect(url());
    {
        auto warm = p.mutex(unique_name("conn-warm"));
        warm.lock();
        warm.unlock();
    }
    const int tcp0 = tcp_connections();
    const auto prefix = unique_name("conn-held");
    std::vector<std::unique_ptr<distlock::mutex>> ms;
    for (int i = 0; i < 320; ++i) ms.push_back(std::make_unique<distlock::mutex>(p.mutex(prefix + std::to_string(i))));
    on_threads(32, [&](int t) {
        for (int i = t; i < 320; i += 32) ms[i]->lock();
    });
    const int held = tcp_connections() - tcp0;
    std::printf("320 locks held: %+d TCP connections\n", held);
    // The client's pool (32 handles, one connection each), 8 watches of
    // held keys of their own and the release stream at most; a watch per held
    // lock would make 320 more.
    CHECK(held <= 42);
    for (auto& m : ms) CHECK(m->held());
    for (auto& m : ms) m->unlock();
}

TEST_CASE("etcd: requests from 32 threads reuse the pool's connections", "[etcd][connections]") {
    auto p = distlock::connect(url());
    const auto port = port_hex();
    const auto name = unique_name("conn-churn");
    const int before = time_waits(port);
    on_threads(32, [&](int t) {
        auto m = p.mutex(name + std::to_string(t));
        for (int i = 0; i < 20; ++i) {
            m.lock();
            m.unlock();
        }
    });
    const int after = time_waits(port);
    std::printf("640 lock/unlock cycles from 32 threads: %+d sockets in TIME_WAIT\n", after - before);
    // A connection per request would leave about 2,000 (3 requests a cycle).
    CHECK(after - before <= 40);
}

TEST_CASE("etcd: a held lock past the 8 with a watch of their own is told of its key's deletion by the release stream",
          "[etcd][connections][loss]") {
    distlock::test::loss_recorder rec;  // before the provider: its callback thread calls it until it ends
    auto p = distlock::connect(url());
    distlock::test::etcd_direct etcd(url());
    const auto prefix = unique_name("conn-lost");
    auto o = rec.options();
    o.lease = 60s;  // the keepalive's check of the keys comes after 20 s
    std::vector<std::unique_ptr<distlock::mutex>> ms;
    for (int i = 0; i < 12; ++i) {
        ms.push_back(std::make_unique<distlock::mutex>(p.mutex(prefix + std::to_string(i), o)));
        ms.back()->lock();
    }
    // The last two are past the 8 watches of their own: their deletion comes on the stream.
    for (int i = 10; i < 12; ++i) {
        const auto kvs = etcd.keys(prefix + std::to_string(i));
        REQUIRE(kvs.size() == 1);
        etcd.call("/v3/kv/deleterange", {{"key", kvs[0]["key"]}});
    }
    REQUIRE(rec.wait_lost(2, 5s));
    CHECK_FALSE(rec.wait_lost(3, 300ms));
    for (int i = 0; i < 12; ++i) CHECK(ms[static_cast<std::size_t>(i)]->held() == (i < 10));
    for (auto& m : ms) m->unlock();
}
