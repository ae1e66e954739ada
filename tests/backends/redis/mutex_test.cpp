// Redis-specific tests of the mutex of redis:// and redis://...?strategy=reentrant:
// the server-side layout (plain and Redisson's RLock), loss, waking without
// polling, the FIFO hand-off, batched renewals and databases. They use the
// shared server of DISTLOCK_TEST_REDIS_URL.
#include "redis_test_helpers.hpp"

// ---- server-side layout ------------------------------------------------------------------

TEST_CASE("plain layout: token key with a lease, never-expiring fence key, release message", "[redis][layout]") {
    auto p = distlock::connect(shared_url("?lease=5s"));
    raw_client raw(shared_port());
    const auto name = unique_name("layout");
    const std::string key = "distlock:{" + name + "}";
    auto m = p.mutex(name);
    REQUIRE(m.try_lock());
    const auto token = raw.string({"GET", key});
    CHECK(std::regex_match(token, std::regex("[0-9a-f]{32}")));
    const auto pttl = raw.integer({"PTTL", key});
    CHECK(pttl > 0);
    CHECK(pttl <= 5000);
    CHECK(raw.string({"GET", key + ":fence"}) == std::to_string(m.token()));
    CHECK(raw.integer({"PTTL", key + ":fence"}) == -1);  // the fence key never expires

    raw_client sub(shared_port());
    sub.cmd({"SUBSCRIBE", key + ":released"});
    m.unlock();
    auto [channel, payload] = next_message(sub);
    CHECK(channel == key + ":released");
    CHECK(raw.integer({"EXISTS", key}) == 0);
    CHECK(raw.string({"GET", key + ":fence"}) != "");  // survives the release
}

TEST_CASE("reentrant layout is Redisson's: hash field uuid:thread with a count, PEXPIRE, message 0",
          "[redis][redisson][layout]") {
    auto p = distlock::connect(shared_url("/1?strategy=reentrant&lease=4s"));
    CHECK(p.caps().reentrant);
    raw_client raw(shared_port(), {}, 1);
    const auto name = unique_name("redisson-layout");
    auto m = p.mutex(name);
    REQUIRE(m.try_lock());
    CHECK(m.try_lock());  // nests on the same thread
    auto all = raw.cmd({"HGETALL", name});
    REQUIRE(all->type == REDIS_REPLY_ARRAY);
    REQUIRE(all->elements == 2);  // exactly one field
    const std::string field(all->element[0]->str, all->element[0]->len);
    CHECK(std::regex_match(field,
                           std::regex("[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}:[0-9]+")));
    CHECK(std::string(all->element[1]->str, all->element[1]->len) == "1");
    const auto pttl = raw.integer({"PTTL", name});
    CHECK(pttl > 0);
    CHECK(pttl <= 4000);
    CHECK(raw.string({"GET", "redisson_lock_token:{" + name + "}"}) == std::to_string(m.token()));

    raw_client sub(shared_port());
    sub.cmd({"SUBSCRIBE", "redisson_lock__channel:{" + name + "}"});
    m.unlock();  // inner: local count only
    CHECK(raw.integer({"EXISTS", name}) == 1);
    m.unlock();
    auto [channel, payload] = next_message(sub);
    CHECK(channel == "redisson_lock__channel:{" + name + "}");
    CHECK(payload == "0");
    CHECK(raw.integer({"EXISTS", name}) == 0);
}

TEST_CASE("a Redisson-held lock blocks us, and Redisson's release message wakes our waiter at once",
          "[redis][redisson]") {
    auto p = distlock::connect(shared_url("/1?strategy=reentrant"));
    raw_client raw(shared_port(), {}, 1);
    const auto name = unique_name("redisson-peer");
    const std::string java_field = "6f1c1b9e-2f4e-4a57-9d53-0c1e9d1f7a10:57";
    // What a Java RLock.lock() leaves behind (field, count, 20 s lease).
    raw.cmd({"HINCRBY", name, java_field, "1"});
    raw.cmd({"PEXPIRE", name, "20000"});
    auto m = p.mutex(name);
    CHECK_FALSE(m.try_lock());
    std::atomic<long long> waited{-1};
    std::thread waiter([&] {
        auto t0 = clk::now();
        if (m.try_lock_for(15s)) waited = ms(clk::now() - t0);
    });
    std::this_thread::sleep_for(300ms);
    // Java RLock.unlock(): count to 0, DEL, PUBLISH "0".
    raw.cmd({"DEL", name});
    raw.cmd({"PUBLISH", "redisson_lock__channel:{" + name + "}", "0"});
    waiter.join();
    INFO("waited " << waited.load() << " ms for a lock whose lease had 20 s left");
    REQUIRE(waited.load() >= 0);
    CHECK(waited.load() < 10000);  // woken by the message, not by the lease running out
    // While we hold it, a Redisson acquire (its documented semantics) is refused with the PTTL.
    const char* redisson_acquire =
        "if (redis.call('exists', KEYS[1]) == 0) or (redis.call('hexists', KEYS[1], ARGV[2]) == 1) then "
        "redis.call('hincrby', KEYS[1], ARGV[2], 1); redis.call('pexpire', KEYS[1], ARGV[1]); return nil; end; "
        "return redis.call('pttl', KEYS[1]);";
    auto r = raw.cmd({"EVAL", redisson_acquire, "1", name, "30000", java_field});
    CHECK(r->type == REDIS_REPLY_INTEGER);
    CHECK(r->integer > 0);
    m.unlock();
    r = raw.cmd({"EVAL", redisson_acquire, "1", name, "30000", java_field});
    CHECK(r->type == REDIS_REPLY_NIL);  // Java acquires once we released
    raw.cmd({"DEL", name});
}

