// The seed's optimistic stock update of the tool (tools/optimistic_stock.hpp),
// and `distlock flash-sale` over every SQL strategy: locked runs and the
// lock-free optimistic run both sell exactly the stock.
#include <atomic>
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <thread>

#include "distlock/distlock.hpp"
#include "distlock/spi/url.hpp"
#include "optimistic_stock.hpp"
#include "support.hpp"

namespace {

std::vector<std::string> sql_urls(const std::vector<std::string>& vars) {
    std::vector<std::string> out;
    for (const auto& v : vars) {
        auto url = distlock::test::env(v.c_str());
        if (url.empty() && distlock::test::env("DISTLOCK_REQUIRE_ALL") == "1") FAIL(v << " is not set");
        if (!url.empty()) out.push_back(url);
    }
    return out;
}

nlohmann::json flash_sale(const std::string& args) {
    const std::string cmd = std::string(DISTLOCK_CLI) + " flash-sale --json --quiet " + args;
    const auto r = distlock::test::run_command(cmd);
    INFO(cmd << "\n" << r.out);
    REQUIRE(r.status == 0);
    return nlohmann::json::parse(r.out);
}

}  // namespace

TEST_CASE("optimistic takes never oversell and report conflicts honestly", "[sql][optimistic]") {
    namespace tool = distlock::tool;
    for (const auto& url : sql_urls({"DISTLOCK_TEST_MYSQL_URL", "DISTLOCK_TEST_POSTGRES_URL"})) {
        INFO(url);
        auto stock = tool::open_optimistic_stock(url);
        stock->create_table();
        const auto item = distlock::test::unique_name("item");
        stock->put(item, 30);
        CHECK(stock->stock(item) == 30);
        CHECK_FALSE(stock->stock(item + ":none").has_value());
        std::atomic<int> taken{0}, sold_out{0}, conflicts{0}, most_attempts{0};
        std::vector<std::thread> buyers;
        for (int t = 0; t < 8; ++t)
            buyers.emplace_back([&] {
                auto mine = tool::open_optimistic_stock(url);
                for (int i = 0; i < 10; ++i) {
                    auto r = mine->take(item);
                    for (int seen = most_attempts.load(); r.attempts > seen;)
                        if (most_attempts.compare_exchange_weak(seen, r.attempts)) break;
                    if (r.outcome == tool::stock_outcome::sold_out) {
                        ++sold_out;  // seen empty on reading: no compare-and-set sent
                        CHECK(r.remaining == 0);
                        continue;
                    }
                    CHECK(r.attempts >= 1);  // taken or conflict: at least one compare-and-set
                    if (r.outcome == tool::stock_outcome::taken) ++taken;
                    else ++conflicts;
                }
            });
        for (auto& b : buyers) b.join();
        CHECK(taken.load() + sold_out.load() + conflicts.load() == 80);
        CHECK(taken.load() <= 30);
        CHECK(stock->stock(item) == 30 - taken.load());
        CHECK(most_attempts.load() <= tool::stock_options{}.tries);  // bounded retries
        CHECK_THROWS_AS(stock->take(item + ":none"), distlock::invalid_argument_error);
    }
    CHECK_THROWS_AS(tool::open_optimistic_stock("redis://127.0.0.1:1"), distlock::invalid_argument_error);
    tool::stock_options bad;
    bad.table = "stock; DROP TABLE x";
    for (const auto& url : sql_urls({"DISTLOCK_TEST_MYSQL_URL"}))
        CHECK_THROWS_AS(tool::open_optimistic_stock(url, bad), distlock::invalid_argument_error);
}

