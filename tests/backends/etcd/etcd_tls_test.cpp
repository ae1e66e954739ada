// etcd:// over https on the etcd-tls servers of integration/backends.sh
// (integration/servers/etcd-tls.sh): the URLs it exports, and every way a
// handshake can fail (issue 24, item 6), each typed (the errors of
// docs/backends/etcd.md, "TLS"), within 2 s, with no key or password shown.
// The conformance suite runs over the good URL as conformance.etcd-tls.
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>

#include "distlock/distlock.hpp"
#include "support.hpp"

namespace {

using distlock::errc;

std::string must(const char* name) {
    const auto v = distlock::test::env(name);
    INFO(name << " is not set: integration/backends.sh up etcd-tls");
    REQUIRE(!v.empty());
    return v;
}

// The URL up to its query.
std::string base_of(const std::string& url) { return url.substr(0, url.find('?')); }

// `url` fails with `code` (or `alternative`, when given), quickly, and shows
// neither a private key nor a password; what it showed.
std::string refused(const std::string& url, errc code, std::optional<errc> alternative = std::nullopt) {
    INFO(url);
    const auto o = distlock::test::lock_once(url + "&connect_timeout=5s");
    INFO("shown: " << o.shown);
    CHECK((o.code == static_cast<int>(code) || (alternative && o.code == static_cast<int>(*alternative))));
    CHECK(o.ms < 2000);
    CHECK(o.shown.find("PRIVATE KEY") == std::string::npos);
    CHECK(o.shown.find("secret") == std::string::npos);
    return o.shown;
}

void locks(const std::string& url) {
    INFO(url);
    const auto o = distlock::test::lock_once(url);
    CHECK(o.shown == "");
}

}  // namespace

TEST_CASE("etcd over https: the good URLs lock; every handshake failure is typed, quick and secret-free",
          "[etcd][tls]") {
    const auto url = must("DISTLOCK_TEST_ETCD_TLS_URL");
    const auto dir = must("DISTLOCK_TEST_TLS_DIR"), ca = must("DISTLOCK_TEST_TLS_CA");
    const auto base = base_of(url);
    locks(url);
    locks(base + "?tls=true&tls_ca=" + ca);
    // A password in the URL must not show in any failure below (etcd without
    // auth ignores it).
    const auto with_pw = [](const std::string& b) { return "etcd://root:secret-pw@" + b.substr(7); };
    SECTION("wrong CA") {
        const auto shown = refused(with_pw(base) + "?tls=true&tls_ca=" + dir + "/other-ca.crt", errc::access_denied);
        CHECK(shown.find("secret-pw") == std::string::npos);
    }
    SECTION("host name mismatch; tls_server_name names the one to verify") {
        const auto wrong_name = base_of(must("DISTLOCK_TEST_ETCD_TLS_WRONG_NAME_URL_MUST_FAIL"));
        refused(wrong_name + "?tls=true&tls_ca=" + ca, errc::access_denied);
        locks(wrong_name + "?tls=true&tls_ca=" + ca + "&tls_server_name=wrong.example&lease=2s");
        refused(base + "?tls=true&tls_ca=" + ca + "&tls_server_name=wrong.example", errc::access_denied);
        locks(base + "?tls=true&tls_ca=" + ca + "&tls_server_name=localhost&lease=2s");
        refused(base + "?tls=true&tls_ca=" + ca + "&tls_server_name=a/b", errc::invalid_argument);
    }
    SECTION("expired certificate") {
        refused(base_of(must("DISTLOCK_TEST_ETCD_TLS_EXPIRED_URL_MUST_FAIL")) + "?tls=true&tls_ca=" + ca,
                errc::access_denied);
    }
    SECTION("plaintext server where TLS is required: nothing sent in clear, no fallback") {
        refused(with_pw(base_of(must("DISTLOCK_TEST_ETCD_TLS_ON_PLAIN_URL_MUST_FAIL"))) + "?tls=true&tls_ca=" + ca,
                errc::unavailable);
    }
    SECTION("TLS server reached without TLS") {
        refused(base_of(must("DISTLOCK_TEST_ETCD_PLAIN_ON_TLS_URL_MUST_FAIL")) + "?lease=2s", errc::unavailable);
    }
    SECTION("client certificate: served with one, refused without one or with one of another CA") {
        const auto cert_url = must("DISTLOCK_TEST_ETCD_TLS_CLIENT_CERT_URL");
        locks(cert_url);
        const auto cert_base = base_of(cert_url) + "?tls=true&tls_ca=" + ca;
        // Under TLS 1.3 the server judges the client's certificate after the
        // client has finished its handshake: its refusal is an alert on the
        // first read (access_denied_error), unless the connection is reset
        // before the alert is read (unavailable_error). Typed either way.
        refused(cert_base, errc::access_denied, errc::unavailable);
        refused(cert_base + "&tls_cert=" + dir + "/other-client.crt&tls_key=" + dir + "/other-client.key",
                errc::access_denied, errc::unavailable);
    }
    SECTION("unreadable or unusable key file") {
        const auto with_cert = base + "?tls=true&tls_ca=" + ca + "&tls_cert=" + dir + "/client.crt";
        CHECK(refused(with_cert + "&tls_key=" + dir, errc::invalid_argument).find("tls_key") != std::string::npos);
        CHECK(refused(with_cert + "&tls_key=" + dir + "/none.key", errc::invalid_argument).find("tls_key") !=
              std::string::npos);
        // A key that is not the certificate's.
        refused(with_cert + "&tls_key=" + dir + "/other-client.key", errc::invalid_argument);
        // The right key under a passphrase: refused before libcurl reads it
        // (OpenSSL would ask for the passphrase on the terminal).
        const auto encrypted = "/tmp/distlock-etcd-tls-enc-" + distlock::test::unique_name("k").substr(2) + ".key";
        REQUIRE(std::system(("openssl pkcs8 -topk8 -in " + dir + "/client.key -passout pass:secret -out " + encrypted +
                             " 2>/dev/null")
                                .c_str()) == 0);
        const auto shown = refused(with_cert + "&tls_key=" + encrypted, errc::invalid_argument);
        CHECK(shown.find("encrypted") != std::string::npos);
        std::remove(encrypted.c_str());
    }
    SECTION("tls_insecure connects to a certificate no CA vouches for, and only with it") {
        const auto wrong_name = base_of(must("DISTLOCK_TEST_ETCD_TLS_WRONG_NAME_URL_MUST_FAIL"));
        locks(wrong_name + "?tls=true&tls_insecure=true");
        refused(wrong_name + "?tls=true", errc::access_denied);
    }
}