// ---- loss, waking, batching ----------------------------------------------------------------------

TEST_CASE("a lock key deleted on the server is reported to the holder as lost", "[redis][loss]") {
    for (std::string strategy : {"plain", "reentrant"}) {
        DYNAMIC_SECTION("strategy=" << strategy) {
            const bool plain = strategy == "plain";
            loss_recorder rec;  // before the providers: their callback threads call it until they end
            auto p = distlock::connect(shared_url(plain ? "?lease=1500ms" : "/1?strategy=reentrant&lease=1500ms"));
            raw_client raw(shared_port(), {}, plain ? 0 : 1);
            const auto name = unique_name("deleted");
            auto m = p.mutex(name, rec.options());
            REQUIRE(m.try_lock());
            CHECK(raw.integer({"DEL", plain ? "distlock:{" + name + "}" : name}) == 1);
            // Found at the next renewal (every lease/3 = 500 ms).
            REQUIRE(rec.wait_lost(1, 3s));
            CHECK_FALSE(m.held());
            CHECK_FALSE(rec.wait_lost(2, 200ms));  // and only once
            const auto losses = rec.losses();
            CHECK(losses[0].reason.find("expired or deleted") != std::string::npos);
            m.unlock();  // never throws
        }
    }
}

TEST_CASE("an expiring key wakes a waiter at its PTTL, without any release message", "[redis][waiting]") {
    auto p = distlock::connect(shared_url(""));
    raw_client raw(shared_port());
    const auto name = unique_name("expiring");
    // A holder that crashed: its key simply runs out in 700 ms.
    raw.cmd({"SET", "distlock:{" + name + "}", "deadbeef", "PX", "700"});
    auto m = p.mutex(name);
    auto t0 = clk::now();
    REQUIRE(m.try_lock_for(10s));
    auto waited = ms(clk::now() - t0);
    INFO("waited " << waited << " ms");
    CHECK(waited >= 600);
    CHECK(waited < 5000);
    m.unlock();
}

TEST_CASE("a waiting client sends O(1) commands however long it waits (no polling)", "[redis][waiting]") {
    redis_server server;
    const auto url = "redis://" + server.address() + "?lease=30s";
    auto a = distlock::connect(url);
    auto b = distlock::connect(url);
    raw_client raw(server.port());
    const auto name = unique_name("no-polling");
    auto holder = a.mutex(name);
    REQUIRE(holder.try_lock());
    raw.cmd({"CONFIG", "RESETSTAT"});
    std::atomic<bool> got{false};
    std::thread waiter([&] {
        auto m = b.mutex(name);
        if (m.try_lock_for(20s)) {
            got = true;
            m.unlock();
        }
    });
    std::this_thread::sleep_for(2s);
    const auto scripts_while_waiting = raw.calls("evalsha") + raw.calls("eval");
    holder.unlock();
    waiter.join();
    CHECK(got.load());
    INFO("acquire scripts during 2 s of waiting: " << scripts_while_waiting);
    CHECK(scripts_while_waiting <= 2);  // one try, one retry after subscribing: then it only listens
}

