// Redis-specific tests of redis://, redis://...?strategy=reentrant and redlock://:
// the server-side layout (plain and Redisson's), loss, waking, batching, and the
// failure cases (node down, wrong password, stopped or hung server, restart).
// Layout tests use the shared server of DISTLOCK_TEST_REDIS_URL; every test that
// stops, pauses or reconfigures a server starts its own redis-server child.
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <map>
#include <regex>
#include <thread>

#include "distlock/distlock.hpp"
#include "distlock/spi/backend.hpp"
#include "distlock/testing.hpp"
#include "redis_server.hpp"
#include "support.hpp"
#include "tcp_proxy.hpp"

namespace distlock::backends::redis {
void register_backend(spi::registry&);
}

using namespace std::chrono_literals;
using distlock::test::eventually;
using distlock::test::loss_recorder;
using distlock::test::raw_client;
using distlock::test::redis_server;
using distlock::test::unique_name;
using clk = std::chrono::steady_clock;

namespace {

std::uint16_t shared_port() {
    auto u = distlock::spi::url::parse(distlock::test::env("DISTLOCK_TEST_REDIS_URL"));
    return u.hosts().at(0).port;
}

std::string shared_url(const std::string& params) {
    return "redis://127.0.0.1:" + std::to_string(shared_port()) + params;
}

template <class D>
long long ms(D d) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
}

// Reads one pub/sub message (channel, payload) from a SUBSCRIBEd raw client.
std::pair<std::string, std::string> next_message(raw_client& sub) {
    void* out = nullptr;
    REQUIRE(redisGetReply(sub.context(), &out) == REDIS_OK);
    distlock::test::reply r(static_cast<redisReply*>(out));
    REQUIRE(r->type == REDIS_REPLY_ARRAY);
    REQUIRE(r->elements == 3);
    return {std::string(r->element[1]->str, r->element[1]->len), std::string(r->element[2]->str, r->element[2]->len)};
}

class capture_registry final : public distlock::spi::registry {
public:
    void add(std::string scheme, distlock::spi::factory f) override { factories[scheme] = std::move(f); }
    std::map<std::string, distlock::spi::factory> factories;
};

}  // namespace

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

// ---- read-write lock and semaphore (Redisson's RReadWriteLock / RPermitExpirableSemaphore) ------

namespace {

// The fields of a hash as a map.
std::map<std::string, std::string> hash_of(raw_client& raw, const std::string& key) {
    auto all = raw.cmd({"HGETALL", key});
    std::map<std::string, std::string> out;
    REQUIRE(all->type == REDIS_REPLY_ARRAY);
    for (std::size_t i = 0; i + 1 < all->elements; i += 2)
        out[std::string(all->element[i]->str, all->element[i]->len)] =
            std::string(all->element[i + 1]->str, all->element[i + 1]->len);
    return out;
}

// The server's clock in ms (what permit expiries are scored by).
long long server_ms(raw_client& raw) {
    auto t = raw.cmd({"TIME"});
    REQUIRE(t->type == REDIS_REPLY_ARRAY);
    return std::stoll(std::string(t->element[0]->str, t->element[0]->len)) * 1000 +
           std::stoll(std::string(t->element[1]->str, t->element[1]->len)) / 1000;
}

const std::regex owner_field("[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}:[0-9]+");

}  // namespace

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

TEST_CASE("renewals of many held locks go out as one script in one round trip", "[redis][renewal]") {
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
            for (int i = 0; i < 10; ++i) {
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
            CHECK(raw.calls("evalsha") + raw.calls("eval") == 1);  // ten renewals, one script
            CHECK(raw.integer({"PTTL", key(names[3])}) > 2000);    // renewed to the full lease
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

// ---- failures: credentials, unreachable or hung servers, restarts ---------------------------------------

#ifdef DISTLOCK_CLI
TEST_CASE("distlock run --verbose shows the lease and each renewal of it", "[redis][cli]") {
    const auto url = distlock::test::env("DISTLOCK_TEST_REDIS_URL");
    const auto name = unique_name("verbose");
    // A 600 ms lease is renewed every 200 ms: several renewals in 1.5 s.
    auto r = distlock::test::run_command(std::string(DISTLOCK_CLI) + " run --backend '" + url + "' --name '" + name +
                                         "' --lease 600ms --verbose -- sleep 1.5 2>&1");
    INFO(r.out);
    CHECK(r.status == 0);
    CHECK(r.out.find("lease '" + name + "': valid for ") != std::string::npos);
    std::size_t renewals = 0;
    for (auto at = r.out.find("renewed '" + name + "': valid for "); at != std::string::npos;
         at = r.out.find("renewed '" + name + "'", at + 1))
        ++renewals;
    CHECK(renewals >= 2);  // about 7; fewer on a loaded machine
    CHECK(r.out.find("no lease") == std::string::npos);
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

// ---- inspect and holder labels ---------------------------------------------------------------------

namespace {

// Counts the commands clients send to a server (not those its scripts run), by
// MONITOR: start it, do the work, then count() up to a marker sent after it.
class command_monitor {
public:
    explicit command_monitor(std::uint16_t port) : port_(port), mon_(port) {
        REQUIRE(mon_.string({"MONITOR"}) == "OK");
    }
    long long count() {
        const auto marker = "end-of-count-" + distlock::spi::random_token();
        raw_client other(port_);
        other.cmd({"ECHO", marker});
        long long n = 0;
        for (;;) {
            void* out = nullptr;
            REQUIRE(redisGetReply(mon_.context(), &out) == REDIS_OK);
            distlock::test::reply r(static_cast<redisReply*>(out));
            const std::string line(r->str, r->len);
            if (line.find(marker) != std::string::npos) return n;
            if (line.find(" lua] ") == std::string::npos) {
                UNSCOPED_INFO(line);
                ++n;  // sent by a client, not run by a script
            }
        }
    }

private:
    std::uint16_t port_;
    raw_client mon_;
};

}  // namespace

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
