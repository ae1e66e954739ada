// etcd:// on a three-member cluster (integration/servers/etcd-cluster.sh):
// killing the leader while a lock is held never yields two holders.
#include <catch2/catch.hpp>

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <vector>

#include "distlock/distlock.hpp"
#include "support.hpp"

using namespace std::chrono_literals;
using distlock::test::eventually;
using distlock::test::unique_name;
using clk = std::chrono::steady_clock;

namespace {

std::string url() { return distlock::test::env("DISTLOCK_TEST_ETCD_CLUSTER_URL"); }

std::string ctl(const std::string& args) {
    const auto script = distlock::test::env("DISTLOCK_TEST_ETCD_CLUSTER_CTL");
    REQUIRE_FALSE(script.empty());
    const auto r = distlock::test::run_command(script + " " + args);
    INFO("ctl " << args << " -> " << r.out);
    REQUIRE(r.status == 0);
    return distlock::test::trim_end(r.out);
}

// Kills the leader and starts it again when the test ends, however it ends.
struct leader_killed {
    std::string member;
    leader_killed() {
        member = ctl("leader");
        ctl("kill " + member);
    }
    ~leader_killed() {
        try {
            ctl("start " + member);
            ctl("wait " + member + " 60");
        } catch (...) {}
    }
};

}  // namespace

TEST_CASE("killing the leader while a lock is held never yields two holders", "[etcd][cluster]") {
    distlock::test::loss_recorder rec;  // before the providers: their callback threads call it until they end
    auto a = distlock::connect(url());
    auto b = distlock::connect(url());
    const auto name = unique_name("leader-kill");
    auto holder = a.mutex(name, rec.options());
    holder.lock();
    const auto first = holder.token();
    std::atomic<bool> waiter_holds{false};
    std::atomic<bool> release_waiter{false};
    std::uint64_t waiter_token = 0;
    std::thread waiter([&] {
        auto m = b.mutex(name);
        for (auto until = clk::now() + 60s; clk::now() < until;) {
            try {
                if (!m.try_lock_for(until - clk::now())) return;
                break;
            } catch (const distlock::unavailable_error&) {
                std::this_thread::sleep_for(100ms);  // the election: try again
            }
        }
        if (!m.held()) return;
        waiter_token = m.token();
        waiter_holds = true;
        while (!release_waiter) std::this_thread::sleep_for(10ms);
        m.unlock();
    });
    std::this_thread::sleep_for(300ms);
    int overlaps = 0, holder_gaps = 0;
    {
        leader_killed killed;
        INFO("killed member " << killed.member);
        // Three leases (lease=2s) with one member down: the holder keeps renewing
        // through the others, the waiter keeps waiting.
        for (auto until = clk::now() + 6s; clk::now() < until;) {
            const bool h = holder.held(), w = waiter_holds.load();
            if (h && w) ++overlaps;
            if (!h) ++holder_gaps;
            std::this_thread::sleep_for(20ms);
        }
        CHECK(overlaps == 0);
        CHECK(holder_gaps == 0);
        CHECK(rec.lost() == 0);
        CHECK_FALSE(waiter_holds.load());
        holder.unlock();
        CHECK(eventually([&] { return waiter_holds.load(); }, 15s));
        CHECK(waiter_token > first);
        release_waiter = true;
        waiter.join();
    }
}

TEST_CASE("threads of two providers keep a counter exact while the leader is killed and restarted", "[etcd][cluster]") {
    auto a = distlock::connect(url());
    auto b = distlock::connect(url());
    const auto name = unique_name("leader-counter");
    std::atomic<bool> stop{false};
    std::atomic<int> inside{0}, max_inside{0}, errors{0};
    long counter = 0, increments = 0;
    std::mutex tally;
    std::vector<std::thread> pool;
    for (int t = 0; t < 4; ++t) {
        pool.emplace_back([&, t] {
            auto m = (t % 2 == 0 ? a : b).mutex(name);
            while (!stop) {
                try {
                    if (!m.try_lock_for(2s)) continue;
                } catch (const distlock::unavailable_error&) {
                    ++errors;
                    std::this_thread::sleep_for(50ms);
                    continue;
                }
                int now = ++inside;
                int seen = max_inside.load();
                while (now > seen && !max_inside.compare_exchange_weak(seen, now)) {}
                long v = counter;
                std::this_thread::sleep_for(5ms);
                counter = v + 1;
                {
                    std::lock_guard lk(tally);
                    ++increments;
                }
                --inside;
                m.unlock();
            }
        });
    }
    std::this_thread::sleep_for(1s);
    {
        leader_killed killed;
        std::this_thread::sleep_for(3s);
    }  // restarted
    std::this_thread::sleep_for(1s);
    stop = true;
    for (auto& th : pool) th.join();
    INFO("increments " << increments << ", lock errors during the election " << errors.load());
    CHECK(max_inside.load() == 1);
    CHECK(counter == increments);
    CHECK(increments > 20);
}

TEST_CASE("a hung member (SIGSTOP) does not cost the holder its lock", "[etcd][cluster]") {
    // Member 1 is the first endpoint of the URL: the one the clients talk to.
    const auto pid = ctl("pid 1");
    distlock::test::loss_recorder rec;  // before the providers: their callback threads call it until they end
    auto a = distlock::connect(url());
    auto b = distlock::connect(url());
    const auto name = unique_name("hung-member");
    auto holder = a.mutex(name, rec.options());
    holder.lock();
    REQUIRE(std::system(("kill -STOP " + pid).c_str()) == 0);
    struct resume {
        std::string pid;
        ~resume() { std::system(("kill -CONT " + pid).c_str()); }
    } resume_member{pid};
    // Three leases: renewals time out on the hung member after TTL/3 and move on.
    bool always_held = true;
    for (auto until = clk::now() + 6s; clk::now() < until; std::this_thread::sleep_for(50ms))
        always_held &= holder.held();
    CHECK(always_held);
    CHECK(rec.lost() == 0);
    auto other = b.mutex(name);
    bool got = true;
    try {
        got = other.try_lock_for(1s);
    } catch (const distlock::unavailable_error&) {
        got = false;  // timed out on the hung member: also not a grant
    }
    CHECK_FALSE(got);
    holder.unlock();
    CHECK(other.try_lock_for(15s));
    other.unlock();
}