TEST_CASE("a release hands the lock to the longest-waiting client and wakes only it", "[redis][handoff]") {
    redis_server server;
    const auto url = "redis://" + server.address() + "?lease=30s";
    raw_client raw(server.port());
    const auto name = unique_name("fifo");
    const std::string base = "distlock:{" + name + "}";
    auto h = distlock::connect(url);
    {
        auto warm = h.mutex(unique_name("warm-up"));  // loads the scripts on this fresh server
        warm.lock();
        warm.unlock();
    }
    auto holder = h.mutex(name);
    REQUIRE(holder.try_lock());
    constexpr int waiters = 4;
    std::vector<distlock::provider> providers;
    for (int i = 0; i < waiters; ++i) providers.push_back(distlock::connect(url));
    std::mutex order_mutex;
    std::vector<int> order;
    std::vector<std::thread> threads;
    for (int i = 0; i < waiters; ++i) {
        threads.emplace_back([&, i] {
            auto m = providers[i].mutex(name);
            if (!m.try_lock_for(20s)) return;
            {
                std::lock_guard lk(order_mutex);
                order.push_back(i);
            }
            // Held longer than a hand-off reservation (500 ms): the others must not
            // wake when the reservation would have run out.
            std::this_thread::sleep_for(800ms);
            m.unlock();
        });
        // Queued one after the other.
        REQUIRE(eventually([&] { return raw.integer({"LLEN", base + ":queue"}) == i + 1; }, 5s));
    }
    raw.cmd({"CONFIG", "RESETSTAT"});
    holder.unlock();
    for (auto& t : threads) t.join();
    REQUIRE(order.size() == waiters);
    CHECK(order == std::vector<int>{0, 1, 2, 3});  // first come, first served
    const auto scripts = raw.calls("evalsha") + raw.calls("eval");
    INFO(raw.string({"INFO", "commandstats"}));
    // Each hand-off: one release script and one acquire by the woken waiter; nobody
    // else retries. (waiters + 1 releases: the holder's and each waiter's.)
    CHECK(scripts == 2 * waiters + 1);
    // A hand-off and its take-up each publish; the last release finds no waiter: "released".
    CHECK(raw.calls("publish") == 2 * waiters + 1);
    CHECK(raw.integer({"EXISTS", base + ":queue"}) == 0);
    CHECK(raw.integer({"ZCARD", base + ":waiters"}) == 0);
}

TEST_CASE("a waiter that died in the queue costs the next one only a short reservation", "[redis][handoff]") {
    auto p = distlock::connect(shared_url("?lease=30s"));
    raw_client raw(shared_port());
    const auto name = unique_name("ghost");
    const std::string base = "distlock:{" + name + "}";
    auto holder = p.mutex(name);
    REQUIRE(holder.try_lock());
    auto now_ms = [&] {
        auto t = raw.cmd({"TIME"});
        return std::stoll(std::string(t->element[0]->str)) * 1000 + std::stoll(std::string(t->element[1]->str)) / 1000;
    };
    // Two waiters that died: one whose liveness already ran out, one that looks alive.
    raw.cmd({"RPUSH", base + ":queue", "expired-ghost", "live-ghost"});
    raw.cmd({"ZADD", base + ":waiters", std::to_string(now_ms() - 1000), "expired-ghost"});
    raw.cmd({"ZADD", base + ":waiters", std::to_string(now_ms() + 60000), "live-ghost"});
    auto q = distlock::connect(shared_url("?lease=30s"));
    std::atomic<long long> waited{-1};
    std::thread waiter([&] {
        auto m = q.mutex(name);
        auto t0 = clk::now();
        if (m.try_lock_for(15s)) {
            waited = ms(clk::now() - t0);
            m.unlock();
        }
    });
    REQUIRE(eventually([&] { return raw.integer({"LLEN", base + ":queue"}) == 3; }, 5s));
    raw_client sub(shared_port());
    sub.cmd({"SUBSCRIBE", base + ":released"});
    const auto t0 = clk::now();
    holder.unlock();
    auto [c1, first] = next_message(sub);
    CHECK(first == "h live-ghost 500");  // the expired ghost was skipped
    waiter.join();
    INFO("the real waiter got the lock " << ms(clk::now() - t0) << " ms after the release");
    CHECK(waited.load() >= 0);
    CHECK(clk::now() - t0 < 15s);  // after the ghost's 500 ms reservation, not after the 30 s lease
    CHECK(raw.integer({"EXISTS", base + ":queue"}) == 0);
}

TEST_CASE("a waiter that gives up leaves the queue", "[redis][handoff]") {
    auto p = distlock::connect(shared_url(""));
    auto q = distlock::connect(shared_url(""));
    raw_client raw(shared_port());
    const auto name = unique_name("give-up");
    const std::string base = "distlock:{" + name + "}";
    auto holder = p.mutex(name);
    REQUIRE(holder.try_lock());
    auto m = q.mutex(name);
    CHECK_FALSE(m.try_lock_for(600ms));
    CHECK(raw.integer({"LLEN", base + ":queue"}) == 0);
    CHECK(raw.integer({"ZCARD", base + ":waiters"}) == 0);
    holder.unlock();
    CHECK(raw.integer({"EXISTS", base}) == 0);  // no waiter left: the key is simply deleted
    CHECK(m.try_lock());
    m.unlock();
}

