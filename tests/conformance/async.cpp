// The lock contract through the asynchronous API (include/distlock/async.hpp),
// on every backend URL: exclusion among waiters that hold no thread, across
// connections and processes; timeouts; cancellation mid-wait, after which the
// next acquirer gets the lock at once and nothing is left on the server;
// losses through on_lost; typed errors in the handler. Run alone with the
// tag [async].
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <stop_token>
#include <thread>
#include <vector>

#include "async_wait.hpp"
#include "child_process.hpp"
#include "distlock/distlock.hpp"
#include "distlock/spi/backend.hpp"
#include "distlock/testing.hpp"
#include "suite.hpp"
#include "support.hpp"

using namespace std::chrono_literals;
using distlock::test::async_wait;
using distlock::test::backend_url;
using distlock::test::connect_under_test;
using distlock::test::errc_of;
using distlock::test::eventually;
using distlock::test::released;
using distlock::test::unique_name;

namespace distlock::test {

async_rounds::async_rounds(long rounds, std::function<void()> work) : left_(rounds), work_(std::move(work)) {}

void async_rounds::start(mutex& m) {
    m.async_lock(std::chrono::seconds(120), [this, &m](std::exception_ptr e, bool granted) {
        if (e || !granted) {
            fail(e ? "error " + std::to_string(errc_of(e)) : "timed out");
            return;
        }
        const bool mine = left_.fetch_sub(1) > 0;  // a round left to do
        if (mine) work_();
        m.async_unlock([this, &m, mine] {
            if (mine) start(m);
            else ++ended_;
        });
    });
}

bool async_rounds::wait(int chains, std::chrono::milliseconds limit) {
    return eventually([&] { return ended_.load() == chains; }, limit);
}

std::string async_rounds::errors() const {
    std::lock_guard lk(mutex_);
    return errors_;
}

void async_rounds::fail(const std::string& why) {
    {
        std::lock_guard lk(mutex_);
        errors_ += why + "\n";
    }
    ++ended_;
}

}  // namespace distlock::test

TEST_CASE("async waiters of two connections never hold the lock at once", "[contract][async][exclusion]") {
    auto a = connect_under_test();
    auto b = connect_under_test();
    const auto name = unique_name("async-exclusion");
    constexpr int chains = 8, rounds = 40;
    distlock::test::critical_section section;
    std::vector<distlock::mutex> ms;
    ms.reserve(chains);
    for (int i = 0; i < chains; ++i) ms.push_back((i % 2 == 0 ? a : b).mutex(name));
    distlock::test::async_rounds run(rounds, [&] { section.pass(100us); });
    for (auto& m : ms) run.start(m);
    CHECK(run.wait(chains, 120s));
    CHECK(run.errors() == "");
    CHECK(section.max_inside.load() == 1);
    CHECK(section.counter == rounds);
}

TEST_CASE("processes waiting asynchronously increment a shared counter file exactly",
          "[contract][async][exclusion][needs:cross_process]") {
    const auto name = unique_name("async-processes");
    const auto dir = std::filesystem::temp_directory_path() / ("distlock-conf-" + unique_name("async"));
    std::filesystem::create_directories(dir);
    const auto file = (dir / "counter").string();
    { std::ofstream(file) << 0 << '\n'; }
    constexpr int procs = 3, rounds = 20;
    std::vector<std::unique_ptr<distlock::test::child_process>> kids;
    for (int i = 0; i < procs; ++i)
        kids.push_back(distlock::test::run_helper({"count-async", backend_url(), name, file, std::to_string(rounds)}));
    for (auto& k : kids) CHECK(k->wait_exit() == 0);
    long total = -1;
    std::ifstream(file) >> total;
    CHECK(total == procs * rounds);
    std::filesystem::remove_all(dir);
}

TEST_CASE("an async wait ends at its deadline, not granted, and leaves nothing", "[contract][async][waiting]") {
    auto a = connect_under_test();
    auto b = connect_under_test();
    const auto name = unique_name("async-timeout");
    auto holder = a.mutex(name);
    holder.lock();
    auto m = b.mutex(name);
    async_wait w;
    const auto started = std::chrono::steady_clock::now();
    m.async_lock(400ms, w.handler());
    bool arrived = false;
    const auto got = w.get(arrived);
    REQUIRE(arrived);
    CHECK(errc_of(got.error) == 0);
    CHECK_FALSE(got.granted);
    CHECK(std::chrono::steady_clock::now() - started >= 350ms);  // not before its deadline
    CHECK_FALSE(m.held());
    holder.unlock();
    auto c = connect_under_test().mutex(name);
    CHECK(c.try_lock());  // at once: the timed-out wait left nothing queued
    c.unlock();
}

