// consul:// specific behaviour, checked on the server: against the Consul HTTP
// API emulator (DISTLOCK_TEST_CONSUL_EMULATOR_URL), or against a real Consul
// (DISTLOCK_TEST_CONSUL_URL) when DISTLOCK_CONSUL_TESTS_REAL=1. Tests that need a server
// configured differently (ACLs, Consul's 10 s minimum TTL) start their own
// emulator.
#include <arpa/inet.h>
#include <signal.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <map>
#include <optional>
#include <thread>

#include "../http/fake_http_server.hpp"
#include "child_process.hpp"
#include "distlock/distlock.hpp"
#include "distlock/spi/backend.hpp"
#include "distlock/spi/url.hpp"
#include "distlock/testing.hpp"
#include "http/http_codec.hpp"
#include "http/http_options.hpp"
#include "http/http_pool.hpp"
#include "http/http_transfer.hpp"
#include "support.hpp"
#include "tcp_proxy.hpp"

using namespace std::chrono_literals;
using distlock::test::eventually;
using distlock::test::unique_name;
using json = nlohmann::json;
namespace http = distlock::backends::http;
using clk = std::chrono::steady_clock;

namespace {

constexpr std::uint64_t kLockFlag = 3304740253564472344ULL;
constexpr std::uint64_t kSemaphoreFlag = 0xe0f69a2baa414de0ULL;  // api/semaphore.go SemaphoreFlagValue

// DISTLOCK_CONSUL_TESTS_REAL=1 (ctest's distlock-consul-tests.real): the real
// Consul of DISTLOCK_TEST_CONSUL_URL; otherwise the emulator.
bool real_consul() { return distlock::test::env("DISTLOCK_CONSUL_TESTS_REAL") == "1"; }

std::string url() {
    return distlock::test::env(real_consul() ? "DISTLOCK_TEST_CONSUL_URL" : "DISTLOCK_TEST_CONSUL_EMULATOR_URL");
}

// Whether the server counts requests (the emulator's /emulator/stats); against a
// real Consul the test says so and checks nothing.
bool counts_requests() {
    if (!real_consul()) return true;
    WARN("needs the emulator's request counters: checked against the emulator only");
    return false;
}

// Direct HTTP access to the agent under test.
class agent {
public:
    explicit agent(const std::string& u) : client_(options_for(u)) {
        auto parsed = distlock::spi::url::parse(u);
        prefix_ = parsed.path().empty() ? "distlock" : parsed.path().substr(1);
        if (auto t = parsed.take("token")) token_ = *t;
    }
    http::response call(const char* method, const std::string& target, const std::string& body = {}) {
        http::request r;
        r.method = method;
        r.target =
            target +
            (token_.empty() ? "" : std::string(target.find('?') == std::string::npos ? "?" : "&") + "token=" + token_);
        r.body = body;
        return client_.send(r);
    }
    std::string key_path(const std::string& name) const {
        return "/v1/kv/" + http::escape_path(prefix_ + "/" + http::encode_name(name));
    }
    // Every entry under the semaphore prefix of `name` (<prefix>/<encoded name>/),
    // by key; empty when there is none.
    std::map<std::string, json> semaphore_keys(const std::string& name) {
        auto r = call("GET", key_path(name) + "/?recurse");
        std::map<std::string, json> out;
        if (r.status == 404) return out;
        REQUIRE(r.status == 200);
        for (auto& e : json::parse(r.body)) out[e["Key"].get<std::string>()] = e;
        return out;
    }
    std::string semaphore_prefix(const std::string& name) const {
        return prefix_ + "/" + http::encode_name(name) + "/";
    }
    // The decoded value of an entry.
    static std::string value_of(const json& e) {
        if (!e.contains("Value") || e["Value"].is_null()) return {};
        return http::base64_decode(e["Value"].get<std::string>()).value_or("(not base64)");
    }
    std::string new_session(const std::string& behavior) {
        auto r =
            call("PUT", "/v1/session/create", json{{"Name", "test"}, {"TTL", "10s"}, {"Behavior", behavior}}.dump());
        REQUIRE(r.status == 200);
        return json::parse(r.body)["ID"].get<std::string>();
    }
    // The key's entry, or null when absent.
    json entry(const std::string& name) {
        auto r = call("GET", key_path(name));
        if (r.status == 404) return nullptr;
        REQUIRE(r.status == 200);
        return json::parse(r.body)[0];
    }
    // The GETs of `path` the emulator has counted so far (counts_requests()).
    int gets_of(const std::string& path) {
        auto r = call("GET", "/emulator/stats?path=" + path);
        REQUIRE(r.status == 200);
        return json::parse(r.body).value("GET", 0);
    }
    json session_info(const std::string& id) {
        auto r = call("GET", "/v1/session/info/" + id);
        REQUIRE(r.status == 200);
        auto j = json::parse(r.body);
        return j.is_array() && !j.empty() ? j[0] : json(nullptr);
    }

private:
    static http::options options_for(const std::string& u) {
        auto parsed = distlock::spi::url::parse(u);
        return http::options_from_url(parsed, "consul-test", 8500);
    }
    http::client client_;
    std::string prefix_, token_;
};

// A private emulator with its own flags, on a free port.
class private_emulator {
public:
    explicit private_emulator(const std::vector<std::string>& flags) : proc_(argv_with(flags)) {
        auto s = proc_.read_line(30s);  // "consul-emulator listening on HOST:PORT"
        INFO("emulator said '" << s << "'");
        REQUIRE_FALSE(s.empty());
        auto colon = s.rfind(':');
        REQUIRE(colon != std::string::npos);
        port_ = std::stoi(s.substr(colon + 1));
    }
    std::string base() const { return "consul://127.0.0.1:" + std::to_string(port_); }
    void signal(int sig) { proc_.signal(sig); }

private:
    static std::vector<std::string> argv_with(const std::vector<std::string>& flags) {
        std::vector<std::string> argv{"/usr/bin/python3", DISTLOCK_CONSUL_EMULATOR, "--port", "0"};
        argv.insert(argv.end(), flags.begin(), flags.end());
        return argv;
    }
    distlock::test::child_process proc_;
    int port_ = 0;
};

// True once distlock::connect(url) succeeds (it is unavailable until then), within `limit`.
bool answers_within(const std::string& url, std::chrono::milliseconds limit) {
    return eventually(
        [&] {
            try {
                (void)distlock::connect(url);
                return true;
            } catch (const distlock::unavailable_error&) {
                return false;
            }
        },
        limit);
}

}  // namespace

TEST_CASE("the lock key carries the lock flag and our session, and the token is its ModifyIndex", "[consul]") {
    auto p = distlock::connect(url());
    agent consul(url());
    const auto name = unique_name("layout/odd name");
    auto m = p.mutex(name);
    REQUIRE(m.try_lock());
    auto e = consul.entry(name);
    REQUIRE(e.is_object());
    CHECK(e["Flags"].get<std::uint64_t>() == kLockFlag);
    CHECK(e["LockIndex"].get<std::uint64_t>() >= 1);
    CHECK(m.token() == e["ModifyIndex"].get<std::uint64_t>());
    const auto session = e["Session"].get<std::string>();
    auto info = consul.session_info(session);
    REQUIRE(info.is_object());
    CHECK(info["Behavior"] == "release");
    CHECK(info["TTL"].get<std::string>() == (p.default_lease() % 1000ms == 0ms
                                                 ? std::to_string(p.default_lease().count() / 1000) + "s"
                                                 : std::to_string(p.default_lease().count()) + "ms"));
    m.unlock();
    // Release, then destroy: the key stays, unlocked, and the session is gone.
    auto after = consul.entry(name);
    REQUIRE(after.is_object());
    CHECK((!after.contains("Session") || after["Session"].is_null() || after["Session"] == ""));
    CHECK(consul.session_info(session).is_null());
}

