// zk:// against the three-server ensemble (DISTLOCK_TEST_ZK_ENSEMBLE_URL and
// DISTLOCK_TEST_ZK_ENSEMBLE_CTL from integration/backends.sh up zk-ensemble):
// the leader is killed while the lock is held and contended; inspect and
// leader() from a session on another server than the holder's.
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <vector>

#include "child_process.hpp"
#include "distlock/distlock.hpp"
#include "support.hpp"
#include "zk_support.hpp"

using namespace std::chrono_literals;
using clk = std::chrono::steady_clock;
using distlock::test::child_process;
using distlock::test::eventually;
using distlock::test::unique_name;

namespace {

std::string url() { return distlock::test::env("DISTLOCK_TEST_ZK_ENSEMBLE_URL"); }

// Runs the ensemble's control script; returns its first output line.
std::string ctl(const std::string& args) {
    auto script = distlock::test::env("DISTLOCK_TEST_ZK_ENSEMBLE_CTL");
    REQUIRE_FALSE(script.empty());
    const auto out = distlock::test::run_command(script + " " + args + " 2>/dev/null").out;
    return distlock::test::trim_end(out.substr(0, out.find('\n')));
}

int leader() {
    for (int i = 0; i < 100; ++i) {
        auto l = ctl("leader");
        if (!l.empty()) return std::stoi(l);
        std::this_thread::sleep_for(100ms);
    }
    FAIL("no leader in the ensemble");
    return 0;
}

// Brings a killed server back and waits until it serves again.
struct restart_on_exit {
    int server = 0;
    ~restart_on_exit() {
        if (server == 0) return;
        auto script = distlock::test::env("DISTLOCK_TEST_ZK_ENSEMBLE_CTL");
        std::system((script + " start " + std::to_string(server) + " >/dev/null 2>&1").c_str());
        std::system((script + " wait " + std::to_string(server) + " 60 >/dev/null 2>&1").c_str());
    }
};

// The test URL with only the `index`-th server (1-based, as the control script
// numbers them): a session that stays on that server.
std::string member_url(int index) {
    const auto all = url();
    const auto hosts = zk_test::hosts_of(all);
    std::size_t from = 0;
    for (int i = 1; i < index; ++i) from = hosts.find(',', from) + 1;
    const auto host = hosts.substr(from, hosts.find(',', from) - from);
    const auto at = all.find(hosts);
    return all.substr(0, at) + host + all.substr(at + hosts.size());
}

struct grant {
    int who;
    std::uint64_t token;
    clk::time_point from, to;  // to = unlock, or the moment the holder saw the loss
    bool lost;
};

}  // namespace

TEST_CASE("a holder keeps its lock while the leader is killed and re-elected", "[zookeeper][ensemble]") {
    distlock::test::loss_recorder rec;  // before the providers: their callback threads call it until they end
    auto a = distlock::connect(url());
    auto b = distlock::connect(url());
    const auto name = unique_name("leader-hold");
    auto holder = a.mutex(name, rec.options());
    holder.lock();
    const auto token = holder.token();

    restart_on_exit restart;
    restart.server = leader();
    ctl("kill " + std::to_string(restart.server));
    const auto killed_at = clk::now();

    // While the ensemble elects a new leader, the other client must never get the
    // lock as long as the holder believes it holds it.
    auto other = b.mutex(name);
    int both = 0, tries = 0;
    while (clk::now() - killed_at < 6s) {
        bool got = false;
        try {
            got = other.try_lock_for(200ms);
        } catch (const distlock::unavailable_error&) {
            std::this_thread::sleep_for(50ms);  // no quorum yet
        }
        ++tries;
        if (got) {
            if (holder.held()) ++both;
            other.unlock();
        }
    }
    INFO(tries << " tries; new leader " << ctl("leader") << "; holder lost: " << rec.lost());
    CHECK(both == 0);
    if (holder.held()) {
        // The session survived the election: the lock is still the holder's.
        CHECK_FALSE(other.try_lock());
        holder.unlock();
        REQUIRE(other.try_lock_for(10s));
        CHECK(other.token() > token);
        other.unlock();
    } else {
        WARN("the holder declared its lock lost during the election (conservative, allowed)");
        holder.unlock();
        REQUIRE(other.try_lock_for(10s));
        CHECK(other.token() > token);
        other.unlock();
    }
}

