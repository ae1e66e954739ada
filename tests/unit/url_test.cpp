#include <catch2/catch.hpp>

#include "distlock/distlock.hpp"
#include "distlock/spi/url.hpp"

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