TEST_CASE("a session invalidated out of band is reported lost and the lock-delay is honoured", "[consul]") {
    distlock::test::loss_recorder rec;  // before the providers: their callback threads call it until they end
    auto a = distlock::connect(url());
    auto b = distlock::connect(url());
    agent consul(url());
    const auto name = unique_name("invalidated");
    auto holder = a.mutex(name, rec.options());
    holder.lock();
    const auto first = holder.token();
    auto session = consul.entry(name)["Session"].get<std::string>();
    std::atomic<bool> got{false};
    clk::time_point got_at;
    auto waiter = b.mutex(name);
    std::thread t([&] {
        if (waiter.try_lock_for(15s)) {
            got_at = clk::now();
            got = true;
        }
    });
    std::this_thread::sleep_for(300ms);
    const auto destroyed_at = clk::now();
    REQUIRE(consul.call("PUT", "/v1/session/destroy/" + session).status == 200);
    // The monitor's blocking query sees the key lose its session.
    CHECK(eventually([&] { return !holder.held(); }, 3s));
    CHECK(rec.wait_lost(1, 3s));  // on_lost runs just after
    t.join();
    CHECK_FALSE(rec.wait_lost(2, 200ms));  // and only once
    const auto losses = rec.losses();
    REQUIRE_FALSE(losses.empty());
    CHECK(losses[0].reason.find("session") != std::string::npos);
    REQUIRE(got.load());
    // The URL's lock_delay=1s: the waiter had to wait it out after the invalidation.
    CHECK(got_at - destroyed_at >= 900ms);
    CHECK(waiter.token() > first);
    waiter.unlock();
    holder.unlock();
}

TEST_CASE("a key holding other data is refused as a lock, not overwritten", "[consul]") {
    auto p = distlock::connect(url());
    agent consul(url());
    const auto name = unique_name("not-a-lock");
    REQUIRE(consul.call("PUT", consul.key_path(name) + "?flags=7", "precious").status == 200);
    auto m = p.mutex(name);
    CHECK_THROWS_AS(m.try_lock_for(1s), distlock::invalid_argument_error);
    auto e = consul.entry(name);
    CHECK(e["Flags"].get<std::uint64_t>() == 7);
    consul.call("DELETE", consul.key_path(name));
}

TEST_CASE("break_lock deletes the key: the holder learns it, a waiter proceeds at once", "[consul]") {
    auto a = distlock::connect(url());
    auto b = distlock::connect(url());
    agent consul(url());
    const auto name = unique_name("break");
    auto holder = a.mutex(name);
    holder.lock();
    auto waiter = b.mutex(name);
    std::atomic<bool> got{false};
    std::thread t([&] { got = waiter.try_lock_for(10s); });
    std::this_thread::sleep_for(300ms);
    distlock::testing::break_lock(a, name);
    t.join();
    CHECK(got.load());
    CHECK(eventually([&] { return !holder.held(); }, 3s));
    waiter.unlock();
    holder.unlock();
}

TEST_CASE("a renewed session outlives many TTLs while a waiter's blocking queries keep waiting", "[consul]") {
    auto a = distlock::connect(url());
    auto b = distlock::connect(url());
    agent consul(url());
    const auto name = unique_name("renewed");
    auto holder = a.mutex(name);
    holder.lock();
    const auto lease = a.default_lease();
    const auto session = consul.entry(name)["Session"].get<std::string>();
    auto waiter = b.mutex(name);
    CHECK_FALSE(waiter.try_lock_for(3 * lease));
    CHECK(holder.held());
    CHECK(consul.entry(name)["Session"] == session);
    holder.unlock();
    CHECK(waiter.try_lock_for(5s));
    waiter.unlock();
}

TEST_CASE("a waiter sleeps in blocking queries instead of polling", "[consul][emulator]") {
    if (!counts_requests()) return;
    auto a = distlock::connect(url());
    auto b = distlock::connect(url());
    agent consul(url());
    const auto name = unique_name("no-polling");
    auto holder = a.mutex(name);
    holder.lock();
    auto count = [&] { return consul.gets_of(consul.key_path(name)); };
    const int before = count();
    auto waiter = b.mutex(name);
    CHECK_FALSE(waiter.try_lock_for(3s));
    const int gets = count() - before;
    // lease=2s: each blocking query waits until the session's next renewal (TTL/2
    // = 1 s), so about 3 GETs (plus the holder's monitor); polling at the backoff's
    // 5..250 ms would make dozens.
    INFO(gets << " GETs of the key in 3 s of waiting");
    CHECK(gets <= 8);
    CHECK(gets >= 2);
    holder.unlock();
}

TEST_CASE("a waiter whose session is destroyed while it waits makes a new one and still gets the lock", "[consul]") {
    auto a = distlock::connect(url());
    auto b = distlock::connect(url());
    agent consul(url());
    const auto name = unique_name("waiter-session");
    auto holder = a.mutex(name);
    holder.lock();
    const auto holder_session = consul.entry(name)["Session"].get<std::string>();
    std::atomic<bool> got{false};
    auto waiter = b.mutex(name);
    std::thread t([&] { got = waiter.try_lock_for(10s); });
    // The waiter's session: the other one named after this lock.
    std::string waiter_session;
    REQUIRE(eventually(
        [&] {
            auto r = consul.call("GET", "/v1/session/list");
            for (const auto& s : json::parse(r.body))
                if (s["Name"].get<std::string>().find(name) != std::string::npos && s["ID"] != holder_session)
                    waiter_session = s["ID"].get<std::string>();
            return !waiter_session.empty();
        },
        5s));
    REQUIRE(consul.call("PUT", "/v1/session/destroy/" + waiter_session).status == 200);
    std::this_thread::sleep_for(200ms);
    holder.unlock();
    t.join();
    CHECK(got.load());
    waiter.unlock();
}

TEST_CASE("twenty locks of one provider are renewed over three leases", "[consul]") {
    auto p = distlock::connect(url());
    agent consul(url());
    std::vector<distlock::mutex> held;
    std::vector<std::string> names, sessions;
    for (int i = 0; i < 20; ++i) {
        names.push_back(unique_name("batch-" + std::to_string(i)));
        held.push_back(p.mutex(names.back()));
        REQUIRE(held.back().try_lock());
        sessions.push_back(consul.entry(names.back())["Session"].get<std::string>());
    }
    const auto lease = p.default_lease();
    std::this_thread::sleep_for(3 * lease + lease / 2);
    for (std::size_t i = 0; i < held.size(); ++i) {
        CHECK(held[i].held());
        CHECK(consul.entry(names[i])["Session"] == sessions[i]);
        CHECK(consul.session_info(sessions[i]).is_object());
    }
    for (auto& m : held) m.unlock();
    for (const auto& s : sessions) CHECK(consul.session_info(s).is_null());  // destroyed
}

