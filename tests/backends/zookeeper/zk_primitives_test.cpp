// ZooKeeper-specific tests of zk://'s read-write lock and semaphore against the
// standalone server (DISTLOCK_TEST_ZK_URL): the nodes they leave on the server
// (Curator's InterProcessReadWriteLock and InterProcessSemaphoreV2 layouts), and
// that a release wakes only the waiters it concerns (no herd). The shared
// suite (distlock-conformance) proves the contract; this file what it cannot see.
#include <zookeeper/zookeeper.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <regex>
#include <set>
#include <thread>

#include "distlock/distlock.hpp"
#include "support.hpp"
#include "zk_names.hpp"
#include "zk_raw.hpp"
#include "zk_support.hpp"

using namespace std::chrono_literals;
using distlock::test::eventually;
using distlock::test::unique_name;
namespace zkb = distlock::backends::zookeeper;

namespace {

std::string url() { return distlock::test::env("DISTLOCK_TEST_ZK_URL"); }
std::string lock_dir(const std::string& name) { return zk_test::base_of(url()) + "/" + zkb::encode_segment(name); }

const std::string kUuid = "_c_[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}-";

// One holder on a connection (a session) of its own, on a thread of its own:
// takes its side of the read-write lock (or a permit), then holds until told
// to let go.
class party {
public:
    enum class kind { reader, writer, permit };
    party(const std::string& name, kind k, std::uint32_t permits = 1) : p_(distlock::connect(url())), kind_(k) {
        if (k == kind::permit) sem_ = std::make_unique<distlock::semaphore>(p_.semaphore(name, permits));
        else rw_ = std::make_unique<distlock::shared_mutex>(p_.shared_mutex(name));
        thread_ = std::thread([this] { run(); });
    }
    ~party() { let_go(); }
    party(const party&) = delete;
    party& operator=(const party&) = delete;

    bool holds() const { return holds_.load(); }
    bool failed() const { return failed_.load(); }
    // Tells it to release, and waits until it has.
    void let_go() {
        {
            std::lock_guard lk(m_);
            go_ = true;
        }
        cv_.notify_all();
        if (thread_.joinable()) thread_.join();
        holds_ = false;
    }

private:
    void run() {
        try {
            if (kind_ == kind::writer) rw_->lock();
            else if (kind_ == kind::reader) rw_->lock_shared();
            else sem_->acquire();
            holds_ = true;
            std::unique_lock lk(m_);
            cv_.wait(lk, [&] { return go_; });
            lk.unlock();
            if (kind_ == kind::writer) rw_->unlock();
            else if (kind_ == kind::reader) rw_->unlock_shared();
            else sem_->release();
        } catch (...) {
            failed_ = true;
        }
    }

    distlock::provider p_;
    kind kind_;
    std::unique_ptr<distlock::shared_mutex> rw_;
    std::unique_ptr<distlock::semaphore> sem_;
    std::thread thread_;
    std::mutex m_;
    std::condition_variable cv_;
    bool go_ = false;
    std::atomic<bool> holds_{false}, failed_{false};
};

std::uint64_t wakeups() { return zkb::read_counters().predecessor_wakeups; }

}  // namespace

TEST_CASE(
    "read-write lock nodes are Curator's: _c_<uuid>-__WRIT__ / __READ__<10 digits>, ephemeral, czxid as the token",
    "[zookeeper][layout][rw]") {
    auto a = distlock::connect(url());
    auto b = distlock::connect(url());
    zk_test::raw_zk raw(zk_test::hosts_of(url()));
    const auto name = unique_name("rw-layout");
    const auto dir = lock_dir(name);
    auto x = a.shared_mutex(name);
    auto y = b.shared_mutex(name);

    REQUIRE(x.try_lock());
    auto kids = raw.children(dir);
    REQUIRE(kids.size() == 1);
    INFO("write node " << kids[0]);
    CHECK(std::regex_match(kids[0], std::regex(kUuid + "__WRIT__[0-9]{10}")));
    Stat st{};
    REQUIRE(raw.stat(dir + "/" + kids[0], st) == ZOK);
    CHECK(st.ephemeralOwner != 0);
    CHECK(static_cast<std::uint64_t>(st.czxid) == x.token());
    const auto write_seq = std::string(zkb::sort_key(kids[0]));
    x.unlock();
    CHECK(raw.children(dir).empty());

    REQUIRE(x.try_lock_shared());
    REQUIRE(y.try_lock_shared());
    kids = raw.children(dir);
    REQUIRE(kids.size() == 2);
    zkb::sort_children(kids);
    std::set<std::uint64_t> czxids;
    for (const auto& k : kids) {
        INFO("read node " << k);
        CHECK(std::regex_match(k, std::regex(kUuid + "__READ__[0-9]{10}")));
        REQUIRE(raw.stat(dir + "/" + k, st) == ZOK);
        CHECK(st.ephemeralOwner != 0);
        czxids.insert(static_cast<std::uint64_t>(st.czxid));
        CHECK(std::string(zkb::sort_key(k)) > write_seq);  // one sequence for both sides
    }
    CHECK(czxids == std::set<std::uint64_t>{x.shared_token(), y.shared_token()});
    x.unlock_shared();
    y.unlock_shared();
    CHECK(raw.children(dir).empty());
}

