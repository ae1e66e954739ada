// The TLS parameters every network backend shares (include/distlock/spi/tls.hpp):
// parsing, the native aliases and their conflicts, the files checked at connect
// (named, never quoted), and the warning tls_insecure logs on every connect.
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <mutex>
#include <string>
#include <vector>

#include "distlock/distlock.hpp"
#include "distlock/spi/backend.hpp"
#include "distlock/spi/tls.hpp"

namespace {

using distlock::spi::take_tls;
using distlock::spi::url;

distlock::spi::tls_params parse(const std::string& text, const distlock::spi::tls_aliases& aliases = {}) {
    auto u = url::parse(text);
    auto p = take_tls(u, "unit", aliases);
    u.expect_all_taken();
    return p;
}

const distlock::spi::tls_aliases pg_like{"sslrootcert", "sslcert", "sslkey", ""};

// A scratch directory of this test, removed at the end.
struct scratch {
    std::string dir = "/tmp/distlock-tls-unit-" + distlock::spi::random_token().substr(0, 8);
    scratch() { ::mkdir(dir.c_str(), 0700); }
    ~scratch() { (void)std::system(("rm -rf " + dir).c_str()); }
    std::string file(const std::string& name, const std::string& content) const {
        const std::string path = dir + "/" + name;
        std::ofstream(path) << content;
        return path;
    }
};

}  // namespace

TEST_CASE("no TLS parameter means no TLS, verification on", "[tls]") {
    const auto p = parse("unit://h");
    CHECK_FALSE(p.enabled);
    CHECK(p.verify);
    CHECK_FALSE(p.any());
    CHECK_FALSE(parse("unit://h?tls=false").any());
}

TEST_CASE("every TLS parameter is read under its own name", "[tls]") {
    const auto p =
        parse("unit://h?tls=true&tls_ca=/c.pem&tls_cert=/cert.pem&tls_key=/k.pem&tls_server_name=db.example");
    CHECK(p.enabled);
    CHECK(p.verify);
    CHECK(p.ca.path == "/c.pem");
    CHECK(p.ca.param == "tls_ca");
    CHECK(p.cert.path == "/cert.pem");
    CHECK(p.key.path == "/k.pem");
    CHECK(p.key.param == "tls_key");
    CHECK(p.server_name == "db.example");
    CHECK_FALSE(parse("unit://h?tls=true&tls_insecure=true").verify);
}

TEST_CASE("tls_* parameters without tls=true are refused", "[tls]") {
    for (const char* q :
         {"tls_ca=/c", "tls_cert=/c", "tls_key=/k", "tls_server_name=n", "tls_insecure=true", "tls=false&tls_ca=/c"}) {
        INFO(q);
        CHECK_THROWS_AS(parse(std::string("unit://h?") + q), distlock::invalid_argument_error);
    }
    CHECK_THROWS_AS(parse("unit://h?tls=maybe"), distlock::invalid_argument_error);
    CHECK_THROWS_AS(parse("unit://h?tls=true&tls_ca="), distlock::invalid_argument_error);
}

TEST_CASE("a native alias stands for its tls_* parameter, without tls=true", "[tls]") {
    const auto p = parse("unit://h?sslrootcert=/c.pem&sslkey=/k.pem", pg_like);
    CHECK_FALSE(p.enabled);  // the backend's own mode parameter decides
    CHECK(p.ca.path == "/c.pem");
    CHECK(p.ca.param == "sslrootcert");
    CHECK(p.key.param == "sslkey");
    // Both given and equal: one setting.
    CHECK(parse("unit://h?tls=true&tls_ca=/c.pem&sslrootcert=/c.pem", pg_like).ca.path == "/c.pem");
    // An alias the backend did not declare is left for expect_all_taken() to refuse.
    CHECK_THROWS_AS(parse("unit://h?sslrootcert=/c.pem"), distlock::invalid_argument_error);
}

TEST_CASE("a tls_* parameter and its alias that disagree are refused, naming both", "[tls]") {
    for (const char* q : {"tls_ca=/a&sslrootcert=/b", "tls_cert=/a&sslcert=/b", "tls_key=/a&sslkey=/b"}) {
        INFO(q);
        try {
            parse(std::string("unit://h?tls=true&") + q, pg_like);
            FAIL("accepted");
        } catch (const distlock::invalid_argument_error& e) {
            const std::string what = e.what();
            CHECK(what.find("disagree") != std::string::npos);
            CHECK(what.find("ssl") != std::string::npos);
        }
    }
}