TEST_CASE("an unreachable agent is unavailable at once", "[consul][input]") {
    auto t0 = clk::now();
    CHECK_THROWS_AS(distlock::connect("consul://127.0.0.1:1/x?lease=2s"), distlock::unavailable_error);
    CHECK(clk::now() - t0 < 10s);
}

TEST_CASE("a URL that points at another HTTP server than Consul is a bad argument, not 'retry later'",
          "[consul][input]") {
    // A plain HTTP server answers GET with 404 (which connect() accepts: a missing
    // prefix) and PUT with 501: the first session create says what is wrong.
    const int port = distlock::test::free_port();
    distlock::test::child_process web({"/usr/bin/python3", "-m", "http.server", "--bind", "127.0.0.1",
                                       std::to_string(port), "--directory", "/nonexistent-distlock"});
    const std::string url = "consul://127.0.0.1:" + std::to_string(port) + "/x";
    REQUIRE(answers_within(url, 10s));  // listening
    auto p = distlock::connect(url);
    try {
        (void)p.mutex(unique_name("wrong-server")).try_lock();
        FAIL("locked");
    } catch (const distlock::invalid_argument_error& e) {
        CHECK(std::string(e.what()).find("a Consul agent's HTTP API") != std::string::npos);
    }
}

TEST_CASE("consul URL parameters are checked", "[consul][input]") {
    auto u = url();
    auto base = u.substr(0, u.find_first_of("/?", 9));
    auto p = distlock::connect(base + "/params?ttl=12s&lock_delay=0s&behavior=delete");
    CHECK(p.default_lease() == 12s);
    CHECK_THROWS_AS(distlock::connect(base + "?behavior=explode"), distlock::invalid_argument_error);
    CHECK_THROWS_AS(distlock::connect(base + "?ttl=0s"), distlock::invalid_argument_error);
    CHECK_THROWS_AS(distlock::connect(base + "?lock_delay=soon"), distlock::invalid_argument_error);
}

TEST_CASE("ACL tokens: the right token locks, a wrong or missing one is access denied at connect", "[consul][acl]") {
    private_emulator emu({"--min-ttl", "100ms", "--acl-token", "s3cret-token"});
    CHECK_THROWS_AS(distlock::connect(emu.base() + "/x?lease=2s"), distlock::access_denied_error);
    CHECK_THROWS_AS(distlock::connect(emu.base() + "/x?lease=2s&token=wrong"), distlock::access_denied_error);
    auto p = distlock::connect(emu.base() + "/x?lease=2s&token=s3cret-token");
    CHECK(p.url().find("s3cret") == std::string::npos);  // redacted
    auto m = p.mutex(unique_name("acl"));
    REQUIRE(m.try_lock());
    CHECK(m.token() > 0);
    m.unlock();
}

TEST_CASE("a TTL below a real Consul's 10 s minimum is refused with the server's message", "[consul][input]") {
    private_emulator emu({});  // the emulator's defaults are Consul's: 10s .. 24h
    auto p = distlock::connect(emu.base() + "/x?lease=2s");
    auto m = p.mutex(unique_name("short-ttl"));
    try {
        (void)m.try_lock();
        FAIL("a 2 s session TTL was accepted");
    } catch (const distlock::invalid_argument_error& e) {
        CHECK(std::string(e.what()).find("Invalid Session TTL") != std::string::npos);
    }
    auto ok = distlock::connect(emu.base() + "/x?lease=10s").mutex(unique_name("ten-seconds"));
    CHECK(ok.try_lock());
    ok.unlock();
}

TEST_CASE("a hung agent: the holder is told of the loss within its lease, and unlock never throws", "[consul][fault]") {
    distlock::test::loss_recorder rec;  // before the providers: their callback threads call it until they end
    private_emulator emu({"--min-ttl", "100ms"});
    const std::string u = emu.base() + "/x?lease=2s&lock_delay=0s&timeout=1s&connect_timeout=500ms";
    auto p = distlock::connect(u);
    const auto name = unique_name("hung");
    auto m = p.mutex(name, rec.options());
    REQUIRE(m.try_lock());
    emu.signal(SIGSTOP);
    auto t0 = clk::now();
    // Renewals time out: after a whole lease without one, the core reports the loss.
    CHECK(eventually([&] { return !m.held(); }, 8s));
    CHECK(clk::now() - t0 < 2s + 3s);
    // on_lost follows once the renewal under way times out (timeout=1s).
    CHECK(rec.wait_lost(1, 3s));
    CHECK_FALSE(rec.wait_lost(2, 200ms));  // and only once
    // Connecting to (or locking on) a hung agent is a typed error, not a hang.
    auto t1 = clk::now();
    CHECK_THROWS_AS(distlock::connect(u), distlock::unavailable_error);
    CHECK_THROWS_AS(p.mutex(unique_name("hung-2")).try_lock_for(1s), distlock::unavailable_error);
    CHECK(clk::now() - t1 < 5s);
    m.unlock();  // never throws
    emu.signal(SIGCONT);
    // The resumed agent first works through the connections queued while it was
    // stopped; until then a new one may time out (connect_timeout=500ms).
    REQUIRE(answers_within(u, 10s));
    auto again = p.mutex(name);
    CHECK(again.try_lock_for(10s));
    again.unlock();
}

TEST_CASE("a URL that points at a server that does not speak HTTP is a bad argument, not 'retry later'",
          "[consul][input]") {
    distlock::test::wrong_server other("-ERR unknown command\r\n");  // HTTP/0.9 to curl, which refuses it
    try {
        (void)distlock::connect("consul://" + other.address() + "/x");
        FAIL("connected");
    } catch (const distlock::invalid_argument_error& e) {
        CHECK(std::string(e.what()).find("the consul HTTP API?") != std::string::npos);
    }
}

TEST_CASE("a release the agent refuses keeps its kind (access denied), not 'in doubt'", "[consul][fault]") {
    distlock::test::loss_recorder rec;  // before the providers: their callback threads call it until they end
    private_emulator emu({"--min-ttl", "100ms", "--deny-release"});
    auto p = distlock::connect(emu.base() + "/x?lease=2s&lock_delay=0s");
    auto m = p.mutex(unique_name("denied"), rec.options());
    m.lock();
    m.unlock();  // the release is refused; the session's end frees the key all the same
    REQUIRE(rec.wait_errors(1, 5s));
    const auto [event, code] = rec.error_events().at(0);
    const auto& what = event.reason;  // the error's what()
    CHECK(code == distlock::errc::access_denied);
    CHECK(what.find("Permission denied") != std::string::npos);
    CHECK(what.find("retry later") == std::string::npos);  // no nested what() of the inner error
    CHECK(rec.lost() == 0);
    CHECK(m.try_lock_for(5s));  // the key was freed with the session
    m.unlock();
}

// ---- the semaphore (api/semaphore.go's layout) -----------------------------------

