// Who may touch what zk:// leaves on the server (issue 23), against the
// standalone server (DISTLOCK_TEST_ZK_URL):
//  - with digest credentials every node distlock makes (lock paths, lock, read,
//    write, lease and latch nodes, the semaphore's directories, the base path
//    and its parents) is its creator's (acl=creator, the default): an anonymous
//    session and a session of another digest user get NOAUTH deleting a
//    holder's node or creating a node beside it; acl=read lets anyone read;
//    acl=open is the open ACL of before; clients of one identity share a lock;
//  - a lock path flooded with children is refused with a typed error, at once.
// (The C client's descriptors and sends: zk_fd_test.cpp.)
// Server-side state is read and tampered with through the C client directly.
#include <sys/types.h>
#include <unistd.h>
#include <zookeeper/zookeeper.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <map>
#include <thread>

#include "distlock/distlock.hpp"
#include "distlock/spi/backend.hpp"
#include "support.hpp"
#include "zk_names.hpp"
#include "zk_raw.hpp"
#include "zk_support.hpp"

using namespace std::chrono_literals;
using clk = std::chrono::steady_clock;
using distlock::test::eventually;
using distlock::test::unique_name;
namespace zkb = distlock::backends::zookeeper;

namespace {

constexpr const char* kOwner = "dl-owner:owner-pw";
constexpr const char* kIntruder = "dl-intruder:intruder-pw";

std::string url() { return distlock::test::env("DISTLOCK_TEST_ZK_URL"); }
std::string hosts() { return zk_test::hosts_of(url()); }
std::string base() { return zk_test::base_of(url()); }
std::string url_with(const std::string& extra) {
    auto u = url();
    return u + (u.find('?') == std::string::npos ? "?" : "&") + extra;
}
// zk://<credentials>@<hosts><base>?session_timeout=2s[&params]
std::string url_as(const std::string& credentials, const std::string& base_path, const std::string& params = {}) {
    return "zk://" + credentials + "@" + hosts() + base_path + "?session_timeout=2s" +
           (params.empty() ? "" : "&" + params);
}
std::string dir_of(const std::string& name, const std::string& base_path = base()) {
    return base_path + "/" + zkb::encode_segment(name);
}

// The ACL distlock gives a node with credentials: all permissions for the
// digest identity of `kOwner`, nobody else.
bool owner_only(const std::vector<std::string>& acl) {
    return acl.size() == 1 && acl[0].rfind("digest:dl-owner:", 0) == 0 && acl[0].size() > 3 &&
           acl[0].substr(acl[0].size() - 3) == ":31";
}

// Sessions that are not the owner: anonymous, and another digest user.
struct strangers {
    zk_test::raw_zk anonymous{hosts()};
    zk_test::raw_zk intruder{hosts()};
    strangers() { intruder.add_digest(kIntruder); }

    // Neither can delete `node`, nor create a child of `dir` (one that would sort
    // first in every recipe's queue, as a hostile client would make it).
    void check_locked_out(const std::string& dir, const std::string& node, const std::string& first_name) {
        for (auto* s : {&anonymous, &intruder}) {
            INFO((s == &anonymous ? "anonymous" : "another digest user") << ", node " << node);
            CHECK(s->remove(node) == ZNOAUTH);
            CHECK(s->create_ephemeral(dir + "/" + first_name) == ZNOAUTH);
            CHECK(s->create_persistent(dir + "/" + first_name) == ZNOAUTH);
        }
    }
};

// The only child of `dir`, as the owner sees it.
std::string only_child(zk_test::raw_zk& owner, const std::string& dir) {
    auto kids = owner.children(dir);
    REQUIRE(kids.size() == 1);
    return dir + "/" + kids[0];
}

}  // namespace

TEST_CASE("with credentials, a mutex's lock path and node are the creator's: others get NOAUTH deleting or creating",
          "[zookeeper][acl]") {
    auto p = distlock::connect(url_as(kOwner, base()));
    const auto name = unique_name("acl-mutex");
    const auto dir = dir_of(name);
    auto m = p.mutex(name);
    REQUIRE(m.try_lock());
    zk_test::raw_zk owner(hosts());
    owner.add_digest(kOwner);
    const auto node = only_child(owner, dir);
    CHECK(owner_only(owner.acl(dir)));
    CHECK(owner_only(owner.acl(node)));
    strangers others;
    others.check_locked_out(dir, node, "x-lock-0000000000");
    CHECK(others.anonymous.list(dir) == ZNOAUTH);  // not even read
    CHECK(others.intruder.read(node) == ZNOAUTH);
    CHECK(m.held());
    // A session of the same identity may (distlock's own break_lock does).
    CHECK(owner.create_ephemeral(dir + "/probe") == ZOK);
    CHECK(owner.remove(dir + "/probe") == ZOK);
    m.unlock();
}

