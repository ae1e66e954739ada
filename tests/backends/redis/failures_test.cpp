// Redis-specific failure tests of redis://: the CLI's verbose lease, a server
// of another kind, credentials, a stopped or hung server, restarts with and
// without persistence, and fencing across them. Every test that stops, pauses
// or reconfigures a server starts its own redis-server child.
#include "redis_test_helpers.hpp"

// ---- failures: credentials, unreachable or hung servers, restarts ---------------------------------------

#ifdef DISTLOCK_CLI
TEST_CASE("distlock run --verbose shows the lease and each renewal, of every primitive", "[redis][cli]") {
    const auto url = distlock::test::env("DISTLOCK_TEST_REDIS_URL");
    for (const std::string form : {"", " --shared", " --permits 2"}) {
        DYNAMIC_SECTION("run" << form) {
            const auto name = unique_name("verbose");
            // A 600 ms lease is renewed every 200 ms: several renewals in 1.5 s.
            auto r = distlock::test::run_command(std::string(DISTLOCK_CLI) + " run --backend '" + url + "' --name '" +
                                                 name + "'" + form + " --lease 600ms --verbose -- sleep 1.5 2>&1");
            INFO(r.out);
            CHECK(r.status == 0);
            if (form.empty()) CHECK(r.out.find("lease '" + name + "': valid for ") != std::string::npos);
            std::size_t renewals = 0;
            for (auto at = r.out.find(": renewed: "); at != std::string::npos; at = r.out.find(": renewed: ", at + 1))
                ++renewals;
            CHECK(renewals >= 2);  // about 7; fewer on a loaded machine
            CHECK(r.out.find("no lease") == std::string::npos);
        }
    }
}
#endif

TEST_CASE("a URL that points at a server of another kind is a bad argument, not 'retry later'", "[redis][input]") {
    distlock::test::wrong_server http("HTTP/1.1 400 Bad Request\r\n\r\n"), http2(""), http3("");
    const auto at = http.address();
    for (const auto& url : {"redis://" + at, "redlock://" + at + "," + http2.address() + "," + http3.address()}) {
        try {
            (void)distlock::connect(url);
            FAIL("connected to " << url);
        } catch (const distlock::invalid_argument_error& e) {
            CHECK(std::string(e.what()).find("is " + at + " a Redis server?") != std::string::npos);
        }
    }
}

TEST_CASE("a wrong password or ACL user gives access_denied_error; right ones work", "[redis][auth]") {
    redis_server server(
        {"requirepass s3cret", "user alice on >alicepw ~* &* +@all", "user reader on >readerpw ~* &* +@read +ping"});
    const auto at = server.address();
    CHECK_THROWS_AS(distlock::connect("redis://:Xyzzy42@" + at), distlock::access_denied_error);
    CHECK_THROWS_AS(distlock::connect("redis://" + at), distlock::access_denied_error);  // NOAUTH
    try {  // and it says where the password goes
        (void)distlock::connect("redis://" + at);
    } catch (const distlock::access_denied_error& e) {
        CHECK(std::string(e.what()).find("redis://:PASSWORD@host:port") != std::string::npos);
    }
    CHECK_THROWS_AS(distlock::connect("redis://alice:nope@" + at), distlock::access_denied_error);
    CHECK_THROWS_AS(distlock::connect("redis://bob:alicepw@" + at), distlock::access_denied_error);
    // The first node refuses the password (the others are the same server by
    // another name, and a closed port).
    CHECK_THROWS_AS(
        distlock::connect("redlock://:wrong@" + at + ",localhost:" + std::to_string(server.port()) + ",127.0.0.1:1"),
        distlock::access_denied_error);
    try {
        (void)distlock::connect("redis://:Xyzzy42@" + at);
        FAIL("connected with a wrong password");
    } catch (const distlock::access_denied_error& e) {
        CHECK(std::string(e.what()).find("Xyzzy42") == std::string::npos);  // the password is never echoed
        CHECK(e.backend() == "redis");
    }
    // An ACL user without the right to run scripts: typed at the first lock.
    auto reader = distlock::connect("redis://reader:readerpw@" + at);
    CHECK_THROWS_AS(reader.mutex(unique_name("acl")).try_lock(), distlock::access_denied_error);
    for (std::string url : {"redis://:s3cret@" + at, "redis://alice:alicepw@" + at + "/2",
                            "redis://alice:alicepw@" + at + "/2?strategy=reentrant"}) {
        INFO(url);
        auto p = distlock::connect(url);
        auto m = p.mutex(unique_name("auth"));
        CHECK(m.try_lock_for(5s));
        m.unlock();
    }
}