TEST_CASE("a cancelled async wait leaves nothing; the next acquirer gets the lock at once",
          "[contract][async][cancel]") {
    auto a = connect_under_test();
    auto b = connect_under_test();
    const auto name = unique_name("async-cancel");
    auto holder = a.mutex(name);
    holder.lock();
    auto m = b.mutex(name);
    std::stop_source stop;
    async_wait w;
    m.async_lock(1h, w.handler(), stop.get_token());
    std::this_thread::sleep_for(300ms);
    CHECK_FALSE(w.ready());
    stop.request_stop();
    bool arrived = false;
    const auto got = w.get(arrived, 30s);
    REQUIRE(arrived);
    CHECK(errc_of(got.error) == static_cast<int>(distlock::errc::cancelled));
    CHECK_FALSE(got.granted);
    CHECK_FALSE(m.held());
    holder.unlock();
    auto c = connect_under_test().mutex(name);
    CHECK(c.try_lock());  // one attempt: nothing of the cancelled wait stands in its way
    c.unlock();
}

TEST_CASE("an async waiter gets the lock after a release, and its grant may be released from another thread",
          "[contract][async][waiting]") {
    auto a = connect_under_test();
    auto b = connect_under_test();
    const auto name = unique_name("async-handoff");
    auto holder = a.mutex(name);
    holder.lock();
    const auto holder_token = holder.token();
    auto m = b.mutex(name);
    async_wait w;
    m.async_lock(60s, w.handler());
    std::this_thread::sleep_for(300ms);
    CHECK_FALSE(w.ready());
    holder.unlock();
    bool arrived = false;
    const auto got = w.get(arrived);
    REQUIRE(arrived);
    CHECK(got.granted);
    CHECK(got.thread != std::this_thread::get_id());
    CHECK(m.held());
    if (holder_token != 0) CHECK(m.token() > holder_token);
    std::thread([&] { m.unlock(); }).join();  // the grant is the object's, not a thread's
    CHECK_FALSE(m.held());
    auto c = a.mutex(name);
    CHECK(c.try_lock());
    c.unlock();
}

TEST_CASE("the loss of an async grant is reported through on_lost",
          "[contract][async][loss][needs:loss_detection][needs:break_lock]") {
    auto a = connect_under_test();
    const auto name = unique_name("async-loss");
    distlock::test::loss_recorder rec;
    auto m = a.mutex(name, rec.options());
    async_wait w;
    m.async_lock(30s, w.handler());
    bool arrived = false;
    REQUIRE(w.get(arrived).granted);
    const auto token = m.token();
    distlock::testing::break_lock(a, name);
    const auto bound = std::max<std::chrono::milliseconds>(5s, 2 * a.default_lease());
    CHECK(eventually([&] { return !m.held(); }, bound));
    CHECK(rec.wait_lost(1, 2s));
    const auto seen = rec.losses();
    REQUIRE(seen.size() == 1);
    CHECK(seen[0].token == token);
    CHECK(released([&](distlock::release_handler h) { m.async_unlock(std::move(h)); }));
}

TEST_CASE("async readers hold together and a writer waits for them",
          "[contract][async][read_write][needs:read_write]") {
    auto a = connect_under_test();
    auto b = connect_under_test();
    const auto name = unique_name("async-rw");
    auto rw = a.shared_mutex(name);
    async_wait r1, r2, wr;
    rw.async_lock_shared(30s, r1.handler());
    rw.async_lock_shared(30s, r2.handler());
    bool arrived = false;
    CHECK(r1.get(arrived).granted);
    CHECK(r2.get(arrived).granted);
    // Asked from a thread that took no read grant: the one taken asynchronously last.
    CHECK(rw.held_shared());
    if (a.caps().supports(distlock::feature::fencing)) CHECK(rw.shared_token() > 0);
    auto writer = b.shared_mutex(name);
    writer.async_lock(60s, wr.handler());
    std::this_thread::sleep_for(300ms);
    CHECK_FALSE(wr.ready());
    for (int i = 0; i < 2; ++i) CHECK(released([&](distlock::release_handler h) { rw.async_unlock_shared(h); }));
    const auto got = wr.get(arrived);
    REQUIRE(arrived);
    CHECK(got.granted);
    CHECK(writer.held());
    CHECK(released([&](distlock::release_handler h) { writer.async_unlock(h); }));
}