TEST_CASE("with credentials, read-write lock, semaphore and election nodes are the creator's too", "[zookeeper][acl]") {
    auto p = distlock::connect(url_as(kOwner, base()));
    zk_test::raw_zk owner(hosts());
    owner.add_digest(kOwner);
    strangers others;
    SECTION("read-write lock: the writer's node, then a reader's") {
        const auto name = unique_name("acl-rw");
        const auto dir = dir_of(name);
        auto rw = p.shared_mutex(name);
        REQUIRE(rw.try_lock());
        auto node = only_child(owner, dir);
        CHECK(owner_only(owner.acl(node)));
        others.check_locked_out(dir, node, "x-__WRIT__0000000000");
        rw.unlock();
        REQUIRE(rw.try_lock_shared());
        node = only_child(owner, dir);
        others.check_locked_out(dir, node, "x-__WRIT__0000000000");
        CHECK(owner_only(owner.acl(dir)));
        rw.unlock_shared();
    }
    SECTION("semaphore: the lease, the leases and locks directories, the stored size") {
        const auto name = unique_name("acl-sem");
        const auto dir = dir_of(name);
        auto sem = p.semaphore(name, 2);
        REQUIRE(sem.try_acquire());
        const auto leases = dir + "/" + std::string(zkb::kSemaphoreLeases);
        const auto locks = dir + "/" + std::string(zkb::kSemaphoreLocks);
        const auto lease = only_child(owner, leases);
        for (const auto& path : {dir, leases, locks, lease}) {
            INFO(path);
            CHECK(owner_only(owner.acl(path)));
        }
        others.check_locked_out(leases, lease, "x-lease-0000000000");
        for (auto* s : {&others.anonymous, &others.intruder}) {
            // The internal mutex. Its directory is a container, empty between
            // acquisitions: the server may have removed it by now (the test
            // servers look every 500 ms); then its parent refuses it as well.
            const int rc = s->create_ephemeral(locks + "/x-lock-0000000000");
            if (rc == ZNONODE) CHECK(s->create_ephemeral(locks) == ZNOAUTH);
            else CHECK(rc == ZNOAUTH);
            CHECK(s->write(leases, zkb::permits_data(99)) == ZNOAUTH);  // the stored size
        }
        sem.release();
    }
    SECTION("election: the leader's latch node") {
        const auto name = unique_name("acl-elect");
        const auto dir = dir_of(name);
        auto e = p.election(name);
        REQUIRE(e.campaign(2s));
        const auto node = only_child(owner, dir);
        CHECK(owner_only(owner.acl(node)));
        others.check_locked_out(dir, node, "x-latch-0000000000");
        e.resign();
    }
}

TEST_CASE("the base path and parents distlock makes with credentials are the creator's too", "[zookeeper][acl]") {
    const auto root = "/distlock-acl-" + distlock::spi::random_token().substr(0, 8);
    const auto base_path = root + "/nested";
    zk_test::raw_zk owner(hosts());
    owner.add_digest(kOwner);
    {
        auto p = distlock::connect(url_as(kOwner, base_path));
        auto m = p.mutex("x");
        REQUIRE(m.try_lock());
        m.unlock();
    }
    const auto dir = base_path + "/x";
    for (const auto& path : {root, base_path, dir}) {
        INFO(path);
        CHECK(owner_only(owner.acl(path)));
    }
    strangers others;
    for (auto* s : {&others.anonymous, &others.intruder}) {
        CHECK(s->create_persistent(base_path + "/squatter") == ZNOAUTH);  // no lock path made first by another
        CHECK(s->create_persistent(root + "/squatter") == ZNOAUTH);
        CHECK(s->remove(dir) == ZNOAUTH);  // an empty lock path (a container)
    }
    // An anonymous distlock client cannot use (nor squat) this base path.
    auto anonymous = distlock::connect("zk://" + hosts() + base_path + "?session_timeout=2s");
    CHECK_THROWS_AS(anonymous.mutex("y").try_lock(), distlock::access_denied_error);
    owner.remove(dir);
    owner.remove(base_path);
    CHECK(owner.remove(root) == ZOK);
}

