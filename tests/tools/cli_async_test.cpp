// The distlock tool's asynchronous forms, driven as a user would: the shape of
// `bench --async`'s report (pending waiters counted, hand-offs measured beside
// the synchronous ones) and `flash-sale --async` selling exactly the stock, on
// memory:// and file://. Counts are checked, never times.
#include <catch2/catch.hpp>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "support.hpp"

namespace {

distlock::test::command_result run(const std::string& args) {
    return distlock::test::run_command(std::string(DISTLOCK_CLI) + " " + args + " 2>/dev/null");
}

// memory:// and a file:// directory of this run.
std::vector<std::string> embedded_urls() {
    const auto dir =
        std::filesystem::temp_directory_path() / ("distlock-cli-async-" + distlock::test::unique_name("t").substr(2));
    std::filesystem::create_directories(dir);
    return {"memory://", "file://" + dir.string()};
}

// The checks shared by both parts of the report: every waiter was still
// waiting when the process was sampled, and each completed.
void check_pending_part(const nlohmann::json& part, long waiters) {
    for (const char* when : {"before", "pending"}) {
        INFO(when);
        CHECK(part[when]["threads"].get<long>() >= 1);
        CHECK(part[when]["descriptors"].get<long>() >= 3);
        CHECK(part[when]["tcp_connections"] == 0);  // embedded backends
        CHECK(part[when]["rss_bytes"].get<long>() > 0);
    }
    CHECK(part["completed_early"] == 0);
    CHECK(part["stuck"] == 0);
    CHECK(part["unreleased"] == 0);
    CHECK(part["rss_per_waiter_bytes"].is_number_integer());
    CHECK(part["object_rss_per_waiter_bytes"].is_number_integer());
    const auto& o = part["outcomes"];
    CHECK(o["failed"] == 0);
    CHECK(o["timed_out"] == 0);
    CHECK(o["granted"].get<long>() + o["cancelled"].get<long>() == waiters);
    CHECK(o["released"] == o["granted"]);
}

}  // namespace

TEST_CASE("bench --async counts pending waiters and times hand-offs beside the synchronous ones",
          "[cli][bench][async]") {
    for (const auto& url : embedded_urls()) {
        INFO(url);
        auto r = run("bench --backend " + url + " --async --waiters 40 --handoffs 15 --seconds 20 --json --quiet");
        INFO(r.out);
        REQUIRE(r.status == 0);
        auto j = nlohmann::json::parse(r.out);
        CHECK(j["mode"] == "async");
        CHECK(j["primitive"] == "mutex");
        CHECK(j["waiters"] == 40);
        CHECK(j["floor_rtt_us"].is_null());  // no round trip to count in
        check_pending_part(j["one_name"], 40);
        check_pending_part(j["many_names"], 40);
        // One name: the chain stopped at 15 hand-offs (16 grants: the holder's
        // release is not one of them) and the 24 other waiters were cancelled.
        const auto& one = j["one_name"];
        CHECK(one["handoffs"] == 15);
        CHECK(one["outcomes"]["granted"] == 16);
        CHECK(one["outcomes"]["cancelled"] == 24);
        CHECK(one["handoff_p99_us"].get<double>() >= one["handoff_p50_us"].get<double>());
        // N names: each waiter was granted once its holder released.
        CHECK(j["many_names"]["outcomes"]["granted"] == 40);
        // The holders are another process where the backend excludes processes.
        const bool file = url.rfind("file://", 0) == 0;
        CHECK(one["holder_in_another_process"] == file);
        CHECK(j["many_names"]["holder_in_another_process"] == file);
        CHECK(j["sync"]["threads"] == 4);
        CHECK(j["sync"]["handoffs"].get<long>() > 0);
        CHECK(j["sync"]["handoffs"].get<long>() <= 15);
        CHECK(j["async_sync_ratio"].is_number());
        CHECK(j["targets"] ==
              nlohmann::json{{"threads", 16}, {"rss_per_waiter_bytes", 8192}, {"async_sync_ratio", 1.2}});
        for (const char* t : {"threads", "rss_per_waiter_bytes", "async_sync_ratio"}) CHECK(j["met"][t].is_boolean());
    }
    auto text = run("bench --backend memory:// --async --waiters 10 --handoffs 5 --threads 2 --quiet");
    REQUIRE(text.status == 0);
    INFO(text.out);
    for (const char* part : {"async mutex memory://: 10 waiters\n", "\n  one name: threads ", "\n  10 names: threads ",
                             "\n  sync (2 threads, one name): hand-off p50 ", "\n  async/sync hand-off p50 "})
        CHECK(text.out.find(part) != std::string::npos);
}

TEST_CASE("bench --async refuses what it does not measure", "[cli][bench][async]") {
    const std::string base = "bench --backend memory:// --async --seconds 1 --quiet ";
    CHECK(run(base + "--waiters 0").status == 64);
    CHECK(run(base + "--handoffs 0").status == 64);
    CHECK(run(base + "--threads 1").status == 64);  // no hand-off between threads
    for (const char* other : {"--mode contended", "--primitive rw", "--processes 2", "--observe", "--permits 2"})
        CHECK(run(base + other).status == 64);
    CHECK(run("bench --backend memory:// --waiters 5 --seconds 300ms --quiet").status == 64);  // without --async
}

TEST_CASE("flash-sale --async sells exactly the stock", "[cli][flash-sale][async]") {
    const auto urls = embedded_urls();
    for (const auto& url : urls) {
        const bool file = url.rfind("file://", 0) == 0;
        for (int segments : {1, 3}) {
            INFO(url << ", " << segments << " segment(s)");
            auto r = run("flash-sale --backend " + url + " --async --json --quiet --requests 300 --concurrency 40" +
                         " --stock 25 --segments " + std::to_string(segments) + " --processes " + (file ? "2" : "1"));
            INFO(r.out);
            REQUIRE(r.status == 0);
            auto j = nlohmann::json::parse(r.out);
            CHECK(j["async"] == true);
            CHECK(j["locked"] == true);
            CHECK(j["sold"] == 25);
            CHECK(j["oversold"] == 0);
            CHECK(j["stock_left"] == 0);
            CHECK(j["consistent"] == true);
            CHECK(j["lock_timeouts"] == 0);
            CHECK(j["requests"] == 300);
            for (const char* key : {"elapsed_ms", "throughput_rps", "p50_ms", "p99_ms"}) CHECK(j.contains(key));
        }
    }
    auto text = run("flash-sale --backend " + urls[1] + " --async --quiet --requests 50 --stock 10");
    CHECK(text.status == 0);
    CHECK(text.out.rfind("WITH distlock (" + urls[1] + ", async):\n  stock 10, sold 10, stock left 0, OVERSOLD 0\n",
                         0) == 0);
    CHECK(run("flash-sale --backend memory:// --async --no-lock --quiet").status == 64);
}
