// etcd:// specific behaviour, checked on the server itself (one member,
// DISTLOCK_TEST_ETCD_URL from integration/servers/etcd.sh).
#include <catch2/catch.hpp>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

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

TEST_CASE("the holder's key is <prefix>/<encoded name>/<lease hex> and the token is its create revision", "[etcd]") {
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
    for (int i = 0; i < 20; ++i) etcd.call("/v3/kv/put", {{"key", etcd_direct::b64(etcd.dir(name) + "zz-unrelated")}, {"value", "eA=="}});
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
    std::string cmd = "ETCDCTL_API=3 etcdctl --endpoints=" + endpoint() + " lock '" + go_name + "' sleep 2 >/dev/null 2>&1 &";
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
    std::string free_cmd = "ETCDCTL_API=3 timeout 10 etcdctl --endpoints=" + endpoint() + " lock '" + go_name +
                           "' true >/dev/null 2>&1";
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
// with authentication enabled (user root, password "rootpw"), on ports 12679/12680.
class private_tls_etcd {
public:
    private_tls_etcd() {
        dir_ = "/tmp/distlock-etcd-tls-" + distlock::spi::random_token().substr(0, 8);
        REQUIRE(sh("mkdir -p " + dir_ + " && openssl req -x509 -newkey rsa:2048 -nodes -keyout " + dir_ +
                   "/key.pem -out " + dir_ + "/cert.pem -days 1 -subj /CN=127.0.0.1 -addext subjectAltName=IP:127.0.0.1"
                   " >/dev/null 2>&1") == 0);
        REQUIRE(sh("etcd --name p1 --data-dir " + dir_ + "/data --listen-client-urls https://127.0.0.1:12679"
                   " --advertise-client-urls https://127.0.0.1:12679 --cert-file " + dir_ + "/cert.pem --key-file " +
                   dir_ + "/key.pem --listen-peer-urls http://127.0.0.1:12680 --initial-advertise-peer-urls"
                   " http://127.0.0.1:12680 --initial-cluster p1=http://127.0.0.1:12680 --heartbeat-interval=10"
                   " --election-timeout=100 >" + dir_ + "/log 2>&1 & echo $! > " + dir_ + "/pid") == 0);
        REQUIRE(eventually([&] { return sh("curl -sf --cacert " + ca() + " https://127.0.0.1:12679/health | grep -q true") == 0; },
                           20s));
        const std::string ctl = "ETCDCTL_API=3 etcdctl --endpoints=https://127.0.0.1:12679 --cacert=" + ca() + " ";
        REQUIRE(sh(ctl + "user add root:rootpw >/dev/null && " + ctl + "user grant-role root root >/dev/null && " + ctl +
                   "auth enable >/dev/null") == 0);
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
    const std::string host = "etcd://root:rootpw@127.0.0.1:12679/tls?lease=2s&tls=true";
    // Unknown CA: verification fails, a typed error at once.
    CHECK_THROWS_AS(distlock::connect(host), distlock::access_denied_error);
    // Wrong password, and no credentials at all.
    CHECK_THROWS_AS(distlock::connect("etcd://root:wrong@127.0.0.1:12679/tls?lease=2s&tls=true&tls_ca=" + etcd.ca()),
                    distlock::access_denied_error);
    CHECK_THROWS_AS(distlock::connect("etcd://127.0.0.1:12679/tls?lease=2s&tls=true&tls_ca=" + etcd.ca()),
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

TEST_CASE("a URL that points at a server that does not speak HTTP is a bad argument, not 'retry later'", "[etcd][input]") {
    distlock::test::wrong_server other("-ERR unknown command\r\n");  // HTTP/0.9 to curl, which refuses it
    try {
        (void)distlock::connect("etcd://" + other.address() + "/x");
        FAIL("connected");
    } catch (const distlock::invalid_argument_error& e) {
        CHECK(std::string(e.what()).find("the etcd HTTP API?") != std::string::npos);
    }
}