TEST_CASE("acl=read: anyone may read (inspect, monitors), only the creator may write", "[zookeeper][acl]") {
    auto p = distlock::connect(url_as(kOwner, base(), "acl=read&holder=acl-read-holder"));
    const auto name = unique_name("acl-read");
    const auto dir = dir_of(name);
    auto m = p.mutex(name);
    REQUIRE(m.try_lock());
    zk_test::raw_zk owner(hosts());
    owner.add_digest(kOwner);
    const auto node = only_child(owner, dir);
    for (const auto& path : {dir, node}) {
        auto acl = owner.acl(path);
        INFO(path);
        REQUIRE(acl.size() == 2);
        CHECK(std::count(acl.begin(), acl.end(), "world:anyone:1") == 1);
        CHECK(owner_only({acl[0] == "world:anyone:1" ? acl[1] : acl[0]}));
    }
    strangers others;
    CHECK(others.anonymous.list(dir) == ZOK);
    CHECK(others.anonymous.read(node) == ZOK);
    others.check_locked_out(dir, node, "x-lock-0000000000");
    // An anonymous distlock provider sees the holder.
    auto monitor = distlock::connect(url());
    auto info = monitor.inspect(name);
    CHECK(info.held == true);
    CHECK(info.holder == "acl-read-holder");
    CHECK(info.token == m.token());
    m.unlock();
}

TEST_CASE("acl=open is the open ACL of before, with credentials too; without credentials it is the default",
          "[zookeeper][acl]") {
    zk_test::raw_zk raw(hosts());
    SECTION("acl=open with credentials: anyone may delete the holder's node") {
        auto p = distlock::connect(url_as(kOwner, base(), "acl=open"));
        const auto name = unique_name("acl-open");
        auto m = p.mutex(name);
        REQUIRE(m.try_lock());
        const auto node = only_child(raw, dir_of(name));
        CHECK(raw.acl(dir_of(name)) == std::vector<std::string>{"world:anyone:31"});
        CHECK(raw.acl(node) == std::vector<std::string>{"world:anyone:31"});
        CHECK(raw.remove(node) == ZOK);
        CHECK(eventually([&] { return !m.held(); }, 5s));
        m.unlock();
    }
    SECTION("no credentials: the open ACL") {
        auto p = distlock::connect(url());
        const auto name = unique_name("acl-none");
        auto m = p.mutex(name);
        REQUIRE(m.try_lock());
        CHECK(raw.acl(only_child(raw, dir_of(name))) == std::vector<std::string>{"world:anyone:31"});
        m.unlock();
        CHECK_NOTHROW(distlock::connect(url_with("acl=open")));
    }
}

TEST_CASE("acl=creator or acl=read without credentials, and an unknown acl=, are refused", "[zookeeper][acl][input]") {
    for (const char* param : {"acl=creator", "acl=read"}) {
        INFO(param);
        try {
            (void)distlock::connect(url_with(param));
            FAIL("accepted");
        } catch (const distlock::invalid_argument_error& e) {
            CHECK(std::string(e.what()).find("credentials") != std::string::npos);
        }
    }
    CHECK_THROWS_AS(distlock::connect(url_with("acl=everyone")), distlock::invalid_argument_error);
    CHECK_THROWS_AS(distlock::connect(url_as(kOwner, base(), "acl=")), distlock::invalid_argument_error);
    try {
        (void)distlock::connect(url_as(kOwner, base(), "acl=bogus"));
        FAIL("accepted");
    } catch (const distlock::invalid_argument_error& e) {
        CHECK(std::string(e.what()).find("owner-pw") == std::string::npos);
        CHECK(std::string(e.what()).find("creator, read or open") != std::string::npos);
    }
}

TEST_CASE("clients of one identity share a lock; another identity or an anonymous client is access_denied",
          "[zookeeper][acl]") {
    const auto name = unique_name("acl-share");
    auto a = distlock::connect(url_as(kOwner, base()));
    auto b = distlock::connect(url_as(kOwner, base()));
    auto ma = a.mutex(name);
    auto mb = b.mutex(name);
    REQUIRE(ma.try_lock());
    CHECK_FALSE(mb.try_lock());
    std::atomic<bool> got{false};
    std::thread waiter([&] {
        mb.lock();
        got = true;
    });
    std::this_thread::sleep_for(200ms);
    CHECK_FALSE(got.load());
    const auto first = ma.token();
    ma.unlock();
    CHECK(eventually([&] { return got.load(); }, 10s));
    waiter.join();
    CHECK(mb.token() > first);
    // b holds: a client of another identity cannot even queue.
    auto c = distlock::connect(url_as(kIntruder, base()));
    CHECK_THROWS_AS(c.mutex(name).try_lock(), distlock::access_denied_error);
    CHECK_THROWS_AS(c.mutex(name).try_lock_for(300ms), distlock::access_denied_error);
    auto anonymous = distlock::connect(url());
    CHECK_THROWS_AS(anonymous.mutex(name).try_lock(), distlock::access_denied_error);
    CHECK_THROWS_AS(anonymous.inspect(name), distlock::access_denied_error);
    CHECK(mb.held());
    mb.unlock();
}

