// Redis over TLS (issue 24): rediss:// and tls=true on redis-server children
// with a tls-port, and certificates made here with openssl, never committed: a
// test CA, the server's (127.0.0.1 and localhost), one for another name, an
// expired one, another CA's, and a client certificate for a server that
// requires one. Each child keeps its plaintext port too, which the tests use to
// look at the server side (INFO) and as "a plaintext server".
//
// Every failure is typed, quick and secret-free; the handshake is paid once per
// pooled connection. Skipped (77) when redis-server was built without TLS or
// openssl is missing.
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <thread>

#include "distlock/distlock.hpp"
#include "distlock/spi/url.hpp"
#include "redis_server.hpp"
#include "support.hpp"
#include "tcp_proxy.hpp"

using namespace std::chrono_literals;
using distlock::test::free_port;
using distlock::test::raw_client;
using distlock::test::redis_server;
using distlock::test::unique_name;
using clk = std::chrono::steady_clock;

namespace {

const std::string password = "tls-secret-pw-91c3";

bool run(const std::string& command) { return distlock::test::run_command(command + " >/dev/null 2>&1").status == 0; }

// The certificates, made once per run in a directory of their own.
struct certificates {
    std::string dir;
    certificates() {
        dir = (std::filesystem::temp_directory_path() / ("distlock-tls-" + unique_name("certs").substr(6))).string();
        std::filesystem::create_directories(dir);
        const std::string d = "cd '" + dir + "' && ";
        auto key = [&](const std::string& name) {
            return run(d + "openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out " + name + ".key");
        };
        auto ca = [&](const std::string& name) {
            return key(name) && run(d + "openssl req -x509 -new -key " + name + ".key -out " + name +
                                    ".crt -subj /CN=" + name + " -days 2");
        };
        // A certificate for `names` (subjectAltName) signed by `issuer`, valid `days`.
        auto leaf = [&](const std::string& name, const std::string& issuer, const std::string& alt, int days,
                        const std::string& usage) {
            std::ofstream(dir + "/" + name + ".ext")
                << (alt.empty() ? "" : "subjectAltName=" + alt + "\n") << "extendedKeyUsage=" << usage << "\n";
            return key(name) &&
                   run(d + "openssl req -new -key " + name + ".key -out " + name + ".csr -subj /CN=" + name) &&
                   run(d + "openssl x509 -req -in " + name + ".csr -CA " + issuer + ".crt -CAkey " + issuer +
                       ".key -CAcreateserial -out " + name + ".crt -days " + std::to_string(days) + " -extfile " +
                       name + ".ext");
        };
        ok = ca("ca") && ca("other-ca") &&
             leaf("expired", "ca", "IP:127.0.0.1,DNS:localhost", 0, "serverAuth") &&  // not after = now
             leaf("server", "ca", "IP:127.0.0.1,DNS:localhost", 2, "serverAuth") &&
             leaf("wrong-name", "ca", "DNS:wrong.example", 2, "serverAuth") &&
             leaf("client", "ca", "", 2, "clientAuth") &&
             run(d + "openssl pkey -in client.key -aes256 -passout pass:key-passphrase -out encrypted.key");
        std::ofstream(dir + "/garbage.key") << "-----BEGIN PRIVATE KEY-----\nnot a key\n-----END PRIVATE KEY-----\n";
    }
    ~certificates() {
        std::error_code ec;
        std::filesystem::remove_all(dir, ec);
    }
    std::string operator()(const std::string& file) const { return dir + "/" + file; }
    bool ok = false;
};

const certificates& certs() {
    static certificates c;
    return c;
}

// A redis-server child with a TLS port besides its plaintext one.
struct tls_server {
    redis_server server;
    std::uint16_t tls_port;
    explicit tls_server(const std::string& cert, bool client_certs = false)
        : server({"tls-port {tls_port}", "tls-cert-file " + certs()(cert + ".crt"),
                  "tls-key-file " + certs()(cert + ".key"), "tls-ca-cert-file " + certs()("ca.crt"),
                  std::string("tls-auth-clients ") + (client_certs ? "yes" : "no"), "requirepass " + password}),
          tls_port(server.tls_port()) {}
    std::string address(const std::string& host = "127.0.0.1") const { return host + ":" + std::to_string(tls_port); }
    // rediss:// with the password and the test CA, plus `more` parameters.
    std::string url(const std::string& more = "", const std::string& host = "127.0.0.1") const {
        return "rediss://:" + password + "@" + address(host) + "?lease=2s&tls_ca=" + certs()("ca.crt") + more;
    }
    long long connections() {
        raw_client raw(server.port(), password);
        const auto info = raw.string({"INFO", "stats"});
        const auto at = info.find("total_connections_received:");
        return std::stoll(info.substr(at + 27));
    }
};

bool accepts(std::uint16_t port) {
    const int s = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(port);
    const bool ok = ::connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    ::close(s);
    return ok;
}

// A sentinel child that speaks TLS only (port 0, tls-port), watching `master`'s
// TLS port over TLS (tls-replication yes).
struct tls_sentinel {
    std::uint16_t port = free_port();
    std::string dir;
    explicit tls_sentinel(const tls_server& master) {
        dir =
            (std::filesystem::temp_directory_path() / ("distlock-tls-sentinel-" + unique_name("s").substr(2))).string();
        std::filesystem::create_directories(dir);
        std::ofstream(dir + "/sentinel.conf")
            << "port 0\ntls-port " << port << "\ntls-cert-file " << certs()("server.crt") << "\ntls-key-file "
            << certs()("server.key") << "\ntls-ca-cert-file " << certs()("ca.crt")
            << "\ntls-auth-clients no\ntls-replication yes\ndir " << dir << "\nlogfile " << dir
            << "/sentinel.log\npidfile " << dir << "/sentinel.pid\ndaemonize yes\nsentinel monitor m 127.0.0.1 "
            << master.tls_port << " 1\nsentinel auth-pass m " << password << "\n";
        if (!run("redis-server '" + dir + "/sentinel.conf' --sentinel")) throw std::runtime_error("no sentinel");
        // Up when it accepts connections (it learns the master at once: monitor).
        REQUIRE(distlock::test::eventually([&] { return accepts(port); }, 5s));
    }
    ~tls_sentinel() {
        run("kill $(cat '" + dir + "/sentinel.pid')");
        std::this_thread::sleep_for(100ms);
        std::error_code ec;
        std::filesystem::remove_all(dir, ec);
    }
    std::string url(const std::string& more) const {
        return "redis-sentinel://:" + password + "@127.0.0.1:" + std::to_string(port) + "/m?lease=2s" + more;
    }
};

// The failure of `url`: the error `code`, within `limit`, naming `words`, and
// no password anywhere.
void check_refused(const std::string& url, distlock::errc code, const std::string& words,
                   std::chrono::milliseconds limit = 1500ms) {
    INFO("url: " << distlock::spi::redact_url(url));
    const auto o = distlock::test::lock_once(url);
    INFO("shown: " << o.shown);
    CHECK(o.code == static_cast<int>(code));
    CHECK(o.shown.find(words) != std::string::npos);
    CHECK(o.ms < limit.count());
    CHECK(o.shown.find(password) == std::string::npos);
}

}  // namespace