TEST_CASE(
    "a permit is a contender key held by its session and an entry in .lock's Holders, as api/semaphore.go writes them",
    "[consul][semaphore]") {
    auto p = distlock::connect(url());
    agent consul(url());
    const auto name = unique_name("sem-layout/odd name");
    const auto prefix = consul.semaphore_prefix(name);
    auto s = p.semaphore(name, 3);
    REQUIRE(s.try_acquire_for(10s));
    auto keys = consul.semaphore_keys(name);
    REQUIRE(keys.size() == 2);  // .lock and our contender key
    REQUIRE(keys.count(prefix + ".lock") == 1);
    const auto lock = keys[prefix + ".lock"];
    CHECK(lock["Flags"].get<std::uint64_t>() == kSemaphoreFlag);
    CHECK((!lock.contains("Session") || lock["Session"].is_null()));  // written by check-and-set, never held
    keys.erase(prefix + ".lock");
    const auto contender = keys.begin()->second;
    const auto session = contender["Session"].get<std::string>();
    CHECK(keys.begin()->first == prefix + session);  // <prefix>/<session>
    CHECK(contender["Flags"].get<std::uint64_t>() == kSemaphoreFlag);
    // Go's json.Marshal of {Limit, Holders}: Limit first, no spaces, the set's values true.
    CHECK(agent::value_of(lock) == "{\"Limit\":3,\"Holders\":{\"" + session + "\":true}}");
    auto info = consul.session_info(session);
    REQUIRE(info.is_object());
    CHECK(info["Behavior"] == "delete");  // semaphore.go's sessions: invalidation deletes the contender key
    // The token: the holder's own write to its contender key after the admission.
    CHECK(s.token() == contender["ModifyIndex"].get<std::uint64_t>());
    CHECK(s.token() > lock["ModifyIndex"].get<std::uint64_t>());
    s.release();
    // The last holder removes .lock (consul lock's cleanup), its contender key and its session.
    CHECK(consul.semaphore_keys(name).empty());
    CHECK(consul.session_info(session).is_null());
}

TEST_CASE("a holder whose session is destroyed is told of its loss and pruned from .lock by the next contender",
          "[consul][semaphore]") {
    distlock::test::loss_recorder rec;  // before the providers: their callback threads call it until they end
    auto a = distlock::connect(url());
    auto b = distlock::connect(url());
    agent consul(url());
    const auto name = unique_name("sem-prune");
    const auto prefix = consul.semaphore_prefix(name);
    auto holder = a.semaphore(name, 1, rec.options());
    REQUIRE(holder.try_acquire_for(10s));
    const auto dead_token = holder.token();
    auto keys = consul.semaphore_keys(name);
    keys.erase(prefix + ".lock");
    REQUIRE(keys.size() == 1);
    const auto dead = keys.begin()->second["Session"].get<std::string>();
    auto waiter = b.semaphore(name, 1);
    CHECK_FALSE(waiter.try_acquire());
    REQUIRE(consul.call("PUT", "/v1/session/destroy/" + dead).status == 200);
    // Behavior delete took the contender key; .lock still names the dead session until a client prunes it.
    CHECK(consul.semaphore_keys(name).count(prefix + dead) == 0);
    CHECK(agent::value_of(consul.semaphore_keys(name)[prefix + ".lock"]).find(dead) != std::string::npos);
    CHECK(rec.wait_lost(1, 5s));  // the monitor prunes too: our session is not a holder any more
    CHECK(holder.held() == 0);
    REQUIRE(waiter.try_acquire_for(10s));
    CHECK(waiter.token() > dead_token);
    const auto lock = agent::value_of(consul.semaphore_keys(name)[prefix + ".lock"]);
    CHECK(lock.find(dead) == std::string::npos);
    const auto holders = json::parse(lock)["Holders"];
    CHECK(holders.size() == 1);
    waiter.release();
    holder.release();  // lost already: nothing to give back, never throws
    CHECK(consul.semaphore_keys(name).empty());
}

TEST_CASE("a Go client's holder written by hand counts, and is pruned once its session is gone",
          "[consul][semaphore]") {
    auto p = distlock::connect(url());
    agent consul(url());
    const auto name = unique_name("sem-interop");
    const auto prefix = consul.semaphore_prefix(name);
    // What api/semaphore.go's Acquire writes for a contender admitted to a semaphore of 1.
    const auto go = consul.new_session("delete");
    auto contender = consul.call("PUT", "/v1/kv/" + http::escape_path(prefix + go) + "?acquire=" + go +
                                            "&flags=" + std::to_string(kSemaphoreFlag));
    REQUIRE(contender.body.find("true") != std::string::npos);
    auto admitted = consul.call(
        "PUT", "/v1/kv/" + http::escape_path(prefix + ".lock") + "?cas=0&flags=" + std::to_string(kSemaphoreFlag),
        "{\"Limit\":1,\"Holders\":{\"" + go + "\":true}}");
    REQUIRE(admitted.body.find("true") != std::string::npos);
    auto s = p.semaphore(name, 1);
    CHECK_FALSE(s.try_acquire());
    CHECK_FALSE(s.try_acquire_for(500ms));
    REQUIRE(consul.call("PUT", "/v1/session/destroy/" + go).status == 200);
    REQUIRE(s.try_acquire_for(10s));
    auto keys = consul.semaphore_keys(name);
    CHECK(agent::value_of(keys[prefix + ".lock"]).find(go) == std::string::npos);  // pruned in the admitting write
    s.release();
}

TEST_CASE("a semaphore asked with another size than .lock's Limit is refused with both sizes and leaves nothing behind",
          "[consul][semaphore][input]") {
    auto a = distlock::connect(url());
    auto b = distlock::connect(url());
    agent consul(url());
    const auto name = unique_name("sem-limit");
    const auto prefix = consul.semaphore_prefix(name);
    auto two = a.semaphore(name, 2);
    REQUIRE(two.try_acquire_for(10s));
    const auto before = consul.semaphore_keys(name);
    auto five = b.semaphore(name, 5);
    try {
        (void)five.try_acquire_for(2s);
        FAIL("a semaphore of 5 was granted beside a holder of a semaphore of 2");
    } catch (const distlock::invalid_argument_error& e) {
        CHECK_THAT(e.what(), Catch::Contains("semaphore limit conflict (lock: 2, local: 5)"));
        CHECK_THAT(e.what(), Catch::Contains(name));
    }
    CHECK(five.held() == 0);
    // No contender key or holder of the refused one: .lock and the contender key as before.
    auto after = consul.semaphore_keys(name);
    REQUIRE(after.size() == before.size());
    for (const auto& [key, e] : before) {
        REQUIRE(after.count(key) == 1);
        CHECK(after[key]["ModifyIndex"] == e["ModifyIndex"]);
    }
    two.release();
    // Once nobody holds it, another size may take the name.
    REQUIRE(five.try_acquire_for(10s));
    CHECK(json::parse(agent::value_of(consul.semaphore_keys(name)[prefix + ".lock"]))["Limit"] == 5);
    five.release();
}

TEST_CASE("a .lock that is not a semaphore's is refused, not overwritten", "[consul][semaphore][input]") {
    auto p = distlock::connect(url());
    agent consul(url());
    const auto name = unique_name("sem-foreign");
    const auto lock_target = "/v1/kv/" + http::escape_path(consul.semaphore_prefix(name) + ".lock");
    // `consul lock <prefix>` (n = 1) holds <prefix>/.lock with the mutex's flag.
    REQUIRE(consul.call("PUT", lock_target + "?flags=" + std::to_string(kLockFlag), "").status == 200);
    auto s = p.semaphore(name, 2);
    CHECK_THROWS_AS(s.try_acquire_for(1s), distlock::invalid_argument_error);
    // A semaphore's flag over a value that is not {Limit, Holders}.
    REQUIRE(consul.call("PUT", lock_target + "?flags=" + std::to_string(kSemaphoreFlag), "precious").status == 200);
    CHECK_THROWS_AS(s.try_acquire_for(1s), distlock::invalid_argument_error);
    auto keys = consul.semaphore_keys(name);
    REQUIRE(keys.size() == 1);  // .lock alone, untouched: no contender key left behind
    CHECK(agent::value_of(keys.begin()->second) == "precious");
    consul.call("DELETE", lock_target);
}

