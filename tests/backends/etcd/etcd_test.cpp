// etcd:// specific behaviour, checked on the server itself (one member,
// DISTLOCK_TEST_ETCD_URL from integration/servers/etcd.sh).
#include <signal.h>
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "../http/fake_http_server.hpp"
#include "child_process.hpp"
#include "distlock/distlock.hpp"
#include "distlock/spi/backend.hpp"
#include "distlock/spi/url.hpp"
#include "distlock/testing.hpp"
#include "etcd_support.hpp"
#include "support.hpp"
#include "tcp_proxy.hpp"

using namespace std::chrono_literals;
using distlock::test::etcd_direct;
using distlock::test::eventually;
using distlock::test::unique_name;
using clk = std::chrono::steady_clock;

namespace {

std::string url() { return distlock::test::env("DISTLOCK_TEST_ETCD_URL"); }

// "etcd://host:port" of the URL under test, without path or parameters.
std::string base() {
    auto u = url();
    auto end = u.find_first_of("/?", 7);
    return u.substr(0, end);
}

std::string endpoint() { return "http://" + base().substr(7); }

}  // namespace

TEST_CASE("the holder's key is <prefix>/<encoded name>/<lease hex>; uncontended, the token is its create revision",
          "[etcd]") {
    auto p = distlock::connect(url());
    etcd_direct etcd(url());
    const auto name = unique_name("layout/odd name");
    auto m = p.mutex(name);
    REQUIRE(m.try_lock());
    auto kvs = etcd.keys(name);
    REQUIRE(kvs.size() == 1);
    const auto key = etcd_direct::unb64(kvs[0]["key"]);
    const auto lease = etcd_direct::num(kvs[0], "lease");
    REQUIRE(lease != 0);
    char hex[32];
    std::snprintf(hex, sizeof hex, "%llx", static_cast<unsigned long long>(lease));
    CHECK(key == etcd.dir(name) + hex);
    CHECK(key.find("layout%2Fodd%20name") != std::string::npos);  // '/' never splits the directory
    CHECK(m.token() == static_cast<std::uint64_t>(etcd_direct::num(kvs[0], "create_revision")));
    // The lease has the URL's TTL (lease=2s) and is alive.
    auto ttl = etcd.call("/v3/lease/timetolive", {{"ID", std::to_string(lease)}});
    CHECK(etcd_direct::num(ttl, "grantedTTL") == 2);
    CHECK(etcd_direct::num(ttl, "TTL") > 0);
    m.unlock();
    CHECK(etcd.keys(name).empty());
}

TEST_CASE("waiters are served in the order they queued, each woken by its predecessor's deletion", "[etcd]") {
    const auto name = unique_name("fifo");
    auto holder_p = distlock::connect(url());
    auto holder = holder_p.mutex(name);
    holder.lock();
    std::vector<distlock::provider> providers;
    for (int i = 0; i < 3; ++i) providers.push_back(distlock::connect(url()));
    etcd_direct etcd(url());
    std::mutex order_mutex;
    std::vector<int> order;
    std::vector<std::uint64_t> tokens;
    std::vector<std::thread> waiters;
    for (int i = 0; i < 3; ++i) {
        waiters.emplace_back([&, i] {
            auto m = providers[static_cast<std::size_t>(i)].mutex(name);
            if (!m.try_lock_for(20s)) return;
            {
                std::lock_guard lk(order_mutex);
                order.push_back(i);
                tokens.push_back(m.token());
            }
            std::this_thread::sleep_for(50ms);
            m.unlock();
        });
        // The next waiter queues only once this one's key exists.
        REQUIRE(eventually([&] { return etcd.keys(name).size() == static_cast<std::size_t>(i) + 2; }, 5s));
    }
    std::this_thread::sleep_for(200ms);
    CHECK(order.empty());
    holder.unlock();
    for (auto& t : waiters) t.join();
    CHECK(order == std::vector<int>{0, 1, 2});
    REQUIRE(tokens.size() == 3);
    CHECK(tokens[0] < tokens[1]);
    CHECK(tokens[1] < tokens[2]);
    CHECK(etcd.keys(name).empty());
}

TEST_CASE("twenty locks of one provider share one lease and stay held over three leases", "[etcd]") {
    auto p = distlock::connect(url());
    etcd_direct etcd(url());
    std::vector<distlock::mutex> held;
    std::vector<std::string> names;
    for (int i = 0; i < 20; ++i) {
        names.push_back(unique_name("batch-" + std::to_string(i)));
        held.push_back(p.mutex(names.back()));
        REQUIRE(held.back().try_lock());
    }
    std::set<std::string> leases;
    for (const auto& n : names) {
        auto kvs = etcd.keys(n);
        REQUIRE(kvs.size() == 1);
        leases.insert(kvs[0]["lease"].get<std::string>());
    }
    CHECK(leases.size() == 1);  // one session lease, renewed once per batch
    std::this_thread::sleep_for(3 * p.default_lease() + p.default_lease() / 2);
    for (auto& m : held) CHECK(m.held());
    for (const auto& n : names) CHECK(etcd.keys(n).size() == 1);
    for (auto& m : held) m.unlock();
    for (const auto& n : names) CHECK(etcd.keys(n).empty());
}

TEST_CASE("a waiter that times out leaves no key behind", "[etcd]") {
    const auto name = unique_name("timeout");
    auto a = distlock::connect(url());
    auto b = distlock::connect(url());
    etcd_direct etcd(url());
    auto holder = a.mutex(name);
    holder.lock();
    auto waiter = b.mutex(name);
    CHECK_FALSE(waiter.try_lock_for(300ms));
    CHECK_FALSE(waiter.try_lock());
    CHECK(etcd.keys(name).size() == 1);
    holder.unlock();
    CHECK(etcd.keys(name).empty());
}

TEST_CASE("bench's native floor is a put under a lease and its delete, beside the prefix, leaving nothing", "[etcd]") {
    auto p = distlock::connect(url());
    etcd_direct etcd(url());
    const double before = etcd.metric("etcd_mvcc_put_total"), deletes = etcd.metric("etcd_mvcc_delete_total");
    const auto floor = p.native_cycle();
    REQUIRE(floor.has_value());
    CHECK(floor->count() > 0);
    CHECK(etcd.metric("etcd_mvcc_put_total") - before >= 1);
    CHECK(etcd.metric("etcd_mvcc_delete_total") - deletes >= 1);
    CHECK(etcd.under(etcd.prefix() + ".bench-floor/").empty());  // deleted again, outside the lock prefix
}

TEST_CASE("an uncontended mutex cycle reads three keys in the server: two txns' compares and the queue's head",
          "[etcd][count]") {
    // The server's count of ranges (a txn's compare reads one too) over a
    // provider's cycles: the acquire txn's compare and its range of the
    // queue's head, the release txn's compare. The release reads no count
    // (only a semaphore needs one). Other clients of the server (tests in
    // parallel) can only add, so the fewest of a few tries is taken.
    constexpr int cycles = 40;
    etcd_direct etcd(url());
    std::string u = url();  // with a lease of 30 s: no renewal falls in the cycles
    const auto at = u.find("lease=");
    REQUIRE(at != std::string::npos);
    u = u.substr(0, at) + "lease=30s" + u.substr(std::min(u.size(), u.find('&', at)));
    auto p = distlock::connect(u);
    auto m = p.mutex(unique_name("count"));
    m.lock();
    m.unlock();  // the session's lease is granted, the connection made
    double fewest = -1;
    for (int attempt = 0; attempt < 5 && fewest != 3 * cycles; ++attempt) {
        const double before = etcd.metric("etcd_mvcc_range_total");
        for (int i = 0; i < cycles; ++i) {
            m.lock();
            m.unlock();
        }
        const double ranges = etcd.metric("etcd_mvcc_range_total") - before;
        if (fewest < 0 || ranges < fewest) fewest = ranges;
    }
    CHECK(fewest == 3 * cycles);
}

