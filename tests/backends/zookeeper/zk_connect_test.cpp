// zk:// connecting to the standalone server (DISTLOCK_TEST_ZK_URL): digest
// credentials, typed errors for connection problems and bad URLs, TLS refused
// (the C client has none) and a TLS-only server reached in clear.
#include <zookeeper/zookeeper.h>

#include <catch2/catch.hpp>

#include "distlock/distlock.hpp"
#include "distlock/spi/backend.hpp"
#include "distlock/testing.hpp"
#include "support.hpp"
#include "zk_raw.hpp"
#include "zk_support.hpp"

using namespace std::chrono_literals;
using clk = std::chrono::steady_clock;
using distlock::test::eventually;

namespace {

std::string url() { return distlock::test::env("DISTLOCK_TEST_ZK_URL"); }
std::string url_with(const std::string& extra) {
    auto u = url();
    return u + (u.find('?') == std::string::npos ? "?" : "&") + extra;
}

}  // namespace

TEST_CASE("URL credentials authenticate the session (digest); wrong ones are access_denied when locking",
          "[zookeeper][auth]") {
    zk_test::raw_zk raw(zk_test::hosts_of(url()));
    raw.add_digest("locker:s3cret");
    const auto base = "/distlock-acl-" + distlock::spi::random_token().substr(0, 8);
    REQUIRE(raw.create_private(base) == ZOK);  // digest:locker:<hash> may do anything, nobody else
    const auto hosts = zk_test::hosts_of(url());
    {
        auto good = distlock::connect("zk://locker:s3cret@" + hosts + base + "?session_timeout=2s");
        CHECK(good.url().find("s3cret") == std::string::npos);
        auto m = good.mutex("guarded");
        REQUIRE(m.try_lock());
        distlock::testing::break_lock(good, "guarded");  // its own session authenticates too
        CHECK(eventually([&] { return !m.held(); }, 5s));
        m.unlock();
    }
    auto bad = distlock::connect("zk://locker:wrong@" + hosts + base + "?session_timeout=2s");
    auto m = bad.mutex("guarded-too");
    CHECK_THROWS_AS(m.try_lock(), distlock::access_denied_error);
    auto anonymous = distlock::connect("zk://" + hosts + base + "?session_timeout=2s");
    CHECK_THROWS_AS(anonymous.mutex("guarded-too").try_lock(), distlock::access_denied_error);
    raw.remove(base + "/guarded");
    CHECK(raw.remove(base) == ZOK);
}

TEST_CASE("connection problems and bad URLs are typed errors", "[zookeeper][input]") {
    auto t0 = clk::now();
    CHECK_THROWS_AS(distlock::connect("zk://127.0.0.1:1/x"), distlock::unavailable_error);
    CHECK(clk::now() - t0 < 3s);
    CHECK_THROWS_AS(distlock::connect(url_with("session_timeout=fast")), distlock::invalid_argument_error);
    CHECK_THROWS_AS(distlock::connect("zk://127.0.0.1:12181/a//b"), distlock::invalid_argument_error);
    CHECK_THROWS_AS(distlock::connect("zk://127.0.0.1:12181/zookeeper"), distlock::invalid_argument_error);
    CHECK_THROWS_AS(distlock::connect(url_with("log=loud")), distlock::invalid_argument_error);
    auto p = distlock::connect(url_with("connect_timeout=3s"));
    CHECK(p.round_trip().has_value());
    CHECK(p.caps().reentrant);
    CHECK(p.caps().supports(distlock::feature::fencing));
    CHECK(p.caps().supports(distlock::feature::notified_wakeup));
}

// Debian 12's C client has no zookeeper_init_ssl: TLS asked for is refused
// before anything reaches the network (port 1 of a host that does not exist:
// a connection attempt would be unavailable_error, not unsupported_error).
TEST_CASE("TLS asked for on zk:// is unsupported, refused before any connection, pointing to the tunnel",
          "[zookeeper][input][tls]") {
    for (const char* q : {"tls=true", "tls=true&tls_ca=/nonexistent", "tls_ca=/nonexistent",
                          "tls=true&tls_insecure=true", "tls_server_name=zk.example"}) {
        INFO(q);
        const auto t0 = clk::now();
        try {
            distlock::connect(std::string("zk://zk-does-not-exist.invalid:1/x?") + q);
            FAIL("accepted");
        } catch (const distlock::unsupported_error& e) {
            const std::string what = e.what();
            CHECK(what.find("zookeeper_init_ssl") != std::string::npos);
            CHECK(what.find("OpenSSL") != std::string::npos);
            CHECK(what.find("docs/backends/zookeeper.md") != std::string::npos);
        }
        CHECK(clk::now() - t0 < 1s);
    }
    // tls=false says what is done anyway.
    CHECK_THROWS_AS(distlock::connect("zk://127.0.0.1:1/x?tls=false"), distlock::unavailable_error);
}

// integration/servers/zookeeper-tls.sh: a server whose only client port is its
// secureClientPort, reached in clear (the server waits for a ClientHello and
// drops the connection): a typed error within the connect bound, no hang and
// no fallback. The same server through the TLS tunnel runs the conformance
// suite (conformance.zookeeper-tls-tunnel).
TEST_CASE("a TLS-only ZooKeeper reached without TLS fails typed within connect_timeout", "[zookeeper][tls]") {
    const auto url = distlock::test::env("DISTLOCK_TEST_ZK_PLAIN_ON_TLS_URL_MUST_FAIL");
    if (url.empty() && distlock::test::env("DISTLOCK_REQUIRE_ALL") != "1") {
        WARN(
            "not applicable: DISTLOCK_TEST_ZK_PLAIN_ON_TLS_URL_MUST_FAIL is not set (integration/backends.sh up "
            "zookeeper-tls)");
        return;
    }
    REQUIRE(!url.empty());
    const auto o = distlock::test::lock_once(url + "&connect_timeout=2s");
    INFO("shown: " << o.shown);
    CHECK(o.code == static_cast<int>(distlock::errc::unavailable));
    CHECK(o.ms < 4000);
    // Through the tunnel: served.
    const auto tunnel = distlock::test::env("DISTLOCK_TEST_ZK_TLS_TUNNEL_URL");
    REQUIRE(!tunnel.empty());
    CHECK(distlock::test::lock_once(tunnel).shown == "");
}
