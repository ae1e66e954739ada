// Redis-specific tests of the read-write lock of redis:// (both strategies), in
// Redisson's RReadWriteLock layout: the keys and messages, the write waiters
// that hold readers back, and loss. On the shared server of DISTLOCK_TEST_REDIS_URL.
#include "redis_test_helpers.hpp"

TEST_CASE("read-write lock layout is Redisson's: mode, owner fields, rwlock_timeout keys, messages 0 and 1",
          "[redis][redisson][layout][rw]") {
    for (std::string strategy : {"reentrant", "plain"}) {
        DYNAMIC_SECTION("strategy=" << strategy) {
            const bool plain = strategy == "plain";
            auto p = distlock::connect(shared_url(plain ? "?lease=4s" : "/1?strategy=reentrant&lease=4s"));
            raw_client raw(shared_port(), {}, plain ? 0 : 1);
            const auto name = unique_name("rw-layout");
            // The Redisson object name, and Redisson's derived names for it.
            const std::string object = plain ? "distlock:{" + name + "}:rwlock" : name;
            const std::string root = plain ? object : "{" + name + "}";
            const std::string channel = "redisson_rwlock:" + (plain ? object : "{" + name + "}");
            auto a = p.shared_mutex(name);
            auto b = p.shared_mutex(name);
            REQUIRE(a.try_lock_shared());
            REQUIRE(b.try_lock_shared());  // another object: a grant of its own
            auto fields = hash_of(raw, object);
            REQUIRE(fields.size() == 3);  // mode + one field per reading grant
            CHECK(fields["mode"] == "read");
            std::vector<std::string> owners;
            for (const auto& [f, v] : fields) {
                if (f == "mode") continue;
                CHECK(std::regex_match(f, owner_field));
                CHECK(v == "1");
                owners.push_back(f);
                const std::string timeout = root + ":" + f + ":rwlock_timeout:1";
                CHECK(raw.string({"GET", timeout}) == "1");
                const auto pttl = raw.integer({"PTTL", timeout});
                CHECK(pttl > 0);
                CHECK(pttl <= 4000);
            }
            REQUIRE(owners.size() == 2);
            CHECK(owners[0] != owners[1]);  // each grant is an owner of its own
            CHECK(raw.integer({"PTTL", object}) > 0);
            CHECK(raw.integer({"PTTL", object}) <= 4000);
            const auto fence = std::stoull(raw.string({"GET", (plain ? object : "{" + name + "}") + ":rwlock_fence"}));
            CHECK(fence >= a.shared_token());
            CHECK(raw.integer({"PTTL", (plain ? object : "{" + name + "}") + ":rwlock_fence"}) == -1);

            raw_client sub(shared_port(), {}, plain ? 0 : 1);
            sub.cmd({"SUBSCRIBE", channel});
            a.unlock_shared();  // b still reads: no message, hash kept
            CHECK(raw.integer({"EXISTS", object}) == 1);
            CHECK(hash_of(raw, object).size() == 2);
            b.unlock_shared();
            auto [ch, payload] = next_message(sub);
            CHECK(ch == channel);
            CHECK(payload == "0");  // Redisson's UNLOCK_MESSAGE after a read unlock
            CHECK(raw.integer({"EXISTS", object}) == 0);
            for (const auto& f : owners) CHECK(raw.integer({"EXISTS", root + ":" + f + ":rwlock_timeout:1"}) == 0);

            REQUIRE(a.try_lock());
            fields = hash_of(raw, object);
            REQUIRE(fields.size() == 2);
            CHECK(fields["mode"] == "write");
            std::string write_field;
            for (const auto& [f, v] : fields)
                if (f != "mode") write_field = f;
            REQUIRE(write_field.size() > 6);
            CHECK(write_field.substr(write_field.size() - 6) == ":write");
            CHECK(std::regex_match(write_field.substr(0, write_field.size() - 6), owner_field));
            CHECK(fields[write_field] == "1");
            CHECK(a.token() > fence);
            a.unlock();
            auto [ch2, payload2] = next_message(sub);
            CHECK(ch2 == channel);
            CHECK(payload2 == "1");  // Redisson's READ_UNLOCK_MESSAGE after a write unlock
            CHECK(raw.integer({"EXISTS", object}) == 0);
        }
    }
}

