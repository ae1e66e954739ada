// No secret is ever printed: a generated corpus of URLs, malformed in every way
// the parser knows (and valid ones), over every scheme, with passwords holding
// '@ : / % #', percent-encoding and UTF-8, and secret parameters. Whatever
// distlock says about them (what() of every error, redacted(), provider::url())
// must not contain any piece of the password or of a secret parameter's value.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "distlock/distlock.hpp"
#include "distlock/spi/url.hpp"

namespace {

// Every piece of every password and secret value starts with this marker, so
// that a message showing any fragment of one (cut at a special character) is
// caught: no message may contain it.
constexpr const char* marker = "Zq7";

const std::vector<std::string>& passwords() {
    static const std::vector<std::string> list = {
        "Zq7plain",
        "Zq7a@Zq7b",                               // '@' unescaped
        "Zq7a:Zq7b",                               // ':'
        "Zq7a/Zq7b",                               // '/'
        "Zq7a#Zq7b",                               // '#'
        "Zq7a%Zq7b",                               // a lone '%'
        "Zq7a%40Zq7b%3AZq7c%2FZq7d%23Zq7e%25",     // every special character percent-encoded
        "Zq7a@Zq7b:Zq7c/Zq7d#Zq7e%Zq7f",           // all of them unescaped
        "Zq7%zz",                                   // a bad escape
        "Zq7\xc3\xa9t\xc3\xa9",                    // UTF-8
        "Zq7 sp Zq7ace",                            // a space
        "Zq7a@@Zq7b",
        "Zq7a/Zq7b@Zq7c",                           // '/' before an '@' in the password
        "Zq7a#Zq7b@Zq7c:Zq7d",
    };
    return list;
}

const std::vector<std::string>& schemes() {
    static const std::vector<std::string> list = {"redis",  "redlock", "mysql", "postgres", "zk",
                                                  "etcd",   "consul",  "file",  "memory",   "nosuch"};
    return list;
}

// URL templates: {s} scheme, {p} password. Each is malformed in one way (or
// valid, last group), so that every error path of the parser is taken.
const std::vector<std::string>& templates() {
    static const std::vector<std::string> list = {
        "{s}://user:{p}@host:99999",                   // port out of range
        "{s}://user:{p}@host:abc",                     // port not a number
        "{s}://user:{p}@host:0/x",                     // port 0
        "{s}://user:{p}@h1:1,,h2:2",                   // empty host in a list
        "{s}://user:{p}@h1:1,h2:99999",                // bad port in a list
        "{s}://user:{p}@h1:1,h2/x:2",                  // a path in a listed host
        "{s}://user:{p}@h:1/0#frag",                   // a fragment
        "{s}://user:{p}@h:1?a=1&a=2",                  // a parameter twice
        "{s}://user:{p}@h:1?=x",                       // an empty parameter name
        "{s}://user:{p}@h:1/0?prefix=a@b",             // '@' in a parameter
        "{s}://user:{p}@[::1:6379",                    // an unclosed IPv6 bracket
        "{s}://user:{p}@:6379",                        // no host
        "{s}://user:{p}@h ost:1",                      // a space in the host
        "{s}://user:{p}@h\x01:1",                      // a control character
        "{s}://user:{p}@",                             // nothing after the user info
        "{s}://:{p}@h:1,,",                            // no user, empty hosts
        "{s}:/user:{p}@h:1",                           // one slash
        "{s}:user:{p}@h:1",                            // no slashes
        "user:{p}@h:1",                                // no scheme at all
        "://user:{p}@h:1",                             // empty scheme
        "{s}://h:1?token={p}&token=x",                 // a secret parameter, given twice
        "{s}://h:1?password={p}#frag",                 // a secret parameter and a fragment
        "{s}://h:1?secret={p}&&=",                     // a secret parameter, then an empty name
        "{s}://h:1?tok%65n={p}&x=1&x=2",               // an encoded secret parameter name
        "{s}://h:99999?lease=2s&token={p}",            // a secret parameter after an error's cause
        "{s}://user:{p}@h:1/0?lease=2s",               // valid: must parse, redacted
        "{s}://user:{p}@h1:1,h2:2,h3:3/base",          // valid host list
        "{s}://h:1/0?token={p}&lease=2s",              // valid, secret parameter
    };
    return list;
}

std::string fill(std::string t, const std::string& scheme, const std::string& password) {
    for (auto at = t.find("{s}"); at != std::string::npos; at = t.find("{s}")) t.replace(at, 3, scheme);
    for (auto at = t.find("{p}"); at != std::string::npos; at = t.find("{p}")) t.replace(at, 3, password);
    return t;
}

}  // namespace