// The whole run is not applicable without a redis-server that speaks TLS or openssl.
int distlock::test::before_run(const std::vector<test_case_info>&, std::vector<std::string>&) {
    if (!run("command -v redis-server") || !run("openssl version")) {
        std::cout << "not applicable: redis-server or openssl is not on PATH\n";
        return 77;
    }
    if (!certs().ok) {
        std::cout << "cannot make the test certificates with openssl\n";
        return 1;
    }
    try {
        tls_server probe("server");
    } catch (const std::exception& e) {
        std::cout << "not applicable: this redis-server does not start with tls-port (built without TLS?): " << e.what()
                  << "\n";
        return 77;
    }
    return 0;
}

TEST_CASE("rediss:// locks, excludes, and wakes a waiter through TLS pub/sub", "[redis][tls]") {
    tls_server s("server");
    auto a = distlock::connect(s.url());
    auto b = distlock::connect(s.url());
    const auto name = unique_name("tls");
    auto held = a.mutex(name);
    REQUIRE(held.try_lock());
    auto other = b.mutex(name);
    CHECK_FALSE(other.try_lock());
    // The waiter is woken by the release's message on its TLS pub/sub
    // connection, long before the lease (2 s) would have expired.
    std::thread release([&] {
        std::this_thread::sleep_for(300ms);
        held.unlock();
    });
    const auto start = clk::now();
    CHECK(other.try_lock_for(5s));
    CHECK(clk::now() - start < 1500ms);
    release.join();
    other.unlock();
    SECTION("tls=true on redis:// is the same, and localhost is verified by name") {
        const auto url =
            "redis://:" + password + "@" + s.address("localhost") + "?tls=true&tls_ca=" + certs()("ca.crt");
        CHECK(distlock::test::lock_once(url).shown == "");
    }
    SECTION("redlock:// with tls=true") {
        tls_server t("server"), u("server");
        const auto url = "redlock://:" + password + "@" + s.address() + "," + t.address() + "," + u.address() +
                         "?tls=true&tls_ca=" + certs()("ca.crt");
        CHECK(distlock::test::lock_once(url).shown == "");
    }
}