TEST_CASE("break_lock removes a semaphore's keys: its holders learn it", "[consul][semaphore]") {
    distlock::test::loss_recorder rec;
    auto a = distlock::connect(url());
    agent consul(url());
    const auto name = unique_name("sem-break");
    auto s = a.semaphore(name, 2, rec.options());
    REQUIRE(s.try_acquire_for(10s));
    distlock::testing::break_lock(a, name);
    CHECK(consul.semaphore_keys(name).empty());
    CHECK(rec.wait_lost(1, 5s));
    CHECK(s.held() == 0);
    s.release();
}

TEST_CASE("a waiting contender sleeps in blocking queries on the prefix instead of polling",
          "[consul][semaphore][emulator]") {
    if (!counts_requests()) return;
    auto a = distlock::connect(url());
    auto b = distlock::connect(url());
    agent consul(url());
    const auto name = unique_name("sem-blocking");
    auto holder = a.semaphore(name, 1);
    REQUIRE(holder.try_acquire_for(10s));
    auto waiter = b.semaphore(name, 1);
    const auto list_path = "/v1/kv/" + http::escape_path(consul.semaphore_prefix(name));  // as sent
    auto lists = [&] { return consul.gets_of(list_path); };
    const auto before = lists();
    std::atomic<bool> got{false};
    std::thread t([&] { got = waiter.try_acquire_for(20s); });
    std::this_thread::sleep_for(2500ms);
    // Over 2.5 s: the waiter's first listing and its blocking ones, each until the
    // session's next renewal (lease=2s: about every 0.7 s), and the holder's
    // monitor's; polling at the backoff's 5..250 ms would make dozens.
    const int gets = lists() - before;
    INFO(gets << " listings of the prefix in 2.5 s of waiting");
    CHECK(gets < 12);
    CHECK(gets >= 2);
    holder.release();
    t.join();
    CHECK(got.load());
    waiter.release();
}

TEST_CASE("names that are not UTF-8, or whose first 64 bytes end inside a character, lock and take permits",
          "[consul][input]") {
    // The session's Name is JSON: the bytes that are not UTF-8 go as U+FFFD.
    auto p = distlock::connect(url());
    const auto base = unique_name("utf8");
    const std::vector<std::string> names = {base + "\xff\xfe raw bytes",
                                            base + std::string(63 - base.size(), 'x') + "\xe9\x94\x81 cut at 64"};
    REQUIRE(names[1].substr(0, 64).back() == '\xe9');
    for (const auto& n : names) {
        auto m = p.mutex(n);
        CHECK(m.try_lock_for(10s));
        m.unlock();
        auto s = p.semaphore(n, 2);
        CHECK(s.try_acquire_for(10s));
        s.release();
    }
}

// ---- the read-write lock (distlock's own, on the semaphore's pattern) ----------

TEST_CASE("a read-write lock's document names its readers, its writer and the writer waiting, by session",
          "[consul][rw]") {
    auto a = distlock::connect(url());
    auto b = distlock::connect(url());
    auto c = distlock::connect(url());
    agent consul(url());
    const auto name = unique_name("rw-layout");
    const auto prefix = consul.semaphore_prefix(name).substr(0, consul.semaphore_prefix(name).size() - 1) + "~rw/";
    auto list = [&] {
        auto r = consul.call("GET", "/v1/kv/" + http::escape_path(prefix) + "?recurse");
        std::map<std::string, json> out;
        if (r.status == 404) return out;
        REQUIRE(r.status == 200);
        for (auto& e : json::parse(r.body)) out[e["Key"].get<std::string>()] = e;
        return out;
    };
    auto document = [&] {
        auto keys = list();
        REQUIRE(keys.count(prefix + ".rwlock") == 1);
        CHECK(keys[prefix + ".rwlock"]["Flags"].get<std::uint64_t>() == 0x6469737472776c6bULL);
        return json::parse(agent::value_of(keys[prefix + ".rwlock"]));
    };
    auto reader = a.shared_mutex(name);
    REQUIRE(reader.try_lock_shared_for(10s));
    auto doc = document();
    REQUIRE(doc["Readers"].size() == 1);
    const auto reader_session = doc["Readers"].begin().key();
    CHECK(list().count(prefix + reader_session) == 1);  // its contender key
    CHECK(doc["Writer"] == "");
    CHECK(doc["Waiting"] == "");
    // A writer waits, recorded as Waiting; a reader that comes later is held back.
    auto writer = b.shared_mutex(name);
    std::atomic<bool> wrote{false};
    std::thread t([&] {
        if (writer.try_lock_for(20s)) {
            wrote = true;
            std::this_thread::sleep_for(300ms);
            writer.unlock();
        }
    });
    CHECK(eventually([&] { return document()["Waiting"] != ""; }, 5s));
    auto late = c.shared_mutex(name);
    CHECK_FALSE(late.try_lock_shared_for(300ms));
    CHECK_FALSE(wrote.load());
    reader.unlock_shared();
    CHECK(eventually([&] { return wrote.load(); }, 10s));
    REQUIRE(late.try_lock_shared_for(10s));  // after the writer
    t.join();
    late.unlock_shared();
    CHECK(list().empty());  // the last one out removes the document
}

TEST_CASE("a writer that gives up waiting does not hold readers back", "[consul][rw]") {
    auto a = distlock::connect(url());
    auto b = distlock::connect(url());
    const auto name = unique_name("rw-gave-up");
    auto reader = a.shared_mutex(name);
    REQUIRE(reader.try_lock_shared_for(10s));
    auto writer = b.shared_mutex(name);
    CHECK_FALSE(writer.try_lock_for(500ms));  // recorded itself as Waiting, then gave up
    auto second = b.shared_mutex(name);
    CHECK(second.try_lock_shared_for(5s));  // its session is gone: pruned, not waited for
    second.unlock_shared();
    reader.unlock_shared();
}

TEST_CASE("inspect shows the holder label (the key's value) and the token of a lock held by another connection",
          "[consul][inspect]") {
    const auto label = "consul-holder-" + distlock::spi::random_token().substr(0, 8);
    auto holder = distlock::connect(url() + "&holder=" + label);
    auto observer = distlock::connect(url());
    agent consul(url());
    const auto name = unique_name("inspect");

    auto before = observer.inspect(name);
    CHECK(before.name == name);
    CHECK(before.held == false);
    CHECK_FALSE(before.holder);
    CHECK_FALSE(before.token);
    CHECK_FALSE(before.remaining);
    CHECK_FALSE(before.waiters);
    CHECK(before.unknown.size() == 1);
    CHECK(before.unknown.count("waiters") == 1);

    auto m = holder.mutex(name);
    REQUIRE(m.try_lock());
    // The raw layout: the lock flag, our session, the label as the value.
    auto e = consul.entry(name);
    REQUIRE(e.is_object());
    CHECK(e["Flags"].get<std::uint64_t>() == kLockFlag);
    CHECK(agent::value_of(e) == label);

    auto held = observer.inspect(name);
    CHECK(held.held == true);
    CHECK(held.holder == label);
    CHECK(held.token == m.token());
    CHECK(held.token == e["ModifyIndex"].get<std::uint64_t>());
    CHECK_FALSE(held.remaining);
    REQUIRE(held.unknown.count("remaining") == 1);
    CHECK(held.unknown.at("remaining").find("2 x TTL") != std::string::npos);
    CHECK_FALSE(held.waiters);
    CHECK(held.unknown.count("waiters") == 1);
    CHECK(held.unknown.size() == 2);

    m.unlock();
    auto after = observer.inspect(name);
    CHECK(after.held == false);
    CHECK_FALSE(after.holder);
    CHECK_FALSE(after.token);
    CHECK(after.unknown.size() == 1);
    // Released as api/lock.go releases: the key stays, without a session, with its value.
    auto released = consul.entry(name);
    REQUIRE(released.is_object());
    CHECK((!released.contains("Session") || released["Session"].is_null() || released["Session"] == ""));
    CHECK(agent::value_of(released) == label);
}

