// Tests of redlock:// against redis-server children (redis_server.hpp, three
// independent masters each): a node down or two, the minority released, and
// inspect by majority.
#include "redis_test_helpers.hpp"  // tests/backends/redis

// ---- Redlock ---------------------------------------------------------------------------------------

TEST_CASE("redlock acquires with one of three nodes down and fails clearly with two down", "[redlock]") {
    redis_server n1, n2, n3;
    // Generous per-node timeouts: this test is about node loss, not about a slow machine.
    const auto url = "redlock://" + n1.address() + "," + n2.address() + "," + n3.address() +
                     "?lease=3s&timeout=1s&connect_timeout=1s";
    auto p = distlock::connect(url);
    CHECK_FALSE(p.caps().supports(distlock::feature::fencing));
    CHECK_FALSE(p.caps().why_not(distlock::feature::fencing).empty());
    const auto name = unique_name("redlock-nodes");
    raw_client raw2(n2.port()), raw3(n3.port());

    n1.stop();
    auto m = p.mutex(name);
    REQUIRE(m.try_lock_for(5s));
    CHECK(m.token() == 0);  // no fencing token
    CHECK(raw2.string({"GET", "distlock:{" + name + "}"}) == raw3.string({"GET", "distlock:{" + name + "}"}));
    auto other = distlock::connect(url).mutex(name);
    CHECK_FALSE(other.try_lock());
    std::this_thread::sleep_for(3500ms);  // renewals keep it past its lease on the two live nodes
    CHECK(m.held());
    CHECK_FALSE(other.try_lock());
    m.unlock();
    CHECK(other.try_lock());
    other.unlock();

    n2.stop();
    for (auto wait : {0ms, 10000ms}) {
        auto t0 = clk::now();
        try {
            (void)m.try_lock_for(wait);
            FAIL("acquired with two of three nodes down");
        } catch (const distlock::unavailable_error& e) {
            INFO(e.what());
            CHECK(std::string(e.what()).find("majority of 2") != std::string::npos);
            CHECK(e.backend() == "redlock");
        }
        CHECK(clk::now() - t0 < 5s);  // at once, not after the wait
    }
    n1.start();
    n2.start();
    CHECK(m.try_lock_for(5s));  // back once a majority is back
    m.unlock();
}

TEST_CASE("redlock releases the minority it got when it cannot win a majority", "[redlock]") {
    redis_server n1, n2, n3;
    const auto url = "redlock://" + n1.address() + "," + n2.address() + "," + n3.address();
    auto p = distlock::connect(url);
    const auto name = unique_name("redlock-minority");
    const auto key = "distlock:{" + name + "}";
    raw_client r1(n1.port()), r2(n2.port()), r3(n3.port());
    // Someone else holds it on two nodes: we can only get the third.
    r1.cmd({"SET", key, "someone", "PX", "10000"});
    r2.cmd({"SET", key, "someone", "PX", "10000"});
    auto m = p.mutex(name);
    CHECK_FALSE(m.try_lock_for(500ms));
    CHECK(r3.integer({"EXISTS", key}) == 0);  // our partial grant was undone
    CHECK(r1.string({"GET", key}) == "someone");
}

// ---- inspect on redlock:// -------------------------------------------------------------------------

TEST_CASE("redlock inspect: the majority's holder, lease left, a split view undecided, one script per node",
          "[redlock][inspect]") {
    redis_server n1, n2, n3;
    const auto url = "redlock://" + n1.address() + "," + n2.address() + "," + n3.address() + "?lease=4s";
    auto holder_side = distlock::connect(url + "&holder=redlock-holder");
    auto observer = distlock::connect(url);
    raw_client r1(n1.port()), r2(n2.port()), r3(n3.port());
    const auto name = unique_name("redlock-inspect");
    const std::string key = "distlock:{" + name + "}";
    auto free_view = observer.inspect(name);
    CHECK(free_view.held == std::optional<bool>(false));
    CHECK(free_view.unknown.count("waiters") == 1);

    auto m = holder_side.mutex(name);
    REQUIRE(m.try_lock());
    for (auto* r : {&r1, &r2, &r3})
        CHECK(r->string({"HGET", key + ":holder", "holder"}) == "redlock-holder");  // on every node
    std::vector<std::unique_ptr<command_monitor>> monitors;
    for (auto* n : {&n1, &n2, &n3}) monitors.push_back(std::make_unique<command_monitor>(n->port()));
    auto info = observer.inspect(name);
    for (auto& mon : monitors) CHECK(mon->count() == 1);  // one read-only script per node, one round
    monitors.clear();
    CHECK(info.held == std::optional<bool>(true));
    CHECK(info.holder == std::optional<std::string>("redlock-holder"));
    CHECK_FALSE(info.token.has_value());
    CHECK(info.unknown.at("token").find("fencing") != std::string::npos);
    REQUIRE(info.remaining.has_value());
    CHECK(info.remaining->count() > 0);
    CHECK(*info.remaining <= 4000ms);
    // One node lost the key: still a majority.
    r1.cmd({"DEL", key});
    CHECK(observer.inspect(name).holder == std::optional<std::string>("redlock-holder"));
    // Two owners and a free node: no majority either way.
    r2.cmd({"SET", key, "someone-else", "PX", "10000"});
    info = observer.inspect(name);
    CHECK_FALSE(info.held.has_value());
    CHECK(info.unknown.at("held").find("no majority") != std::string::npos);
    CHECK(info.unknown.count("holder") == 1);
    // A foreign owner on a majority: held, label unknown.
    r1.cmd({"SET", key, "someone-else", "PX", "10000"});
    info = observer.inspect(name);
    CHECK(info.held == std::optional<bool>(true));
    CHECK_FALSE(info.holder.has_value());
    CHECK(info.unknown.count("holder") == 1);
    m.unlock();  // not ours on a majority any more: reported as a loss, never thrown
    for (auto* r : {&r1, &r2, &r3}) r->cmd({"DEL", key});
    CHECK(observer.inspect(name).held == std::optional<bool>(false));
    // A majority down: inspect cannot read, and says so.
    n1.stop();
    n2.stop();
    CHECK_THROWS_AS(observer.inspect(name), distlock::unavailable_error);
}
