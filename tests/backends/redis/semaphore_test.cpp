// Redis-specific tests of the semaphore of redis:// (both strategies), in
// Redisson's RPermitExpirableSemaphore layout: the keys and messages, expired
// permits reclaimed, Redisson's permits counted and sizes checked; and
// break_lock of a read-write lock and a semaphore. On the shared server of
// DISTLOCK_TEST_REDIS_URL.
#include "redis_test_helpers.hpp"

TEST_CASE("break_lock removes a read-write lock and a semaphore: readers, writers and permits learn the loss",
          "[redis][rw][semaphore][loss]") {
    for (std::string strategy : {"plain", "reentrant"}) {
        DYNAMIC_SECTION("strategy=" << strategy) {
            const bool plain = strategy == "plain";
            loss_recorder rec;
            auto p = distlock::connect(shared_url(plain ? "?lease=1500ms" : "/1?strategy=reentrant&lease=1500ms"));
            raw_client raw(shared_port(), {}, plain ? 0 : 1);
            // strategy=reentrant keeps every primitive of a name at the name (as
            // Redisson does): one name each.
            const auto rname = unique_name("break-rw"), wname = unique_name("break-w"),
                       sname = unique_name("break-sem");
            auto reader = p.shared_mutex(rname, rec.options());
            auto writer = p.shared_mutex(wname, rec.options());
            auto sem = p.semaphore(sname, 2, rec.options());
            REQUIRE(reader.try_lock_shared());
            REQUIRE(writer.try_lock());
            REQUIRE(sem.try_acquire());
            distlock::testing::break_lock(p, rname);
            distlock::testing::break_lock(p, wname);
            distlock::testing::break_lock(p, sname);
            const std::string sobject = plain ? "distlock:{" + sname + "}:semaphore" : sname;
            CHECK(raw.integer({"EXISTS", sobject}) == 0);
            CHECK(raw.integer({"EXISTS", (plain ? sobject : "{" + sname + "}") + ":timeout"}) == 0);
            REQUIRE(rec.wait_lost(3, 5s));  // at the next renewals (lease/3)
            CHECK_FALSE(reader.held_shared());
            CHECK_FALSE(writer.held());
            CHECK(sem.held() == 0);
            reader.unlock_shared();  // never throw
            writer.unlock();
            sem.release();
            auto again = p.semaphore(sname, 3);  // the size went with the keys
            CHECK(again.try_acquire());
            again.release();
        }
    }
}

TEST_CASE("semaphore layout is Redisson's: available count, {name}:timeout of raw permit ids, redisson_sc channel",
          "[redis][redisson][layout][semaphore]") {
    for (std::string strategy : {"reentrant", "plain"}) {
        DYNAMIC_SECTION("strategy=" << strategy) {
            const bool plain = strategy == "plain";
            auto p = distlock::connect(shared_url(plain ? "?lease=5s" : "/1?strategy=reentrant&lease=5s"));
            raw_client raw(shared_port(), {}, plain ? 0 : 1);
            const auto name = unique_name("sem-layout");
            const std::string object = plain ? "distlock:{" + name + "}:semaphore" : name;
            const std::string timeouts = (plain ? object : "{" + name + "}") + ":timeout";
            const std::string channel = "redisson_sc:" + (plain ? object : "{" + name + "}");
            auto s = p.semaphore(name, 3);
            const auto before = server_ms(raw);
            REQUIRE(s.try_acquire());
            const auto after = server_ms(raw);
            CHECK(raw.string({"GET", object}) == "2");  // 3 permits, 1 taken
            CHECK(raw.integer({"PTTL", object}) == -1);
            auto zs = raw.cmd({"ZRANGE", timeouts, "0", "-1", "WITHSCORES"});
            REQUIRE(zs->type == REDIS_REPLY_ARRAY);
            REQUIRE(zs->elements == 2);
            CHECK(zs->element[0]->len == 16);  // the permit id: 16 raw bytes
            const auto expiry = std::stoll(std::string(zs->element[1]->str, zs->element[1]->len));
            CHECK(expiry >= before + 5000);  // the lease, by the server's clock
            CHECK(expiry <= after + 5000);
            const auto fence = (plain ? object : "{" + name + "}") + ":semaphore_fence";
            CHECK(raw.string({"GET", fence}) == std::to_string(s.token()));

            raw_client sub(shared_port(), {}, plain ? 0 : 1);
            sub.cmd({"SUBSCRIBE", channel});
            s.release();
            auto [ch, payload] = next_message(sub);
            CHECK(ch == channel);
            CHECK(payload == "3");  // the new available count, as Redisson publishes it
            CHECK(raw.string({"GET", object}) == "3");
            CHECK(raw.integer({"ZCARD", timeouts}) == 0);
        }
    }
}