TEST_CASE("a lease revoked out of band is reported as a lost lock", "[etcd]") {
    distlock::test::loss_recorder rec;  // before the providers: their callback threads call it until they end
    auto p = distlock::connect(url());
    etcd_direct etcd(url());
    const auto name = unique_name("revoked");
    auto m = p.mutex(name, rec.options());
    m.lock();
    auto kvs = etcd.keys(name);
    REQUIRE(kvs.size() == 1);
    etcd.call("/v3/lease/revoke", {{"ID", kvs[0]["lease"]}});
    CHECK(eventually([&] { return !m.held(); }, 5s));
    REQUIRE(rec.wait_lost(1, 2s));
    CHECK_FALSE(rec.wait_lost(2, 200ms));  // and only once
    const auto losses = rec.losses();
    CHECK(losses[0].reason.find("lease") != std::string::npos);
    m.unlock();  // never throws
    // The provider grants itself a new lease for the next lock.
    auto again = p.mutex(name);
    CHECK(again.try_lock_for(5s));
    auto now = etcd.keys(name);
    REQUIRE(now.size() == 1);
    CHECK(now[0]["lease"] != kvs[0]["lease"]);
    again.unlock();
}

TEST_CASE("a lock without auto-renewal has a lease of its own that expires", "[etcd]") {
    auto p = distlock::connect(url());
    etcd_direct etcd(url());
    const auto renewed = unique_name("renewed"), expiring = unique_name("expiring");
    auto kept = p.mutex(renewed);
    distlock::lock_options no_renew;
    no_renew.auto_renew = false;
    auto brief = p.mutex(expiring, no_renew);
    kept.lock();
    brief.lock();
    auto k1 = etcd.keys(renewed), k2 = etcd.keys(expiring);
    REQUIRE(k1.size() == 1);
    REQUIRE(k2.size() == 1);
    CHECK(k1[0]["lease"] != k2[0]["lease"]);
    // The server removes the unrenewed key although the provider renews its other lease.
    CHECK(eventually([&] { return etcd.keys(expiring).empty(); }, 6s));
    CHECK(eventually([&] { return !brief.held(); }, 3s));
    CHECK(kept.held());
    CHECK(etcd.keys(renewed).size() == 1);
    brief.unlock();
    kept.unlock();
}

TEST_CASE("break_lock deletes the holder's key and the next contender gets a higher token", "[etcd]") {
    auto a = distlock::connect(url());
    auto b = distlock::connect(url());
    etcd_direct etcd(url());
    const auto name = unique_name("break");
    auto holder = a.mutex(name);
    holder.lock();
    const auto first = holder.token();
    auto waiter = b.mutex(name);
    std::atomic<bool> got{false};
    std::thread t([&] { got = waiter.try_lock_for(10s); });
    REQUIRE(eventually([&] { return etcd.keys(name).size() == 2; }, 5s));
    distlock::testing::break_lock(a, name);
    t.join();
    CHECK(got.load());
    CHECK(waiter.token() > first);
    CHECK(eventually([&] { return !holder.held(); }, 3s));
    waiter.unlock();
    holder.unlock();
}

TEST_CASE("a holder learns of its key's deletion at once, not at its next keepalive", "[etcd]") {
    // lease=30s: keepalives every 10 s; the watch of the held key reports sooner.
    auto p = distlock::connect(base() + "/distlock-tests?lease=30s");
    const auto name = unique_name("watched");
    auto m = p.mutex(name);
    m.lock();
    std::this_thread::sleep_for(200ms);  // the watch is in place
    auto t0 = clk::now();
    distlock::testing::break_lock(p, name);
    CHECK(eventually([&] { return !m.held(); }, 5s));
    CHECK(clk::now() - t0 < 3s);
    m.unlock();
    // A long hold with other writes around it is not mistaken for a loss.
    auto again = p.mutex(name);
    again.lock();
    etcd_direct etcd(url());
    for (int i = 0; i < 20; ++i)
        etcd.call("/v3/kv/put", {{"key", etcd_direct::b64(etcd.dir(name) + "zz-unrelated")}, {"value", "eA=="}});
    etcd.call("/v3/kv/deleterange", {{"key", etcd_direct::b64(etcd.dir(name) + "zz-unrelated")}});
    std::this_thread::sleep_for(500ms);
    CHECK(again.held());
    again.unlock();
}

TEST_CASE("etcdctl lock and distlock exclude each other on the same directory", "[etcd][interop]") {
    REQUIRE(std::system("command -v etcdctl >/dev/null") == 0);
    auto p = distlock::connect(url());
    etcd_direct etcd(url());
    const auto name = unique_name("interop");
    const auto dir = etcd.dir(name);
    const std::string go_name = dir.substr(0, dir.size() - 1);  // Go's Mutex appends the '/'
    // etcdctl (Go's concurrency.Mutex) holds for 2 s while we try.
    std::string cmd =
        "ETCDCTL_API=3 etcdctl --endpoints=" + endpoint() + " lock '" + go_name + "' sleep 2 >/dev/null 2>&1 &";
    REQUIRE(std::system(cmd.c_str()) == 0);
    REQUIRE(eventually([&] { return etcd.keys(name).size() == 1; }, 10s));
    auto m = p.mutex(name);
    CHECK_FALSE(m.try_lock());
    auto t0 = clk::now();
    REQUIRE(m.try_lock_for(15s));
    CHECK(clk::now() - t0 > 500ms);  // only once etcdctl let go
    // Now we hold it: etcdctl cannot get it within its timeout.
    std::string blocked = "ETCDCTL_API=3 timeout 3 etcdctl --endpoints=" + endpoint() + " lock '" + go_name +
                          "' echo got >/dev/null 2>&1";
    CHECK(std::system(blocked.c_str()) != 0);
    m.unlock();
    std::string free_cmd =
        "ETCDCTL_API=3 timeout 10 etcdctl --endpoints=" + endpoint() + " lock '" + go_name + "' true >/dev/null 2>&1";
    CHECK(std::system(free_cmd.c_str()) == 0);
}

TEST_CASE("an unreachable etcd is reported as unavailable at once", "[etcd][input]") {
    auto t0 = clk::now();
    CHECK_THROWS_AS(distlock::connect("etcd://127.0.0.1:1/x?lease=2s"), distlock::unavailable_error);
    CHECK(clk::now() - t0 < 10s);
}

TEST_CASE("a URL that points at another HTTP server than etcd is a bad argument, not 'retry later'", "[etcd][input]") {
    // The member's peer port answers HTTP, but not etcd's JSON gateway: 404.
    auto u = distlock::spi::url::parse(distlock::test::env("DISTLOCK_TEST_ETCD_URL"));
    const auto peer = "etcd://127.0.0.1:" + std::to_string(u.hosts().at(0).port + 1) + "/x";
    try {
        (void)distlock::connect(peer);
        FAIL("connected");
    } catch (const distlock::invalid_argument_error& e) {
        CHECK(std::string(e.what()).find("client port") != std::string::npos);
    }
}

TEST_CASE("etcd URL parameters are checked", "[etcd][input]") {
    auto p = distlock::connect(base() + "/params?ttl=3s&timeout=2s&connect_timeout=1s");
    CHECK(p.default_lease() == 3s);
    CHECK_THROWS_AS(distlock::connect(base() + "?ttl=0s"), distlock::invalid_argument_error);
    CHECK_THROWS_AS(distlock::connect(base() + "?tls_ca=/nonexistent"), distlock::invalid_argument_error);
    CHECK_THROWS_AS(distlock::connect(base() + "?timeout=never"), distlock::invalid_argument_error);
    // TLS against a plain-HTTP member: a transport failure, typed, no hang.
    auto t0 = clk::now();
    CHECK_THROWS_AS(distlock::connect(base() + "?tls=true"), distlock::error);
    CHECK(clk::now() - t0 < 10s);
}

// ---- TLS and authentication, on a private member ------------------------------------