TEST_CASE("renewals of many held locks go out as one script per 512 in one round trip", "[redis][renewal]") {
    redis_server server;
    capture_registry registry;
    distlock::backends::redis::register_backend(registry);
    REQUIRE(registry.factories.count("redis") == 1);
    for (std::string strategy : {"plain", "reentrant"}) {
        DYNAMIC_SECTION("strategy=" << strategy) {
            auto u = distlock::spi::url::parse("redis://" + server.address() + "?strategy=" + strategy);
            auto backend = registry.factories["redis"](u);
            u.expect_all_taken();
            std::vector<std::unique_ptr<distlock::spi::lock_handle>> handles;
            std::vector<distlock::spi::lock_handle*> raw_handles;
            std::vector<std::string> names;
            constexpr int n = 1100;  // three scripts of at most 512 renewals, pipelined
            for (int i = 0; i < n; ++i) {
                distlock::spi::lock_request req;
                req.name = unique_name("batch");
                req.lease = 3s;
                names.push_back(req.name);
                handles.push_back(backend->make_lock(req));
                REQUIRE(handles.back()->acquire(clk::now() + 5s, {}).has_value());
                raw_handles.push_back(handles.back().get());
            }
            raw_client raw(server.port());
            auto key = [&](const std::string& n) { return strategy == "plain" ? "distlock:{" + n + "}" : n; };
            std::vector<distlock::spi::keepalive_result> results(raw_handles.size());
            backend->keepalive_batch(raw_handles, results);  // the first one also loads the script
            raw.cmd({"PEXPIRE", key(names[3]), "1000"});
            raw.cmd({"CONFIG", "RESETSTAT"});
            backend->keepalive_batch(raw_handles, results);
            for (auto& r : results) CHECK(r.state == distlock::spi::keepalive_result::status::ok);
            INFO(raw.string({"INFO", "commandstats"}));
            CHECK(raw.calls("evalsha") + raw.calls("eval") == (n + 511) / 512);
            CHECK(raw.integer({"PTTL", key(names[3])}) > 2000);  // renewed to the full lease
            // One key deleted: that one is lost, the others still fine.
            raw.cmd({"DEL", key(names[5])});
            backend->keepalive_batch(raw_handles, results);
            for (std::size_t i = 0; i < results.size(); ++i)
                CHECK(results[i].state == (i == 5 ? distlock::spi::keepalive_result::status::lost
                                                  : distlock::spi::keepalive_result::status::ok));
            // A server that forgot the scripts (restart, SCRIPT FLUSH) still renews.
            raw.cmd({"SCRIPT", "FLUSH"});
            backend->keepalive_batch(raw_handles, results);
            CHECK(results[0].state == distlock::spi::keepalive_result::status::ok);
            for (std::size_t i = 0; i < handles.size(); ++i) {
                if (i == 5) CHECK_THROWS_AS(handles[i]->release(), distlock::not_owner_error);
                else handles[i]->release();
            }
        }
    }
}

TEST_CASE("databases are separate: SELECT from the URL path", "[redis]") {
    const auto name = unique_name("db");
    auto p3 = distlock::connect(shared_url("/3"));
    auto p4 = distlock::connect(shared_url("/4"));
    auto m3 = p3.mutex(name);
    auto m4 = p4.mutex(name);
    REQUIRE(m3.try_lock());
    CHECK(m4.try_lock());  // same name, other database
    raw_client raw3(shared_port(), {}, 3);
    CHECK(raw3.integer({"EXISTS", "distlock:{" + name + "}"}) == 1);
    m3.unlock();
    m4.unlock();
    CHECK_THROWS_AS(distlock::connect(shared_url("/99")), distlock::invalid_argument_error);
    CHECK_THROWS_AS(distlock::connect(shared_url("/x")), distlock::invalid_argument_error);
    CHECK_THROWS_AS(distlock::connect(shared_url("?strategy=fair")), distlock::invalid_argument_error);
    CHECK_THROWS_AS(distlock::connect("redlock://127.0.0.1:1,127.0.0.1:2"), distlock::invalid_argument_error);
    try {  // one server named twice would cast two votes
        (void)distlock::connect("redlock://127.0.0.1:1,127.0.0.1:2,127.0.0.1:1");
        FAIL("a node listed twice was accepted");
    } catch (const distlock::invalid_argument_error& e) {
        CHECK(std::string(e.what()).find("lists 127.0.0.1:1 twice") != std::string::npos);
    }
}