TEST_CASE("the optimistic stock helper's errors say what to do next", "[sql][optimistic]") {
    namespace tool = distlock::tool;
    using distlock::invalid_argument_error;
    using distlock::unsupported_error;
    // Refused before any connection: not an SQL URL, a parameter nobody takes,
    // no tries.
    CHECK_THROWS_AS(tool::open_optimistic_stock("postgres://u:p@127.0.0.1:1/db?bogus=1"), invalid_argument_error);
    CHECK_THROWS_AS(tool::open_optimistic_stock("mysql://u:p@127.0.0.1:1/db?tries=0"), invalid_argument_error);
    tool::stock_options no_tries;
    no_tries.tries = 0;
    CHECK_THROWS_AS(tool::open_optimistic_stock("postgres://u:p@127.0.0.1:1/db", no_tries), invalid_argument_error);
    // The lock backend's own parameters are ignored.
    CHECK_NOTHROW(
        tool::open_optimistic_stock("mysql://u:p@127.0.0.1:1/db?strategy=get-lock&lease=2s&fence=table&pool=3"));
    // TLS that the client library cannot do as asked is refused, never dropped.
    CHECK_THROWS_AS(tool::open_optimistic_stock("mysql://u:p@127.0.0.1:1/db?ssl_mode=required"), unsupported_error);
    CHECK_THROWS_AS(tool::open_optimistic_stock("mysql://u:p@127.0.0.1:1/db?tls=true&tls_insecure=true"),
                    unsupported_error);
    CHECK_THROWS_AS(tool::open_optimistic_stock("postgres://u:p@localhost:1/db?tls=true&tls_server_name=db.example"),
                    unsupported_error);
    // Nothing listening: unavailable (it connects on first use), and no
    // message shows the password.
    for (const char* url : {"postgres://u:s3cret-pw@127.0.0.1:1/db?connect_timeout=2s",
                            "mysql://u:s3cret-pw@127.0.0.1:1/db?connect_timeout=2s"}) {
        INFO(url);
        auto stock = tool::open_optimistic_stock(url);
        try {
            (void)stock->stock("x");
            FAIL("no error");
        } catch (const distlock::unavailable_error& e) {
            CHECK(std::string(e.what()).find("s3cret-pw") == std::string::npos);
        }
    }
    // A wrong password: access denied, and not shown.
    for (const auto& url : sql_urls({"DISTLOCK_TEST_MYSQL_URL", "DISTLOCK_TEST_POSTGRES_URL"})) {
        const auto password = distlock::spi::url::parse(url).password();
        auto wrong = url;
        wrong.replace(wrong.find(":" + password + "@"), password.size() + 2, ":not-the-password-7@");
        INFO(wrong);
        try {
            (void)tool::open_optimistic_stock(wrong)->stock("x");
            FAIL("no error");
        } catch (const distlock::access_denied_error& e) {
            CHECK(std::string(e.what()).find("not-the-password-7") == std::string::npos);
        }
    }
    // Over TLS where the servers are up (integration/backends.sh up postgres-tls
    // mysql-tls): it works, and a certificate for another name is refused.
    for (const char* var : {"DISTLOCK_TEST_POSTGRES_TLS_URL", "DISTLOCK_TEST_MYSQL_TLS_URL"}) {
        const auto url = distlock::test::env(var);
        if (url.empty()) continue;
        INFO(url);
        auto stock = tool::open_optimistic_stock(url);
        stock->create_table();
        const auto item = distlock::test::unique_name("tls-item");
        stock->put(item, 3);
        CHECK(stock->take(item).outcome == tool::stock_outcome::taken);
        CHECK(stock->stock(item) == 2);
    }
    for (const char* var :
         {"DISTLOCK_TEST_POSTGRES_TLS_WRONG_NAME_URL_MUST_FAIL", "DISTLOCK_TEST_MYSQL_TLS_WRONG_NAME_URL_MUST_FAIL"}) {
        const auto url = distlock::test::env(var);
        if (url.empty()) continue;
        INFO(url);
        CHECK_THROWS_AS(tool::open_optimistic_stock(url)->stock("x"), distlock::access_denied_error);
    }
}

TEST_CASE("flash-sale --strategy optimistic sells exactly the stock without a lock", "[sql][flash-sale]") {
    for (const auto& url : sql_urls({"DISTLOCK_TEST_MYSQL_URL", "DISTLOCK_TEST_POSTGRES_URL"})) {
        for (int segments : {1, 4}) {
            auto j = flash_sale("--strategy optimistic --backend '" + url +
                                "' --requests 400 --concurrency 60 "
                                "--stock 40 --segments " +
                                std::to_string(segments) + " --name " + distlock::test::unique_name("opt"));
            CHECK(j["oversold"] == 0);
            CHECK(j["consistent"] == true);
            CHECK(j["strategy"] == "optimistic");
            // Every item is sold unless some purchases lost every race.
            CHECK(j["sold"].get<long>() + j["stock_left"].get<long>() == 40);
            CHECK(j["sold"].get<long>() >= 40 - j["conflicts"].get<long>());
        }
    }
}

TEST_CASE("a locked flash sale over every SQL strategy sells exactly the stock", "[sql][flash-sale]") {
    for (const auto& url : sql_urls({"DISTLOCK_TEST_MYSQL_FOR_UPDATE_URL", "DISTLOCK_TEST_MYSQL_LEASE_TABLE_URL",
                                     "DISTLOCK_TEST_MYSQL_OPTIMISTIC_URL", "DISTLOCK_TEST_MYSQL_GET_LOCK_URL",
                                     "DISTLOCK_TEST_POSTGRES_FOR_UPDATE_URL", "DISTLOCK_TEST_POSTGRES_LEASE_TABLE_URL",
                                     "DISTLOCK_TEST_POSTGRES_OPTIMISTIC_URL", "DISTLOCK_TEST_POSTGRES_ADVISORY_URL"})) {
        auto j =
            flash_sale("--backend '" + url + "' --requests 200 --concurrency 40 --stock 20 --pause-ms 0.2 --name " +
                       distlock::test::unique_name("locked"));
        CHECK(j["sold"] == 20);
        CHECK(j["oversold"] == 0);
        CHECK(j["stock_left"] == 0);
    }
}