namespace {

// A private etcd member serving HTTPS (a self-signed certificate for 127.0.0.1)
// with authentication enabled (user root, password "rootpw"), on ports
// 12779/12780 (not those of integration/servers/etcd-tls.sh).
class private_tls_etcd {
public:
    private_tls_etcd() {
        dir_ = "/tmp/distlock-etcd-tls-" + distlock::spi::random_token().substr(0, 8);
        REQUIRE(sh("mkdir -p " + dir_ + " && openssl req -x509 -newkey rsa:2048 -nodes -keyout " + dir_ +
                   "/key.pem -out " + dir_ +
                   "/cert.pem -days 1 -subj /CN=127.0.0.1 -addext subjectAltName=IP:127.0.0.1"
                   " >/dev/null 2>&1") == 0);
        REQUIRE(sh("etcd --name p1 --data-dir " + dir_ +
                   "/data --listen-client-urls https://127.0.0.1:12779"
                   " --advertise-client-urls https://127.0.0.1:12779 --cert-file " +
                   dir_ + "/cert.pem --key-file " + dir_ +
                   "/key.pem --listen-peer-urls http://127.0.0.1:12780 --initial-advertise-peer-urls"
                   " http://127.0.0.1:12780 --initial-cluster p1=http://127.0.0.1:12780 --heartbeat-interval=10"
                   " --election-timeout=100 >" +
                   dir_ + "/log 2>&1 & echo $! > " + dir_ + "/pid") == 0);
        REQUIRE(eventually(
            [&] { return sh("curl -sf --cacert " + ca() + " https://127.0.0.1:12779/health | grep -q true") == 0; },
            20s));
        const std::string ctl = "ETCDCTL_API=3 etcdctl --endpoints=https://127.0.0.1:12779 --cacert=" + ca() + " ";
        REQUIRE(sh(ctl + "user add root:rootpw >/dev/null && " + ctl + "user grant-role root root >/dev/null && " +
                   ctl + "auth enable >/dev/null") == 0);
    }
    ~private_tls_etcd() { sh("kill -9 $(cat " + dir_ + "/pid) 2>/dev/null; sleep 0.2; rm -rf " + dir_); }
    std::string ca() const { return dir_ + "/cert.pem"; }

private:
    static int sh(const std::string& cmd) { return std::system(cmd.c_str()); }
    std::string dir_;
};

}  // namespace

TEST_CASE("TLS and etcd authentication: right credentials lock, wrong ones are access denied", "[etcd][tls][auth]") {
    REQUIRE(std::system("command -v etcdctl >/dev/null && command -v openssl >/dev/null") == 0);
    private_tls_etcd etcd;
    const std::string host = "etcd://root:rootpw@127.0.0.1:12779/tls?lease=2s&tls=true";
    // Unknown CA: verification fails, a typed error at once.
    CHECK_THROWS_AS(distlock::connect(host), distlock::access_denied_error);
    // Wrong password, and no credentials at all.
    CHECK_THROWS_AS(distlock::connect("etcd://root:wrong@127.0.0.1:12779/tls?lease=2s&tls=true&tls_ca=" + etcd.ca()),
                    distlock::access_denied_error);
    CHECK_THROWS_AS(distlock::connect("etcd://127.0.0.1:12779/tls?lease=2s&tls=true&tls_ca=" + etcd.ca()),
                    distlock::access_denied_error);
    // The right ones, with the CA (and, for tests only, without verification).
    for (const auto& u : {host + "&tls_ca=" + etcd.ca(), host + "&tls_insecure=true"}) {
        auto a = distlock::connect(u);
        auto b = distlock::connect(u);
        CHECK(a.url().find("rootpw") == std::string::npos);
        const auto name = unique_name("tls");
        auto m = a.mutex(name);
        REQUIRE(m.try_lock());
        CHECK(m.token() > 0);
        CHECK_FALSE(b.mutex(name).try_lock());
        m.unlock();
        CHECK(b.mutex(name).try_lock_for(5s));
    }
}

TEST_CASE("a URL that points at a server that does not speak HTTP is a bad argument, not 'retry later'",
          "[etcd][input]") {
    distlock::test::wrong_server other("-ERR unknown command\r\n");  // HTTP/0.9 to curl, which refuses it
    try {
        (void)distlock::connect("etcd://" + other.address() + "/x");
        FAIL("connected");
    } catch (const distlock::invalid_argument_error& e) {
        CHECK(std::string(e.what()).find("the etcd HTTP API?") != std::string::npos);
    }
}

// ---- read-write lock and semaphore ----------------------------------------------------

namespace {

// The key's name after `dir`, checked to be a decimal number (etcd's recipes
// name their keys by the clock in nanoseconds).
bool decimal_after(const std::string& key, const std::string& dir) {
    if (key.rfind(dir, 0) != 0 || key.size() == dir.size()) return false;
    return key.find_first_not_of("0123456789", dir.size()) == std::string::npos;
}

}  // namespace

TEST_CASE("a read grant, a write grant and a permit are the keys of etcd's rwmutex layout and of the semaphore's",
          "[etcd][rw][semaphore]") {
    auto p = distlock::connect(url());
    etcd_direct etcd(url());
    const auto name = unique_name("layout/rw sem");
    const auto rw = etcd.rw_dir(name), sem = etcd.sem_dir(name);
    CHECK(rw.find("layout%2Frw%20sem%3A") != std::string::npos);
    auto lock = p.shared_mutex(name);

    lock.lock_shared();
    auto kvs = etcd.under(rw);
    REQUIRE(kvs.size() == 1);
    auto key = etcd_direct::unb64(kvs[0]["key"]);
    CHECK(decimal_after(key, rw + "read/"));
    CHECK(etcd_direct::num(kvs[0], "lease") != 0);
    CHECK(lock.shared_token() == static_cast<std::uint64_t>(etcd_direct::num(kvs[0], "create_revision")));
    CHECK(etcd.keys(name).empty());  // nothing in the mutex's directory of the name
    {
        auto m = p.mutex(name);  // the name's mutex is another lock
        CHECK(m.try_lock());
    }
    lock.unlock_shared();
    CHECK(etcd.under(rw).empty());

    lock.lock();
    kvs = etcd.under(rw);
    REQUIRE(kvs.size() == 1);
    key = etcd_direct::unb64(kvs[0]["key"]);
    CHECK(decimal_after(key, rw + "write/"));
    CHECK(lock.token() == static_cast<std::uint64_t>(etcd_direct::num(kvs[0], "create_revision")));
    lock.unlock();
    CHECK(etcd.under(rw).empty());

    auto s = p.semaphore(name, 3);
    s.acquire();
    s.acquire();
    kvs = etcd.under(sem + "permit/");
    REQUIRE(kvs.size() == 2);
    for (const auto& kv : kvs) {
        CHECK(decimal_after(etcd_direct::unb64(kv["key"]), sem + "permit/"));
        CHECK(etcd_direct::num(kv, "lease") != 0);
    }
    CHECK(s.token() == static_cast<std::uint64_t>(etcd_direct::num(kvs[1], "create_revision")));
    auto size = etcd.under(sem + "size");
    REQUIRE(size.size() == 1);
    CHECK(etcd_direct::unb64(size[0]["value"]) == "3");
    CHECK(etcd_direct::num(size[0], "lease") == 0);  // it outlives the holders' sessions
    CHECK(etcd.under(sem).size() == 3);              // two permits and the size, nothing else
    s.release();
    CHECK(etcd.under(sem).size() == 2);
    s.release();
    CHECK(etcd.under(sem).empty());  // the last release deletes the size key
    CHECK(etcd.keys(name).empty());
}

TEST_CASE("a semaphore's size key refuses another size while a permit key stands and is taken over when none does",
          "[etcd][semaphore][input]") {
    auto a = distlock::connect(url());
    auto b = distlock::connect(url());
    etcd_direct etcd(url());
    const auto name = unique_name("size");
    const auto size_key = etcd.sem_dir(name) + "size";
    auto two = a.semaphore(name, 2);
    REQUIRE(two.try_acquire());
    auto five = b.semaphore(name, 5);
    try {
        (void)five.try_acquire();
        FAIL("a semaphore of 5 was granted beside a holder of a semaphore of 2");
    } catch (const distlock::invalid_argument_error& e) {
        CHECK_THAT(e.what(), Catch::Contains("held with 2 permits"));
        CHECK_THAT(e.what(), Catch::Contains("asks for 5"));
    }
    CHECK(etcd.under(etcd.sem_dir(name) + "permit/").size() == 1);  // the refused one left no key
    two.release();
    // A size key left by a crashed last holder (no permit key any more) does not
    // bind the next client.
    etcd.call("/v3/kv/put", {{"key", etcd_direct::b64(size_key)}, {"value", etcd_direct::b64("7")}});
    REQUIRE(five.try_acquire());
    auto size = etcd.under(size_key);
    REQUIRE(size.size() == 1);
    CHECK(etcd_direct::unb64(size[0]["value"]) == "5");
    five.release();
    CHECK(etcd.under(etcd.sem_dir(name)).empty());
}