TEST_CASE("a closed port or stopped server gives unavailable_error within the connect timeout", "[redis][down]") {
    const auto port = distlock::test::free_port();
    auto t0 = clk::now();
    CHECK_THROWS_AS(distlock::connect("redis://127.0.0.1:" + std::to_string(port) + "?connect_timeout=500ms"),
                    distlock::unavailable_error);
    CHECK(clk::now() - t0 < 3s);

    redis_server server;
    auto p = distlock::connect("redis://" + server.address() + "?connect_timeout=500ms&timeout=500ms");
    auto m = p.mutex(unique_name("down"));
    server.stop();
    for (auto wait : {0ms, 30000ms}) {
        t0 = clk::now();
        CHECK_THROWS_AS(m.try_lock_for(wait), distlock::unavailable_error);
        CHECK(clk::now() - t0 < 3s);
    }
    t0 = clk::now();
    CHECK_THROWS_AS(m.lock(), distlock::unavailable_error);
    CHECK(clk::now() - t0 < 3s);
}

TEST_CASE("a hung server or a port that never answers gives unavailable_error within the timeouts, no hang",
          "[redis][down]") {
    // A listening socket nobody accepts on: connect succeeds, no reply ever comes.
    auto t0 = clk::now();
    {
        distlock::test::silent_listener silent;
        CHECK_THROWS_AS(distlock::connect("redis://127.0.0.1:" + std::to_string(silent.port()) + "?timeout=400ms"),
                        distlock::unavailable_error);
    }
    CHECK(clk::now() - t0 < 3s);

    redis_server server;
    auto p = distlock::connect("redis://" + server.address() + "?timeout=400ms&connect_timeout=400ms");
    auto m = p.mutex(unique_name("hung"));
    REQUIRE(m.try_lock());
    m.unlock();
    server.pause();  // SIGSTOP: the kernel still accepts, nothing answers
    t0 = clk::now();
    CHECK_THROWS_AS(m.try_lock_for(10s), distlock::unavailable_error);
    CHECK(clk::now() - t0 < 3s);
    server.resume();
    CHECK(m.try_lock_for(5s));  // fresh connections once it answers again
    m.unlock();
}

TEST_CASE("a restart with an fsynced append-only file is survived by the holder", "[redis][restart]") {
    redis_server server({"appendonly yes", "appendfsync always"});
    const auto url = "redis://" + server.address() + "?lease=1500ms";
    loss_recorder rec;  // before the providers: their callback threads call it until they end
    auto a = distlock::connect(url);
    auto b = distlock::connect(url);
    const auto name = unique_name("restart-aof");
    auto holder = a.mutex(name, rec.options());
    REQUIRE(holder.try_lock());
    const auto token = holder.token();
    auto contender = b.mutex(name);
    server.kill();  // a crash: the fsynced AOF has the key, its expiry and the fence
    server.start();
    const auto until = clk::now() + 4500ms;  // three leases
    while (clk::now() < until) {
        CHECK_FALSE(contender.try_lock());
        std::this_thread::sleep_for(250ms);
    }
    CHECK(holder.held());
    CHECK(rec.lost() == 0);
    holder.unlock();
    REQUIRE(contender.try_lock_for(5s));
    CHECK(contender.token() > token);  // the fence counter survived too
    contender.unlock();
}

TEST_CASE("without persistence a restart is reported to the holder before anyone else gets the lock",
          "[redis][restart]") {
    // Redis without persistence forgets every key when it restarts. The rule of
    // docs/backends/redis.md: bring it back no sooner than one lease after the
    // crash. Then the holder learns of the loss (no renewal for a lease) before a
    // contender can take the lock: never two holders.
    redis_server server;
    const auto url = "redis://" + server.address() + "?lease=1s&connect_timeout=300ms&timeout=300ms";
    loss_recorder rec;  // before the providers: their callback threads call it until they end
    auto a = distlock::connect(url);
    auto b = distlock::connect(url);
    const auto name = unique_name("restart-volatile");
    auto holder = a.mutex(name, rec.options());
    REQUIRE(holder.try_lock());
    server.kill();
    // Told while the server is still down, so before anyone else can get the lock.
    CHECK(rec.wait_lost(1, 4s));
    std::this_thread::sleep_for(200ms);
    server.start();
    auto contender = b.mutex(name);
    REQUIRE(contender.try_lock_for(5s));
    CHECK(rec.lost() == 1);
    CHECK_FALSE(holder.held());
    contender.unlock();
    holder.unlock();  // never throws
}

