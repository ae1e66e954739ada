// No secret is ever printed: a generated corpus of URLs, malformed in every way
// the parser knows (and valid ones), over every scheme, with passwords holding
// '@ : / % #', percent-encoding and UTF-8, and secret parameters. Whatever
// distlock says about them (what() of every error, redacted(), provider::url())
// must not contain any piece of the password or of a secret parameter's value.
#include <catch2/catch.hpp>

#include <atomic>
#include <new>
#include <span>
#include <string>
#include <vector>

#include "distlock/distlock.hpp"
#include "distlock/spi/backend.hpp"
#include "distlock/spi/url.hpp"
#include "distlock/testing.hpp"
#include "support.hpp"

using namespace std::chrono_literals;

namespace {

// Every piece of every password and secret value starts with this marker, so
// that a message showing any fragment of one (cut at a special character) is
// caught: no message may contain it.
constexpr const char* marker = "Zq7";

const std::vector<std::string>& passwords() {
    static const std::vector<std::string> list = {
        "Zq7plain",
        "Zq7a@Zq7b",                            // '@' unescaped
        "Zq7a:Zq7b",                            // ':'
        "Zq7a/Zq7b",                            // '/'
        "Zq7a#Zq7b",                            // '#'
        "Zq7a%Zq7b",                            // a lone '%'
        "Zq7a%40Zq7b%3AZq7c%2FZq7d%23Zq7e%25",  // every special character percent-encoded
        "Zq7a@Zq7b:Zq7c/Zq7d#Zq7e%Zq7f",        // all of them unescaped
        "Zq7%zz",                               // a bad escape
        "Zq7\xc3\xa9t\xc3\xa9",                 // UTF-8
        "Zq7 sp Zq7ace",                        // a space
        "Zq7a@@Zq7b",
        "Zq7a/Zq7b@Zq7c",  // '/' before an '@' in the password
        "Zq7a#Zq7b@Zq7c:Zq7d",
        "Zq7\xff\xfe\x80",  // bytes that are not UTF-8
        "Zq7\xc3(Zq7\xe9",  // a broken UTF-8 sequence, a Latin-1 byte
        "Zq7%FF%C3%28",     // the same percent-encoded
    };
    return list;
}

const std::vector<std::string>& schemes() {
    static const std::vector<std::string> list = {"redis", "redlock", "mysql", "postgres", "zk",
                                                  "etcd",  "consul",  "file",  "memory",   "nosuch"};
    return list;
}

// URL templates: {s} scheme, {p} password. Each is malformed in one way (or
// valid, last group), so that every error path of the parser is taken.
const std::vector<std::string>& templates() {
    static const std::vector<std::string> list = {
        "{s}://user:{p}@host:99999",           // port out of range
        "{s}://user:{p}@host:abc",             // port not a number
        "{s}://user:{p}@host:0/x",             // port 0
        "{s}://user:{p}@h1:1,,h2:2",           // empty host in a list
        "{s}://user:{p}@h1:1,h2:99999",        // bad port in a list
        "{s}://user:{p}@h1:1,h2/x:2",          // a path in a listed host
        "{s}://user:{p}@h:1/0#frag",           // a fragment
        "{s}://user:{p}@h:1?a=1&a=2",          // a parameter twice
        "{s}://user:{p}@h:1?=x",               // an empty parameter name
        "{s}://user:{p}@h:1/0?prefix=a@b",     // '@' in a parameter
        "{s}://user:{p}@[::1:6379",            // an unclosed IPv6 bracket
        "{s}://user:{p}@:6379",                // no host
        "{s}://user:{p}@h ost:1",              // a space in the host
        "{s}://user:{p}@h\x01:1",              // a control character
        "{s}://user:{p}@",                     // nothing after the user info
        "{s}://:{p}@h:1,,",                    // no user, empty hosts
        "{s}:/user:{p}@h:1",                   // one slash
        "{s}:user:{p}@h:1",                    // no slashes
        "user:{p}@h:1",                        // no scheme at all
        "://user:{p}@h:1",                     // empty scheme
        "{s}://h:1?token={p}&token=x",         // a secret parameter, given twice
        "{s}://h:1?password={p}#frag",         // a secret parameter and a fragment
        "{s}://h:1?secret={p}&&=",             // a secret parameter, then an empty name
        "{s}://h:1?tok%65n={p}&x=1&x=2",       // an encoded secret parameter name
        "{s}://h:99999?lease=2s&token={p}",    // a secret parameter after an error's cause
        "{s}://user:{p}@h:1/0?lease=2s",       // valid: must parse, redacted
        "{s}://user:{p}@h1:1,h2:2,h3:3/base",  // valid host list
        "{s}://h:1/0?token={p}&lease=2s",      // valid, secret parameter
        "{s}://h:1/0?Token={p}&lease=2s",      // secret parameter names in any case
        "{s}://h:1/0?PASSWORD={p}",
        "{s}://h:1/0?Sentinel_Password={p}&x=1&x=2",
        "{s}://h:1/0?sEcReT={p}#frag",
        "{s}://h:1/0?TOK%45N={p}&lease=soon",  // encoded, upper case, then a bad value
    };
    return list;
}

// A password alone as the user info ("redis://PASSWORD@host", as Lettuce
// writes it): with no ':', no '/', '?' or '#' (which would make the '@' part of
// a path: then nothing in front of it is user info).
const std::vector<std::string>& user_alone_templates() {
    static const std::vector<std::string> list = {
        "{s}://{p}@host:6379/0?lease=2s",  // valid
        "{s}://{p}@h1:1,h2:2,h3:3/base",   // valid host list
        "{s}://{p}@host:99999",            // port out of range
        "{s}://{p}@h1:1,,h2:2",            // empty host in a list
        "{s}://{p}@h:1?a=1&a=2",           // a parameter twice
        "{s}://{p}@h:1?lease=soon",        // a bad value
        "{s}://{p}@h:1/0#frag",            // a fragment
        "{s}://{p}@",                      // nothing after it
        "{s}://{p}@h:1?bogus=1",           // unknown parameter (connect)
        "{s}://{p}@h:1/0?prefix=a@b",      // another '@', in the query
        "{s}://{p}@h:1/x@y?lease=soon",    // another '@', in the path
    };
    return list;
}

bool user_alone_password(const std::string& p) { return p.find_first_of(":/?#") == std::string::npos; }

std::string fill(std::string t, const std::string& scheme, const std::string& password) {
    for (auto at = t.find("{s}"); at != std::string::npos; at = t.find("{s}")) t.replace(at, 3, scheme);
    for (auto at = t.find("{p}"); at != std::string::npos; at = t.find("{p}")) t.replace(at, 3, password);
    return t;
}

}  // namespace

