// distlock-zk-bench: zk:// against its floors and against Apache Curator, on one
// server in one run (the numbers of docs/benchmarks/zookeeper.md).
//
//   distlock-zk-bench [--url URL] [--cycles N] [--handoffs N] [--rounds R] [--curator CLASSPATH_FILE]
//
// URL defaults to $DISTLOCK_TEST_ZK_URL (exit 77 when neither is given). Rows:
//   exists round trip                 provider::round_trip(), the cheapest request
//   create+delete (C client floor)    a bare EPHEMERAL_SEQUENTIAL create and its delete
//   distlock uncontended cycle        lock() + unlock() of one mutex, nobody else around
//   create+delete (Java floor)        the same with the Java client under Curator
//   Curator uncontended cycle         InterProcessMutex acquire() + release() (JVM warmed up)
// Every row's samples come from the same interleaved rounds (after a warm-up
// round that is not counted), so that the machine's load hits them alike.
//   distlock -> distlock handoff      from the holder's unlock() call to the waiter's lock() return
//   distlock -> Curator handoff       from distlock's unlock() call to Curator's "locked" line
#include <zookeeper/zookeeper.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <mutex>
#include <numeric>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <vector>

#include "child_process.hpp"
#include "distlock/distlock.hpp"
#include "distlock/spi/backend.hpp"
#include "support.hpp"
#include "zk_names.hpp"
#include "zk_support.hpp"

using namespace std::chrono_literals;
using clk = std::chrono::steady_clock;

namespace {

double us(clk::duration d) { return std::chrono::duration<double, std::micro>(d).count(); }

void row(const std::string& what, std::vector<double> v) {
    if (v.empty()) {
        std::printf("| %-34s | %8s | %8s | %8s | %8s | %6s |\n", what.c_str(), "-", "-", "-", "-", "-");
        return;
    }
    std::sort(v.begin(), v.end());
    auto pct = [&](double p) { return v[std::min(v.size() - 1, static_cast<std::size_t>(p * v.size()))]; };
    double mean = std::accumulate(v.begin(), v.end(), 0.0) / v.size();
    std::printf("| %-34s | %8.0f | %8.0f | %8.0f | %8.0f | %6zu |\n", what.c_str(), pct(0.5), pct(0.9), pct(0.99), mean,
                v.size());
    std::fflush(stdout);
}

// A bare C client session for the create+delete floor.
struct bare_session {
    zhandle_t* zh = nullptr;
    std::mutex m;
    std::condition_variable cv;
    bool up = false;
    explicit bare_session(const std::string& hosts) {
        zoo_set_debug_level(ZOO_LOG_LEVEL_ERROR);
        zh = zookeeper_init(
            hosts.c_str(),
            [](zhandle_t*, int type, int state, const char*, void* ctx) {
                auto* self = static_cast<bare_session*>(ctx);
                if (type != ZOO_SESSION_EVENT) return;
                std::lock_guard lk(self->m);
                self->up = state == ZOO_CONNECTED_STATE;
                self->cv.notify_all();
            },
            10000, nullptr, this, 0);
        std::unique_lock lk(m);
        cv.wait_for(lk, 10s, [&] { return up; });
    }
    ~bare_session() { zookeeper_close(zh); }
};

// A CuratorLock.java process (see tests/interop/curator): it says "ready" once
// started, and "quit" ends it.
class curator_peer {
public:
    curator_peer(const std::string& classpath, const std::string& hosts, const std::string& path)
        : proc_({"java", "-Xmx256m", "-cp", classpath, "CuratorLock", hosts, path, "10000"}, {.stdin_pipe = true}) {
        if (line() != "ready") throw std::runtime_error("CuratorLock did not start");
    }
    ~curator_peer() {
        say("quit");
        proc_.close_input();
        proc_.wait_exit_for(60s);  // then proc_'s destructor kills it
    }
    void say(const std::string& s) { proc_.say(s); }
    // The next line, or "" when none came in 5 minutes (a JIT warm-up takes a while).
    std::string line() { return proc_.read_line(5min); }

private:
    distlock::test::child_process proc_;
};

}  // namespace

