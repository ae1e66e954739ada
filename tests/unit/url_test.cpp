#include <catch2/catch.hpp>

#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include "distlock/distlock.hpp"
#include "distlock/spi/url.hpp"
#include "support.hpp"

using distlock::spi::url;

TEST_CASE("a single-host URL is parsed into its parts", "[url]") {
    auto u = url::parse("redis://alice:s%40cret@127.0.0.1:6380/2?strategy=reentrant&lease=2s");
    CHECK(u.scheme() == "redis");
    CHECK(u.user() == "alice");
    CHECK(u.password() == "s@cret");
    REQUIRE(u.hosts().size() == 1);
    CHECK(u.hosts()[0].host == "127.0.0.1");
    CHECK(u.hosts()[0].port == 6380);
    CHECK(u.path() == "/2");
    CHECK(u.take("strategy") == "reentrant");
    CHECK(u.take_duration("lease") == std::chrono::milliseconds(2000));
    CHECK_NOTHROW(u.expect_all_taken());
    CHECK(u.redacted().find("s%40cret") == std::string::npos);
    CHECK(u.redacted().find("alice:***@") != std::string::npos);
}

TEST_CASE("a host list is split and each host parsed", "[url]") {
    auto u = url::parse("zk://h1:2181,h2,[::1]:2183/base/path?session_timeout=2s");
    REQUIRE(u.hosts().size() == 3);
    CHECK(u.hosts()[0].host == "h1");
    CHECK(u.hosts()[0].port == 2181);
    CHECK(u.hosts()[1].host == "h2");
    CHECK(u.hosts()[1].port == 0);
    CHECK(u.hosts()[2].host == "::1");
    CHECK(u.hosts()[2].port == 2183);
    CHECK(u.path() == "/base/path");
    auto with_defaults = u.hosts_or_throw(2181);
    CHECK(with_defaults[1].port == 2181);
}

TEST_CASE("file and memory URLs have no host", "[url]") {
    auto f = url::parse("file:///tmp/locks%20dir?sync=true");
    CHECK(f.hosts().empty());
    CHECK(f.path() == "/tmp/locks dir");
    CHECK(f.take_bool("sync") == true);
    auto m = url::parse("memory://");
    CHECK(m.scheme() == "memory");
    CHECK(m.hosts().empty());
}

TEST_CASE("malformed URLs and parameters are invalid arguments", "[url]") {
    using distlock::invalid_argument_error;
    CHECK_THROWS_AS(url::parse("no-scheme"), invalid_argument_error);
    CHECK_THROWS_AS(url::parse("://x"), invalid_argument_error);
    CHECK_THROWS_AS(url::parse("redis://h:99999"), invalid_argument_error);
    CHECK_THROWS_AS(url::parse("redis://h:abc"), invalid_argument_error);
    CHECK_THROWS_AS(url::parse("redlock://h1,,h2"), invalid_argument_error);
    CHECK_THROWS_AS(url::parse("redis://h?a=1&a=2"), invalid_argument_error);
    auto u = url::parse("redis://h?n=12x&b=maybe&left=1");
    CHECK_THROWS_AS(u.take_int("n", 0, 100), invalid_argument_error);
    CHECK_THROWS_AS(u.take_bool("b"), invalid_argument_error);
    CHECK_THROWS_AS(u.expect_all_taken(), invalid_argument_error);
    auto t = url::parse("consul://h:8500?token=abc&ttl=10s");
    CHECK(t.redacted().find("abc") == std::string::npos);
}

TEST_CASE("durations parse with units and reject garbage", "[duration]") {
    using namespace std::chrono_literals;
    CHECK(distlock::parse_duration("250ms") == 250ms);
    CHECK(distlock::parse_duration("2s") == 2000ms);
    CHECK(distlock::parse_duration("1.5s") == 1500ms);
    CHECK(distlock::parse_duration("3") == 3000ms);
    CHECK(distlock::parse_duration("2m") == 120000ms);
    CHECK(distlock::parse_duration("1h") == 3600000ms);
    CHECK(distlock::parse_duration("1m30s") == 90000ms);
    CHECK(distlock::parse_duration("1h2m3s") == 3723000ms);
    CHECK(distlock::parse_duration("2s500ms") == 2500ms);
    CHECK(distlock::parse_duration("0") == 0ms);
    for (const char* bad : {"", "s", "-1s", "1x", "1.2.3s", "ms", " 1s", "1s1m", "1s1s", "1m30", "1s 2ms"})
        CHECK_THROWS_AS(distlock::parse_duration(bad), distlock::invalid_argument_error);
}