TEST_CASE("no URL error, redacted form or provider URL shows any piece of a password or secret", "[url][secrets]") {
    int parsed = 0, rejected = 0;
    for (const auto& scheme : schemes()) {
        for (const auto& password : passwords()) {
            for (const auto& t : templates()) {
                const auto text = fill(t, scheme, password);
                INFO("URL: " << distlock::spi::redact_url(text));
                const auto shown = distlock::spi::redact_url(text);
                CHECK(shown.find(marker) == std::string::npos);
                try {
                    auto u = distlock::spi::url::parse(text);
                    ++parsed;
                    CHECK(u.redacted().find(marker) == std::string::npos);
                    CHECK(u.redacted().find("x-distlock") == std::string::npos);
                    for (auto key : {"lease", "prefix", "a", "x"}) {
                        try {  // typed takes name the parameter; never a secret's value
                            (void)u.take_duration(key);
                        } catch (const distlock::error& e) {
                            CHECK(std::string(e.what()).find(marker) == std::string::npos);
                        }
                    }
                    for (auto key : {"token", "password", "secret"}) {
                        try {
                            (void)u.take_int(key, 0, 1);
                        } catch (const distlock::error& e) {
                            CHECK(std::string(e.what()).find(marker) == std::string::npos);
                        }
                    }
                } catch (const distlock::invalid_argument_error& e) {
                    ++rejected;
                    const std::string what = e.what();
                    CHECK(what.find(marker) == std::string::npos);
                    CHECK(what.find("x-distlock") == std::string::npos);  // the parser's internal scheme
                }
            }
        }
    }
    INFO(parsed << " parsed, " << rejected << " rejected");
    CHECK(parsed + rejected == static_cast<int>(schemes().size() * passwords().size() * templates().size()));
    CHECK(parsed > 100);    // the valid group (and more) parsed...
    CHECK(rejected > 2000);  // ...and the malformed ones were rejected, each with a message checked above
}

TEST_CASE("connect() errors show no secret either, whichever layer throws", "[url][secrets]") {
    // Errors of the core (a bad lease=, an unknown scheme or parameter) and of the
    // embedded backends' factories, before any network.
    const std::vector<std::string> urls = {
        "redis://user:Zq7a@Zq7b:Zq7c@127.0.0.1:1?lease=soon",
        "nosuch://user:Zq7a/Zq7b@h:1",
        "memory://user:Zq7a#Zq7b@space?bogus=1",
        "memory://space?token=Zq7x&bogus=1",
        "file://user:Zq7a@Zq7b@/tmp/x",
        "file:///tmp/x?sync=maybe&token=Zq7y",
        "redlock://u:Zq7p@h1:1,,h2:2",
        "etcd://u:Zq7p%40w@h:1?lease=-1s",
        "consul://h:1?token=Zq7t&lease=0s",
    };
    for (const auto& text : urls) {
        INFO(distlock::spi::redact_url(text));
        try {
            auto p = distlock::connect(text);
            CHECK(p.url().find(marker) == std::string::npos);
        } catch (const distlock::error& e) {
            CHECK(std::string(e.what()).find(marker) == std::string::npos);
        }
    }
}

TEST_CASE("redact_url hides the password and secret values, keeps the rest as written", "[url][secrets]") {
    using distlock::spi::redact_url;
    CHECK(redact_url("redis://alice:pw@h:6379/2?lease=2s") == "redis://alice:***@h:6379/2?lease=2s");
    CHECK(redact_url("redis://alice:p@w/x#y@h:1") == "redis://alice:***@h:1");
    CHECK(redact_url("redis://:pw@h") == "redis://:***@h");
    CHECK(redact_url("redis://alice@h") == "redis://alice@h");  // no password
    CHECK(redact_url("consul://h:8500/p?token=abc&ttl=10s") == "consul://h:8500/p?token=***&ttl=10s");
    CHECK(redact_url("etcd://h?password=a&b=2&secret=c#f") == "etcd://h?password=***&b=2&secret=***");  // to the next &: a value may hold #
    CHECK(redact_url("etcd://h?tls_key=/k.pem") == "etcd://h?tls_key=/k.pem");  // key paths are not secrets
    CHECK(redact_url("no-scheme:pw@host") == "no-scheme:***@host");
    CHECK(redact_url("redis://h?prefix=a@b") == "redis://h?prefix=a@b");  // no ':' before: nothing to hide
    CHECK(redact_url("redis://u:p@w?x@h:1") == "redis://u:***@h:1");     // '@' and '?' in the password
}

TEST_CASE("a password whose '/', '?' or '#' would move the host is refused, not misread", "[url][secrets]") {
    // libcurl would read "redis://u:12/pw@h" as host u, port 12, path /pw@h:
    // a connection to a piece of the password. It must be percent-encoded.
    for (const char* text : {"redis://u:12/Zq7pw@h:6379", "redis://u:a#Zq7b@h", "redis://h:1/0?prefix=a:Zq7@b",
                             "redis://u:p@Zq7w?x@h:1"}) {
        INFO(distlock::spi::redact_url(text));
        try {
            (void)distlock::spi::url::parse(text);
            FAIL("parsed");
        } catch (const distlock::invalid_argument_error& e) {
            CHECK(std::string(e.what()).find(marker) == std::string::npos);
            CHECK(std::string(e.what()).find("percent-encode") != std::string::npos);
        }
    }
    CHECK(distlock::spi::url::parse("redis://u:12%2Fpw@h:6379").password() == "12/pw");
    // Without a password, an '@' after the host belongs to the path or the query.
    CHECK(distlock::spi::url::parse("file:///var/lock/app@1").path() == "/var/lock/app@1");
    CHECK(distlock::spi::url::parse("redis://h/0?prefix=a@b").take("prefix") == "a@b");
}