TEST_CASE("a server certificate from another CA is refused: access_denied, quick, no secret", "[redis][tls]") {
    tls_server s("server");
    check_refused("rediss://:" + password + "@" + s.address() + "?tls_ca=" + certs()("other-ca.crt"),
                  distlock::errc::access_denied, "certificate");
    SECTION("the system store does not know the test CA either") {
        check_refused("rediss://:" + password + "@" + s.address(), distlock::errc::access_denied, "certificate");
    }
}

TEST_CASE("a certificate for another host name is refused; tls_server_name= names the one to verify", "[redis][tls]") {
    tls_server s("wrong-name");
    check_refused(s.url(), distlock::errc::access_denied, "IP address mismatch");
    check_refused(s.url("", "localhost"), distlock::errc::access_denied, "hostname mismatch");
    CHECK(distlock::test::lock_once(s.url("&tls_server_name=wrong.example")).shown == "");
    tls_server right("server");
    check_refused(right.url("&tls_server_name=wrong.example"), distlock::errc::access_denied, "hostname mismatch");
}

TEST_CASE("an expired server certificate is refused", "[redis][tls]") {
    tls_server s("expired");
    std::this_thread::sleep_for(1100ms);  // its "not after" is the second it was made
    check_refused(s.url(), distlock::errc::access_denied, "expired");
}

TEST_CASE("rediss:// to a plaintext server fails typed and quick, nothing sent in clear", "[redis][tls]") {
    tls_server s("server");
    raw_client raw(s.server.port(), password);
    raw.cmd({"CONFIG", "RESETSTAT"});
    const auto url =
        "rediss://:" + password + "@127.0.0.1:" + std::to_string(s.server.port()) + "?tls_ca=" + certs()("ca.crt");
    const auto o = distlock::test::lock_once(url);
    INFO("shown: " << o.shown);
    CHECK((o.code == static_cast<int>(distlock::errc::invalid_argument) ||
           o.code == static_cast<int>(distlock::errc::unavailable)));
    CHECK(o.shown.find("TLS") != std::string::npos);
    CHECK(o.ms < 2500);  // connect_timeout (1 s) at most
    CHECK(o.shown.find(password) == std::string::npos);
    // No AUTH ever reached the server in clear.
    CHECK(raw.calls("auth") == 0);
}

TEST_CASE("redis:// to a TLS port fails typed and quick, and says what may be wrong", "[redis][tls]") {
    tls_server s("server");
    const auto o = distlock::test::lock_once("redis://:" + password + "@" + s.address() + "?lease=2s");
    INFO("shown: " << o.shown);
    CHECK(o.code == static_cast<int>(distlock::errc::unavailable));
    CHECK(o.shown.find("is a TLS port: rediss:// or tls=true") != std::string::npos);
    CHECK(o.ms < 2500);
    CHECK(o.shown.find(password) == std::string::npos);
}

TEST_CASE("a server that requires client certificates: refused without one, served with one", "[redis][tls]") {
    tls_server s("server", true);
    check_refused(s.url(), distlock::errc::access_denied, "TLS");
    CHECK(distlock::test::lock_once(s.url("&tls_cert=" + certs()("client.crt") + "&tls_key=" + certs()("client.key")))
              .shown == "");
    SECTION("the client certificate of another CA is refused too") {
        check_refused(s.url("&tls_cert=" + certs()("other-ca.crt") + "&tls_key=" + certs()("other-ca.key")),
                      distlock::errc::access_denied, "TLS");
    }
}