TEST_CASE("a reader that comes after a waiting writer waits behind it (FIFO by revision: writers are not starved)",
          "[etcd][rw]") {
    auto a = distlock::connect(url());
    auto b = distlock::connect(url());
    auto c = distlock::connect(url());
    etcd_direct etcd(url());
    const auto name = unique_name("rw-fifo");
    auto first = a.shared_mutex(name);
    first.lock_shared();
    std::atomic<bool> writer_in{false}, writer_done{false};
    std::uint64_t writer_token = 0;
    std::thread writer([&] {
        auto w = b.shared_mutex(name);
        if (!w.try_lock_for(20s)) return;
        writer_token = w.token();
        writer_in = true;
        std::this_thread::sleep_for(300ms);
        writer_done = true;
        w.unlock();
    });
    REQUIRE(eventually([&] { return etcd.under(etcd.rw_dir(name)).size() == 2; }, 10s));
    auto late = c.shared_mutex(name);
    CHECK_FALSE(late.try_lock_shared());  // the writer queued before it
    CHECK_FALSE(writer_in.load());
    first.unlock_shared();
    REQUIRE(late.try_lock_shared_for(20s));
    CHECK(writer_done.load());  // only after the writer had it
    CHECK(late.shared_token() > writer_token);
    // A reader that waited is granted by a write of the name's grant key, whose
    // revision is its token (readers let in together get tokens of their own).
    const auto grant_key = etcd.rw_dir(name).substr(0, etcd.rw_dir(name).size() - 1) + "-grant";
    auto mark = etcd.under(grant_key);
    REQUIRE(mark.size() == 1);
    CHECK(late.shared_token() == static_cast<std::uint64_t>(etcd_direct::num(mark[0], "mod_revision")));
    late.unlock_shared();
    writer.join();
}

namespace {

// How many watch events the member sent while `step` ran and `settled` became
// true (plus 300 ms for stragglers).
template <class Step, class Settled>
double events_during(etcd_direct& etcd, Step step, Settled settled) {
    const double before = etcd.metric("etcd_debugging_mvcc_events_total");
    step();
    REQUIRE(eventually(settled, 20s));
    std::this_thread::sleep_for(300ms);
    return etcd.metric("etcd_debugging_mvcc_events_total") - before;
}

constexpr int herd_waiters = 10;

// One trial: `herd_waiters` writers queued behind a reader (permit = false) or
// permit waiters behind the two holders of a semaphore of 2 (permit = true),
// each on a provider of its own; returns the watch events the member sent for
// one release, until one waiter holds.
double herd_trial(bool permit) {
    etcd_direct etcd(url());
    std::vector<distlock::provider> conns;
    for (int i = 0; i < herd_waiters + 2; ++i) conns.push_back(distlock::connect(url()));
    std::atomic<bool> stop{false};
    std::atomic<int> holding{0}, done{0};
    const auto name = unique_name(permit ? "herd-sem" : "herd-rw");
    const auto dir = permit ? etcd.sem_dir(name) + "permit/" : etcd.rw_dir(name);
    auto reader = conns[0].shared_mutex(name);
    auto h1 = conns[0].semaphore(name, 2);
    auto h2 = conns[1].semaphore(name, 2);
    if (permit) {
        h1.acquire();
        h2.acquire();
    } else {
        reader.lock_shared();
    }
    const std::size_t ahead = permit ? 2 : 1;
    std::vector<std::thread> pool;
    struct joiner {  // a failed REQUIRE still ends the waiters (they time out or are let go)
        std::atomic<bool>& stop;
        std::vector<std::thread>& pool;
        ~joiner() {
            stop = true;
            for (auto& t : pool)
                if (t.joinable()) t.join();
        }
    } join_all{stop, pool};
    for (int i = 0; i < herd_waiters; ++i) {
        pool.emplace_back([&, i] {
            auto& c = conns[static_cast<std::size_t>(i) + 2];
            auto w = c.shared_mutex(name);
            auto s = c.semaphore(name, 2);
            if (permit ? !s.try_acquire_for(60s) : !w.try_lock_for(60s)) return;
            ++holding;
            while (!stop.load()) std::this_thread::sleep_for(5ms);
            --holding;
            permit ? s.release() : w.unlock();
            ++done;
        });
        // Queued one after the other.
        REQUIRE(eventually([&] { return etcd.under(dir).size() == ahead + static_cast<std::size_t>(i) + 1; }, 10s));
    }
    std::this_thread::sleep_for(300ms);  // every waiter is watching
    const auto sent = events_during(
        etcd, [&] { permit ? h1.release() : reader.unlock_shared(); }, [&] { return holding.load() == 1; });
    CHECK(holding.load() == 1);
    stop = true;
    if (permit) h2.release();
    for (auto& t : pool) t.join();
    CHECK(done.load() == herd_waiters);
    CHECK(etcd.under(dir).empty());
    return sent;
}

}  // namespace

TEST_CASE("a release reaches each waiting provider once, not each waiter's watch of its own (no herd)",
          "[etcd][rw][semaphore][herd]") {
    // Ten waiters queued, each on a provider of its own. A deletion is sent to
    // each provider's one release stream, which wakes only the waiter it
    // concerns (counted exactly in distlock-etcd-async-tests, "blocking waiters
    // are woken by the release feed"); a put only to the one waiter that
    // watches the key put. Other clients of the member can only add events: up
    // to three trials, the fewest events count.
    etcd_direct etcd(url());
    REQUIRE(etcd.metric("etcd_debugging_mvcc_events_total") > 0);
    SECTION("writers behind a reader: each waits for the latest older key") {
        double sent = 1e9;
        for (int trial = 0; trial < 3 && sent > herd_waiters; ++trial) sent = std::min(sent, herd_trial(false));
        INFO(sent << " watch events for one release with " << herd_waiters << " writers waiting");
        CHECK(sent <= herd_waiters);  // the deletion, once to each waiting provider
    }
    SECTION("permits: the first waiter waits for the range, the others for the waiter ahead of them") {
        double sent = 1e9;
        for (int trial = 0; trial < 3 && sent > 4; ++trial) sent = std::min(sent, herd_trial(true));
        INFO(sent << " watch events for one release with " << herd_waiters << " permit waiters");
        // The deletion to the first waiter's provider; its grant's put to the
        // second and to its own key's watch. The others wait for a put (a
        // watch each), not for a deletion.
        CHECK(sent <= 4);
    }
}

TEST_CASE("tokens strictly increase across hand-offs between distlock and etcdctl lock holders",
          "[etcd][interop][fencing]") {
    // etcdctl comes with the test server (integration/servers/etcd.sh installs
    // etcd-client beside etcd-server): its absence is a failure, not a skip.
    REQUIRE(std::system("command -v etcdctl >/dev/null") == 0);
    constexpr int etcdctl_rounds = 40;
    auto p = distlock::connect(url());
    etcd_direct etcd(url());
    const auto name = unique_name("interop-tokens");
    const auto dir = etcd.dir(name);
    const std::string go_name = dir.substr(0, dir.size() - 1);
    const auto work =
        std::filesystem::temp_directory_path() / ("distlock-etcdctl-" + distlock::spi::random_token().substr(0, 8));
    std::filesystem::create_directories(work);
    const auto log = (work / "holders").string(), script = (work / "hold.sh").string(),
               finished = (work / "done").string();
    // While etcdctl holds the lock: append its ETCD_LOCK_REV to the log.
    std::ofstream(script) << "echo \"etcdctl $ETCD_LOCK_REV\" >> " << log << "\nsleep 0.03\n";
    const std::string loop = "(for i in $(seq " + std::to_string(etcdctl_rounds) +
                             "); do ETCDCTL_API=3 etcdctl --endpoints=" + endpoint() + " lock '" + go_name + "' sh " +
                             script + " || echo failed >> " + log + "; done; touch " + finished + ") >/dev/null 2>&1 &";
    REQUIRE(std::system(loop.c_str()) == 0);
    auto m = p.mutex(name);
    int ours = 0;
    const auto give_up = clk::now() + 180s;
    while (!std::filesystem::exists(finished) && clk::now() < give_up) {
        if (!m.try_lock_for(20s)) continue;
        std::ofstream(log, std::ios::app) << "distlock " << m.token() << "\n";
        ++ours;
        std::this_thread::sleep_for(20ms);
        m.unlock();
    }
    REQUIRE(std::filesystem::exists(finished));
    std::ifstream in(log);
    std::string tool, all;
    std::uint64_t token = 0, last = 0;
    std::string last_tool;
    int etcdctl_holds = 0, handoffs = 0, increasing = 0, pairs = 0;
    while (in >> tool) {
        if (tool == "failed") {
            all += "failed\n";
            continue;
        }
        REQUIRE(in >> token);
        all += tool + " " + std::to_string(token) + "\n";
        if (tool == "etcdctl") ++etcdctl_holds;
        if (!last_tool.empty()) {
            ++pairs;
            if (token > last) ++increasing;
            if (tool != last_tool) ++handoffs;
        }
        last = token;
        last_tool = tool;
    }
    INFO("holders in order:\n" << all);
    CHECK(all.find("failed") == std::string::npos);
    CHECK(etcdctl_holds == etcdctl_rounds);
    CHECK(ours > 0);
    CHECK(handoffs >= 20);       // the two tools really took turns
    CHECK(increasing == pairs);  // every holder's number above the previous holder's
    std::filesystem::remove_all(work);
}