TEST_CASE("connect rejects unknown schemes and parameters", "[connect]") {
    CHECK_THROWS_AS(distlock::connect("nosuch://x"), distlock::invalid_argument_error);
    CHECK_THROWS_AS(distlock::connect("memory://?bogus=1"), distlock::invalid_argument_error);
    CHECK_THROWS_AS(distlock::connect("memory://?lease=0s"), distlock::invalid_argument_error);
    CHECK_THROWS_AS(distlock::connect("file://"), distlock::invalid_argument_error);
    CHECK_THROWS_AS(distlock::connect("file://otherhost/tmp/x"), distlock::invalid_argument_error);
    auto schemes = distlock::schemes();
    CHECK(std::find(schemes.begin(), schemes.end(), "memory") != schemes.end());
    CHECK(std::find(schemes.begin(), schemes.end(), "file") != schemes.end());
}

// libcurl resolves "." and ".." in a URL's path unless told not to: then
// consul://h/a/../.. reached the Consul backend as the default prefix, and
// etcd://h/x/../y as the prefix "y", with nothing to see for the backend.
TEST_CASE("dot segments in a URL's path reach the backend as written", "[url]") {
    CHECK(url::parse("consul://h/a/../..").path() == "/a/../..");
    CHECK(url::parse("etcd://h:2379/x/../y").path() == "/x/../y");
    CHECK(url::parse("zk://h1,h2/a/./b").path() == "/a/./b");
    CHECK(url::parse("file:///var/lock/app/../../etc").path() == "/var/lock/app/../../etc");
    CHECK(url::parse("file:///a/%2e%2e/b").path() == "/a/../b");  // decoded: a backend sees ".." either way
    CHECK(url::parse("memory://space/..").path() == "/..");
    CHECK(url::parse("mysql://u:p@h/db/..").path() == "/db/..");
    CHECK(url::parse("redis://h/../0").path() == "/../0");
    CHECK(url::parse("redis://h/0?prefix=a/../b").take("prefix") == "a/../b");  // the query was never touched
}

// Each scheme's decision for a path with "." or ".." segments, checked at
// connect (before any server is reached: the hosts below listen nowhere):
// refused with invalid_argument_error, never resolved into another path.
TEST_CASE("every scheme refuses a URL path with dot segments at connect", "[url][connect]") {
    const auto dir = std::filesystem::temp_directory_path() / distlock::test::unique_name("dots");
    const std::string d = dir.string();
    struct attempt {
        const char* scheme;
        std::string url;
    };
    const std::vector<attempt> attempts = {
        {"memory", "memory://space/a/.."},
        {"memory", "memory://space/."},
        {"file", "file://" + d + "/a/../b"},
        {"file", "file://" + d + "/./b"},
        {"file", "file://" + d + "/b/.."},
        {"file", "file://" + d + "/%2e%2e/b"},
        {"zk", "zk://127.0.0.1:1/a/../b"},
        {"zk", "zk://127.0.0.1:1/a/."},
        {"consul", "consul://127.0.0.1:1/a/../.."},
        {"consul", "consul://127.0.0.1:1/a/./b"},
        {"etcd", "etcd://127.0.0.1:1/x/../y"},
        {"etcd", "etcd://127.0.0.1:1/x/.."},
        {"mysql", "mysql://u:p@127.0.0.1:1/.."},
        {"mysql", "mysql://u:p@127.0.0.1:1/."},
        {"mysql", "mysql://u:p@127.0.0.1:1/a/../b"},
        {"postgres", "postgres://u:p@127.0.0.1:1/.."},
        {"postgres", "postgres://u:p@127.0.0.1:1/."},
        {"postgres", "postgres://u:p@127.0.0.1:1/a/../b"},
        {"redis", "redis://127.0.0.1:1/a/../0"},
        {"redis-sentinel", "redis-sentinel://127.0.0.1:1/master/../0"},
        {"redis-cluster", "redis-cluster://127.0.0.1:1/a/.."},
        {"redlock", "redlock://127.0.0.1:1,127.0.0.1:2,127.0.0.1:3/a/../0"},
    };
    const auto schemes = distlock::schemes();
    for (const auto& a : attempts) {
        if (std::find(schemes.begin(), schemes.end(), a.scheme) == schemes.end()) {
            WARN(a.scheme << ":// is not built in: not applicable");
            continue;
        }
        INFO(a.url);
        CHECK_THROWS_AS(distlock::connect(a.url), distlock::invalid_argument_error);
    }
    // file:// resolved nothing on the disk either.
    CHECK_FALSE(std::filesystem::exists(dir / "b"));
    std::error_code ignored;
    std::filesystem::remove_all(dir, ignored);
}