TEST_CASE("inspect costs exactly one GET of the lock key and writes nothing", "[consul][inspect][emulator]") {
    if (!counts_requests()) return;
    auto observer = distlock::connect(url());
    agent consul(url());
    const auto name = unique_name("inspect-count");
    const auto path = consul.key_path(name);
    auto counts = [&] {
        auto r = consul.call("GET", "/emulator/stats?path=" + path);
        REQUIRE(r.status == 200);
        return json::parse(r.body);
    };
    // Held by a session of this test (a distlock holder's monitor would query the key too).
    const auto session = consul.new_session("delete");
    auto r = consul.call("PUT", path + "?flags=" + std::to_string(kLockFlag) + "&acquire=" + session, "counted");
    REQUIRE(r.body.find("true") != std::string::npos);
    const auto before = counts();
    auto info = observer.inspect(name);
    const auto after = counts();
    CHECK(info.holder == "counted");
    CHECK(after.value("GET", 0) - before.value("GET", 0) == 1);
    CHECK(after.value("PUT", 0) == before.value("PUT", 0));
    CHECK(after.value("DELETE", 0) == before.value("DELETE", 0));
    consul.call("PUT", "/v1/session/destroy/" + session);
}

TEST_CASE("inspect of keys held by other Consul clients: api/lock.go without a value, the leader election pattern",
          "[consul][inspect][interop]") {
    auto observer = distlock::connect(url());
    agent consul(url());
    SECTION("api/lock.go (consul lock) without LockOptions.Value: held, no label, its ModifyIndex") {
        const auto name = unique_name("inspect-go-lock");
        const auto session = consul.new_session("release");
        auto r =
            consul.call("PUT", consul.key_path(name) + "?flags=" + std::to_string(kLockFlag) + "&acquire=" + session);
        REQUIRE(r.status == 200);
        REQUIRE(r.body.find("true") != std::string::npos);
        auto info = observer.inspect(name);
        CHECK(info.held == true);
        CHECK_FALSE(info.holder);
        CHECK(info.unknown.count("holder") == 1);
        CHECK(info.token == consul.entry(name)["ModifyIndex"].get<std::uint64_t>());
        // distlock cannot take it meanwhile.
        CHECK_FALSE(observer.mutex(name).try_lock());
        consul.call("PUT", "/v1/session/destroy/" + session);
        CHECK(observer.inspect(name).held == false);
    }
    SECTION("the documented leader election pattern: the value is the leader's information") {
        const auto name = unique_name("inspect-leader-pattern");
        const auto session = consul.new_session("delete");
        auto r = consul.call("PUT", consul.key_path(name) + "?acquire=" + session, "leader-host-7");
        REQUIRE(r.status == 200);
        REQUIRE(r.body.find("true") != std::string::npos);
        auto info = observer.inspect(name);
        CHECK(info.held == true);
        CHECK(info.holder == "leader-host-7");
        consul.call("PUT", "/v1/session/destroy/" + session);
        CHECK(observer.inspect(name).held == false);
    }
}

// ---- names and prefixes stay in their namespace (issue 23) ------------------------------------

namespace {

// Every key of the agent (a private emulator's: nothing else writes there), by key.
std::map<std::string, std::string> every_key(agent& consul) {
    auto r = consul.call("GET", "/v1/kv/?recurse");
    std::map<std::string, std::string> out;
    if (r.status == 404) return out;
    REQUIRE(r.status == 200);
    for (auto& e : json::parse(r.body)) out[e["Key"].get<std::string>()] = agent::value_of(e);
    return out;
}

}  // namespace

// A private emulator, which cleans paths as Consul's Go server does, with keys
// outside the prefix, beside it and under it: the keys of `others`.
struct dot_names_fixture {
    private_emulator emu{{"--min-ttl", "100ms"}};
    std::string prefix = "tenant/locks";
    std::string u = emu.base() + "/" + prefix + "?lease=2s&lock_delay=0s";
    agent consul{u};
    std::vector<std::string> others{"outside", "tenant/other", "tenant/locks-beside", "tenant/locks/other-name",
                                    "tenant/locks/other-name/.lock"};

    dot_names_fixture() {
        for (const auto& k : others)
            REQUIRE(consul.call("PUT", "/v1/kv/" + http::escape_path(k), "keep " + k).status == 200);
    }
    // Every key of `others` is still there with its value, and whatever else
    // stands is under the prefix, in the keys of the names "." and "..".
    void check_untouched() {
        auto all = every_key(consul);
        for (const auto& k : others) {
            INFO("key " << k);
            REQUIRE(all.count(k) == 1);
            CHECK(all[k] == "keep " + k);
        }
        for (const auto& [k, v] : all) {
            if (std::find(others.begin(), others.end(), k) != others.end()) continue;
            INFO("key " << k);
            CHECK((k.rfind(prefix + "/%2E", 0) == 0));
        }
    }
};

TEST_CASE("break_lock of the names '.' and '..' deletes no other key", "[consul][names]") {
    // On the code before, curl removed the dot segments: break_lock(p, "..")
    // sent DELETE /v1/kv/?recurse and wiped the whole store, and break_lock(p, ".")
    // every key under the prefix.
    dot_names_fixture f;
    {
        auto p = distlock::connect(f.u);
        for (std::string name : {".", ".."}) {
            auto m = p.mutex(name);
            REQUIRE(m.try_lock());
            distlock::testing::break_lock(p, name);
            CHECK(eventually([&] { return !m.held(); }, 3s));
        }
    }
    f.check_untouched();
}

TEST_CASE("the names '.' and '..' stay inside the prefix: the mutex, the semaphore, the read-write lock, inspect",
          "[consul][names]") {
    // On the code before, a semaphore named ".." listed and wrote at the KV root.
    dot_names_fixture f;
    {
        auto p = distlock::connect(f.u);
        for (std::string name : {".", ".."}) {
            INFO("name '" << name << "'");
            auto m = p.mutex(name);
            REQUIRE(m.try_lock());
            CHECK(p.inspect(name).held == true);
            m.unlock();
            auto sem = p.semaphore(name, 2);
            REQUIRE(sem.try_acquire());
            sem.release();
            auto rw = p.shared_mutex(name);
            REQUIRE(rw.try_lock_shared());
            rw.unlock_shared();
            REQUIRE(rw.try_lock());
            rw.unlock();
            distlock::testing::break_lock(p, name);
            CHECK(p.inspect(name).held == false);
            CHECK(f.consul.entry(name).is_null());
        }
    }
    f.check_untouched();
}

