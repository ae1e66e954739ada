// zk:// an asynchronous waiter keeps its node in the lock's queue for its whole
// wait (zk_queue_lock.cpp), against the standalone server (DISTLOCK_TEST_ZK_URL):
// it is served in the order it came with the blocking waiters, a waiting writer
// holds back the readers behind it, and a wait that ends without a grant
// (cancelled, timed out) leaves no node. Every waiter is on a provider of its
// own, so that the server's queue alone decides the order.
#include <catch2/catch.hpp>
#include <stop_token>
#include <thread>

#include "../wake_support.hpp"
#include "zk_names.hpp"
#include "zk_raw.hpp"
#include "zk_support.hpp"

namespace wake = distlock::test::wake;
namespace zkb = distlock::backends::zookeeper;
using distlock::test::unique_name;
using namespace std::chrono_literals;

namespace {

std::string url() { return distlock::test::env("DISTLOCK_TEST_ZK_URL"); }
std::string lock_dir(const std::string& name) { return zk_test::base_of(url()) + "/" + zkb::encode_segment(name); }

// Waits until the lock path of `name` has `n` nodes (a waiter's node made, or
// deleted); false when it never does (checked 400 times, 25 ms apart).
bool nodes_become(zk_test::raw_zk& raw, const std::string& name, std::size_t n) {
    for (int i = 0; i < 400; ++i) {
        if (raw.children(lock_dir(name)).size() == n) return true;
        std::this_thread::sleep_for(25ms);
    }
    return false;
}

bool finished(wake::outcome& o) {
    std::lock_guard lk(o.m);
    return o.done;
}

}  // namespace

TEST_CASE("zk: an async waiter keeps its place: granted before a blocking waiter that came after it",
          "[zk][async][place]") {
    zk_test::raw_zk raw(zk_test::hosts_of(url()));
    auto p1 = distlock::connect(url()), p2 = distlock::connect(url()), p3 = distlock::connect(url());
    const auto name = unique_name("zk-place-fifo");
    auto holder = p1.mutex(name);
    holder.lock();
    auto a = p2.mutex(name);
    wake::outcome oa;
    a.async_lock(30s, oa.handler());
    REQUIRE(nodes_become(raw, name, 2));  // the holder's, and A's kept between its attempts
    std::mutex m;
    std::vector<char> order;
    std::thread tb([&] {
        auto b = p3.mutex(name);
        b.lock();
        {
            std::lock_guard lk(m);
            order.push_back('B');
        }
        b.unlock();
    });
    REQUIRE(nodes_become(raw, name, 3));  // B's node, behind A's
    CHECK_FALSE(finished(oa));
    holder.unlock();
    REQUIRE(oa.wait(20s));
    REQUIRE_FALSE(oa.error);
    REQUIRE(oa.granted);
    {
        std::lock_guard lk(m);
        order.push_back('A');  // B cannot have its turn while A holds
    }
    a.unlock();
    tb.join();
    CHECK(order == std::vector<char>{'A', 'B'});
    CHECK(nodes_become(raw, name, 0));
}

TEST_CASE("zk: an async writer waiting behind readers holds back a later reader", "[zk][async][place]") {
    zk_test::raw_zk raw(zk_test::hosts_of(url()));
    auto p1 = distlock::connect(url()), p2 = distlock::connect(url()), p3 = distlock::connect(url());
    const auto name = unique_name("zk-place-rw");
    auto r1 = p1.shared_mutex(name);
    auto r2 = p3.shared_mutex(name);
    r1.lock_shared();
    r2.lock_shared();
    auto w = p2.shared_mutex(name);
    wake::outcome ow;
    w.async_lock(30s, ow.handler());
    REQUIRE(nodes_become(raw, name, 3));  // two readers, and the writer's node
    auto late = distlock::connect(url());
    auto r3 = late.shared_mutex(name);
    CHECK_FALSE(r3.try_lock_shared_for(300ms));  // behind the waiting writer
    CHECK_FALSE(finished(ow));
    CHECK(raw.children(lock_dir(name)).size() == 3);  // the late reader left nothing
    r1.unlock_shared();
    CHECK_FALSE(finished(ow));  // r2 still reads
    r2.unlock_shared();
    REQUIRE(ow.wait(20s));
    REQUIRE_FALSE(ow.error);
    REQUIRE(ow.granted);
    CHECK(w.held());
    CHECK_FALSE(r3.try_lock_shared());
    w.unlock();
    CHECK(r3.try_lock_shared_for(10s));
    r3.unlock_shared();
    CHECK(nodes_become(raw, name, 0));
}

TEST_CASE("zk: an async waiter that is cancelled or times out leaves no node", "[zk][async][place]") {
    zk_test::raw_zk raw(zk_test::hosts_of(url()));
    auto p1 = distlock::connect(url()), p2 = distlock::connect(url());
    const auto name = unique_name("zk-place-end");
    auto holder = p1.mutex(name);
    holder.lock();
    auto a = p2.mutex(name);
    wake::outcome oa;
    SECTION("cancelled") {
        std::stop_source stop;
        a.async_lock(60s, oa.handler(), stop.get_token());
        REQUIRE(nodes_become(raw, name, 2));  // its node is kept while it waits
        stop.request_stop();
        REQUIRE(oa.wait(20s));
        CHECK_FALSE(oa.granted);
        REQUIRE(oa.error);
        CHECK_THROWS_AS(std::rethrow_exception(oa.error), distlock::cancelled_error);
    }
    SECTION("timed out") {
        a.async_lock(3s, oa.handler());
        REQUIRE(nodes_become(raw, name, 2));
        REQUIRE(oa.wait(20s));
        CHECK_FALSE(oa.granted);
        CHECK_FALSE(oa.error);
    }
    // Its node went with the end of the wait (before its handler ran).
    const auto left = raw.children(lock_dir(name));
    REQUIRE(left.size() == 1);
    CHECK(raw.children(lock_dir(name)) == left);
    holder.unlock();
    CHECK(nodes_become(raw, name, 0));
    // The next acquirer gets the lock at once.
    auto next = p2.mutex(name);
    CHECK(next.try_lock());
    next.unlock();
}