TEST_CASE("tls files are checked readable at connect, named by their parameter, never quoted", "[tls]") {
    scratch s;
    const std::string secret = "-----BEGIN PRIVATE KEY-----\nZq7-key-content-never-shown\n";
    const auto key = s.file("key.pem", secret);
    auto check = [](const std::string& text, const distlock::spi::tls_aliases& aliases = {}) {
        auto u = url::parse(text);
        distlock::spi::check_tls_files(take_tls(u, "unit", aliases), "unit");
    };
    const auto cert = s.file("cert.pem", "-----BEGIN CERTIFICATE-----\n");
    CHECK_NOTHROW(check("unit://h?tls=true&tls_cert=" + cert + "&tls_key=" + key));

    auto refused = [&](const std::string& text, const std::string& param,
                       const distlock::spi::tls_aliases& aliases = {}) {
        INFO(text);
        try {
            check(text, aliases);
            FAIL("accepted");
        } catch (const distlock::invalid_argument_error& e) {
            const std::string what = e.what();
            CHECK(what.find(param + ":") != std::string::npos);
            CHECK(what.find("Zq7") == std::string::npos);
            CHECK(what.find("BEGIN") == std::string::npos);
        }
    };
    refused("unit://h?tls=true&tls_cert=" + cert + "&tls_key=" + s.dir + "/missing.pem", "tls_key");
    refused("unit://h?tls=true&tls_ca=" + s.dir, "tls_ca");                     // a directory
    refused("unit://h?sslcert=" + s.dir + "/missing.pem", "sslcert", pg_like);  // named as written
    // A FIFO would block a reader forever: refused at once, not opened for reading.
    const std::string fifo = s.dir + "/fifo";
    REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
    refused("unit://h?tls=true&tls_cert=" + cert + "&tls_key=" + fifo, "tls_key");
    // Unreadable by permission (not testable as root, who reads anything).
    if (::geteuid() != 0) {
        ::chmod(key.c_str(), 0);
        refused("unit://h?tls=true&tls_cert=" + cert + "&tls_key=" + key, "tls_key");
    }
    // A key without the certificate it belongs to, in either syntax.
    CHECK_THROWS_WITH(check("unit://h?tls=true&tls_key=" + key),
                      Catch::Contains("tls_key: a client key needs tls_cert"));
    CHECK_THROWS_WITH(check("unit://h?sslkey=" + key, pg_like), Catch::Contains("sslkey: a client key needs sslcert"));
    // A key under a passphrase: the TLS libraries would prompt on the terminal.
    // PKCS#8 and the traditional form, in the key file or in the certificate
    // file that holds the key.
    const auto pkcs8 = s.file("enc8.pem", "-----BEGIN ENCRYPTED PRIVATE KEY-----\nZq7\n");
    const auto traditional =
        s.file("enc.pem", "-----BEGIN EC PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\nDEK-Info: AES-128-CBC,00\nZq7\n");
    refused("unit://h?tls=true&tls_cert=" + cert + "&tls_key=" + pkcs8, "tls_key");
    refused("unit://h?tls=true&tls_cert=" + cert + "&tls_key=" + traditional, "tls_key");
    refused("unit://h?tls=true&tls_cert=" + traditional, "tls_cert");
}

TEST_CASE("tls_server_name is a host name or an IP address, nothing else", "[tls]") {
    for (const char* name : {"db.example", "127.0.0.1", "::1", "a_b-c.example"})
        CHECK(parse(std::string("unit://h?tls=true&tls_server_name=") + name).server_name == name);
    // As written in the URL (percent-encoded): a/b, -x, .x, "a b", h:1, [::1], x?y, a@b.
    for (const char* name : {"a%2Fb", "-x", ".x", "a%20b", "h%3A1", "%5B%3A%3A1%5D", "x%3Fy", "a%40b"}) {
        INFO(name);
        CHECK_THROWS_AS(parse(std::string("unit://h?tls=true&tls_server_name=") + name),
                        distlock::invalid_argument_error);
    }
}