TEST_CASE("a prefix with a '.', '..' or empty segment is refused at connect, before any request",
          "[consul][names][input]") {
    // No agent at all: the refusal comes first.
    for (std::string path : {"/%2e%2e", "/%2E", "/a/%2e%2e/b", "/a//b", "/a/%2E%2E"}) {
        INFO("path " << path);
        try {
            (void)distlock::connect("consul://127.0.0.1:1" + path);
            FAIL("connected");
        } catch (const distlock::invalid_argument_error& e) {
            CHECK(std::string(e.what()).find("prefix") != std::string::npos);
        }
    }
}

TEST_CASE("token= with a control character is refused at connect, and the message does not show it",
          "[consul][headers][input]") {
    const auto u = url();
    const auto base = u.substr(0, u.find_first_of("/?", 9)) + "/inject";
    for (std::string bad : {"%0D%0AX-Injected:%201", "%0A", "%00", "%09", "%1F", "%7F"}) {
        INFO("token s3cr3t" << bad);
        try {
            (void)distlock::connect(base + "?token=s3cr3t" + bad);
            FAIL("connected");
        } catch (const distlock::invalid_argument_error& e) {
            const std::string what = e.what();
            CHECK(what.find("X-Consul-Token") != std::string::npos);
            CHECK(what.find("s3cr3t") == std::string::npos);
            CHECK(what.find("Injected") == std::string::npos);
        }
    }
}

// ---- a hostile agent: every reply it can make gives a typed distlock error ------------------

namespace {

// A fake agent: the connect probe answers 404, then `answer` decides.
distlock::test::fake_http_server hostile_agent(
    std::function<std::optional<distlock::test::fake_reply>(const distlock::test::fake_request&, int)> answer) {
    return distlock::test::fake_http_server(
        [answer = std::move(answer)](const distlock::test::fake_request& rq,
                                     int fd) -> std::optional<distlock::test::fake_reply> {
            if (rq.method == "GET" && rq.target == "/v1/kv/h") return distlock::test::fake_reply{404, ""};
            return answer(rq, fd);
        });
}

}  // namespace

TEST_CASE("a session ID that is not one is refused: nothing is sent with it", "[consul][hostile]") {
    for (const std::string& id :
         std::vector<std::string>{"../../v1/kv/", "x&recurse", "a/b", "", std::string(200, 'a')}) {
        INFO("ID '" << id << "'");
        auto server = hostile_agent(
            [&](const distlock::test::fake_request& rq, int) -> std::optional<distlock::test::fake_reply> {
                if (rq.target == "/v1/session/create") return distlock::test::fake_reply{200, json{{"ID", id}}.dump()};
                return distlock::test::fake_reply{200, "true"};
            });
        auto p = distlock::connect("consul://" + server.address() + "/h?lease=2s");
        auto m = p.mutex("n");
        CHECK_THROWS_AS(m.try_lock(), distlock::unavailable_error);
        auto seen = server.requests();
        REQUIRE(seen.size() == 2);  // the connect probe and the session create, nothing with the ID
        CHECK(seen[1].target == "/v1/session/create");
    }
}

TEST_CASE("malformed or mistyped replies of the agent are typed distlock errors, never JSON exceptions",
          "[consul][hostile]") {
    const std::vector<std::string> kv_bodies{
        "[{\"Key\":\"h/n\",\"Flags\":\"3304740253564472344\",\"Session\":\"s\"}]",  // Flags a string
        "[{\"Key\":\"h/n\",\"Flags\":-1}]",                                         // negative
        "[{\"Key\":\"h/n\",\"ModifyIndex\":1.5}]",                                  // not an integer
        "[{\"Key\":\"h/n\",\"LockIndex\":{}}]",                                     // an object
        "[{\"Key\":\"h/n\",\"Value\":\"not base64!\"}]",
        "[\"a\"]",
        "{}",
        "[]",
        "[{",
        "\xff\xfe",
        "null"};
    for (const auto& body : kv_bodies) {
        INFO("KV reply " << body);
        auto server = hostile_agent(
            [&](const distlock::test::fake_request& rq, int) -> std::optional<distlock::test::fake_reply> {
                if (rq.target == "/v1/session/create")
                    return distlock::test::fake_reply{200, "{\"ID\":\"0b5c2f8e-1c1e-4f7a-9d1e-3c2b1a0f9e8d\"}"};
                if (rq.method == "GET") return distlock::test::fake_reply{200, body, {"X-Consul-Index: 5"}};
                return distlock::test::fake_reply{200, "true"};
            });
        auto p = distlock::connect("consul://" + server.address() + "/h?lease=2s");
        try {
            (void)p.inspect("n");
            FAIL("a malformed reply was accepted");
        } catch (const distlock::error& e) {
            CHECK(e.code() == distlock::errc::unavailable);
        }
        auto m = p.mutex("n");
        CHECK_THROWS_AS(m.try_lock(), distlock::error);
    }
}

TEST_CASE("an agent that answers an endless body is unavailable at once, not a growing process",
          "[consul][hostile][caps]") {
    // Bounded at 64 MiB, so that the code before (no cap) times out instead of eating the memory.
    distlock::test::fake_http_server server(
        [](const distlock::test::fake_request&, int fd) -> std::optional<distlock::test::fake_reply> {
            if (!distlock::test::scripted_server::send_all(fd, "HTTP/1.1 200 OK\r\nX-Consul-Index: 1\r\n\r\n["))
                return std::nullopt;
            const std::string chunk(64 * 1024, ' ');
            for (int i = 0; i < 1024; ++i)
                if (!distlock::test::scripted_server::send_all(fd, chunk)) break;
            return std::nullopt;
        });
    auto t0 = clk::now();
    try {
        (void)distlock::connect("consul://" + server.address() + "/h?timeout=20s");
        FAIL("connected");
    } catch (const distlock::unavailable_error& e) {
        CHECK(std::string(e.what()).find("cut off") != std::string::npos);
    }
    CHECK(clk::now() - t0 < 10s);
}

TEST_CASE("the proxy environment is ignored: the token goes to the agent only, never to a proxy",
          "[consul][hostile][proxy]") {
    // A proxy named by http_proxy or ALL_PROXY would read X-Consul-Token on every
    // request (and could answer as the agent): libcurl obeys them unless told not to.
    distlock::test::fake_http_server proxy([](const distlock::test::fake_request&, int) {
        return distlock::test::fake_reply{404, ""};
    });
    auto agent =
        hostile_agent([](const distlock::test::fake_request&, int) -> std::optional<distlock::test::fake_reply> {
            return distlock::test::fake_reply{404, "", {"X-Consul-Index: 3"}};
        });
    distlock::test::proxy_environment env("http://" + proxy.address());
    {
        auto p = distlock::connect("consul://" + agent.address() + "/h?token=s3cr3t-consul-token");
        CHECK_FALSE(p.inspect("n").held.value_or(true));
    }
    const auto seen = agent.requests();
    REQUIRE(seen.size() == 2);  // the connect probe and inspect's GET
    for (const auto& rq : seen) CHECK(rq.headers.count("x-consul-token") == 1);
    for (const auto& rq : proxy.requests()) CHECK(("the proxy got " + rq.method + " " + rq.target).empty());
}