namespace {

// etcdctl (v3 API) against the member under test, as a child whose output is read line by line.
distlock::test::child_process etcdctl(std::vector<std::string> args) {
    std::vector<std::string> argv{"etcdctl", "--endpoints=" + endpoint()};
    argv.insert(argv.end(), args.begin(), args.end());
    return distlock::test::child_process(argv, {.env = {{"ETCDCTL_API", "3"}}});
}

// Reads lines of `child` until one equals `want` (true) or `limit` passes (false); `seen` gets them all.
bool prints(distlock::test::child_process& child, const std::string& want, std::chrono::milliseconds limit,
            std::string& seen) {
    const auto until = clk::now() + limit;
    while (clk::now() < until) {
        auto line = child.read_line(std::chrono::duration_cast<std::chrono::milliseconds>(until - clk::now()));
        if (line.empty()) continue;
        seen += line + "\n";
        if (line == want) return true;
    }
    return false;
}

// The go name of a distlock lock name: Go's Mutex and Election append the '/'.
std::string go_name_of(etcd_direct& etcd, const std::string& name) {
    const auto dir = etcd.dir(name);
    return dir.substr(0, dir.size() - 1);
}

const char* const kRange =
    R"(grpc_server_started_total{grpc_method="Range",grpc_service="etcdserverpb.KV",grpc_type="unary"})";
const char* const kTimeToLive =
    R"(grpc_server_started_total{grpc_method="LeaseTimeToLive",grpc_service="etcdserverpb.Lease",grpc_type="unary"})";
const char* const kWrites[] = {
    R"(grpc_server_started_total{grpc_method="Put",grpc_service="etcdserverpb.KV",grpc_type="unary"})",
    R"(grpc_server_started_total{grpc_method="Txn",grpc_service="etcdserverpb.KV",grpc_type="unary"})",
    R"(grpc_server_started_total{grpc_method="DeleteRange",grpc_service="etcdserverpb.KV",grpc_type="unary"})"};

}  // namespace

TEST_CASE("inspect shows the holder label, the token and the lease left of a lock held by another connection",
          "[etcd][inspect]") {
    const auto label = "etcd-holder-" + distlock::spi::random_token().substr(0, 8);
    auto holder = distlock::connect(url() + "&holder=" + label);
    auto observer = distlock::connect(url());
    auto waiter = distlock::connect(url(), distlock::provider_options{.holder = "etcd-waiter"});
    etcd_direct etcd(url());
    const auto name = unique_name("inspect");

    auto before = observer.inspect(name);
    CHECK(before.name == name);
    CHECK(before.held == false);
    CHECK(before.waiters == 0u);
    CHECK_FALSE(before.holder);
    CHECK_FALSE(before.token);
    CHECK_FALSE(before.remaining);
    CHECK(before.unknown.empty());

    auto m = holder.mutex(name);
    REQUIRE(m.try_lock());
    // The raw layout: the key's value is the holder label.
    auto kvs = etcd.keys(name);
    REQUIRE(kvs.size() == 1);
    CHECK(etcd_direct::unb64(kvs[0]["value"]) == label);

    auto held = observer.inspect(name);
    CHECK(held.held == true);
    CHECK(held.holder == label);
    REQUIRE(held.token);
    CHECK(*held.token == m.token());
    REQUIRE(held.remaining);
    CHECK(*held.remaining > 0ms);
    CHECK(*held.remaining <= 2s);  // the URL's lease=2s
    CHECK(held.waiters == 0u);
    CHECK(held.unknown.empty());

    // A waiter of another connection is counted; when it gets the lock after
    // waiting, its token (a put of its key again) is what inspect reads back.
    auto w = waiter.mutex(name);
    std::atomic<bool> got{false};
    std::thread t([&] { got = w.try_lock_for(20s); });
    CHECK(eventually([&] { return observer.inspect(name).waiters == 1u; }, 10s));
    m.unlock();
    t.join();
    REQUIRE(got);
    auto next = observer.inspect(name);
    CHECK(next.holder == "etcd-waiter");
    REQUIRE(next.token);
    CHECK(*next.token == w.token());
    CHECK(*next.token > m.token());
    kvs = etcd.keys(name);
    REQUIRE(kvs.size() == 1);
    CHECK(etcd_direct::num(kvs[0], "mod_revision") == static_cast<long long>(w.token()));
    CHECK(etcd_direct::num(kvs[0], "create_revision") < static_cast<long long>(w.token()));
    w.unlock();

    auto after = observer.inspect(name);
    CHECK(after.held == false);
    CHECK(after.waiters == 0u);
    CHECK_FALSE(after.holder);
    CHECK(after.unknown.empty());
    CHECK(etcd.keys(name).empty());
}

TEST_CASE("inspect costs one Range, plus one LeaseTimeToLive when held, and writes nothing", "[etcd][inspect]") {
    etcd_direct etcd(url());
    auto holder = distlock::connect(url().substr(0, url().find('?')) + "?lease=30s");  // no renewal during the count
    auto observer = distlock::connect(url());
    const auto name = unique_name("inspect-count");
    REQUIRE(etcd.metric(kRange) > 0);
    // Other clients of the member can only add requests: up to three trials, the fewest count.
    auto cost = [&](double& ranges, double& ttls, double& writes) {
        ranges = ttls = writes = 1e9;
        for (int trial = 0; trial < 3; ++trial) {
            double w0 = 0, w1 = 0;
            for (auto* w : kWrites) w0 += etcd.metric(w);
            const double r0 = etcd.metric(kRange), t0 = etcd.metric(kTimeToLive);
            (void)observer.inspect(name);
            const double r1 = etcd.metric(kRange), t1 = etcd.metric(kTimeToLive);
            for (auto* w : kWrites) w1 += etcd.metric(w);
            ranges = std::min(ranges, r1 - r0);
            ttls = std::min(ttls, t1 - t0);
            writes = std::min(writes, w1 - w0);
        }
    };
    double ranges, ttls, writes;
    cost(ranges, ttls, writes);
    CHECK(ranges == 1);
    CHECK(ttls == 0);
    CHECK(writes == 0);
    auto m = holder.mutex(name);
    REQUIRE(m.try_lock());
    cost(ranges, ttls, writes);
    CHECK(ranges == 1);
    CHECK(ttls == 1);
    CHECK(writes == 0);
    m.unlock();
}

TEST_CASE("inspect of a lock held by etcdctl lock (Go's concurrency.Mutex): no label, no token, its lease",
          "[etcd][inspect][interop]") {
    REQUIRE(std::system("command -v etcdctl >/dev/null") == 0);
    auto observer = distlock::connect(url());
    etcd_direct etcd(url());
    const auto name = unique_name("inspect-go-mutex");
    auto ctl = etcdctl({"lock", go_name_of(etcd, name)});  // prints its key once it holds, then holds
    REQUIRE(eventually([&] { return etcd.keys(name).size() == 1; }, 10s));
    std::string seen;
    REQUIRE(prints(ctl, etcd_direct::unb64(etcd.keys(name)[0]["key"]), 10s, seen));
    auto info = observer.inspect(name);
    CHECK(info.held == true);
    CHECK_FALSE(info.holder);
    CHECK(info.unknown.count("holder") == 1);
    CHECK_FALSE(info.token);
    CHECK(info.unknown.count("token") == 1);
    REQUIRE(info.remaining);
    CHECK(*info.remaining > 0ms);
    CHECK(*info.remaining <= 60s);  // etcdctl's session TTL
    CHECK(info.waiters == 0u);
    CHECK(info.unknown.size() == 2);
    ctl.signal(SIGTERM);
    CHECK(ctl.wait_exit_for(10s));
    CHECK(eventually([&] { return observer.inspect(name).held == false; }, 10s));
}