TEST_CASE(
    "Redisson's readers share our read lock, its writer blocks ours, and its write unlock message wakes our waiter",
    "[redis][redisson][rw]") {
    auto p = distlock::connect(shared_url("/1?strategy=reentrant"));
    raw_client raw(shared_port(), {}, 1);
    const auto name = unique_name("rw-peer");
    const std::string java = "6f1c1b9e-2f4e-4a57-9d53-0c1e9d1f7a10:57";
    // Redisson's read acquire, as its documented semantics (RedissonReadLock).
    const char* java_read =
        "local mode = redis.call('hget', KEYS[1], 'mode'); "
        "if mode == false then redis.call('hset', KEYS[1], 'mode', 'read'); redis.call('hset', KEYS[1], ARGV[2], 1); "
        "redis.call('set', KEYS[2] .. ':1', 1); redis.call('pexpire', KEYS[2] .. ':1', ARGV[1]); "
        "redis.call('pexpire', KEYS[1], ARGV[1]); return nil; end; "
        "if mode == 'read' then local n = redis.call('hincrby', KEYS[1], ARGV[2], 1); "
        "redis.call('set', KEYS[2] .. ':' .. n, 1); redis.call('pexpire', KEYS[2] .. ':' .. n, ARGV[1]); "
        "redis.call('pexpire', KEYS[1], math.max(redis.call('pttl', KEYS[1]), ARGV[1])); return nil; end; "
        "return redis.call('pttl', KEYS[1]);";
    const std::string java_timeout = "{" + name + "}:" + java + ":rwlock_timeout";
    auto rw = p.shared_mutex(name);
    REQUIRE(rw.try_lock_shared());
    auto r = raw.cmd({"EVAL", java_read, "2", name, java_timeout, "30000", java});
    CHECK(r->type == REDIS_REPLY_NIL);  // Java reads beside us
    CHECK(hash_of(raw, name).size() == 3);
    rw.unlock_shared();  // Java still reads: the hash lives on for its lease
    CHECK(raw.integer({"EXISTS", name}) == 1);
    CHECK(hash_of(raw, name)["mode"] == "read");
    auto w = p.shared_mutex(name);
    CHECK_FALSE(w.try_lock());  // a reader of Redisson's keeps our writer out
    raw.cmd({"DEL", name, java_timeout + ":1"});

    // What Java RWriteLock.lock() leaves behind: mode=write, <field>:write = 1, 20 s lease.
    raw.cmd({"HSET", name, "mode", "write", java + ":write", "1"});
    raw.cmd({"PEXPIRE", name, "20000"});
    CHECK_FALSE(rw.try_lock_shared());
    CHECK_FALSE(w.try_lock());
    std::atomic<long long> waited{-1};
    std::thread waiter([&] {
        auto t0 = clk::now();
        if (rw.try_lock_shared_for(15s)) {
            waited = ms(clk::now() - t0);
            rw.unlock_shared();
        }
    });
    std::this_thread::sleep_for(300ms);
    // Java RWriteLock.unlock(): HDEL, only mode left: DEL, PUBLISH "1".
    raw.cmd({"DEL", name});
    raw.cmd({"PUBLISH", "redisson_rwlock:{" + name + "}", "1"});
    waiter.join();
    INFO("waited " << waited.load() << " ms for a write lock whose lease had 20 s left");
    REQUIRE(waited.load() >= 0);
    CHECK(waited.load() < 10000);  // woken by the message, not by the lease running out
}

TEST_CASE("a name whose key is another client's RLock (distlock's or Redisson's) is busy to our read-write lock",
          "[redis][redisson][rw]") {
    auto p = distlock::connect(shared_url("/1?strategy=reentrant"));
    auto other = distlock::connect(shared_url("/1?strategy=reentrant"));
    raw_client raw(shared_port(), {}, 1);
    const auto name = unique_name("rw-over-rlock");
    auto rw = p.shared_mutex(name);
    {
        auto m = other.mutex(name);  // another provider's reentrant mutex: an RLock hash, no `mode`
        m.lock();
        CHECK(raw.integer({"HEXISTS", name, "mode"}) == 0);
        CHECK_FALSE(rw.try_lock_shared());
        CHECK_FALSE(rw.try_lock());
        CHECK(raw.integer({"HEXISTS", name, "mode"}) == 0);  // the hash untouched
        m.unlock();
    }
    {
        // This client's own mutex, as a Redisson thread may hold both locks of a
        // name (distlock run's plain form takes the mutex, then the write side).
        auto m = p.mutex(name);
        m.lock();
        REQUIRE(rw.try_lock());
        rw.unlock();
        m.unlock();
    }
    // Java RLock.lock() of another process: one field <uuid>:<thread> = 1, 30 s lease.
    raw.cmd({"HSET", name, "6f1c1b9e-2f4e-4a57-9d53-0c1e9d1f7a10:57", "1"});
    raw.cmd({"PEXPIRE", name, "30000"});
    CHECK_FALSE(rw.try_lock_shared_for(300ms));
    CHECK_FALSE(rw.try_lock_for(300ms));
    CHECK(hash_of(raw, name).size() == 1);
    // A hash of many fields (an RLock has one per holding thread) is not read
    // through: busy, at once.
    for (int i = 0; i < 40; ++i) raw.cmd({"HSET", name, "f" + std::to_string(i), "1"});
    CHECK_FALSE(rw.try_lock_shared());
    CHECK_FALSE(rw.try_lock());
    raw.cmd({"DEL", name});
    REQUIRE(rw.try_lock_shared());  // free again: ours
    rw.unlock_shared();
    REQUIRE(rw.try_lock());
    rw.unlock();
}

