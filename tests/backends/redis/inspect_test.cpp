// Redis-specific tests of inspect and holder labels on redis:// (both
// strategies): another connection's grant, queued waiters, a lapsed lease,
// Redisson's own grants, a foreign key, the cost in commands, and no password
// in any message.
#include "redis_test_helpers.hpp"

// ---- inspect and holder labels ---------------------------------------------------------------------

TEST_CASE("inspect shows another connection's grant: label, token, lease left, waiters; free after release",
          "[redis][inspect]") {
    for (std::string strategy : {"plain", "reentrant"}) {
        DYNAMIC_SECTION("strategy=" << strategy) {
            const auto base =
                strategy == "plain" ? shared_url("?lease=5s") : shared_url("/1?strategy=reentrant&lease=5s");
            const auto label = "inspect-url-" + distlock::spi::random_token().substr(0, 8);
            auto holder_side = distlock::connect(base + "&holder=" + label);
            CHECK(holder_side.holder() == label);
            auto observer = distlock::connect(base);
            const auto name = unique_name("inspect-" + strategy);
            auto before = observer.inspect(name);
            CHECK(before.name == name);
            CHECK(before.held == std::optional<bool>(false));
            CHECK_FALSE(before.holder.has_value());
            CHECK_FALSE(before.token.has_value());
            CHECK_FALSE(before.remaining.has_value());

            auto m = holder_side.mutex(name);
            REQUIRE(m.try_lock());
            auto info = observer.inspect(name);
            CHECK(info.held == std::optional<bool>(true));
            CHECK(info.holder == std::optional<std::string>(label));
            CHECK(info.token == std::optional<std::uint64_t>(m.token()));
            REQUIRE(info.remaining.has_value());
            CHECK(info.remaining->count() > 0);
            CHECK(*info.remaining <= 5000ms);
            CHECK(info.unknown.count("holder") == 0);
            CHECK(info.unknown.count("token") == 0);
            CHECK(info.unknown.count("remaining") == 0);
            if (strategy == "plain") {
                CHECK(info.waiters == std::optional<std::uint32_t>(0));
            } else {
                CHECK_FALSE(info.waiters.has_value());
                CHECK(info.unknown.at("waiters").find("PUBSUB NUMSUB") != std::string::npos);
            }
            // The holder side sees the same.
            CHECK(holder_side.inspect(name).holder == std::optional<std::string>(label));
            m.unlock();
            auto after = observer.inspect(name);
            CHECK(after.held == std::optional<bool>(false));
            CHECK_FALSE(after.holder.has_value());
        }
    }
}

TEST_CASE("inspect counts the queued waiters of a plain lock, and the label of provider_options wins",
          "[redis][inspect][handoff]") {
    distlock::provider_options o;
    o.holder = "from-options";
    auto holder_side = distlock::connect(shared_url("?lease=10s&holder=from-the-url"), o);
    CHECK(holder_side.holder() == "from-options");
    auto waiter_a = distlock::connect(shared_url(""));
    auto waiter_b = distlock::connect(shared_url(""));
    const auto name = unique_name("inspect-waiters");
    auto m = holder_side.mutex(name);
    REQUIRE(m.try_lock());
    std::vector<std::thread> threads;
    std::atomic<int> got{0};
    for (auto* p : {&waiter_a, &waiter_b})
        threads.emplace_back([&, p] {
            auto w = p->mutex(name);
            if (w.try_lock_for(20s)) {
                ++got;
                w.unlock();
            }
        });
    CHECK(eventually([&] { return holder_side.inspect(name).waiters == std::optional<std::uint32_t>(2); }, 10s));
    const auto info = holder_side.inspect(name);
    CHECK(info.holder == std::optional<std::string>("from-options"));
    m.unlock();
    for (auto& t : threads) t.join();
    CHECK(got == 2);
    const auto after = holder_side.inspect(name);
    CHECK(after.held == std::optional<bool>(false));
    CHECK(after.waiters == std::optional<std::uint32_t>(0));
}