TEST_CASE("etcdctl elect leads: a distlock election on the same name waits, and sees etcdctl's proposal as leader",
          "[etcd][election][interop]") {
    REQUIRE(std::system("command -v etcdctl >/dev/null") == 0);
    auto p = distlock::connect(url());
    etcd_direct etcd(url());
    const auto name = unique_name("elect-go-leads");
    auto ctl = etcdctl({"elect", go_name_of(etcd, name), "proposal-x"});
    std::string seen;
    REQUIRE(prints(ctl, "proposal-x", 10s, seen));  // it prints its key and proposal once elected
    auto e = p.election(name, {.id = "distlock-y"});
    CHECK_FALSE(e.campaign(1500ms));
    CHECK_FALSE(e.is_leader());
    auto leader = e.leader();
    CHECK(leader.held == true);
    CHECK(leader.holder == "proposal-x");
    // etcdctl resigns on SIGTERM (deletes its key): distlock leads.
    REQUIRE(ctl.signal(SIGTERM));
    REQUIRE(e.campaign(15s));
    CHECK(e.is_leader());
    CHECK(e.leader().holder == "distlock-y");
    CHECK(e.leader().token == e.term());
    CHECK(ctl.wait_exit_for(10s));
    e.resign();
    CHECK(e.leader().held == false);
}

TEST_CASE("a distlock leader is what etcdctl elect -l observes", "[etcd][election][interop]") {
    REQUIRE(std::system("command -v etcdctl >/dev/null") == 0);
    auto p = distlock::connect(url());
    etcd_direct etcd(url());
    const auto name = unique_name("elect-distlock-leads");
    auto e = p.election(name, {.id = "distlock-y"});
    REQUIRE(e.campaign(5s));
    auto observer = etcdctl({"elect", "-l", go_name_of(etcd, name)});
    std::string seen;
    CHECK(prints(observer, "distlock-y", 10s, seen));
    INFO("etcdctl elect -l printed:\n" << seen);
    // A candidate of etcdctl does not lead while distlock does.
    auto rival = etcdctl({"elect", go_name_of(etcd, name), "proposal-z"});
    std::string rival_seen;
    CHECK_FALSE(prints(rival, "proposal-z", 1500ms, rival_seen));
    e.resign();
    CHECK(prints(rival, "proposal-z", 10s, rival_seen));  // then it does,
    CHECK(prints(observer, "proposal-z", 10s, seen));     // and the observer sees it
    rival.signal(SIGTERM);
    CHECK(rival.wait_exit_for(10s));
    observer.kill_hard();
}

// ---- names and prefixes stay in their namespace; a hostile server (issue 23) -----------------

TEST_CASE("the names '.' and '..' stay inside the prefix on etcd too (keys are bytes: nothing normalises them)",
          "[etcd][names]") {
    // Not a fix on etcd (its keys travel base64 in JSON bodies, never in a URL
    // path), a guard: the keys of every primitive of these names, and what
    // break_lock deletes, stay under <prefix>/, and other keys survive.
    const auto prefix = "/" + unique_name("dots");
    const auto u = base() + prefix + "?lease=2s";
    etcd_direct etcd(u);
    const std::vector<std::string> others{prefix + "-beside/k", prefix + "/other/k", prefix.substr(0, 5) + "/k",
                                          prefix + "/%2E%2Ex/k"};
    for (const auto& k : others)
        etcd.call("/v3/kv/put", {{"key", etcd_direct::b64(k)}, {"value", etcd_direct::b64("keep " + k)}});
    {
        auto p = distlock::connect(u);
        for (std::string name : {".", ".."}) {
            INFO("name '" << name << "'");
            auto m = p.mutex(name);
            REQUIRE(m.try_lock());
            auto keys = etcd.keys(name);
            REQUIRE(keys.size() == 1);
            CHECK(etcd_direct::unb64(keys[0]["key"])
                      .rfind(prefix + "/" + distlock::backends::http::encode_name(name) + "/", 0) == 0);
            auto sem = p.semaphore(name, 2);
            REQUIRE(sem.try_acquire());
            auto rw = p.shared_mutex(name);
            REQUIRE(rw.try_lock_shared());
            distlock::testing::break_lock(p, name);
            CHECK(eventually([&] { return !m.held(); }, 3s));
            m.unlock();
            sem.release();
            rw.unlock_shared();
        }
    }
    for (const auto& k : others) {
        INFO("key " << k);
        auto got = etcd.under(k);
        REQUIRE(got.size() == 1);
        CHECK(etcd_direct::unb64(got[0]["value"]) == "keep " + k);
        etcd.call("/v3/kv/deleterange", {{"key", etcd_direct::b64(k)}});
    }
}

TEST_CASE("an etcd prefix with a '.', '..' or empty segment is refused at connect", "[etcd][names][input]") {
    for (std::string path : {"/%2e%2e", "/a/%2E", "/a//b", "/a/%2e%2e/b"}) {
        INFO("path " << path);
        try {
            (void)distlock::connect("etcd://127.0.0.1:1" + path);
            FAIL("connected");
        } catch (const distlock::invalid_argument_error& e) {
            CHECK(std::string(e.what()).find("prefix") != std::string::npos);
        }
    }
}

TEST_CASE("a user name or password that is not UTF-8 is refused, without its bytes in the message",
          "[etcd][auth][input]") {
    // Before: nlohmann threw type_error.316 ("invalid UTF-8 byte at index 1: 0xFF"),
    // which is no distlock::error, and named the byte.
    for (std::string userinfo : {"root:p%FFw", "root:%C3%28", "root:%ED%A0%80", "r%FFot:pw", "root:%F4%90%80%80"}) {
        INFO("user info " << userinfo);
        try {
            (void)distlock::connect("etcd://" + userinfo + "@127.0.0.1:1/x");
            FAIL("connected");
        } catch (const distlock::invalid_argument_error& e) {
            const std::string what = e.what();
            CHECK(what.find("UTF-8") != std::string::npos);
            CHECK(what.find("0xFF") == std::string::npos);
            CHECK(what.find('\xff') == std::string::npos);
            CHECK(what.find("p%FFw") == std::string::npos);
        }
    }
    // UTF-8 beyond ASCII is fine: it reaches the (absent) server.
    CHECK_THROWS_AS(distlock::connect("etcd://root:p%C3%A4ss@127.0.0.1:1/x"), distlock::unavailable_error);
}

namespace {

// Runs `f`: a distlock::error or nothing is fine, any other exception fails the test.
template <class F>
void typed_or_nothing(F&& f) {
    try {
        f();
    } catch (const distlock::error&) {
    } catch (const std::exception& e) {
        FAIL("a non-distlock exception escaped: " << e.what());
    }
}

// A fake etcd gateway: `replies` maps a path to its reply body (200); anything
// else gets `{}`; authenticate answers `token`.
distlock::test::fake_http_server fake_etcd(std::map<std::string, std::string> replies) {
    return distlock::test::fake_http_server(
        [replies = std::move(replies)](const distlock::test::fake_request& rq,
                                       int) -> std::optional<distlock::test::fake_reply> {
            auto it = replies.find(rq.target);
            if (it != replies.end())
                return distlock::test::fake_reply{it->second.rfind("!400", 0) == 0 ? 400 : 200,
                                                  it->second.rfind("!400", 0) == 0 ? it->second.substr(4) : it->second};
            if (rq.target == "/v3/lease/grant") return distlock::test::fake_reply{200, R"({"ID":"7","TTL":"2"})"};
            if (rq.target == "/v3/lease/keepalive")
                return distlock::test::fake_reply{200, R"({"result":{"ID":"7","TTL":"2"}})"};
            return distlock::test::fake_reply{200, "{}"};
        });
}

}  // namespace