TEST_CASE("async permits: at most the semaphore's size at once", "[contract][async][semaphore][needs:semaphore]") {
    auto a = connect_under_test();
    auto b = connect_under_test();
    const auto name = unique_name("async-sem");
    auto s1 = a.semaphore(name, 2);
    auto s2 = b.semaphore(name, 2);
    async_wait p1, p2, p3;
    s1.async_acquire(30s, p1.handler());
    s2.async_acquire(30s, p2.handler());
    bool arrived = false;
    CHECK(p1.get(arrived).granted);
    CHECK(p2.get(arrived).granted);
    // Asked from a thread that took no permit: the one taken asynchronously last.
    if (a.caps().supports(distlock::feature::fencing)) CHECK(s1.token() > 0);
    s2.async_acquire(60s, p3.handler());
    std::this_thread::sleep_for(300ms);
    CHECK_FALSE(p3.ready());
    CHECK(released([&](distlock::release_handler h) { s1.async_release(h); }));
    const auto got = p3.get(arrived);
    REQUIRE(arrived);
    CHECK(got.granted);
    CHECK(s2.held() == 2);
}

TEST_CASE("an async permit of another size than the name's holders use is an invalid argument, in the handler",
          "[contract][async][semaphore][input][needs:semaphore][needs:permit_limit]") {
    auto a = connect_under_test();
    const auto name = unique_name("async-sem-size");
    auto s = a.semaphore(name, 2);
    REQUIRE(s.try_acquire());
    auto other = a.semaphore(name, 3);
    async_wait w;
    other.async_acquire(5s, w.handler());
    bool arrived = false;
    const auto got = w.get(arrived);
    REQUIRE(arrived);
    CHECK(errc_of(got.error) == static_cast<int>(distlock::errc::invalid_argument));
    CHECK_FALSE(got.granted);
    s.release();
}

TEST_CASE("an async multi-lock takes every part or none", "[contract][async][multi]") {
    auto a = connect_under_test();
    auto b = connect_under_test();
    const auto x = unique_name("async-multi-x"), y = unique_name("async-multi-y");
    auto blocker = b.mutex(y);
    blocker.lock();
    distlock::test::loss_recorder rec;  // for the message, should a part be lost
    auto ml = a.multi_lock({x, y}, rec.options());
    async_wait timed_out;
    ml.async_lock(400ms, timed_out.handler());
    bool arrived = false;
    const auto got = timed_out.get(arrived);
    REQUIRE(arrived);
    CHECK(errc_of(got.error) == 0);
    CHECK_FALSE(got.granted);
    auto other = b.mutex(x);
    CHECK(other.try_lock());  // the part taken before the blocked one was given back
    other.unlock();
    async_wait later;
    ml.async_lock(60s, later.handler());
    std::this_thread::sleep_for(300ms);
    CHECK_FALSE(later.ready());
    blocker.unlock();
    CHECK(later.get(arrived).granted);
    for (const auto& loss : rec.losses()) UNSCOPED_INFO("lost: " << loss.name << " " << loss.reason);
    for (const auto t : ml.tokens()) UNSCOPED_INFO("part token " << t);
    CHECK(ml.held());
    CHECK(released([&](distlock::release_handler h) { ml.async_unlock(std::move(h)); }));
    auto again = b.multi_lock({x, y});
    CHECK(again.try_lock());
    again.unlock();
}

TEST_CASE("an async campaign leads once the leader resigns", "[contract][async][election]") {
    auto a = connect_under_test();
    auto b = connect_under_test();
    const auto name = unique_name("async-elect");
    distlock::election_options o1, o2;
    o1.id = "first";
    o2.id = "second";
    auto leader = a.election(name, o1);
    auto candidate = b.election(name, o2);
    async_wait first, second;
    leader.async_campaign(30s, first.handler());
    bool arrived = false;
    CHECK(first.get(arrived).granted);
    candidate.async_campaign(60s, second.handler());
    std::this_thread::sleep_for(300ms);
    CHECK_FALSE(second.ready());
    CHECK(released([&](distlock::release_handler h) { leader.async_resign(std::move(h)); }));
    const auto got = second.get(arrived);
    REQUIRE(arrived);
    CHECK(got.granted);
    CHECK(candidate.is_leader());
    CHECK_FALSE(leader.is_leader());
}