TEST_CASE(
    "under an open base path, a lock path another identity made first is access_denied to the owner, never shared",
    "[zookeeper][acl]") {
    const auto name = unique_name("acl-squat");
    auto squatter = distlock::connect(url_as(kIntruder, base())).mutex(name);
    REQUIRE(squatter.try_lock());  // its lock path is creator-only: the squatter's
    auto owner = distlock::connect(url_as(kOwner, base())).mutex(name);
    CHECK_THROWS_AS(owner.try_lock(), distlock::access_denied_error);
    CHECK_THROWS_AS(owner.try_lock_for(200ms), distlock::access_denied_error);
    squatter.unlock();
}

// A base path made with an owned ACL is persistent: once its last lock path is
// gone it stays, so no other identity can make it first (the server removes an
// empty container within checkIntervalMs: 500 ms on the test server). Its
// parent here is open, as ZooKeeper's root "/" is by default. With acl=open it
// stays a container, as Curator's parents are (there is nothing to protect).
TEST_CASE("with credentials, a base path distlock makes stays once empty: another identity cannot take it over",
          "[zookeeper][acl]") {
    const auto root = "/distlock-acl-" + distlock::spi::random_token().substr(0, 8);
    zk_test::raw_zk owner(hosts());
    owner.add_digest(kOwner);
    strangers others;
    REQUIRE(others.anonymous.create_persistent(root) == ZOK);  // open, as "/" is
    // acl= -> a base path of its own under root.
    const std::map<std::string, std::string> bases{
        {"", root + "/creator"}, {"acl=read", root + "/read"}, {"acl=open", root + "/open"}};
    // A lock taken and given back under each (made by distlock), then the empty
    // lock paths removed by the server, and its container check run once more.
    for (const auto& [params, base_path] : bases) {
        auto p = distlock::connect(url_as(kOwner, base_path, params));
        auto m = p.mutex("x");
        REQUIRE(m.try_lock());
        m.unlock();
    }
    Stat st{};
    for (const auto& [params, base_path] : bases)
        REQUIRE(eventually([&, &b = base_path] { return owner.stat(b + "/x", st) == ZNONODE; }, 10s));
    std::this_thread::sleep_for(1500ms);
    CHECK(eventually([&] { return owner.stat(bases.at("acl=open"), st) == ZNONODE; }, 5s));  // a container
    for (const auto& params : {"", "acl=read"}) {
        const auto& base_path = bases.at(params);
        INFO(base_path);
        REQUIRE(owner.stat(base_path, st) == ZOK);  // still there
        const auto acl = owner.acl(base_path);
        CHECK(std::count_if(acl.begin(), acl.end(), [](const std::string& a) { return owner_only({a}); }) == 1);
        CHECK(std::count(acl.begin(), acl.end(), "world:anyone:31") == 0);
        // Another identity can neither make it its own nor queue under it.
        CHECK(others.intruder.create_private(base_path) == ZNODEEXISTS);
        CHECK(others.intruder.create_persistent(base_path + "/x") == ZNOAUTH);
        CHECK(others.anonymous.create_persistent(base_path + "/x") == ZNOAUTH);
        // The owner still locks there.
        auto p = distlock::connect(url_as(kOwner, base_path, params));
        auto m = p.mutex("x");
        CHECK(m.try_lock());
        m.unlock();
        owner.remove(base_path + "/x");
        CHECK(owner.remove(base_path) == ZOK);
    }
    CHECK(owner.remove(root) == ZOK);
}

// ---- child lists are capped -------------------------------------------------------