TEST_CASE("malformed or mistyped replies of etcd are typed distlock errors, never JSON exceptions", "[etcd][hostile]") {
    const std::vector<std::string> txns{
        R"({"succeeded":"yes","responses":[{},{}],"header":[]})",
        R"({"responses":{"a":1,"b":2}})",
        R"({"responses":[1,2],"succeeded":false})",
        R"({"responses":[{"response_range":[]},{"response_range":{"kvs":"x"}}]})",
        R"({"responses":[{"response_range":{"kvs":[{"create_revision":{}}]}},{"response_range":{"kvs":[7]}}],"succeeded":false})",
        R"({"responses":[{},{}],"succeeded":true,"header":{"revision":"x"}})",
        R"(!400{"error":5,"code":"x","message":7})",
        R"(!400{"error":"lease not found","code":5,"message":["m"]})",
        R"([1,2])",
        R"(!400{"code":9,"message":"failed precondition"})",
        "\xff\xfe"};
    for (const auto& txn : txns) {
        INFO("txn reply " << txn);
        auto server =
            fake_etcd({{"/v3/kv/txn", txn}, {"/v3/kv/range", R"({"kvs":[{"create_revision":[]}],"count":{}})"}});
        auto p = distlock::connect("etcd://" + server.address() + "/h?lease=2s");
        for (auto kind : {0, 1, 2}) {
            typed_or_nothing([&] {
                if (kind == 0) {
                    auto m = p.mutex("n");
                    if (m.try_lock()) m.unlock();
                } else if (kind == 1) {
                    auto s = p.semaphore("n", 2);
                    if (s.try_acquire()) s.release();
                } else {
                    auto rw = p.shared_mutex("n");
                    if (rw.try_lock_shared()) rw.unlock_shared();
                }
            });
        }
    }
    for (std::string range :
         {R"({"kvs":"x"})", R"({"kvs":[1]})", R"({"kvs":[{"value":{},"lease":"abc"}],"count":[]})",
          R"({"kvs":[{"key":5,"lease":{}}]})", R"([])", R"(!400{"message":{}})",
          R"(!400{"code":9,"message":"failed precondition"})", R"(!400{"code":5,"message":"not found"})"}) {
        INFO("range reply " << range);
        // The connect probe is a range too: answered well, then the hostile ones.
        std::atomic<int> ranges{0};
        distlock::test::fake_http_server server(
            [&](const distlock::test::fake_request& rq, int) -> std::optional<distlock::test::fake_reply> {
                if (rq.target == "/v3/kv/range" && ranges++ > 0)
                    return distlock::test::fake_reply{range.rfind("!400", 0) == 0 ? 400 : 200,
                                                      range.rfind("!400", 0) == 0 ? range.substr(4) : range};
                return distlock::test::fake_reply{200, R"({"header":{"revision":"1"}})"};
            });
        auto p = distlock::connect("etcd://" + server.address() + "/h?lease=2s");
        typed_or_nothing([&] { (void)p.inspect("n"); });
        typed_or_nothing([&] { distlock::testing::break_lock(p, "n"); });
    }
}

TEST_CASE("break_lock deletes no key outside the name's directory, whatever the range answers", "[etcd][hostile]") {
    const std::string elsewhere = "/elsewhere/precious";
    auto server = fake_etcd({{"/v3/kv/range", R"({"kvs":[{"key":")" + etcd_direct::b64(elsewhere) +
                                                  R"(","create_revision":"3"}],"count":"1"})"}});
    auto p = distlock::connect("etcd://" + server.address() + "/h?lease=2s");
    CHECK_THROWS_AS(distlock::testing::break_lock(p, "n"), distlock::unavailable_error);
    for (const auto& rq : server.requests()) {
        if (rq.target != "/v3/kv/deleterange") continue;
        auto body = nlohmann::json::parse(rq.body);
        INFO("deleterange of " << etcd_direct::unb64(body["key"]));
        CHECK(etcd_direct::unb64(body["key"]).rfind("/h/", 0) == 0);
    }
}

TEST_CASE("an auth token with a control character is refused: no header is injected", "[etcd][hostile][auth]") {
    auto server = fake_etcd({{"/v3/auth/authenticate", R"({"token":"t0k\r\nX-Injected: 1"})"}});
    try {
        (void)distlock::connect("etcd://root:pw@" + server.address() + "/h");
        FAIL("connected");
    } catch (const distlock::access_denied_error& e) {
        CHECK(std::string(e.what()).find("t0k") == std::string::npos);
    }
    for (const auto& rq : server.requests()) {
        CHECK(rq.headers.count("x-injected") == 0);
        CHECK(rq.headers.count("authorization") == 0);
    }
}

TEST_CASE("the proxy environment is ignored: the password goes to etcd only, never to a proxy",
          "[etcd][hostile][proxy]") {
    // A proxy named by http_proxy or ALL_PROXY would read the authenticate body
    // (user and password) and the token (and could answer as etcd): libcurl
    // obeys them unless told not to.
    distlock::test::fake_http_server proxy([](const distlock::test::fake_request&, int) {
        return distlock::test::fake_reply{200, "{}"};
    });
    auto server = fake_etcd({{"/v3/auth/authenticate", R"({"token":"t0k"})"}});
    distlock::test::proxy_environment env("http://" + proxy.address());
    {
        auto p = distlock::connect("etcd://root:s3cr3t-etcd-pw@" + server.address() + "/h");
        (void)p.inspect("n");
    }
    const auto seen = server.requests();
    REQUIRE(seen.size() >= 2);
    CHECK(seen[0].target == "/v3/auth/authenticate");
    CHECK(seen[0].body.find("s3cr3t-etcd-pw") != std::string::npos);
    for (const auto& rq : proxy.requests()) CHECK(("the proxy got " + rq.method + " " + rq.target).empty());
}

// ---- a member whose replies nest a million levels deep -------------------------------------

namespace {

// {"error":[[[...]]]} nested a million levels: 2 MB, well under the 16 MiB reply
// cap. nlohmann parses and frees it without recursion, but dump() recursed per
// level and blew the stack (the keepalive's and the waiter's watch error text).
std::string deeply_nested_error() {
    constexpr std::size_t depth = 1000000;
    return "{\"error\":" + std::string(depth, '[') + std::string(depth, ']') + "}";
}

}  // namespace

// The child of the tests below (hidden: run only by tag), a client of the fake
// member at DISTLOCK_TEST_HOSTILE_ETCD, as DISTLOCK_TEST_HOSTILE_CASE says:
// "watch", a waiter (on the name "waited": the fake shows a key ahead of it);
// "keepalive", a holder (the name "held") whose renewals run; "overflow", both
// and inspect. Exits 0 when each ends as a distlock error or nothing; a crash
// (or, in a sanitizer build, undefined behaviour) is the parent's failure.
TEST_CASE("(child) a waiter or a holder on a hostile member", "[.][etcd-hostile-child]") {
    const auto address = distlock::test::env("DISTLOCK_TEST_HOSTILE_ETCD");
    const auto which = distlock::test::env("DISTLOCK_TEST_HOSTILE_CASE");
    REQUIRE(!address.empty());
    auto p = distlock::connect("etcd://" + address + "/h?lease=1s");
    if (which == "watch" || which == "overflow") {
        auto m = p.mutex("waited");
        typed_or_nothing([&] { CHECK_FALSE(m.try_lock_for(700ms)); });
    }
    if (which == "keepalive" || which == "overflow") {
        auto m = p.mutex("held");
        typed_or_nothing([&] {
            REQUIRE(m.try_lock());
            std::this_thread::sleep_for(1500ms);  // the renewals' keepalives
            m.unlock();
        });
    }
    if (which == "overflow") typed_or_nothing([&] { (void)p.inspect("held"); });
}

// Runs the child above on `server` for `which`: its exit status (nullopt when it
// still ran after a minute), its output in `output`.
std::optional<int> run_hostile_child(const distlock::test::fake_http_server& server, const std::string& which,
                                     std::string& output) {
    const auto self = std::filesystem::read_symlink("/proc/self/exe").string();
    distlock::test::child_process child(
        {self, "[etcd-hostile-child]"},
        {{{"DISTLOCK_TEST_HOSTILE_ETCD", server.address()}, {"DISTLOCK_TEST_HOSTILE_CASE", which}}});
    const auto status = child.wait_exit_for(60s);
    for (auto l = child.read_line(100ms); !l.empty(); l = child.read_line(100ms)) output += l + "\n";
    return status;
}