TEST_CASE(
    "a permit is Curator's lease node <path>/leases/_c_<uuid>-lease-<10 digits>; the internal mutex is given back",
    "[zookeeper][layout][semaphore]") {
    auto a = distlock::connect(url());
    zk_test::raw_zk raw(zk_test::hosts_of(url()));
    const auto name = unique_name("sem-layout");
    const auto dir = lock_dir(name);
    auto s = a.semaphore(name, 2);
    REQUIRE(s.try_acquire());
    auto kids = raw.children(dir + "/leases");
    REQUIRE(kids.size() == 1);
    INFO("lease node " << kids[0]);
    CHECK(std::regex_match(kids[0], std::regex(kUuid + "lease-[0-9]{10}")));
    Stat st{};
    REQUIRE(raw.stat(dir + "/leases/" + kids[0], st) == ZOK);
    CHECK(st.ephemeralOwner != 0);
    CHECK(static_cast<std::uint64_t>(st.czxid) == s.token());
    // The internal mutex (<path>/locks, Curator's InterProcessMutex) was taken
    // and given back: one child created and deleted (cversion 2), none left.
    // The server may already have removed the empty container: then nothing
    // is left either. (The waiters' nodes in <path>/locks are seen below.)
    const int locks_rc = raw.stat(dir + "/locks", st);
    CHECK((locks_rc == ZOK || locks_rc == ZNONODE));
    if (locks_rc == ZOK) {
        CHECK(st.ephemeralOwner == 0);
        CHECK(st.cversion >= 2);
    }
    CHECK(raw.children(dir + "/locks").empty());
    // The semaphore's size is in the leases node's data.
    CHECK(raw.data(dir + "/leases") == "distlock permits=2");
    REQUIRE(raw.stat(dir + "/leases", st) == ZOK);
    CHECK(st.ephemeralOwner == 0);
    s.release();
    CHECK(raw.children(dir + "/leases").empty());
}

TEST_CASE(
    "a read-write lock wakes only the waiters a release concerns: readers behind the writer, then the writer alone",
    "[zookeeper][herd][rw]") {
    zk_test::raw_zk raw(zk_test::hosts_of(url()));
    const auto name = unique_name("rw-herd");
    const auto dir = lock_dir(name);
    // In sequence order: w0 (holds), readers r1..r5, writer w1, readers r6..r8.
    auto w0 = std::make_unique<party>(name, party::kind::writer);
    REQUIRE(eventually([&] { return w0->holds(); }, 20s));
    std::vector<std::unique_ptr<party>> early, late;
    std::size_t nodes = 1;
    auto queue = [&](std::vector<std::unique_ptr<party>>& into, party::kind k) {
        into.push_back(std::make_unique<party>(name, k));
        ++nodes;
        REQUIRE(eventually([&] { return raw.children(dir).size() == nodes; }, 20s));  // its node is next in line
    };
    for (int i = 0; i < 5; ++i) queue(early, party::kind::reader);
    std::vector<std::unique_ptr<party>> writer;
    queue(writer, party::kind::writer);
    auto& w1 = *writer.front();
    for (int i = 0; i < 3; ++i) queue(late, party::kind::reader);
    std::this_thread::sleep_for(300ms);  // every waiter has set its watch
    auto holding = [](const std::vector<std::unique_ptr<party>>& v) {
        int n = 0;
        for (const auto& p : v) n += p->holds() ? 1 : 0;
        return n;
    };
    CHECK(holding(early) == 0);
    CHECK_FALSE(w1.holds());

    // The writer goes: the five readers behind it are woken (and read together);
    // neither the writer behind them nor the readers behind that writer.
    auto c0 = wakeups();
    w0->let_go();
    REQUIRE(eventually([&] { return holding(early) == 5; }, 20s));
    std::this_thread::sleep_for(300ms);  // let any herd show up
    auto c1 = wakeups();
    CHECK(c1 - c0 == 5);
    CHECK_FALSE(w1.holds());
    CHECK(holding(late) == 0);

    // Four of those readers go: nobody watches them (w1 watches r5 only).
    for (int i = 0; i < 4; ++i) early[i]->let_go();
    std::this_thread::sleep_for(300ms);
    auto c2 = wakeups();
    CHECK(c2 - c1 == 0);
    CHECK_FALSE(w1.holds());

    // The last reader goes: w1 alone is woken and writes.
    early[4]->let_go();
    REQUIRE(eventually([&] { return w1.holds(); }, 20s));
    std::this_thread::sleep_for(300ms);
    auto c3 = wakeups();
    CHECK(c3 - c2 == 1);
    CHECK(holding(late) == 0);

    // The writer goes: the three readers behind it.
    w1.let_go();
    REQUIRE(eventually([&] { return holding(late) == 3; }, 20s));
    std::this_thread::sleep_for(300ms);
    CHECK(wakeups() - c3 == 3);
    for (auto& p : late) p->let_go();
    for (const auto* v : {&early, &late, &writer})
        for (const auto& p : *v) CHECK_FALSE(p->failed());
    CHECK(raw.children(dir).empty());
}