TEST_CASE("tls_start: another prefix, a starting point, and what turns TLS on", "[tls]") {
    using distlock::spi::tls_start;
    // rediss:// starts enabled: tls_ca alone is fine.
    tls_start on;
    on.base.enabled = true;
    on.enabled_by = "rediss://";
    auto u = url::parse("unit://h?tls_ca=/c");
    CHECK(take_tls(u, "unit", {}, on).ca.path == "/c");
    // Off, a tls_* parameter names what turns TLS on.
    u = url::parse("unit://h?tls_ca=/c");
    tls_start off;
    off.enabled_by = "rediss://";
    CHECK_THROWS_WITH(take_tls(u, "unit", {}, off), Catch::Contains("need tls=true (or rediss://)"));
    // The sentinels' parameters start from the data nodes' settings; their own override them.
    tls_start sentinel;
    sentinel.prefix = "sentinel_tls";
    sentinel.insecure = false;
    sentinel.base.enabled = true;
    sentinel.base.ca = {"/data-ca", "tls_ca"};
    sentinel.base.cert = {"/data-cert", "tls_cert"};
    u = url::parse("unit://h?sentinel_tls_ca=/sentinel-ca");
    const auto s = take_tls(u, "unit", {}, sentinel);
    CHECK(s.ca.path == "/sentinel-ca");
    CHECK(s.ca.param == "sentinel_tls_ca");
    CHECK(s.cert.path == "/data-cert");
    // sentinel_tls=false: nothing inherited; and with a parameter of its own, refused.
    u = url::parse("unit://h?sentinel_tls=false");
    CHECK_FALSE(take_tls(u, "unit", {}, sentinel).any());
    u = url::parse("unit://h?sentinel_tls=false&sentinel_tls_ca=/x");
    CHECK_THROWS_AS(take_tls(u, "unit", {}, sentinel), distlock::invalid_argument_error);
    // No <prefix>_insecure when the backend does not read it: left for expect_all_taken().
    u = url::parse("unit://h?sentinel_tls_insecure=true");
    (void)take_tls(u, "unit", {}, sentinel);
    CHECK_THROWS_AS(u.expect_all_taken(), distlock::invalid_argument_error);
}

TEST_CASE("tls_asked and tls_insecure_requested read without taking", "[tls]") {
    auto u = url::parse("unit://h?tls=true&tls_insecure=yes");
    CHECK(distlock::spi::tls_asked(u));
    CHECK(distlock::spi::tls_insecure_requested(u));
    CHECK(take_tls(u, "unit").verify == false);  // still there for the backend
    CHECK_FALSE(distlock::spi::tls_asked(url::parse("unit://h?tls=false")));
    CHECK(distlock::spi::tls_asked(url::parse("unit://h?tls_ca=/c")));
    CHECK_FALSE(distlock::spi::tls_insecure_requested(url::parse("unit://h?tls=true&tls_insecure=perhaps")));
}

namespace {

// A backend that takes the TLS parameters and locks nothing.
class tls_only_backend final : public distlock::spi::backend {
public:
    std::string_view name() const noexcept override { return "unit-tls"; }
    const distlock::capabilities& caps() const noexcept override { return caps_; }
    std::unique_ptr<distlock::spi::lock_handle> make_lock(const distlock::spi::lock_request&) override {
        distlock::throw_error(distlock::errc::unsupported, "unit-tls", "no locks");
    }

private:
    distlock::capabilities caps_;
};

std::vector<std::string> warnings_of_connect(const std::string& query) {
    static const bool registered = [] {
        distlock::register_backend("unit-tls", [](url& u) -> std::shared_ptr<distlock::spi::backend> {
            (void)take_tls(u, "unit-tls");
            return std::make_shared<tls_only_backend>();
        });
        return true;
    }();
    REQUIRE(registered);
    auto seen = std::make_shared<std::vector<std::string>>();
    distlock::provider_options o;
    o.log = [seen](const distlock::log_record& r) {
        if (r.level == distlock::log_level::warning) seen->emplace_back(r.message);
    };
    (void)distlock::connect("unit-tls://h" + query, o);
    return *seen;
}

}  // namespace

TEST_CASE("tls_insecure says so through the log hook on every connect", "[tls]") {
    for (int i = 0; i < 2; ++i) {
        const auto w = warnings_of_connect("?tls=true&tls_insecure=true");
        REQUIRE(w.size() == 1);
        CHECK(w[0].find("tls_insecure") != std::string::npos);
        CHECK(w[0].find("not verified") != std::string::npos);
    }
    CHECK(warnings_of_connect("?tls=true").empty());
    CHECK(warnings_of_connect("?tls=true&tls_insecure=false").empty());
}