TEST_CASE("a keepalive reply or a watch line nested a million levels deep is a typed error, not a crash",
          "[etcd][hostile][json]") {
    const std::string deep = deeply_nested_error();
    const std::string held_dir = "/h/held/", other = etcd_direct::b64("/h/waited/0");
    distlock::test::fake_http_server server([&](const distlock::test::fake_request& rq,
                                                int) -> std::optional<distlock::test::fake_reply> {
        if (rq.target == "/v3/lease/grant") return distlock::test::fake_reply{200, R"({"ID":"7","TTL":"1"})"};
        if (rq.target == "/v3/lease/keepalive") return distlock::test::fake_reply{200, deep};
        if (rq.target == "/v3/watch") return distlock::test::fake_reply{200, deep + "\n"};
        // The holder's acquire is granted at once; the waiter's finds a key ahead of its own.
        const std::string first =
            rq.body.find(etcd_direct::b64(held_dir).substr(0, 8)) != std::string::npos ? "5" : "1";
        if (rq.target == "/v3/kv/txn")
            return distlock::test::fake_reply{
                200,
                R"({"succeeded":true,"header":{"revision":"5"},"responses":[{},{"response_range":{"kvs":[{"key":")" +
                    other + R"(","create_revision":")" + first + R"("}]}}]})"};
        if (rq.target == "/v3/kv/range")
            return distlock::test::fake_reply{200, R"({"header":{"revision":"5"},"kvs":[{"key":")" + other +
                                                       R"(","create_revision":"1"}],"count":"1"})"};
        return distlock::test::fake_reply{200, R"({"header":{"revision":"5"}})"};
    });
    for (std::string which : {"watch", "keepalive"}) {
        INFO("case " << which);
        const auto before = server.requests().size();
        std::string output;
        const auto status = run_hostile_child(server, which, output);
        INFO("the child's output:\n" << output);
        REQUIRE(status.has_value());
        CHECK(*status == 0);  // 139 = 128 + SIGSEGV: the stack blown by a recursive dump()
        const auto seen = server.requests();
        const auto target = which == "watch" ? "/v3/watch" : "/v3/lease/keepalive";
        CHECK(std::count_if(seen.begin() + static_cast<std::ptrdiff_t>(before), seen.end(),
                            [&](const auto& rq) { return rq.target == target; }) > 0);
    }
}

// ---- durations and revisions a reply cannot overflow, loops it cannot spin -------------------

namespace {

constexpr const char* kInt64Max = "9223372036854775807";

// A fake member on which the name "held" is granted at once and the name
// "waited" has a key ahead of it; `answer` may answer a request first
// (nullopt: the defaults). Leases, revisions and TTLs are `revision` and `ttl`.
distlock::test::fake_http_server scripted_member(
    std::string revision, std::string ttl,
    std::function<std::optional<distlock::test::fake_reply>(const distlock::test::fake_request&)> answer = {}) {
    return distlock::test::fake_http_server(
        [=](const distlock::test::fake_request& rq, int) -> std::optional<distlock::test::fake_reply> {
            if (answer)
                if (auto r = answer(rq)) return r;
            const std::string other = etcd_direct::b64("/h/waited/0");
            if (rq.target == "/v3/lease/grant")
                return distlock::test::fake_reply{200, R"({"ID":"7","TTL":")" + ttl + R"("})"};
            if (rq.target == "/v3/lease/keepalive")
                return distlock::test::fake_reply{200, R"({"result":{"ID":"7","TTL":")" + ttl + R"("}})"};
            if (rq.target == "/v3/lease/timetolive")
                return distlock::test::fake_reply{200, R"({"ID":"7","TTL":")" + ttl + R"("})"};
            const bool held = rq.body.find(etcd_direct::b64("/h/held/").substr(0, 8)) != std::string::npos;
            const std::string kv = R"({"key":")" + other + R"(","create_revision":")" + (held ? revision : "1") +
                                   R"(","mod_revision":")" + revision + R"(","lease":"7","value":")" +
                                   etcd_direct::b64("x") + R"("})";
            if (rq.target == "/v3/kv/txn")
                return distlock::test::fake_reply{200, R"({"succeeded":true,"header":{"revision":")" + revision +
                                                           R"("},"responses":[{},{"response_range":{"kvs":[)" + kv +
                                                           "]}}]}"};
            if (rq.target == "/v3/kv/range")
                return distlock::test::fake_reply{
                    200, R"({"header":{"revision":")" + revision + R"("},"kvs":[)" + kv + R"(],"count":"1"})"};
            if (rq.target == "/v3/watch")  // a put of the watched key, then the stream ends
                return distlock::test::fake_reply{
                    200, R"({"result":{"events":[{"type":"PUT","kv":{"mod_revision":")" + revision + "\"}}]}}\n"};
            return distlock::test::fake_reply{200, R"({"header":{"revision":")" + revision + R"("}})"};
        });
}

}  // namespace

TEST_CASE("a lease TTL or a revision of INT64_MAX from the server is harmless (no overflow, no undefined behaviour)",
          "[etcd][hostile][overflow]") {
    // Before: the grant's TTL was believed whatever its size, and every
    // duration_cast of it overflowed (signed overflow: undefined behaviour,
    // which the ASan+UBSan build reports and aborts on); so did revision + 1.
    // Meaningful in the sanitizer build (-DDISTLOCK_SANITIZE=address,undefined);
    // in a plain build the overflow is silent. In a child process, so that an
    // abort there is this test's failure, not the test program's end.
    auto server = scripted_member(kInt64Max, kInt64Max);
    std::string output;
    const auto status = run_hostile_child(server, "overflow", output);
    INFO("the child's output:\n" << output);
    REQUIRE(status.has_value());
    CHECK(*status == 0);
}

TEST_CASE("a lease granted longer than asked is renewed as asked", "[etcd][hostile][overflow]") {
    // A grant of 3600 s for a 1 s lease: before, believed, so the session was
    // taken as fresh for 20 minutes and never renewed before reuse; now the TTL
    // is clamped to the one asked for: reused after a third of it, it is renewed.
    auto server = scripted_member("5", "3600");
    auto p = distlock::connect("etcd://" + server.address() + "/h?lease=1s");
    auto m = p.mutex("held");
    REQUIRE(m.try_lock());
    m.unlock();
    const auto before = server.requests().size();
    std::this_thread::sleep_for(500ms);
    REQUIRE(m.try_lock());
    m.unlock();
    const auto seen = server.requests();
    CHECK(std::count_if(seen.begin() + static_cast<std::ptrdiff_t>(before), seen.end(),
                        [](const auto& rq) { return rq.target == "/v3/lease/keepalive"; }) >= 1);
}

TEST_CASE("a session lease under 3 s is reused without a keepalive until a third of it has passed",
          "[etcd][hostile][count]") {
    // A third of a 2 s lease counted in whole seconds was 0 s: each acquisition
    // renewed the session first, a keepalive round trip per lock. A third is
    // 666 ms: acquisitions in quick succession send none (one per 666 ms at
    // most, should this machine be slow).
    auto server = scripted_member("5", "2");
    auto p = distlock::connect("etcd://" + server.address() + "/h?lease=2s");
    auto m = p.mutex("held");
    REQUIRE(m.try_lock());  // the session lease granted
    m.unlock();
    const auto before = server.requests().size();
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < 5; ++i) {
        REQUIRE(m.try_lock());
        m.unlock();
    }
    const auto allowed = (std::chrono::steady_clock::now() - start) / 666ms;
    const auto seen = server.requests();
    const auto keepalives = std::count_if(seen.begin() + static_cast<std::ptrdiff_t>(before), seen.end(),
                                          [](const auto& rq) { return rq.target == "/v3/lease/keepalive"; });
    INFO("keepalives " << keepalives << ", allowed " << allowed);
    CHECK(keepalives <= allowed);
}

TEST_CASE("a member that ends every watch at once makes neither a waiter nor a holder's monitor spin",
          "[etcd][hostile][spin]") {
    // The stream ends at once with nothing in it: before, the waiter ranged and
    // watched again at once (thousands of rounds a second until its deadline),
    // and the held lock's monitor watched again at once for as long as the lock
    // was held.
    std::atomic<int> watches{0}, ranges{0};
    auto server = scripted_member(
        "5", "10", [&](const distlock::test::fake_request& rq) -> std::optional<distlock::test::fake_reply> {
            if (rq.target == "/v3/kv/range") ++ranges;
            if (rq.target != "/v3/watch") return std::nullopt;
            ++watches;
            return distlock::test::fake_reply{200, ""};
        });
    auto p = distlock::connect("etcd://" + server.address() + "/h?lease=10s");
    ranges = 0;
    auto waiter = p.mutex("waited");
    CHECK_FALSE(waiter.try_lock_for(1s));
    CHECK(ranges.load() < 50);
    CHECK(watches.load() > 2);  // it kept looking, at a pace
    auto holder = p.mutex("held");
    REQUIRE(holder.try_lock());
    watches = 0;
    std::this_thread::sleep_for(1s);
    const int in_one_second = watches.load();
    holder.unlock();
    CHECK(in_one_second < 20);
    CHECK(in_one_second > 2);  // still watching
}