TEST_CASE("a waiter across a server restart: unavailable while it is down, then woken by the hand-off",
          "[redis][restart]") {
    redis_server server({"appendonly yes", "appendfsync always"});
    const auto url = "redis://" + server.address() + "?lease=30s";
    auto a = distlock::connect(url);
    auto b = distlock::connect(url);
    const auto name = unique_name("restart-waiter");
    auto holder = a.mutex(name);
    REQUIRE(holder.try_lock());
    std::atomic<long long> got_after{-1};
    std::atomic<int> unavailable{0};
    std::atomic<bool> released{false};
    std::atomic<clk::rep> release_time{0};
    std::thread waiter([&] {
        auto m = b.mutex(name);
        const auto until = clk::now() + 25s;
        while (clk::now() < until) {
            try {
                if (m.try_lock_for(until - clk::now())) {
                    got_after = released ? ms(clk::now().time_since_epoch() - clk::duration(release_time.load())) : -2;
                    m.unlock();
                }
                return;
            } catch (const distlock::unavailable_error&) {
                ++unavailable;  // the server is down: retry, as a caller would
                std::this_thread::sleep_for(100ms);
            }
        }
    });
    std::this_thread::sleep_for(500ms);
    server.kill();
    std::this_thread::sleep_for(300ms);
    server.start();
    std::this_thread::sleep_for(1500ms);  // the subscriber reconnects and subscribes again
    release_time = clk::now().time_since_epoch().count();
    released = true;
    holder.unlock();  // the holder survived (fsynced AOF)
    waiter.join();
    INFO("the waiter got the lock " << got_after.load() << " ms after the release; " << unavailable.load()
                                    << " unavailable_error(s) meanwhile");
    CHECK(got_after.load() >= 0);     // not before the release
    CHECK(got_after.load() < 10000);  // woken by the hand-off, not by the 30 s lease
}

TEST_CASE("a quick restart without persistence is reported to the holder at its next renewal", "[redis][restart]") {
    redis_server server;
    const auto url = "redis://" + server.address() + "?lease=1500ms";
    loss_recorder rec;  // before the providers: their callback threads call it until they end
    auto a = distlock::connect(url);
    const auto name = unique_name("restart-quick");
    auto holder = a.mutex(name, rec.options());
    REQUIRE(holder.try_lock());
    server.kill();
    server.start();  // empty: the key is gone
    CHECK(rec.wait_lost(1, 3s));
    CHECK_FALSE(rec.wait_lost(2, 200ms));  // and only once
    CHECK_FALSE(holder.held());
}

TEST_CASE("fencing tokens keep increasing across a restart that lost every key", "[redis][restart][fencing]") {
    // A Redis without persistence forgets the fence key when it restarts. A fence
    // that started again from 1 would make a fenced store reject every
    // legitimate write after it: a missing fence key starts from the server's
    // clock in microseconds instead.
    redis_server server;
    for (const std::string query : {"?strategy=plain", "/1?strategy=reentrant"}) {
        INFO(query);
        raw_client raw(server.port(), {}, query[1] == '1' ? 1 : 0);
        auto p = distlock::connect("redis://" + server.address() + query);
        const auto name = unique_name("fence-restart");
        auto m = p.mutex(name);
        auto server_micros = [&] {
            auto t = raw.cmd({"TIME"});
            REQUIRE(t);
            REQUIRE(t->type == REDIS_REPLY_ARRAY);
            return std::stoull(std::string(t->element[0]->str, t->element[0]->len)) * 1000000ull +
                   std::stoull(std::string(t->element[1]->str, t->element[1]->len));
        };
        const auto before_first = server_micros();
        REQUIRE(m.try_lock());
        const auto first = m.token();
        m.unlock();
        CHECK(first > before_first);  // a new fence starts from the server's clock
        REQUIRE(m.try_lock());
        CHECK(m.token() == first + 1);  // and counts up by one per grant
        const auto second = m.token();
        m.unlock();
        server.kill();
        server.start();  // empty
        raw_client fresh(server.port(), {}, query[1] == '1' ? 1 : 0);
        CHECK(fresh.integer({"DBSIZE"}) == 0);
        std::uint64_t after = 0;
        for (int i = 0; i < 50 && after == 0; ++i) {  // the pool reconnects on first use
            try {
                if (m.try_lock()) {
                    after = m.token();
                    m.unlock();
                }
            } catch (const distlock::unavailable_error&) {
                std::this_thread::sleep_for(50ms);
            }
        }
        CHECK(after > second);
    }
}

TEST_CASE("a fence key left by an older counter from 1 keeps counting from where it is", "[redis][fencing]") {
    auto p = distlock::connect(shared_url(""));
    raw_client raw(shared_port());
    const auto name = unique_name("fence-existing");
    raw.cmd({"SET", "distlock:{" + name + "}:fence", "1893"});
    auto m = p.mutex(name);
    REQUIRE(m.try_lock());
    CHECK(m.token() == 1894);
    m.unlock();
}