TEST_CASE("an expired permit of a crashed holder is reclaimed by the next acquirer", "[redis][semaphore][expiry]") {
    auto p = distlock::connect(shared_url("/1?strategy=reentrant"));
    raw_client raw(shared_port(), {}, 1);
    const auto name = unique_name("sem-reclaim");
    const std::string timeouts = "{" + name + "}:timeout";
    // A semaphore of 1 whose only permit belongs to a holder that died: its
    // expiry passed a second ago (a Redisson holder leaves the same).
    const std::string dead("\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a\x0b\x0c\x0d\x0e\x0f\x10", 16);
    raw.cmd({"SET", name, "0"});
    raw.cmd({"ZADD", timeouts, std::to_string(server_ms(raw) - 1000), dead});
    raw_client sub(shared_port(), {}, 1);
    sub.cmd({"SUBSCRIBE", "redisson_sc:{" + name + "}"});
    auto s = p.semaphore(name, 1);
    REQUIRE(s.try_acquire());  // at once: no waiting for anything
    auto [ch, payload] = next_message(sub);
    CHECK(payload == "1");  // the reclaim published the count it gave back
    CHECK(raw.cmd({"ZSCORE", timeouts, dead})->type == REDIS_REPLY_NIL);
    CHECK(raw.integer({"ZCARD", timeouts}) == 1);  // ours only
    CHECK(raw.string({"GET", name}) == "0");
    s.release();
    CHECK(raw.string({"GET", name}) == "1");

    // A permit that has not expired yet is not reclaimed: the acquirer waits for it.
    raw.cmd({"SET", name, "0"});
    raw.cmd({"ZADD", timeouts, std::to_string(server_ms(raw) + 700), dead});
    auto t0 = clk::now();
    REQUIRE(s.try_acquire_for(20s));
    auto waited = ms(clk::now() - t0);
    INFO("waited " << waited << " ms");
    CHECK(waited >= 500);
    CHECK(waited < 10000);  // at the permit's expiry, not at the deadline
    s.release();
}

TEST_CASE("a permit held by Redisson counts against ours, and its release message wakes our waiter",
          "[redis][redisson][semaphore]") {
    auto p = distlock::connect(shared_url("/1?strategy=reentrant"));
    raw_client raw(shared_port(), {}, 1);
    const auto name = unique_name("sem-peer");
    const std::string timeouts = "{" + name + "}:timeout";
    const std::string java_id("\xa1\xb2\xc3\xd4\xe5\xf6\x07\x18\x29\x3a\x4b\x5c\x6d\x7e\x8f\x90", 16);
    // Java: trySetPermits(2), then tryAcquire(20 s lease): DECRBY 1, ZADD its id
    // at its clock's now + 20 s.
    raw.cmd({"SET", name, "2"});
    raw.cmd({"DECRBY", name, "1"});
    raw.cmd({"ZADD", timeouts, std::to_string(server_ms(raw) + 20000), java_id});
    auto a = p.semaphore(name, 2);
    auto b = p.semaphore(name, 2);
    REQUIRE(a.try_acquire());      // the second permit
    CHECK_FALSE(b.try_acquire());  // Java's and ours: both taken
    CHECK(raw.string({"GET", name}) == "0");
    CHECK(raw.integer({"ZCARD", timeouts}) == 2);
    std::atomic<long long> waited{-1};
    std::thread waiter([&] {
        auto t0 = clk::now();
        if (b.try_acquire_for(15s)) {
            waited = ms(clk::now() - t0);
            b.release();
        }
    });
    std::this_thread::sleep_for(300ms);
    // Java release(id): ZREM, INCRBY 1, PUBLISH the new count.
    CHECK(raw.integer({"ZREM", timeouts, java_id}) == 1);
    const auto count = raw.integer({"INCRBY", name, "1"});
    raw.cmd({"PUBLISH", "redisson_sc:{" + name + "}", std::to_string(count)});
    waiter.join();
    INFO("waited " << waited.load() << " ms for a permit whose lease had 20 s left");
    REQUIRE(waited.load() >= 0);
    CHECK(waited.load() < 10000);  // woken by the message, not by the permit's expiry
    a.release();
    CHECK(raw.string({"GET", name}) == "2");
    CHECK(raw.integer({"ZCARD", timeouts}) == 0);
}

TEST_CASE("a semaphore Redisson set to another size is refused, naming both sizes", "[redis][semaphore][input]") {
    auto p = distlock::connect(shared_url("/1?strategy=reentrant"));
    raw_client raw(shared_port(), {}, 1);
    const auto name = unique_name("sem-size");
    raw.cmd({"SET", name, "5"});  // RPermitExpirableSemaphore.trySetPermits(5)
    auto s = p.semaphore(name, 2);
    try {
        (void)s.try_acquire();
        FAIL("a semaphore of 2 was granted on one of 5");
    } catch (const distlock::invalid_argument_error& e) {
        CHECK_THAT(e.what(), Catch::Contains("5 permits"));
        CHECK_THAT(e.what(), Catch::Contains("asks for 2"));
    }
    CHECK(raw.string({"GET", name}) == "5");  // untouched
    CHECK(raw.integer({"EXISTS", "{" + name + "}:timeout"}) == 0);
    auto five = p.semaphore(name, 5);
    REQUIRE(five.try_acquire());
    five.release();
    raw.cmd({"SET", name, "not a number"});
    CHECK_THROWS_AS(five.try_acquire(), distlock::invalid_argument_error);
    raw.cmd({"DEL", name});
}
