// The HTTP/JSON layer shared by consul:// and etcd://, against a real etcd
// member (DISTLOCK_TEST_ETCD_URL): failover, timeouts, streamed responses, the
// asynchronous loop and its cancellation, and the small encoders.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <atomic>
#include <set>
#include <thread>

#include "distlock/error.hpp"
#include "distlock/spi/backend.hpp"
#include "http/http_codec.hpp"
#include "http/http_multi.hpp"
#include "http/http_options.hpp"
#include "http/http_pool.hpp"
#include "http/http_transfer.hpp"
#include "support.hpp"

using namespace std::chrono_literals;
using distlock::test::eventually;
using json = nlohmann::json;
namespace http = distlock::backends::http;
using clk = std::chrono::steady_clock;

namespace {

std::string endpoint() {
    auto u = distlock::test::env("DISTLOCK_TEST_ETCD_URL");
    auto start = u.find("://") + 3;
    return "http://" + u.substr(start, u.find_first_of("/?", start) - start);
}

http::options opts(std::vector<std::string> endpoints) {
    http::options o;
    o.backend = "test";
    o.endpoints = std::move(endpoints);
    o.connect_timeout = 1s;
    o.request_timeout = 3s;
    return o;
}

http::request post(const std::string& path, const json& body, std::chrono::milliseconds timeout = 0ms) {
    http::request r;
    r.method = "POST";
    r.target = path;
    r.body = body.dump();
    r.timeout = timeout;
    return r;
}

std::string b64(const std::string& s) { return http::base64_encode(s); }

}  // namespace

TEST_CASE("base64 round-trips every byte value and matches the standard vectors", "[http]") {
    CHECK(http::base64_encode("") == "");
    CHECK(http::base64_encode("f") == "Zg==");
    CHECK(http::base64_encode("fo") == "Zm8=");
    CHECK(http::base64_encode("foo") == "Zm9v");
    CHECK(http::base64_encode("foobar") == "Zm9vYmFy");
    std::string all;
    for (int i = 0; i < 256; ++i) all += static_cast<char>(i);
    for (std::size_t n = 0; n < 7; ++n) CHECK(http::base64_decode(http::base64_encode(all.substr(n))) == all.substr(n));
    CHECK_FALSE(http::base64_decode("a*b").has_value());
}

TEST_CASE("encoded names keep safe bytes, escape the rest and never contain a slash", "[http]") {
    CHECK(http::encode_name("stock:product_01") == "stock%3Aproduct_01");
    CHECK(http::encode_name(std::string("a/b\0c", 5)) == "a%2Fb%00c");
    CHECK(http::encode_name("%") == "%25");
    // Injective on a set of lookalikes.
    std::set<std::string> seen;
    for (std::string n : {"a/b", "a%2Fb", "a%252Fb", "a b", "a+b", "a%20b"})
        CHECK(seen.insert(http::encode_name(n)).second);
    CHECK(http::escape_path("a b/c%d") == "a%20b/c%25d");
}

TEST_CASE("a request fails over from an unreachable endpoint to a live one and stays there", "[http]") {
    http::client c(opts({"http://127.0.0.1:1", endpoint()}));
    auto r = c.send(post("/v3/kv/range", {{"key", b64("x")}}));
    CHECK(r.status == 200);
    CHECK(r.endpoint == endpoint());
    CHECK(c.current_endpoint() == endpoint());
    CHECK(json::parse(r.body).contains("header"));
    CHECK(r.header("content-type").find("json") != std::string::npos);
}

TEST_CASE("no reachable endpoint is an unavailable_error, quickly", "[http]") {
    http::client c(opts({"http://127.0.0.1:1", "http://127.0.0.1:2"}));
    auto t0 = clk::now();
    CHECK_THROWS_AS(c.send(post("/v3/kv/range", {{"key", b64("x")}})), distlock::unavailable_error);
    CHECK(clk::now() - t0 < 5s);
}