int main(int argc, char** argv) try {
    std::string url = distlock::test::env("DISTLOCK_TEST_ZK_URL"), classpath_file;
    int cycles = 1000, handoffs = 200, rounds = 5;
    for (int i = 1; i + 1 < argc; i += 2) {
        std::string a = argv[i];
        if (a == "--url") url = argv[i + 1];
        else if (a == "--cycles") cycles = std::stoi(argv[i + 1]);
        else if (a == "--handoffs") handoffs = std::stoi(argv[i + 1]);
        else if (a == "--rounds") rounds = std::max(1, std::stoi(argv[i + 1]));
        else if (a == "--curator") classpath_file = argv[i + 1];
        else {
            std::cerr << "unknown option " << a << "\n";
            return 2;
        }
    }
    if (url.empty()) {
        std::cerr << "no URL: --url zk://... or DISTLOCK_TEST_ZK_URL\n";
        return 77;
    }
    const auto hosts = zk_test::hosts_of(url);
    const auto base = zk_test::base_of(url);
    const auto run = distlock::spi::random_token().substr(0, 8);
    auto p = distlock::connect(url);
    std::printf(
        "zk:// benchmark against %s: %d cycles and %d handoffs in %d interleaved rounds after a warm-up round "
        "(microseconds)\n\n",
        p.url().c_str(), cycles, handoffs, rounds);
    std::printf("| %-34s | %8s | %8s | %8s | %8s | %6s |\n", "operation", "p50", "p90", "p99", "mean", "n");
    std::printf("|%s|%s|%s|%s|%s|%s|\n", std::string(36, '-').c_str(), std::string(10, '-').c_str(),
                std::string(10, '-').c_str(), std::string(10, '-').c_str(), std::string(10, '-').c_str(),
                std::string(8, '-').c_str());

    // Interleaved rounds (floor, distlock, Curator, handoffs), so that a change of
    // load on the machine hits every row alike.
    std::string classpath;
    if (!classpath_file.empty()) std::getline(std::ifstream(classpath_file), classpath);
    std::unique_ptr<curator_peer> cur, cur_mixed;
    const auto mixed_name = "bench-mixed-" + run;
    if (!classpath.empty()) {
        cur = std::make_unique<curator_peer>(classpath, hosts, base + "/bench-curator-" + run);
        cur_mixed = std::make_unique<curator_peer>(classpath, hosts, base + "/" + mixed_name);
        cur->say("bench 2000");  // JIT warm-up
        cur->line();
    }
    bare_session bare(hosts);
    const auto floor_dir = base + "/bench-floor-" + run;
    zoo_create(bare.zh, base.c_str(), nullptr, -1, &ZOO_OPEN_ACL_UNSAFE, ZOO_PERSISTENT, nullptr, 0);
    zoo_create(bare.zh, floor_dir.c_str(), nullptr, -1, &ZOO_OPEN_ACL_UNSAFE, ZOO_PERSISTENT, nullptr, 0);
    auto uncontended = p.mutex("bench-uncontended-" + run);
    auto a = distlock::connect(url);
    auto b = distlock::connect(url);
    const auto handoff_name = "bench-handoff-" + run;
    auto mixed = p.mutex(mixed_name);
    std::vector<double> rtt, floor, java_floor, mine, theirs, handoff, to_curator;
    const int per_round = std::max(1, cycles / rounds), handoffs_per_round = std::max(1, handoffs / rounds);
    for (int r = 0; r < rounds + 1; ++r) {
        const bool warmup = r == 0;  // round 0 warms every path up and is not counted
        for (int i = 0; i < per_round; ++i) {
            auto t = p.round_trip();
            if (!warmup) rtt.push_back(us(*t));
        }
        char made[512];
        for (int i = 0; i < per_round; ++i) {
            auto t0 = clk::now();
            if (zoo_create(bare.zh, (floor_dir + "/n-").c_str(), nullptr, -1, &ZOO_OPEN_ACL_UNSAFE,
                           ZOO_EPHEMERAL_SEQUENTIAL, made, sizeof made) != ZOK ||
                zoo_delete(bare.zh, made, -1) != ZOK)
                throw std::runtime_error("bare create/delete failed");
            if (!warmup) floor.push_back(us(clk::now() - t0));
        }
        for (int i = 0; i < per_round; ++i) {
            auto t0 = clk::now();
            uncontended.lock();
            uncontended.unlock();
            if (!warmup) mine.push_back(us(clk::now() - t0));
        }
        if (cur) {
            for (auto [cmd, out] :
                 {std::pair{std::string("samples "), &theirs}, std::pair{std::string("floor "), &java_floor}}) {
                cur->say(cmd + std::to_string(per_round));
                std::istringstream in(cur->line());
                std::string word;
                in >> word;
                for (double ns; in >> ns;)
                    if (!warmup) out->push_back(ns / 1e3);
            }
        }
        // distlock -> distlock: two sessions take turns; the waiter is queued (its
        // watch set) before the holder lets go.
        {
            std::mutex mu;
            std::condition_variable cv;
            int turn = 0;
            clk::time_point released_at;
            auto player = [&](distlock::provider& prov, int parity) {
                auto m = prov.mutex(handoff_name);
                for (;;) {
                    {
                        std::unique_lock lk(mu);
                        cv.wait(lk, [&] { return turn % 2 == parity || turn > handoffs_per_round; });
                        if (turn > handoffs_per_round) return;
                    }
                    m.lock();
                    auto got = clk::now();
                    std::unique_lock lk(mu);
                    if (turn > 0 && !warmup) handoff.push_back(us(got - released_at));
                    ++turn;
                    cv.notify_all();
                    lk.unlock();
                    std::this_thread::sleep_for(15ms);  // the other side queues and sets its watch
                    lk.lock();
                    released_at = clk::now();
                    lk.unlock();
                    m.unlock();
                }
            };
            std::thread ta(player, std::ref(a), 0), tb(player, std::ref(b), 1);
            ta.join();
            tb.join();
        }
        // distlock -> Curator.
        if (cur_mixed) {
            for (int i = 0; i < handoffs_per_round; ++i) {
                mixed.lock();
                cur_mixed->say("lockq");
                std::this_thread::sleep_for(15ms);
                auto t0 = clk::now();
                mixed.unlock();
                auto l = cur_mixed->line();
                if (l != "locked") throw std::runtime_error("Curator said " + l);
                if (!warmup) to_curator.push_back(us(clk::now() - t0));
                cur_mixed->say("unlock");
                cur_mixed->line();
            }
        }
    }
    zoo_delete(bare.zh, floor_dir.c_str(), -1);
    row("exists round trip", rtt);
    row("create+delete (C client floor)", floor);
    row("distlock uncontended cycle", mine);
    row(cur ? "create+delete (Java client floor)" : "Java floor (no --curator)", java_floor);
    row(cur ? "Curator uncontended cycle" : "Curator uncontended (no --curator)", theirs);
    row("distlock -> distlock handoff", handoff);
    row(cur ? "distlock -> Curator handoff" : "distlock -> Curator (no --curator)", to_curator);
    auto c = distlock::backends::zookeeper::read_counters();
    std::printf(
        "\nclient counters: %llu lock nodes created, %llu getChildren, %llu predecessor watches set, %llu "
        "predecessor wake-ups\n",
        static_cast<unsigned long long>(c.lock_nodes_created), static_cast<unsigned long long>(c.children_reads),
        static_cast<unsigned long long>(c.predecessor_watches), static_cast<unsigned long long>(c.predecessor_wakeups));
    return 0;
} catch (const std::exception& e) {
    std::cerr << "distlock-zk-bench: " << e.what() << "\n";
    return 1;
}
