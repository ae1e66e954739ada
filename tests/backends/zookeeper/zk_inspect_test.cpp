// zk:// provider::inspect, holder labels in the lock nodes' data, elections in
// Curator's LeaderLatch layout and grant::waited, against the standalone server
// (DISTLOCK_TEST_ZK_URL). The server side is read with the C client directly.
#include <zookeeper/zookeeper.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <mutex>
#include <regex>
#include <thread>
#include <vector>

#include "distlock/distlock.hpp"
#include "distlock/spi/backend.hpp"
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
std::string url_with(const std::string& extra) {
    auto u = url();
    return u + (u.find('?') == std::string::npos ? "?" : "&") + extra;
}
std::string lock_dir(const std::string& name) { return zk_test::base_of(url()) + "/" + zkb::encode_segment(name); }
std::uint64_t inspect_requests() { return zkb::read_counters().inspect_requests; }

distlock::provider connect_as(const std::string& holder) {
    distlock::provider_options o;
    o.holder = holder;
    return distlock::connect(url(), o);
}

const std::regex latch_node("_c_[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}-latch-[0-9]{10}");

// Records whether each grant waited (the core's contention, from grant::waited).
class contention_log final : public distlock::observer {
public:
    void acquired(const distlock::acquire_event& e) override {
        if (e.outcome != distlock::acquire_outcome::granted) return;
        std::lock_guard lk(m_);
        seen_.push_back(e.contended);
    }
    std::vector<distlock::contention> seen() {
        std::lock_guard lk(m_);
        return seen_;
    }

private:
    std::mutex m_;
    std::vector<distlock::contention> seen_;
};

}  // namespace

TEST_CASE("inspect of a lock nobody holds: free, no waiters, a sync and one getChildren", "[zookeeper][inspect]") {
    auto p = distlock::connect(url());
    const auto name = unique_name("insp-free");
    auto before = inspect_requests();
    auto info = p.inspect(name);              // the lock path does not even exist
    CHECK(inspect_requests() - before == 2);  // sync + getChildren, pipelined: one round trip
    CHECK(info.name == name);
    CHECK(info.held == std::optional<bool>(false));
    CHECK(info.waiters == std::optional<std::uint32_t>(0));
    CHECK_FALSE(info.holder);
    CHECK_FALSE(info.token);
    CHECK(info.unknown.empty());

    // Held once and released: the path may still be there, empty.
    auto m = p.mutex(name);
    REQUIRE(m.try_lock());
    m.unlock();
    before = inspect_requests();
    info = p.inspect(name);
    CHECK(inspect_requests() - before == 2);
    CHECK(info.held == std::optional<bool>(false));
    CHECK(info.waiters == std::optional<std::uint32_t>(0));
}

TEST_CASE("the holder label (URL holder=) is the lock node's data; inspect shows it, the czxid token and the waiters",
          "[zookeeper][inspect][holder]") {
    const auto who = "url-holder-" + distlock::spi::random_token().substr(0, 8);
    auto holder_side = distlock::connect(url_with("holder=" + who));
    auto waiter_side = connect_as("waiter-label");
    auto observer_side = distlock::connect(url());
    zk_test::raw_zk raw(zk_test::hosts_of(url()));
    const auto name = unique_name("insp-held");
    auto m = holder_side.mutex(name);
    REQUIRE(m.try_lock());
    auto kids = raw.children(lock_dir(name));
    REQUIRE(kids.size() == 1);
    CHECK(raw.data(lock_dir(name) + "/" + kids[0]) == who);

    auto before = inspect_requests();
    auto info = observer_side.inspect(name);
    CHECK(inspect_requests() - before == 3);  // sync + getChildren, then getData of the holder's node
    CHECK(info.held == std::optional<bool>(true));
    CHECK(info.holder == std::optional<std::string>(who));
    CHECK(info.token == std::optional<std::uint64_t>(m.token()));
    CHECK_FALSE(info.remaining);
    REQUIRE(info.unknown.count("remaining") == 1);
    CHECK(info.unknown.at("remaining").find("session") != std::string::npos);
    CHECK(info.unknown.size() == 1);
    CHECK(info.waiters == std::optional<std::uint32_t>(0));

    // A waiter of another provider: its node is counted, the holder unchanged.
    std::atomic<bool> got{false};
    std::thread t([&] {
        auto w = waiter_side.mutex(name);
        if (w.try_lock_for(20s)) {
            got = true;
            w.unlock();
        }
    });
    CHECK(eventually([&] { return observer_side.inspect(name).waiters == std::optional<std::uint32_t>(1); }, 10s));
    info = observer_side.inspect(name);
    CHECK(info.holder == std::optional<std::string>(who));
    CHECK(raw.children(lock_dir(name)).size() == 2);
    m.unlock();
    CHECK(eventually([&] { return got.load(); }, 10s));
    t.join();
    info = observer_side.inspect(name);
    CHECK(info.held == std::optional<bool>(false));
}