TEST_CASE("a streamed watch delivers events line by line and ends at its timeout", "[http]") {
    http::client c(opts({endpoint()}));
    const auto key = "/http-test/" + distlock::spi::random_token();
    std::vector<json> lines;
    std::thread writer([&] {
        std::this_thread::sleep_for(300ms);
        http::client w(opts({endpoint()}));
        w.send(post("/v3/kv/put", {{"key", b64(key)}, {"value", b64("v")}}));
        w.send(post("/v3/kv/deleterange", {{"key", b64(key)}}));
    });
    auto res = c.stream_lines(post("/v3/watch", {{"create_request", {{"key", b64(key)}}}}, 1500ms),
                              [&](std::string_view line) {
                                  lines.push_back(json::parse(line));
                                  return true;
                              });
    writer.join();
    CHECK(res.how == http::outcome::timed_out);
    CHECK(res.resp.status == 200);
    REQUIRE(lines.size() >= 2);
    CHECK(lines[0]["result"].value("created", false));
    int deletes = 0;
    for (const auto& l : lines)
        for (const auto& ev : l["result"].value("events", json::array())) deletes += ev.value("type", "") == "DELETE";
    CHECK(deletes == 1);
}

TEST_CASE("a stream stops as soon as its callback says so", "[http]") {
    http::client c(opts({endpoint()}));
    auto t0 = clk::now();
    auto res = c.stream_lines(post("/v3/watch", {{"create_request", {{"key", b64("/http-test/stop")}}}}, 10s),
                              [&](std::string_view) { return false; });
    CHECK(res.how == http::outcome::stopped);
    CHECK(clk::now() - t0 < 5s);
    // The client is still usable afterwards.
    CHECK(c.send(post("/v3/kv/range", {{"key", b64("x")}})).status == 200);
}

TEST_CASE("the loop runs requests concurrently and cancels a watch synchronously", "[http]") {
    http::client c(opts({endpoint()}));
    http::loop loop(c);
    std::vector<http::request> batch;
    for (int i = 0; i < 5; ++i) batch.push_back(post("/v3/kv/range", {{"key", b64("k" + std::to_string(i))}}));
    auto results = loop.run_all(batch);
    REQUIRE(results.size() == 5);
    for (const auto& r : results) {
        CHECK(r.how == http::outcome::completed);
        CHECK(r.resp.status == 200);
    }

    const auto key = "/http-test/" + distlock::spi::random_token();
    std::atomic<int> lines{0}, done{0};
    auto id = loop.start(
        post("/v3/watch", {{"create_request", {{"key", b64(key)}}}}, 30s),
        [&](std::string_view) {
            ++lines;
            return true;
        },
        [&](http::transfer_result) { ++done; });
    REQUIRE(eventually([&] { return lines.load() >= 1; }, 5s));  // "created"
    c.send(post("/v3/kv/put", {{"key", b64(key)}, {"value", b64("v")}}));
    REQUIRE(eventually([&] { return lines.load() >= 2; }, 5s));  // the event
    loop.cancel(id);
    const int after = lines.load();
    c.send(post("/v3/kv/deleterange", {{"key", b64(key)}}));
    std::this_thread::sleep_for(300ms);
    CHECK(lines.load() == after);  // nothing after cancel()
    CHECK(done.load() == 0);
}

TEST_CASE("a delayed transfer waits for its delay and a cancelled one never calls back", "[http]") {
    http::client c(opts({endpoint()}));
    http::loop loop(c);
    std::atomic<int> done{0};
    auto t0 = clk::now();
    std::atomic<long long> took{0};
    loop.start(
        post("/v3/kv/range", {{"key", b64("x")}}), nullptr,
        [&](http::transfer_result r) {
            took = std::chrono::duration_cast<std::chrono::milliseconds>(clk::now() - t0).count();
            done += r.how == http::outcome::completed ? 1 : 100;
        },
        300ms);
    auto never = loop.start(
        post("/v3/kv/range", {{"key", b64("y")}}), nullptr, [&](http::transfer_result) { done += 1000; }, 200ms);
    loop.cancel(never);
    REQUIRE(eventually([&] { return done.load() != 0; }, 5s));
    std::this_thread::sleep_for(300ms);
    CHECK(done.load() == 1);
    CHECK(took.load() >= 290);
}

TEST_CASE("a request that outlives its timeout fails as timed out", "[http]") {
    http::client c(opts({endpoint()}));
    // A watch never completes on its own: with a 300 ms bound send() must give up.
    auto t0 = clk::now();
    try {
        c.send(post("/v3/watch", {{"create_request", {{"key", b64("/http-test/t")}}}}, 300ms));
        FAIL("a watch completed");
    } catch (const distlock::unavailable_error& e) {
        CHECK(std::string(e.what()).find("timed out") != std::string::npos);
    }
    CHECK(clk::now() - t0 < 3s);
}