TEST_CASE("a key file that cannot be used fails at connect with invalid_argument, never prompts", "[redis][tls]") {
    tls_server s("server", true);
    const auto cert = "&tls_cert=" + certs()("client.crt");
    for (const std::string key : {"missing.key", "garbage.key", "encrypted.key", "server.key", ""}) {
        INFO("key: " << key);
        const auto path = key.empty() ? certs().dir : certs()(key);  // "": a directory
        const auto o = distlock::test::lock_once(s.url(cert + "&tls_key=" + path));
        INFO("shown: " << o.shown);
        CHECK(o.code == static_cast<int>(distlock::errc::invalid_argument));
        CHECK(o.shown.find("tls_key") != std::string::npos);
        CHECK(o.shown.find(password) == std::string::npos);
        CHECK(o.shown.find("PRIVATE KEY") == std::string::npos);
        CHECK(o.ms < 1000);
    }
    check_refused(s.url("&tls_ca=" + certs()("missing.crt")), distlock::errc::invalid_argument, "tls_ca");
}

TEST_CASE("tls_* parameters without TLS are refused, and rediss:// with tls=false (no silent plaintext)",
          "[redis][tls]") {
    for (const std::string url : {"redis://127.0.0.1:1?tls_ca=/x", "redis://127.0.0.1:1?tls_insecure=true",
                                  "redis-cluster://127.0.0.1:1?tls_cert=/x", "redlock://127.0.0.1:1?tls_server_name=x",
                                  "rediss://127.0.0.1:1?tls_key=/x", "rediss://127.0.0.1:1?tls=false",
                                  "rediss://127.0.0.1:1?tls_server_name=a/b", "rediss://127.0.0.1:1?tls_server_name=-x",
                                  "redis-sentinel://127.0.0.1:1/m?tls=true&sentinel_tls_server_name=a/b",
                                  "redis-sentinel://127.0.0.1:1/m?sentinel_tls_ca=/x"}) {
        INFO("url: " << url);
        // Known parameters, refused for what they say (not "unknown parameter").
        CHECK_THROWS_AS(distlock::connect(url), distlock::invalid_argument_error);
        CHECK_THROWS_WITH(distlock::connect(url), Catch::Contains("tls=true") || Catch::Contains("needs tls_cert") ||
                                                      Catch::Contains("disagree") ||
                                                      Catch::Contains("_server_name must be"));
    }
}

TEST_CASE(
    "redis-sentinel:// over TLS: the sentinels and the master they name; sentinel_tls_* apply to the "
    "sentinels only",
    "[redis][tls][sentinel]") {
    tls_server master("server");
    tls_sentinel sentinel(master);
    const auto ca = "&tls_ca=" + certs()("ca.crt");
    CHECK(distlock::test::lock_once(sentinel.url("&tls=true" + ca)).shown == "");
    // The sentinels verified against another CA: refused there, before any master is asked.
    check_refused(sentinel.url("&tls=true" + ca + "&sentinel_tls_ca=" + certs()("other-ca.crt")),
                  distlock::errc::access_denied, "verified against sentinel_tls_ca=");
    // The data nodes verified against another CA: the sentinel answers, the master is refused.
    check_refused(sentinel.url("&tls=true&tls_ca=" + certs()("other-ca.crt") + "&sentinel_tls_ca=" + certs()("ca.crt")),
                  distlock::errc::access_denied, "verified against tls_ca=");
    // Plaintext to a TLS-only sentinel: typed, quick.
    const auto o = distlock::test::lock_once(sentinel.url("&tls=true" + ca + "&sentinel_tls=false"));
    CHECK(o.code == static_cast<int>(distlock::errc::unavailable));
    CHECK(o.shown.find(password) == std::string::npos);
}

TEST_CASE("tls_insecure=true connects to a certificate no CA vouches for", "[redis][tls]") {
    tls_server s("wrong-name");
    CHECK(distlock::test::lock_once("rediss://:" + password + "@" + s.address() + "?tls_insecure=true").shown == "");
}