TEST_CASE("a grant whose lease ran out without renewal is shown free, its stale record ignored",
          "[redis][inspect][expiry]") {
    for (std::string strategy : {"plain", "reentrant"}) {
        DYNAMIC_SECTION("strategy=" << strategy) {
            const auto url = strategy == "plain" ? shared_url("?holder=expiring")
                                                 : shared_url("/1?strategy=reentrant&holder=expiring");
            auto p = distlock::connect(url);
            const auto name = unique_name("inspect-expiry");
            distlock::lock_options opts;
            opts.lease = 700ms;
            opts.auto_renew = false;
            auto m = p.mutex(name, opts);
            REQUIRE(m.try_lock());
            const auto held = p.inspect(name);
            CHECK(held.held == std::optional<bool>(true));
            REQUIRE(held.remaining.has_value());
            CHECK(held.remaining->count() > 0);
            CHECK(*held.remaining <= 700ms);
            CHECK(eventually([&] { return p.inspect(name).held == std::optional<bool>(false); }, 5s));
            const auto gone = p.inspect(name);
            CHECK_FALSE(gone.holder.has_value());
            CHECK_FALSE(gone.token.has_value());
            // A client that is not distlock takes it now: the old record (left by the
            // expiry) must not name the old holder.
            raw_client raw(shared_port(), {}, strategy == "plain" ? 0 : 1);
            if (strategy == "plain") raw.cmd({"SET", "distlock:{" + name + "}", "foreign-token", "PX", "10000"});
            else raw.cmd({"HSET", name, "6f1c1b9e-2f4e-4a57-9d53-0c1e9d1f7a10:9", "1"});
            const auto foreign = p.inspect(name);
            CHECK(foreign.held == std::optional<bool>(true));
            CHECK(foreign.holder != std::optional<std::string>("expiring"));
            CHECK_FALSE(foreign.token.has_value());
            CHECK(foreign.unknown.count("token") == 1);
            m.unlock();  // reports the loss; never throws
            raw.cmd({"DEL", strategy == "plain" ? "distlock:{" + name + "}" : name});
        }
    }
}

TEST_CASE("inspect of a lock Redisson holds shows its uuid:thread field and lease, the token unknown",
          "[redis][inspect][redisson]") {
    auto p = distlock::connect(shared_url("/1?strategy=reentrant"));
    raw_client raw(shared_port(), {}, 1);
    const auto name = unique_name("inspect-redisson");
    const std::string java_field = "6f1c1b9e-2f4e-4a57-9d53-0c1e9d1f7a10:57";
    // What a Java RLock.lock() leaves behind, entered twice (count 2), 20 s lease.
    raw.cmd({"HINCRBY", name, java_field, "2"});
    raw.cmd({"PEXPIRE", name, "20000"});
    auto info = p.inspect(name);
    CHECK(info.held == std::optional<bool>(true));
    CHECK(info.holder == std::optional<std::string>(java_field));
    REQUIRE(info.remaining.has_value());
    CHECK(info.remaining->count() > 0);
    CHECK(*info.remaining <= 20000ms);
    CHECK_FALSE(info.token.has_value());
    CHECK(info.unknown.at("token").find("not distlock") != std::string::npos);
    CHECK_FALSE(info.waiters.has_value());
    // Redisson's read-write lock under the same name: a hash with `mode`.
    raw.cmd({"DEL", name});
    raw.cmd({"HSET", name, "mode", "read", java_field, "1"});
    raw.cmd({"PEXPIRE", name, "20000"});
    info = p.inspect(name);
    CHECK(info.held == std::optional<bool>(true));
    CHECK_FALSE(info.holder.has_value());
    CHECK(info.unknown.at("holder").find("mode=read") != std::string::npos);
    raw.cmd({"DEL", name});
    CHECK(p.inspect(name).held == std::optional<bool>(false));
}