TEST_CASE("a lock path flooded past max_children is refused at once, leaving no node of ours; the default lets 2050 by",
          "[zookeeper][cap]") {
    auto p = distlock::connect(url_with("max_children=2000"));
    const auto name = unique_name("flood");
    const auto dir = dir_of(name);
    zk_test::raw_zk keeper(hosts());
    REQUIRE(keeper.create_persistent(dir) == ZOK);
    {
        // A hostile client's nodes, sorted before any later one.
        zk_test::raw_zk flooder(hosts());
        REQUIRE(flooder.flood(dir + "/_c_00000000-0000-4000-8000-000000000000-lock-", 2050) == 2050);
        auto m = p.mutex(name);
        auto t0 = clk::now();
        try {
            (void)m.try_lock();
            FAIL("a flooded lock path was accepted");
        } catch (const distlock::unavailable_error& e) {
            CHECK(std::string(e.what()).find("2051 children") != std::string::npos);  // with our own
            CHECK(std::string(e.what()).find("max_children=2000") != std::string::npos);
        }
        CHECK_THROWS_AS(m.try_lock_for(1s), distlock::unavailable_error);
        CHECK_THROWS_AS(p.inspect(name), distlock::unavailable_error);
        CHECK(clk::now() - t0 < 3s);
        CHECK(keeper.children(dir).size() == 2050);  // none of ours left behind
        // The default cap (10000) lets a client through: it then waits as usual.
        auto roomy = distlock::connect(url());
        CHECK_FALSE(roomy.mutex(name).try_lock());
        CHECK(roomy.inspect(name).waiters == 2049u);
    }
    // The flooder's session is gone, and its nodes with it.
    CHECK(p.mutex(name).try_lock());
    keeper.remove(dir);
}

TEST_CASE("a semaphore whose leases are flooded is refused, its internal mutex given back; max_children= is checked",
          "[zookeeper][cap]") {
    auto p = distlock::connect(url_with("max_children=100"));
    const auto name = unique_name("flood-sem");
    const auto dir = dir_of(name);
    const auto leases = dir + "/" + std::string(zkb::kSemaphoreLeases);
    const auto locks = dir + "/" + std::string(zkb::kSemaphoreLocks);
    auto sem = p.semaphore(name, 2);
    // Makes the directories, and keeps its lease there: they are containers,
    // which the test server reaps every 500 ms once empty (the flood then
    // found no directory).
    REQUIRE(sem.try_acquire());
    zk_test::raw_zk flooder(hosts());
    REQUIRE(flooder.flood(leases + "/_c_00000000-0000-4000-8000-000000000000-lease-", 150) == 150);
    auto other = distlock::connect(url_with("max_children=100")).semaphore(name, 2);
    CHECK_THROWS_AS(other.try_acquire(), distlock::unavailable_error);
    CHECK(flooder.children(leases).size() == 151);
    CHECK(flooder.children(locks).empty());
    sem.release();
    for (const char* bad : {"max_children=0", "max_children=-1", "max_children=lots", "max_children=2000000"}) {
        INFO(bad);
        CHECK_THROWS_AS(distlock::connect(url_with(bad)), distlock::invalid_argument_error);
    }
}

TEST_CASE("a lock path whose children's names add up past 4 MiB is refused", "[zookeeper][cap]") {
    auto p = distlock::connect(url());
    const auto name = unique_name("flood-bytes");
    const auto dir = dir_of(name);
    zk_test::raw_zk keeper(hosts());
    REQUIRE(keeper.create_persistent(dir) == ZOK);
    {
        zk_test::raw_zk flooder(hosts());
        // Eight names of 600 kB each (a request stays under the server's 1 MB jute.maxbuffer).
        const std::string long_name(600 * 1024, 'a');
        REQUIRE(flooder.flood(dir + "/" + long_name + "-lock-", 8) == 8);
        CHECK_THROWS_AS(p.mutex(name).try_lock(), distlock::unavailable_error);
        CHECK(keeper.children(dir).size() == 8);
    }
    keeper.remove(dir);
}

TEST_CASE("getData replies are bounded: a holder node with 900 kB of data shows no holder, with why",
          "[zookeeper][cap]") {
    auto p = distlock::connect(url());
    const auto name = unique_name("big-data");
    const auto dir = dir_of(name);
    zk_test::raw_zk keeper(hosts());
    REQUIRE(keeper.create_persistent(dir) == ZOK);
    {
        zk_test::raw_zk holder(hosts());
        REQUIRE(holder.create_sequential(dir + "/_c_00000000-0000-4000-8000-000000000000-lock-",
                                         std::string(900 * 1024, 'x')) != "");
        auto info = p.inspect(name);
        CHECK(info.held == true);
        CHECK_FALSE(info.holder.has_value());
        CHECK(info.unknown.count("holder") == 1);
        CHECK_FALSE(p.mutex(name).try_lock());
    }
    keeper.remove(dir);
}