TEST_CASE("a KV document or a reply nested deeper than 64 levels is refused: never read, never overwritten",
          "[consul][hostile][json]") {
    // Anyone with KV write on the prefix writes the semaphore's .lock and the
    // read-write lock's .rwlock: such a document, like any reply, is refused past
    // 64 levels before it is parsed (copies and dump() of nlohmann recurse per
    // level). Before, these two were read as documents without holders and
    // overwritten.
    const auto nested = [](std::size_t depth) { return std::string(depth, '[') + std::string(depth, ']'); };
    auto p = distlock::connect(url());
    agent consul(url());
    const auto name = unique_name("deep-doc");
    const auto sem_target = "/v1/kv/" + http::escape_path(consul.semaphore_prefix(name) + ".lock");
    const std::string sem_doc = "{\"Limit\":2,\"Holders\":{\"x\":" + nested(100) + "}}";
    REQUIRE(consul.call("PUT", sem_target + "?flags=" + std::to_string(kSemaphoreFlag), sem_doc).status == 200);
    auto s = p.semaphore(name, 2);
    CHECK_THROWS_AS(s.try_acquire_for(1s), distlock::invalid_argument_error);
    const auto rw_prefix = consul.semaphore_prefix(name);
    const auto rw_target = "/v1/kv/" + http::escape_path(rw_prefix.substr(0, rw_prefix.size() - 1) + "~rw/.rwlock");
    const std::string rw_doc = "{\"Writer\":\"\",\"Readers\":{\"x\":" + nested(100) + "},\"Waiting\":\"\"}";
    REQUIRE(consul.call("PUT", rw_target + "?flags=" + std::to_string(0x6469737472776c6bULL), rw_doc).status == 200);
    auto rw = p.shared_mutex(name);
    CHECK_THROWS_AS(rw.try_lock_for(1s), distlock::invalid_argument_error);
    CHECK(consul.call("GET", sem_target + "?raw").body == sem_doc);
    CHECK(consul.call("GET", rw_target + "?raw").body == rw_doc);
    consul.call("DELETE", "/v1/kv/" + http::escape_path(rw_prefix) + "?recurse");
    consul.call("DELETE", "/v1/kv/" + http::escape_path(rw_prefix.substr(0, rw_prefix.size() - 1)) + "~rw/?recurse");

    // An agent whose listing nests a million levels: unexpected reply (a guard:
    // nothing recursed over a listing before either).
    auto server =
        hostile_agent([&](const distlock::test::fake_request&, int) -> std::optional<distlock::test::fake_reply> {
            return distlock::test::fake_reply{200, nested(1000000), {"X-Consul-Index: 5"}};
        });
    auto hostile = distlock::connect("consul://" + server.address() + "/h");
    CHECK_THROWS_AS((void)hostile.inspect("n"), distlock::unavailable_error);
}

// ---- replies that would make a loop spin -----------------------------------------------------

namespace {

constexpr const char* kSessionId = "0b5c2f8e-1c1e-4f7a-9d1e-3c2b1a0f9e8d";

// A fake agent on which the key h/n is held by another session (or, with
// `ours`, by ours once acquired), whose GETs answer at once: with
// X-Consul-Index `index`, or without the header when `index` is empty. It
// counts the GETs of the key.
distlock::test::fake_http_server spinning_agent(std::atomic<int>& gets, std::string index, bool ours) {
    return hostile_agent([&gets, index, ours](const distlock::test::fake_request& rq,
                                              int) -> std::optional<distlock::test::fake_reply> {
        if (rq.target == "/v1/session/create") return distlock::test::fake_reply{200, json{{"ID", kSessionId}}.dump()};
        if (rq.method == "GET" && rq.target.rfind("/v1/kv/h/n/?", 0) == 0) {  // a semaphore's listing: full
            ++gets;
            const auto b64 = [](const std::string& v) { return http::base64_encode(v); };
            const json entries = json::array({{{"Key", "h/n/.lock"},
                                               {"Flags", kSemaphoreFlag},
                                               {"ModifyIndex", 7},
                                               {"Value", b64(R"({"Limit":1,"Holders":{"another-session":true}})")}},
                                              {{"Key", "h/n/another-session"},
                                               {"Flags", kSemaphoreFlag},
                                               {"Session", "another-session"},
                                               {"ModifyIndex", 6}},
                                              {{"Key", std::string("h/n/") + kSessionId},
                                               {"Flags", kSemaphoreFlag},
                                               {"Session", kSessionId},
                                               {"ModifyIndex", 7}}});
            std::vector<std::string> headers;
            if (!index.empty()) headers.push_back("X-Consul-Index: " + index);
            return distlock::test::fake_reply{200, entries.dump(), headers};
        }
        if (rq.method == "GET" && rq.target.rfind("/v1/kv/h/n", 0) == 0) {
            ++gets;
            const json e{{"Key", "h/n"},     {"Flags", kLockFlag}, {"Session", ours ? kSessionId : "another-session"},
                         {"Value", nullptr}, {"ModifyIndex", 7},   {"LockIndex", 1}};
            std::vector<std::string> headers;
            if (!index.empty()) headers.push_back("X-Consul-Index: " + index);
            return distlock::test::fake_reply{200, json::array({e}).dump(), headers};
        }
        return distlock::test::fake_reply{200, "true"};
    });
}

}  // namespace

TEST_CASE("a waiter paces its queries when the agent's index does not move: no header, or the same index at once",
          "[consul][hostile][spin]") {
    // Consul's rules for blocking queries: an index that is missing (0) or goes
    // backwards restarts a query that does not block, and the loop must rate-limit
    // rounds that show nothing new. Before, each reply was followed by the next
    // query at once: thousands a second for as long as the wait lasts.
    for (std::string index : {"", "5", "abc"}) {
        INFO("X-Consul-Index: '" << index << "'");
        std::atomic<int> gets{0};
        auto server = spinning_agent(gets, index, false);
        auto p = distlock::connect("consul://" + server.address() + "/h?lease=2s");
        auto m = p.mutex("n");
        const auto t0 = clk::now();
        CHECK_FALSE(m.try_lock_for(1s));
        CHECK(clk::now() - t0 < 2s);
        CHECK(gets.load() < 50);
        CHECK(gets.load() > 2);  // it kept looking, at a pace
        // A semaphore's contender, its one permit held by another session.
        gets = 0;
        auto s = p.semaphore("n", 1);
        CHECK_FALSE(s.try_acquire_for(1s));
        CHECK(gets.load() < 50);
        CHECK(gets.load() > 2);
    }
}

TEST_CASE("the held lock's monitor paces its queries when the agent answers at once with nothing new",
          "[consul][hostile][spin]") {
    // An agent that answers the monitor's blocking query at once with the same
    // index (or none) and the key still ours: before, the loop thread queried again
    // at once, for as long as the lock was held.
    for (std::string index : {"", "5"}) {
        INFO("X-Consul-Index: '" << index << "'");
        std::atomic<int> gets{0};
        auto server = spinning_agent(gets, index, true);
        auto p = distlock::connect("consul://" + server.address() + "/h?lease=10s");
        auto m = p.mutex("n");
        REQUIRE(m.try_lock());
        const int at_grant = gets.load();
        std::this_thread::sleep_for(1s);
        const int in_one_second = gets.load() - at_grant;
        m.unlock();
        CHECK(in_one_second < 20);
        CHECK(in_one_second > 2);  // still watching
    }
}