TEST_CASE("no URL error, redacted form or provider URL shows any piece of a password or secret", "[url][secrets]") {
    int parsed = 0, rejected = 0, tried = 0;
    for (const auto& scheme : schemes()) {
        for (const auto& password : passwords()) {
            std::vector<std::string> all = templates();
            if (user_alone_password(password))
                all.insert(all.end(), user_alone_templates().begin(), user_alone_templates().end());
            for (const auto& t : all) {
                ++tried;
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
                    for (auto key :
                         {"token", "password", "secret", "Token", "PASSWORD", "Sentinel_Password", "sEcReT"}) {
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
    CHECK(parsed + rejected == tried);
    CHECK(parsed > 100);     // the valid group (and more) parsed...
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
        "memory://Zq7alone@space?bogus=1",  // a password alone as the user info
        "redis://Zq7alone@127.0.0.1:1?lease=soon",
        "file://Zq7alone@/tmp/x?bogus=1",
        "memory://space?Token=Zq7x&bogus=1",  // secret names in any case
        "consul://h:1?TOKEN=Zq7t&lease=0s",
        "redis://127.0.0.1:1?Sentinel_Password=Zq7s&lease=soon",
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
    // A user info without ':' is hidden whole, for every scheme: it may be a
    // password alone (Lettuce: redis://PASSWORD@host), however the backend reads it.
    CHECK(redact_url("redis://alice@h") == "redis://***@h");
    CHECK(redact_url("redis://s3cr3t@h1:1,h2:2/0?lease=2s") == "redis://***@h1:1,h2:2/0?lease=2s");
    CHECK(redact_url("mysql://root@db:3306/app") == "mysql://***@db:3306/app");
    CHECK(redact_url("redis://@h") == "redis://@h");                                 // nothing to hide
    CHECK(redact_url("file:///var/lock/app@1") == "file:///var/lock/app@1");         // a path, not user info
    CHECK(redact_url("redis://h/0?prefix=a@b") == "redis://h/0?prefix=a@b");         // a query, not user info
    CHECK(redact_url("redis://pw@h/0?prefix=a@b") == "redis://***@h/0?prefix=a@b");  // user info, and an '@' later
    CHECK(distlock::spi::url::parse("redis://pw@h/0?prefix=a@b").user() == "pw");
    // Secret parameter names in any case.
    CHECK(redact_url("consul://h?Token=abc&TTL=1s") == "consul://h?Token=***&TTL=1s");
    CHECK(redact_url("redis://h?PASSWORD=a&Sentinel_Password=b") == "redis://h?PASSWORD=***&Sentinel_Password=***");
    CHECK(redact_url("redis://h?TOK%45N=a") == "redis://h?TOK%45N=***");
    CHECK(redact_url("consul://h:8500/p?token=abc&ttl=10s") == "consul://h:8500/p?token=***&ttl=10s");
    CHECK(redact_url("etcd://h?password=a&b=2&secret=c#f") ==
          "etcd://h?password=***&b=2&secret=***");                              // to the next &: a value may hold #
    CHECK(redact_url("etcd://h?tls_key=/k.pem") == "etcd://h?tls_key=/k.pem");  // key paths are not secrets
    CHECK(redact_url("no-scheme:pw@host") == "no-scheme:***@host");
    CHECK(redact_url("redis://h?prefix=a@b") == "redis://h?prefix=a@b");  // no ':' before: nothing to hide
    CHECK(redact_url("redis://u:p@w?x@h:1") == "redis://u:***@h:1");      // '@' and '?' in the password
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

TEST_CASE("the URL's secrets are listed as written and decoded", "[url][secrets]") {
    auto has = [](const distlock::spi::url& u, const std::string& s) {
        return std::find(u.secrets().begin(), u.secrets().end(), s) != u.secrets().end();
    };
    auto u = distlock::spi::url::parse("redis://u:p%40ss@h:1?Token=t%26k&lease=2s");
    CHECK(has(u, "p%40ss"));
    CHECK(has(u, "p@ss"));
    CHECK(has(u, "t%26k"));
    CHECK(has(u, "t&k"));
    CHECK_FALSE(has(u, "u"));  // a user name beside a password is not secret
    auto alone = distlock::spi::url::parse("redis://Zq7alone@h:1");
    CHECK(has(alone, "Zq7alone"));
    CHECK(distlock::spi::url::parse("redis://h:1/0?lease=2s").secrets().empty());
}

// ---- the net beneath the public API ----------------------------------------------

namespace {

// Where the "throwing" backend throws, and what.
enum class hook { none, factory, make_lock, acquire, release, keepalive, inspect, break_lock, round_trip };
enum class what {
    library,        // a std::runtime_error whose message quotes the password (a library's own error)
    quoting,        // a distlock::error whose message quotes the password (a server's message, say)
    out_of_memory,  // std::bad_alloc: passes as it is
    not_standard,   // an int
};
// Read by the renewal thread too: atomics (the password is set by the
// factory, before any thread of the provider runs).
struct script {
    std::atomic<hook> where{hook::none};
    std::atomic<what> kind{what::library};
    std::string password;           // what the URL gave
    std::atomic<bool> lose{false};  // keepalives say lost, quoting the password
};
script& scripted() {
    static script s;
    return s;
}

void maybe_throw(hook here) {
    const auto& s = scripted();
    if (s.where != here) return;
    switch (s.kind.load()) {
        case what::library: throw std::runtime_error("library failure near " + s.password + " (Zq7-library)");
        case what::quoting:
            distlock::throw_error(distlock::errc::access_denied, "throwing", "the server refused " + s.password, 7,
                                  "WRONGPASS " + s.password);
        case what::out_of_memory: throw std::bad_alloc();
        case what::not_standard: throw 42;
    }
}

class throwing_handle final : public distlock::spi::lock_handle {
public:
    std::optional<distlock::spi::grant> acquire(distlock::spi::deadline, const distlock::spi::loss_sink&) override {
        maybe_throw(hook::acquire);
        return distlock::spi::grant{++token_, distlock::spi::clock::now()};
    }
    void release() override { maybe_throw(hook::release); }

private:
    std::uint64_t token_ = 0;
};

class throwing_backend final : public distlock::spi::backend {
public:
    throwing_backend() {
        caps_.implements = {distlock::feature::read_write, distlock::feature::semaphore, distlock::feature::election,
                            distlock::feature::inspect};
    }
    std::string_view name() const noexcept override { return "throwing"; }
    const distlock::capabilities& caps() const noexcept override { return caps_; }
    std::unique_ptr<distlock::spi::lock_handle> make_lock(const distlock::spi::lock_request&) override {
        maybe_throw(hook::make_lock);
        return std::make_unique<throwing_handle>();
    }
    void keepalive_batch(std::span<distlock::spi::lock_handle* const> hs,
                         std::span<distlock::spi::keepalive_result> out) override {
        maybe_throw(hook::keepalive);
        for (std::size_t i = 0; i < hs.size(); ++i)
            out[i] = scripted().lose
                         ? distlock::spi::keepalive_result::lost("session of " + scripted().password + " expired")
                         : distlock::spi::keepalive_result::ok();
    }
    distlock::lock_info inspect(std::string_view, distlock::spi::lock_kind) override {
        maybe_throw(hook::inspect);
        return {};
    }
    void break_lock(std::string_view) override { maybe_throw(hook::break_lock); }
    std::optional<std::chrono::nanoseconds> round_trip() override {
        maybe_throw(hook::round_trip);
        return std::chrono::nanoseconds{1};
    }
    std::optional<std::chrono::nanoseconds> native_cycle() override {
        maybe_throw(hook::round_trip);
        return std::nullopt;
    }

private:
    distlock::capabilities caps_;
};

// "throwing://user:<password>@h?token=<token>&lease=..." (registered once).
distlock::provider throwing_provider(const std::string& lease = "10s") {
    static const bool registered = [] {
        distlock::register_backend("throwing", [](distlock::spi::url& u) -> std::shared_ptr<distlock::spi::backend> {
            (void)u.take("token");
            scripted().password = u.password();
            maybe_throw(hook::factory);
            return std::make_shared<throwing_backend>();
        });
        return true;
    }();
    REQUIRE(registered);
    return distlock::connect("throwing://user:Zq7pw-secret@h?token=Zq7tok-secret&lease=" + lease);
}

// Runs `call` with the backend scripted to throw `kind` at `where`: it must
// throw a distlock::error whose message shows no secret (or std::bad_alloc, as
// it is), and nothing else.
void expect_typed(hook where, what kind, const std::function<void()>& call, const char* name) {
    INFO(name);
    scripted().where = where;
    scripted().kind = kind;
    bool threw = false;
    try {
        call();
    } catch (const std::bad_alloc&) {
        threw = true;
        CHECK(kind == what::out_of_memory);
    } catch (const distlock::error& e) {
        threw = true;
        const std::string text = e.what();
        INFO(text);
        CHECK(kind != what::out_of_memory);
        CHECK(text.find(marker) == std::string::npos);
        CHECK(e.native_message().find(marker) == std::string::npos);
        CHECK(e.reason().find(marker) == std::string::npos);
        if (kind == what::library) CHECK(text.find("std::runtime_error") != std::string::npos);  // says what it was
        if (kind == what::quoting) CHECK(e.code_value() == distlock::errc::access_denied);       // keeps its type
    } catch (...) {
        threw = true;
        FAIL("an exception that is not a distlock::error escaped");
    }
    scripted().where = hook::none;
    CHECK(threw);
}

}  // namespace

TEST_CASE("no exception but distlock::error (and std::bad_alloc) leaves the public API, and none shows a secret",
          "[secrets][boundary]") {
    for (auto kind : {what::library, what::quoting, what::out_of_memory, what::not_standard}) {
        INFO("kind " << static_cast<int>(kind));
        expect_typed(
            hook::factory, kind, [] { (void)throwing_provider(); }, "connect");
        auto p = throwing_provider();
        expect_typed(
            hook::make_lock, kind, [&] { (void)p.mutex("m"); }, "provider::mutex");
        expect_typed(
            hook::make_lock, kind, [&] { (void)p.shared_mutex("m"); }, "provider::shared_mutex");
        expect_typed(
            hook::make_lock, kind, [&] { (void)p.semaphore("m", 2); }, "provider::semaphore");
        expect_typed(
            hook::make_lock, kind,
            [&] {
                (void)p.multi_lock({"m", "n"});
            },
            "provider::multi_lock");
        expect_typed(
            hook::make_lock, kind, [&] { (void)p.election("m"); }, "provider::election");
        expect_typed(
            hook::inspect, kind, [&] { (void)p.inspect("m"); }, "provider::inspect");
        expect_typed(
            hook::round_trip, kind, [&] { (void)p.round_trip(); }, "provider::round_trip");
        expect_typed(
            hook::round_trip, kind, [&] { (void)p.native_cycle(); }, "provider::native_cycle");
        expect_typed(
            hook::break_lock, kind, [&] { distlock::testing::break_lock(p, "m"); }, "testing::break_lock");
        auto m = p.mutex("m");
        expect_typed(
            hook::acquire, kind, [&] { m.lock(); }, "mutex::lock");
        expect_typed(
            hook::acquire, kind, [&] { (void)m.try_lock(); }, "mutex::try_lock");
        expect_typed(
            hook::acquire, kind, [&] { (void)m.try_lock_for(10ms); }, "mutex::try_lock_for");
        auto rw = p.shared_mutex("rw");
        expect_typed(
            hook::acquire, kind, [&] { rw.lock(); }, "shared_mutex::lock");
        expect_typed(
            hook::acquire, kind, [&] { rw.lock_shared(); }, "shared_mutex::lock_shared");
        auto sem = p.semaphore("s", 2);
        expect_typed(
            hook::acquire, kind, [&] { sem.acquire(); }, "semaphore::acquire");
        auto all = p.multi_lock({"a", "b"});
        expect_typed(
            hook::acquire, kind, [&] { all.lock(); }, "multi_lock::lock");
        auto e = p.election("e");
        expect_typed(
            hook::acquire, kind, [&] { e.campaign(); }, "election::campaign");
        expect_typed(
            hook::acquire, kind, [&] { (void)e.campaign(10ms); }, "election::campaign(timeout)");
        expect_typed(
            hook::inspect, kind, [&] { (void)e.leader(); }, "election::leader");
        // Nothing is left held by the failed calls.
        CHECK_FALSE(m.held());
        CHECK_FALSE(all.held());
        CHECK(sem.held() == 0);
        CHECK_FALSE(e.is_leader());
    }
}

TEST_CASE("what reaches on_lost and on_error shows no secret either", "[secrets][boundary]") {
    auto p = throwing_provider("300ms");
    distlock::test::loss_recorder rec;
    auto check_all = [&] {
        for (const auto& l : rec.losses()) CHECK(l.reason.find(marker) == std::string::npos);
        for (const auto& [event, code] : rec.error_events()) {
            INFO(event.reason);
            CHECK(event.reason.find(marker) == std::string::npos);
        }
    };
    SECTION("a release that throws a library's exception") {
        scripted().kind = what::library;
        auto m = p.mutex("r", rec.options());
        m.lock();
        scripted().where = hook::release;
        m.unlock();
        scripted().where = hook::none;
        CHECK(rec.wait_errors(1, 2s));
        check_all();
    }
    SECTION("a renewal that throws, then a loss whose reason quotes the password") {
        auto m = p.mutex("k", rec.options());
        m.lock();
        scripted().kind = what::library;
        scripted().where = hook::keepalive;
        CHECK(rec.wait_errors(1, 3s));
        scripted().where = hook::none;
        scripted().lose = true;
        CHECK(rec.wait_lost(1, 3s));
        scripted().lose = false;
        m.unlock();
        check_all();
    }
    scripted().where = hook::none;
    scripted().kind = what::library;
    scripted().lose = false;
}