TEST_CASE("killing the leader under contention never yields two holders", "[zookeeper][ensemble]") {
    constexpr int contenders = 4;
    const auto name = unique_name("leader-contended");
    std::vector<distlock::provider> providers;
    for (int i = 0; i < contenders; ++i) providers.push_back(distlock::connect(url()));

    std::mutex grants_mutex;
    std::vector<grant> grants;
    std::atomic<int> inside{0}, max_inside{0}, errors{0};
    std::atomic<bool> stop{false};
    std::vector<std::thread> pool;
    for (int i = 0; i < contenders; ++i) {
        pool.emplace_back([&, i] {
            auto m = providers[i].mutex(name);
            while (!stop) {
                try {
                    if (!m.try_lock_for(500ms)) continue;
                } catch (const distlock::error&) {
                    ++errors;
                    std::this_thread::sleep_for(50ms);
                    continue;
                }
                grant g{i, m.token(), clk::now(), {}, false};
                int now_inside = ++inside;
                int seen = max_inside.load();
                while (now_inside > seen && !max_inside.compare_exchange_weak(seen, now_inside)) {}
                // Work in small steps, stopping as soon as the lock is reported lost.
                for (int step = 0; step < 10 && m.held(); ++step) std::this_thread::sleep_for(3ms);
                g.lost = !m.held();
                --inside;
                g.to = clk::now();
                m.unlock();
                std::lock_guard lk(grants_mutex);
                grants.push_back(g);
            }
        });
    }
    // Counts, not rates: wait for the grants however slow the machine is.
    auto granted_since = [&](clk::time_point t) {
        std::lock_guard lk(grants_mutex);
        return static_cast<std::size_t>(
            std::count_if(grants.begin(), grants.end(), [&](const grant& g) { return g.from > t; }));
    };
    const bool warmed_up = distlock::test::eventually([&] { return granted_since(clk::time_point{}) > 10; }, 60s);
    const std::size_t before_kill = granted_since(clk::time_point{});
    restart_on_exit restart;
    restart.server = leader();
    ctl("kill " + std::to_string(restart.server));
    const auto killed_at = clk::now();
    // The lock works again under the new leader.
    const bool recovered = distlock::test::eventually([&] { return granted_since(killed_at) > 10; }, 60s);
    stop = true;
    for (auto& t : pool) t.join();

    const std::size_t after_kill = granted_since(killed_at);
    INFO(grants.size() << " grants, " << before_kill << " before the kill, " << after_kill << " after it; "
                       << errors.load() << " errors while there was no quorum");
    CHECK(warmed_up);
    CHECK(recovered);
    CHECK(max_inside.load() == 1);
    // No two grants overlap in time, and tokens increase in grant order.
    std::sort(grants.begin(), grants.end(), [](const grant& x, const grant& y) { return x.from < y.from; });
    int overlaps = 0, disorder = 0;
    for (std::size_t k = 1; k < grants.size(); ++k) {
        if (grants[k].from < grants[k - 1].to) ++overlaps;
        if (grants[k].token <= grants[k - 1].token) ++disorder;
    }
    CHECK(overlaps == 0);
    CHECK(disorder == 0);
}

TEST_CASE("on the ensemble, a holder frozen past its session timeout is told it lost the lock when it resumes",
          "[zookeeper][ensemble][expiry]") {
    auto p = distlock::connect(url());
    const auto session = p.default_lease();
    const auto name = unique_name("frozen-ensemble");
    child_process holder({distlock::test::beside_test("distlock-zk-helper"), "hold", url(), name});
    auto line = holder.read_line(10s);
    REQUIRE(line.rfind("locked ", 0) == 0);
    const std::uint64_t frozen_token = std::stoull(line.substr(7));
    REQUIRE(holder.signal(SIGSTOP));
    // The quorum expires the silent session (a closeSession transaction) and the
    // lock moves on, with a higher czxid.
    auto next = p.mutex(name);
    REQUIRE(next.try_lock_for(session * 3 + 5s));
    CHECK(next.token() > frozen_token);
    REQUIRE(holder.signal(SIGCONT));
    auto lost = holder.read_line(session * 2 + 3s);
    INFO("holder said: " << lost);
    CHECK(lost.rfind("lost ", 0) == 0);
    CHECK(holder.read_line(5s) == "released-by-loss");
    CHECK(holder.wait_exit() == 0);
    CHECK(next.held());
    next.unlock();
}

// ZooKeeper orders reads per session only: a server answers a read from what
// it has applied, which may lag behind the quorum. inspect and leader() are
// monitoring calls that must not show a lock free when its grant completed
// before they were called (nor held after its release completed): they sync the
// lock path first. The holder is on the leader, each inspector on a follower,
// so that the grant's commit reaches the inspector's server last; many rounds,
// as the lag is short.
TEST_CASE("inspect and leader() on another server see every grant and release that completed before them",
          "[zookeeper][ensemble][inspect]") {
    const int lead = leader();
    auto holder = distlock::connect(member_url(lead));
    std::vector<distlock::provider> inspectors;
    for (int i = 1; i <= 3; ++i)
        if (i != lead) inspectors.push_back(distlock::connect(member_url(i)));
    REQUIRE(inspectors.size() == 2);
    int rounds = 0, held_missed = 0, free_missed = 0, leader_missed = 0, resigned_missed = 0;
    const auto until = clk::now() + 4s;
    while (rounds < 300 && clk::now() < until) {
        ++rounds;
        const auto name = unique_name("inspect-follower");
        auto m = holder.mutex(name);
        REQUIRE(m.try_lock());
        for (auto& p : inspectors) held_missed += p.inspect(name).held != std::optional<bool>(true);
        m.unlock();
        for (auto& p : inspectors) free_missed += p.inspect(name).held != std::optional<bool>(false);
        auto e = holder.election(name + "-e");
        REQUIRE(e.campaign(5s));
        for (auto& p : inspectors) leader_missed += p.election(name + "-e").leader().held != std::optional<bool>(true);
        e.resign();
        for (auto& p : inspectors)
            resigned_missed += p.election(name + "-e").leader().held != std::optional<bool>(false);
    }
    INFO(rounds << " rounds, holder on server " << lead);
    CHECK(rounds >= 20);
    CHECK(held_missed == 0);
    CHECK(free_missed == 0);
    CHECK(leader_missed == 0);
    CHECK(resigned_missed == 0);
}