TEST_CASE("semaphore waiters queue on the internal mutex: a returned permit wakes one decider, then its successor",
          "[zookeeper][herd][semaphore]") {
    zk_test::raw_zk raw(zk_test::hosts_of(url()));
    const auto name = unique_name("sem-herd");
    const auto dir = lock_dir(name);
    auto holder = std::make_unique<party>(name, party::kind::permit, 1);
    REQUIRE(eventually([&] { return holder->holds(); }, 20s));
    std::vector<std::unique_ptr<party>> waiters;
    for (int i = 0; i < 5; ++i) waiters.push_back(std::make_unique<party>(name, party::kind::permit, 1));
    // Each waiter has a node in <path>/locks; only the first of them (holding
    // the internal mutex) has a lease node, waiting on the leases' children.
    REQUIRE(eventually([&] { return raw.children(dir + "/locks").size() == 5; }, 20s));
    REQUIRE(eventually([&] { return raw.children(dir + "/leases").size() == 2; }, 20s));
    std::this_thread::sleep_for(300ms);
    auto holding = [&] {
        int n = 0;
        for (const auto& p : waiters) n += p->holds() ? 1 : 0;
        return n;
    };
    CHECK(holding() == 0);

    auto c0 = wakeups();
    holder->let_go();
    REQUIRE(eventually([&] { return holding() == 1; }, 20s));
    // The next waiter takes the internal mutex and waits with a lease node of its own.
    REQUIRE(eventually([&] { return raw.children(dir + "/locks").size() == 4; }, 20s));
    REQUIRE(eventually([&] { return raw.children(dir + "/leases").size() == 2; }, 20s));
    std::this_thread::sleep_for(300ms);  // let any herd show up
    // Two wakeups: the decider's children watch, then its successor's watch on
    // the internal mutex node it gave back; the three others slept on.
    CHECK(wakeups() - c0 == 2);
    CHECK(holding() == 1);
    for (auto& p : waiters) p->let_go();
    for (const auto& p : waiters) CHECK_FALSE(p->failed());
    CHECK(raw.children(dir + "/leases").empty());
    CHECK(raw.children(dir + "/locks").empty());
}

TEST_CASE("a semaphore of another size beside a distlock holder is refused and leaves no node behind",
          "[zookeeper][semaphore][input]") {
    auto a = distlock::connect(url());
    auto b = distlock::connect(url());
    zk_test::raw_zk raw(zk_test::hosts_of(url()));
    const auto name = unique_name("sem-size");
    const auto dir = lock_dir(name);
    auto two = a.semaphore(name, 2);
    REQUIRE(two.try_acquire());
    auto three = b.semaphore(name, 3);
    CHECK_THROWS_AS(three.try_acquire(), distlock::invalid_argument_error);
    CHECK(raw.children(dir + "/leases").size() == 1);
    CHECK(raw.children(dir + "/locks").empty());
    two.release();
    // Empty again: the next size stands.
    REQUIRE(three.try_acquire());
    CHECK(raw.data(dir + "/leases") == "distlock permits=3");
    CHECK_THROWS_AS(two.try_acquire(), distlock::invalid_argument_error);
    three.release();
}