TEST_CASE("a waiting writer is listed among the write waiters and holds back our readers until it gets in",
          "[redis][rw][policy]") {
    auto p = distlock::connect(shared_url("/1?strategy=reentrant&lease=3s"));
    raw_client raw(shared_port(), {}, 1);
    const auto name = unique_name("rw-waiters");
    const std::string waiters = "{" + name + "}:rwlock_write_waiters";
    auto reader = p.shared_mutex(name);
    REQUIRE(reader.try_lock_shared());
    auto writer = p.shared_mutex(name);
    std::atomic<bool> got{false}, done{false};
    std::thread w([&] {
        got = writer.try_lock_for(20s);
        eventually([&] { return done.load(); }, 60s);
        if (got) writer.unlock();
    });
    REQUIRE(eventually([&] { return raw.integer({"ZCARD", waiters}) == 1; }, 5s));
    auto zs = raw.cmd({"ZRANGE", waiters, "0", "-1"});
    REQUIRE(zs->elements == 1);
    CHECK(std::regex_match(std::string(zs->element[0]->str, zs->element[0]->len), owner_field));
    auto late = p.shared_mutex(name);
    CHECK_FALSE(late.try_lock_shared());  // a reader that comes after the waiting writer waits
    reader.unlock_shared();
    CHECK(eventually([&] { return got.load(); }, 15s));
    CHECK(raw.integer({"ZCARD", waiters}) == 0);  // the grant took it off the list
    done = true;
    w.join();

    // A writer that gives up leaves the list, and readers come in at once.
    REQUIRE(reader.try_lock_shared());
    CHECK_FALSE(writer.try_lock_for(400ms));
    CHECK(raw.integer({"ZCARD", waiters}) == 0);
    CHECK(late.try_lock_shared());
    late.unlock_shared();
    reader.unlock_shared();
}

TEST_CASE("a waiting writer that died holds our readers back only until its entry expires", "[redis][rw][policy]") {
    auto p = distlock::connect(shared_url("/1?strategy=reentrant"));
    raw_client raw(shared_port(), {}, 1);
    const auto name = unique_name("rw-dead-writer");
    const std::string waiters = "{" + name + "}:rwlock_write_waiters";
    // A writer that listed itself and died: its entry expires in 700 ms.
    raw.cmd({"ZADD", waiters, std::to_string(server_ms(raw) + 700), "6f1c1b9e-2f4e-4a57-9d53-0c1e9d1f7a10:9"});
    auto rw = p.shared_mutex(name);
    CHECK_FALSE(rw.try_lock_shared());
    auto t0 = clk::now();
    REQUIRE(rw.try_lock_shared_for(20s));
    auto waited = ms(clk::now() - t0);
    INFO("waited " << waited << " ms");
    CHECK(waited >= 500);
    CHECK(waited < 10000);                        // at the entry's expiry, not at the deadline
    CHECK(raw.integer({"ZCARD", waiters}) == 0);  // the expired entry was dropped
    rw.unlock_shared();
}

TEST_CASE("a read grant whose hash was deleted is reported lost", "[redis][rw][loss]") {
    loss_recorder rec;
    auto p = distlock::connect(shared_url("/1?strategy=reentrant&lease=1500ms"));
    raw_client raw(shared_port(), {}, 1);
    const auto name = unique_name("rw-deleted");
    auto rw = p.shared_mutex(name, rec.options());
    REQUIRE(rw.try_lock_shared());
    CHECK(raw.integer({"DEL", name}) == 1);
    REQUIRE(rec.wait_lost(1, 3s));  // at the next renewal (lease/3)
    CHECK_FALSE(rw.held_shared());
    rw.unlock_shared();  // never throws
}