TEST_CASE("the holder record leaves Redisson's hash alone: its commands still work on our grant",
          "[redis][inspect][redisson][layout]") {
    auto p = distlock::connect(shared_url("/1?strategy=reentrant&lease=5s&holder=cpp-side"));
    raw_client raw(shared_port(), {}, 1);
    const auto name = unique_name("redisson-record");
    auto m = p.mutex(name);
    REQUIRE(m.try_lock());
    auto all = raw.cmd({"HGETALL", name});
    REQUIRE(all->type == REDIS_REPLY_ARRAY);
    REQUIRE(all->elements == 2);  // still exactly one field: ours, count 1
    const std::string field(all->element[0]->str, all->element[0]->len);
    CHECK(raw.string({"HGET", name, field}) == "1");  // Redisson's getHoldCount
    CHECK(raw.integer({"EXISTS", name}) == 1);        // isLocked
    CHECK(raw.integer({"PTTL", name}) > 0);           // remainTimeToLive
    const std::string record = "distlock_holder:{" + name + "}";
    CHECK(raw.string({"HGET", record, "owner"}) == field);
    CHECK(raw.string({"HGET", record, "holder"}) == "cpp-side");
    CHECK(raw.string({"HGET", record, "token"}) == std::to_string(m.token()));
    // Redisson's forceUnlock: DEL and the release message. The lock is free for everyone.
    raw.cmd({"DEL", name});
    raw.cmd({"PUBLISH", "redisson_lock__channel:{" + name + "}", "0"});
    CHECK(p.inspect(name).held == std::optional<bool>(false));
    auto other = distlock::connect(shared_url("/1?strategy=reentrant&holder=second")).mutex(name);
    REQUIRE(other.try_lock());
    CHECK(p.inspect(name).holder == std::optional<std::string>("second"));
    other.unlock();
    CHECK(raw.integer({"EXISTS", record}) == 0);  // the release removes the record
    m.unlock();
}

TEST_CASE("inspect of a plain key set by another client: held, lease left, holder and token unknown",
          "[redis][inspect]") {
    auto p = distlock::connect(shared_url(""));
    raw_client raw(shared_port());
    const auto name = unique_name("inspect-foreign");
    const std::string key = "distlock:{" + name + "}";
    raw.cmd({"SET", key, "0123456789abcdef0123456789abcdef", "PX", "9000"});
    auto info = p.inspect(name);
    CHECK(info.held == std::optional<bool>(true));
    CHECK_FALSE(info.holder.has_value());
    CHECK_FALSE(info.token.has_value());
    CHECK(info.unknown.at("holder").find("records no holder") != std::string::npos);
    REQUIRE(info.remaining.has_value());
    CHECK(*info.remaining <= 9000ms);
    CHECK(info.remaining->count() > 0);
    raw.cmd({"PERSIST", key});  // no expiry at all
    info = p.inspect(name);
    CHECK_FALSE(info.remaining.has_value());
    CHECK(info.unknown.at("remaining").find("no expiry") != std::string::npos);
    raw.cmd({"DEL", key});
    raw.cmd({"HSET", key, "x", "1"});  // another program's hash under our key
    info = p.inspect(name);
    CHECK(info.held == std::optional<bool>(true));
    CHECK(info.unknown.at("holder").find("hash") != std::string::npos);
    raw.cmd({"DEL", key});
}

TEST_CASE("inspect costs exactly one command and a grant with its label still one script", "[redis][inspect][count]") {
    redis_server server;
    raw_client raw(server.port());
    for (std::string strategy : {"plain", "reentrant"}) {
        DYNAMIC_SECTION("strategy=" << strategy) {
            auto p = distlock::connect("redis://" + server.address() + "?strategy=" + strategy + "&holder=counted");
            const auto warm = unique_name("warm-up");  // loads the scripts on this fresh server
            (void)p.inspect(warm);
            {
                auto w = p.mutex(warm);
                REQUIRE(w.try_lock());
                w.unlock();
            }
            const auto name = unique_name("counted");
            auto m = p.mutex(name);
            {
                command_monitor mon(server.port());
                REQUIRE(m.try_lock());
                CHECK(mon.count() == 1);  // the acquire script records the label: no extra command
            }
            raw.cmd({"CONFIG", "RESETSTAT"});
            command_monitor mon(server.port());
            const auto info = p.inspect(name);
            CHECK(mon.count() == 1);  // one read-only script
            CHECK(raw.calls("evalsha") == 1);
            CHECK(info.holder == std::optional<std::string>("counted"));
            m.unlock();
        }
    }
}