TEST_CASE("provider_options::holder labels the node; a node without data or with binary data shows no holder, with why",
          "[zookeeper][inspect][holder]") {
    auto p = connect_as("options-holder");
    zk_test::raw_zk raw(zk_test::hosts_of(url()));
    const auto name = unique_name("insp-opt");
    {
        auto m = p.mutex(name);
        REQUIRE(m.try_lock());
        auto info = p.inspect(name);
        CHECK(info.holder == std::optional<std::string>("options-holder"));
        m.unlock();
    }
    // Another client's nodes, made by hand: Curator's layout with a text IP
    // address (Curator's default data), none (kazoo without an identifier),
    // and bytes that are no label.
    raw.create_persistent(zk_test::base_of(url()));
    const int made = raw.create_persistent(lock_dir(name));
    REQUIRE((made == ZOK || made == ZNODEEXISTS));
    struct sample {
        std::string data;
        std::optional<std::string> holder;
    };
    for (const auto& s : {sample{"192.0.2.7", "192.0.2.7"}, sample{"", std::nullopt},
                          sample{std::string("\x0a\x00\x00\x01", 4), std::nullopt}}) {
        const auto node =
            raw.create_sequential(lock_dir(name) + "/_c_" + distlock::spi::random_uuid() + "-lock-", s.data);
        REQUIRE_FALSE(node.empty());
        Stat st{};
        REQUIRE(raw.stat(node, st) == ZOK);
        auto info = p.inspect(name);
        INFO("data of " << s.data.size() << " bytes");
        CHECK(info.held == std::optional<bool>(true));
        CHECK(info.holder == s.holder);
        CHECK(info.token == std::optional<std::uint64_t>(static_cast<std::uint64_t>(st.czxid)));
        CHECK(info.unknown.count("holder") == (s.holder ? 0u : 1u));
        CHECK(info.unknown.count("remaining") == 1);
        REQUIRE(raw.remove(node) == ZOK);
    }
}

TEST_CASE("an election is Curator's LeaderLatch: _c_<uuid>-latch-<seq> nodes whose data is the id; the lowest leads",
          "[zookeeper][election][layout]") {
    auto log = std::make_shared<contention_log>();
    distlock::provider_options ao;
    ao.observer = log;
    auto a = distlock::connect(url(), ao);
    auto b = distlock::connect(url(), ao);
    zk_test::raw_zk raw(zk_test::hosts_of(url()));
    CHECK(a.caps().supports(distlock::feature::election));
    const auto name = unique_name("latch");
    distlock::election_options oa, ob;
    oa.id = "cand-a";
    ob.id = "cand-b";
    auto ea = a.election(name, oa);
    auto eb = b.election(name, ob);
    auto free = ea.leader();
    CHECK(free.held == std::optional<bool>(false));
    CHECK(free.waiters == std::optional<std::uint32_t>(0));

    REQUIRE(ea.campaign(10s));
    auto kids = raw.children(lock_dir(name));
    REQUIRE(kids.size() == 1);
    INFO("node " << kids[0]);
    CHECK(std::regex_match(kids[0], latch_node));
    CHECK(raw.data(lock_dir(name) + "/" + kids[0]) == "cand-a");
    Stat st{};
    REQUIRE(raw.stat(lock_dir(name) + "/" + kids[0], st) == ZOK);
    CHECK(st.ephemeralOwner != 0);
    CHECK(static_cast<std::uint64_t>(st.czxid) == ea.term());

    // A second candidate queues behind with its own latch node.
    std::atomic<bool> b_leads{false};
    std::thread t([&] {
        if (eb.campaign(20s)) b_leads = true;
    });
    CHECK(eventually([&] { return raw.children(lock_dir(name)).size() == 2; }, 10s));
    auto before = inspect_requests();
    auto seen = eb.leader();
    CHECK(inspect_requests() - before == 3);  // as inspect: sync + getChildren, getData
    CHECK(seen.held == std::optional<bool>(true));
    CHECK(seen.holder == std::optional<std::string>("cand-a"));
    CHECK(seen.token == std::optional<std::uint64_t>(ea.term()));
    CHECK(seen.waiters == std::optional<std::uint32_t>(1));
    CHECK(seen.unknown.count("remaining") == 1);
    for (const auto& k : raw.children(lock_dir(name))) CHECK(std::regex_match(k, latch_node));
    // A mutex of the same name is another recipe: its nodes and the latch's do not meet.
    CHECK(a.inspect(name).held == std::optional<bool>(false));
    CHECK_FALSE(b_leads.load());

    ea.resign();
    CHECK(eventually([&] { return b_leads.load(); }, 10s));
    t.join();
    CHECK(eb.term() > ea.term());
    auto now = ea.leader();
    CHECK(now.holder == std::optional<std::string>("cand-b"));
    CHECK(now.waiters == std::optional<std::uint32_t>(0));
    kids = raw.children(lock_dir(name));
    REQUIRE(kids.size() == 1);
    CHECK(raw.data(lock_dir(name) + "/" + kids[0]) == "cand-b");
    eb.resign();
    CHECK(raw.children(lock_dir(name)).empty());
    // grant::waited: a's term came at the first try, b's after waiting for a.
    auto c = log->seen();
    REQUIRE(c.size() == 2);
    CHECK(c[0] == distlock::contention::none);
    CHECK(c[1] == distlock::contention::waited);
}