TEST_CASE("one TLS handshake per pooled connection, not one per acquire", "[redis][tls][count]") {
    tls_server s("server");
    auto p = distlock::connect(s.url());
    auto m = p.mutex(unique_name("count"));
    REQUIRE(m.try_lock());
    m.unlock();
    const auto before = s.connections();
    for (int i = 0; i < 50; ++i) {
        REQUIRE(m.try_lock());
        m.unlock();
    }
    // The raw client's own connection for INFO is the one new connection.
    CHECK(s.connections() - before == 1);
}

TEST_CASE("a TLS write to a server that closed never raises SIGPIPE: a typed error instead", "[redis][tls][sigpipe]") {
    tls_server s("server");
    // In a program of its own: SIGPIPE at its default disposition (death).
    const auto r = distlock::test::run_command(distlock::test::exe_dir() + "/distlock-redis-sigpipe-helper tls " +
                                               std::to_string(s.tls_port) + " " + certs()("ca.crt") + " " + password);
    INFO("helper printed: " << r.out);
    CHECK(r.status == 0);
    CHECK(r.out.find("typed error:") != std::string::npos);
}

// ---- the TLS servers of integration/backends.sh (redis-tls), when they are up --------------

TEST_CASE(
    "the redis-tls servers: good URLs lock (a cluster over TLS through its slot map), every must-fail URL "
    "fails typed, quick and secret-free",
    "[redis][tls][servers]") {
    const auto pw = distlock::test::env("DISTLOCK_TEST_REDIS_TLS_PW");
    if (distlock::test::env("DISTLOCK_TEST_REDIS_TLS_URL").empty() || pw.empty()) {
        WARN("not applicable: DISTLOCK_TEST_REDIS_TLS_URL is not set (integration/backends.sh up redis-tls)");
        return;
    }
    for (const char* good : {"DISTLOCK_TEST_REDIS_TLS_URL", "DISTLOCK_TEST_REDIS_TLS_REENTRANT_URL",
                             "DISTLOCK_TEST_REDIS_TLS_CLIENT_CERT_URL", "DISTLOCK_TEST_REDIS_CLUSTER_TLS_URL"}) {
        const auto url = distlock::test::env(good);
        if (url.empty()) {
            WARN("not applicable: " << good << " is not set");
            continue;
        }
        INFO(good);
        auto p = distlock::connect(url);
        for (int i = 0; i < 12; ++i) {  // names over several hash slots: every node of a cluster
            auto m = p.mutex(unique_name("tls-env"));
            CHECK(m.try_lock());
            m.unlock();
        }
    }
    const std::pair<const char*, distlock::errc> must_fail[] = {
        {"DISTLOCK_TEST_REDIS_TLS_EXPIRED_URL_MUST_FAIL", distlock::errc::access_denied},
        {"DISTLOCK_TEST_REDIS_TLS_WRONG_NAME_URL_MUST_FAIL", distlock::errc::access_denied},
        // A plaintext Redis reads the ClientHello as the start of an inline
        // command and waits: connect_timeout, then unavailable.
        {"DISTLOCK_TEST_REDIS_TLS_ON_PLAIN_URL_MUST_FAIL", distlock::errc::unavailable},
        {"DISTLOCK_TEST_REDIS_PLAIN_ON_TLS_URL_MUST_FAIL", distlock::errc::unavailable}};
    for (const auto& [name, code] : must_fail) {
        const auto url = distlock::test::env(name);
        if (url.empty()) {
            WARN("not applicable: " << name << " is not set");
            continue;
        }
        INFO(name);
        const auto o = distlock::test::lock_once(url);
        INFO("shown: " << o.shown);
        CHECK(o.code == static_cast<int>(code));
        CHECK(o.ms < 2500);
        CHECK(o.shown.find(pw) == std::string::npos);
    }
    // The client-certificate server without the certificate.
    auto no_cert = distlock::test::env("DISTLOCK_TEST_REDIS_TLS_CLIENT_CERT_URL");
    if (const auto at = no_cert.find("&tls_cert="); at != std::string::npos) {
        no_cert = no_cert.substr(0, at) + "&lease=2s";
        const auto o = distlock::test::lock_once(no_cert);
        INFO("shown: " << o.shown);
        CHECK(o.code == static_cast<int>(distlock::errc::access_denied));
        CHECK(o.shown.find(pw) == std::string::npos);
    }
}