TEST_CASE("inspect never shows the password, even when it fails", "[redis][inspect][auth]") {
    redis_server server({"requirepass Inspect-Secret-9"});
    auto p = distlock::connect("redis://:Inspect-Secret-9@" + server.address() + "?holder=pw-test");
    const auto name = unique_name("inspect-pw");
    auto m = p.mutex(name);
    REQUIRE(m.try_lock());
    auto info = p.inspect(name);
    CHECK(info.holder == std::optional<std::string>("pw-test"));
    for (const auto& [field, why] : info.unknown) CHECK(why.find("Inspect-Secret-9") == std::string::npos);
    server.stop();
    try {
        (void)p.inspect(name);
        FAIL("inspect of a stopped server succeeded");
    } catch (const distlock::unavailable_error& e) {
        INFO(e.what());
        CHECK(std::string(e.what()).find("Inspect-Secret-9") == std::string::npos);
        CHECK(e.backend() == "redis");
    }
    m.unlock();
}

TEST_CASE("strategy=reentrant: every object of a name shares its key, and each inspect says which holds it",
          "[redis][inspect][reentrant]") {
    auto p = distlock::connect(shared_url("/1?strategy=reentrant&lease=5s"));
    SECTION("a semaphore's count keeps the mutex out, and inspect says so rather than 'another program's key'") {
        const auto name = unique_name("shared-sem");
        auto sem = p.semaphore(name, 2);
        REQUIRE(sem.try_acquire());
        sem.release();  // the count stays, as Redisson's does
        const auto info = p.inspect(name);
        CHECK(info.held == std::optional<bool>(true));
        REQUIRE(info.unknown.count("holder") == 1);
        CHECK_THAT(info.unknown.at("holder"), Catch::Contains("semaphore of the same name"));
        CHECK_THROWS_AS(p.mutex(name).try_lock(), distlock::invalid_argument_error);  // WRONGTYPE: what it says
        const auto s = p.inspect_semaphore(name);
        CHECK(s.size == std::optional<std::uint32_t>(2));
        CHECK(s.free == std::optional<std::uint32_t>(2));
        distlock::testing::break_lock(p, name);
    }
    SECTION("a read-write lock's hash: the mutex is held by it, never its mode field taken for a holder") {
        const auto name = unique_name("shared-rw");
        auto rw = p.shared_mutex(name);
        REQUIRE(rw.try_lock_shared());
        const auto info = p.inspect(name);
        CHECK(info.held == std::optional<bool>(true));
        CHECK_FALSE(info.holder.has_value());
        CHECK_THAT(info.unknown.at("holder"), Catch::Contains("mode=read"));
        const auto r = p.inspect_read_write(name);
        CHECK(r.write_held == std::optional<bool>(false));
        REQUIRE(r.readers.has_value());
        CHECK(r.readers->size() == 1u);
        rw.unlock_shared();
    }
    SECTION("a mutex's hash: inspect_read_write says that Redisson's lock of the name holds the key") {
        const auto name = unique_name("shared-mutex");
        auto m = p.mutex(name);
        REQUIRE(m.try_lock());
        const auto r = p.inspect_read_write(name);
        CHECK_FALSE(r.write_held.has_value());
        CHECK_THAT(r.unknown.at("write_held"), Catch::Contains("RLock"));
        m.unlock();
    }
}