TEST_CASE("a latch node sorted first leads whatever its uuid: LeaderLatch orders by the text after \"latch-\"",
          "[zookeeper][election]") {
    auto p = distlock::connect(url());
    zk_test::raw_zk raw(zk_test::hosts_of(url()));
    const auto name = unique_name("latch-order");
    raw.create_persistent(zk_test::base_of(url()));
    REQUIRE(raw.create_persistent(lock_dir(name)) == ZOK);
    // Another candidate whose uuid sorts after ours would in name order: it
    // still leads, having the lower sequence.
    const auto other = raw.create_sequential(lock_dir(name) + "/_c_ffffffff-ffff-4fff-bfff-ffffffffffff-latch-", "x-1");
    REQUIRE_FALSE(other.empty());
    distlock::election_options o;
    o.id = "second";
    auto e = p.election(name, o);
    CHECK_FALSE(e.campaign(300ms));
    auto seen = e.leader();
    CHECK(seen.holder == std::optional<std::string>("x-1"));
    CHECK(seen.waiters == std::optional<std::uint32_t>(0));  // our attempt left nothing behind
    std::atomic<bool> leads{false};
    std::thread t([&] { leads = e.campaign(20s); });
    CHECK(eventually([&] { return e.leader().waiters == std::optional<std::uint32_t>(1); }, 10s));
    CHECK_FALSE(leads.load());
    REQUIRE(raw.remove(other) == ZOK);
    CHECK(eventually([&] { return leads.load(); }, 10s));
    t.join();
    CHECK(e.leader().holder == std::optional<std::string>("second"));
    e.resign();
}

TEST_CASE("grant::waited of a mutex: false at the first try, true after waiting for another holder",
          "[zookeeper][observe]") {
    auto log = std::make_shared<contention_log>();
    distlock::provider_options o;
    o.observer = log;
    auto watched = distlock::connect(url(), o);
    auto other = distlock::connect(url());
    const auto name = unique_name("waited");
    auto m = watched.mutex(name);
    REQUIRE(m.try_lock());
    m.unlock();
    auto h = other.mutex(name);
    REQUIRE(h.try_lock());
    std::thread release([&] {
        std::this_thread::sleep_for(300ms);
        h.unlock();
    });
    REQUIRE(m.try_lock_for(10s));
    release.join();
    m.unlock();
    auto c = log->seen();
    REQUIRE(c.size() == 2);
    CHECK(c[0] == distlock::contention::none);
    CHECK(c[1] == distlock::contention::waited);
}

TEST_CASE("a resigning leader wakes one candidate, not all (each watches its predecessor)",
          "[zookeeper][election][herd]") {
    constexpr int candidates = 6;
    const auto name = unique_name("latch-herd");
    zk_test::raw_zk raw(zk_test::hosts_of(url()));
    std::vector<distlock::provider> providers;
    for (int i = 0; i < candidates; ++i) providers.push_back(distlock::connect(url()));
    std::vector<distlock::election> elections;
    for (int i = 0; i < candidates; ++i) {
        distlock::election_options o;
        o.id = "herd-" + std::to_string(i);
        elections.push_back(providers[i].election(name, o));
    }
    REQUIRE(elections[0].campaign(10s));
    std::atomic<int> leading{0}, most{0}, terms{0}, current{-1};
    std::vector<std::thread> pool;
    std::atomic<int> allowed{0};
    for (int i = 1; i < candidates; ++i)
        pool.emplace_back([&, i] {
            if (!elections[i].campaign(60s)) return;
            current = i;
            int now = ++leading;
            int seen = most.load();
            while (now > seen && !most.compare_exchange_weak(seen, now)) {}
            ++terms;
            while (allowed.load() < terms.load()) std::this_thread::sleep_for(1ms);
            --leading;
            elections[i].resign();
        });
    REQUIRE(eventually([&] { return raw.children(lock_dir(name)).size() == candidates; }, 20s));
    std::this_thread::sleep_for(200ms);  // every candidate has set its watch
    std::vector<std::uint64_t> woken;
    for (int h = 1; h < candidates; ++h) {
        const auto before = zkb::read_counters().predecessor_wakeups;
        if (h == 1) elections[0].resign();
        else allowed = h - 1;  // the current leader resigns
        REQUIRE(eventually([&] { return terms.load() == h; }, 10s));
        std::this_thread::sleep_for(50ms);  // let any herd show up
        woken.push_back(zkb::read_counters().predecessor_wakeups - before);
        INFO("handoff " << h);
        CHECK(woken.back() == 1);
        CHECK(elections[0].leader().holder == std::optional<std::string>("herd-" + std::to_string(current.load())));
    }
    allowed = candidates;
    for (auto& t : pool) t.join();
    CHECK(terms == candidates - 1);
    CHECK(most == 1);
    CHECK(raw.children(lock_dir(name)).empty());
}
