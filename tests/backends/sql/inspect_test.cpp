// provider::inspect on every SQL strategy against the real server: what each
// one shows of a lock held by another provider (label, token, lease left,
// waiters, or the declared reason), the lock free again after release, the
// holder_label column added to a lock table of the layout before it (and
// labels an older client leaves alone never shown for its grant), grant::waited,
// and no password in inspect's errors. Statement counts: round_trip_test.cpp.
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "distlock/distlock.hpp"
#include "distlock/spi/backend.hpp"
#include "distlock/testing.hpp"
#include "sql_test_support.hpp"
#include "support.hpp"
#include "tcp_proxy.hpp"

using namespace std::chrono_literals;
using namespace sql_test;
using distlock::test::eventually;
using distlock::test::unique_name;

namespace {

const std::string native = facts().native;
const bool is_mysql = facts().env == "MYSQL";

// Every strategy, and on MySQL each again over counter rows (fence=table).
std::vector<std::string> queries() {
    std::vector<std::string> q;
    for (const auto& s : {std::string("lease-table"), std::string("optimistic"), std::string("for-update"), native})
        q.push_back("strategy=" + s);
    if (is_mysql)
        for (const auto& s : {"lease-table", "optimistic", "for-update", "get-lock"})
            q.push_back(std::string("strategy=") + s + "&fence=table&table=distlock_fence_rows");
    return q;
}

std::string strategy_of(const std::string& query) {
    const auto from = query.find('=') + 1;
    return query.substr(from, query.find('&') == std::string::npos ? std::string::npos : query.find('&') - from);
}

std::string label(const std::string& what) { return what + "-" + distlock::spi::random_token().substr(0, 8); }

std::string password_of(const std::string& url) {
    const auto colon = url.find(':', url.find("://") + 3);
    return url.substr(colon + 1, url.find('@') - colon - 1);
}

bool has_reason(const distlock::lock_info& info, const char* field) {
    return info.unknown.count(field) == 1 && !info.unknown.at(field).empty();
}

}  // namespace

TEST_CASE("inspect shows who holds a lock, its token and lease left, or why not; free before and after",
          "[sql][inspect]") {
    for (const auto& query : queries()) {
        DYNAMIC_SECTION(query) {
            const auto strategy = strategy_of(query);
            const bool lease = strategy == "lease-table" || strategy == "optimistic";
            const auto base = with_query(url_of(strategy), query + "&lease=20s");
            // The label by the URL's holder= for one, by provider_options for the other.
            const auto who = label("inspect-by-url");
            auto holder_side = distlock::connect(base + "&holder=" + who);
            REQUIRE(holder_side.holder() == who);
            distlock::provider_options o;
            o.holder = label("inspector");
            auto p = distlock::connect(base, o);
            const auto name = unique_name("inspect-" + strategy);

            auto before = p.inspect(name);
            CHECK(before.name == name);
            CHECK(before.held == std::optional<bool>(false));
            CHECK_FALSE(before.holder.has_value());
            CHECK_FALSE(before.token.has_value());

            auto m = holder_side.mutex(name);
            REQUIRE(m.try_lock_for(10s));
            const auto info = p.inspect(name);
            INFO([&] {
                std::string u;
                for (const auto& [k, v] : info.unknown) u += k + ": " + v + "; ";
                return u;
            }());
            REQUIRE(info.held == std::optional<bool>(true));
            if (lease) {
                CHECK(info.holder == std::optional<std::string>(who));
                CHECK(info.token == std::optional<std::uint64_t>(m.token()));
                REQUIRE(info.remaining.has_value());
                CHECK(info.remaining->count() > 0);
                CHECK(*info.remaining <= 20s);
                CHECK(*info.remaining > 15s);  // just taken
                CHECK(has_reason(info, "waiters"));
            } else if (is_mysql) {
                // MySQL names the holding connection and keeps nothing else beside the lock.
                raw_sql db(base);
                const auto session = holder_session(db, strategy, name);
                CHECK_FALSE(info.holder.has_value());
                REQUIRE(has_reason(info, "holder"));
                CHECK(info.unknown.at("holder").find("connection " + std::to_string(session) + ")") !=
                      std::string::npos);
                CHECK_FALSE(info.token.has_value());
                CHECK(has_reason(info, "token"));
                CHECK(has_reason(info, "waiters"));
                CHECK_FALSE(info.remaining.has_value());
                CHECK(has_reason(info, "remaining"));
            } else {
                // PostgreSQL: the label from the holding session's application_name; the
                // advisory token too (drawn in the statement that takes the lock).
                CHECK(info.holder == std::optional<std::string>(who));
                if (strategy == native) {
                    CHECK(info.token == std::optional<std::uint64_t>(m.token()));
                } else {
                    CHECK_FALSE(info.token.has_value());
                    CHECK(has_reason(info, "token"));
                }
                CHECK(info.waiters == std::optional<std::uint32_t>(0));
                CHECK_FALSE(info.remaining.has_value());
                CHECK(has_reason(info, "remaining"));
            }
            m.unlock();
            const auto after = p.inspect(name);
            CHECK(after.held == std::optional<bool>(false));
            CHECK_FALSE(after.holder.has_value());
            CHECK_FALSE(after.token.has_value());
            CHECK_FALSE(after.remaining.has_value());
        }
    }
}

TEST_CASE("inspect counts PostgreSQL's session lock waiters exactly, and declares MySQL's unknown",
          "[sql][inspect][waiters]") {
    for (const auto& strategy : {std::string("for-update"), native}) {
        DYNAMIC_SECTION(strategy) {
            const auto url = with_query(url_of(strategy), "strategy=" + strategy + "&lease=20s");
            auto p = distlock::connect(url);
            auto holder_side = distlock::connect(url);
            const auto name = unique_name("inspect-waiters-" + strategy);
            auto m = holder_side.mutex(name);
            REQUIRE(m.try_lock_for(10s));
            if (is_mysql) {
                const auto info = p.inspect(name);
                CHECK_FALSE(info.waiters.has_value());
                CHECK(has_reason(info, "waiters"));
                m.unlock();
                continue;
            }
            CHECK(p.inspect(name).waiters == std::optional<std::uint32_t>(0));
            std::vector<std::thread> waiters;
            std::atomic<int> got{0};
            std::vector<distlock::provider> sides;
            for (int i = 0; i < 2; ++i) sides.push_back(distlock::connect(url));
            for (int i = 0; i < 2; ++i)
                waiters.emplace_back([&, i] {
                    auto w = sides[static_cast<std::size_t>(i)].mutex(name);
                    if (w.try_lock_for(20s)) {
                        ++got;
                        w.unlock();
                    }
                });
            CHECK(eventually([&] { return p.inspect(name).waiters == std::optional<std::uint32_t>(2); }, 10s));
            m.unlock();
            for (auto& t : waiters) t.join();
            CHECK(got == 2);
            const auto after = p.inspect(name);
            CHECK(after.held == std::optional<bool>(false));
            CHECK(after.waiters == std::optional<std::uint32_t>(0));
        }
    }
}

TEST_CASE("a grant says whether it waited for another holder", "[sql][inspect][waited]") {
    for (const auto& query : queries()) {
        DYNAMIC_SECTION(query) {
            const auto strategy = strategy_of(query);
            auto u = distlock::spi::url::parse(with_query(url_of(strategy), query));
            auto settings = s::take_settings(u, facts().scheme, facts().native);
            auto backend = s::make_backend(facts().make_dialect(u, settings.conn), settings);
            distlock::spi::lock_request r;
            r.name = unique_name("waited");
            r.lease = 20s;
            r.renew_interval = 6s;
            r.holder = "waited-test";
            auto first = backend->make_lock(r);
            auto second = backend->make_lock(r);
            const auto g1 = first->acquire(distlock::spi::clock::now() + 10s, {});
            REQUIRE(g1);
            CHECK(g1->waited == std::optional<bool>(false));
            std::optional<distlock::spi::grant> g2;
            std::thread t([&] { g2 = second->acquire(distlock::spi::clock::now() + 20s, {}); });
            std::this_thread::sleep_for(1500ms);  // past MySQL's first, whole-second row lock wait too
            first->release();
            t.join();
            REQUIRE(g2);
            CHECK(g2->waited == std::optional<bool>(true));
            CHECK(g2->token > g1->token);
            second->release();
            const auto g3 = first->acquire(distlock::spi::clock::now() + 10s, {});
            REQUIRE(g3);
            CHECK(g3->waited == std::optional<bool>(false));
            first->release();
        }
    }
}

TEST_CASE("a lock table made before holder labels gets the column, keeps working, and shows no label for old grants",
          "[sql][inspect][migrate]") {
    raw_sql db(url_of("lease-table"));
    const auto table = "dl_prelabel_" + distlock::spi::random_token().substr(0, 10);
    for (auto text : facts().previous_tables) {
        for (auto at = text.find("{t}"); at != std::string::npos; at = text.find("{t}")) text.replace(at, 3, table);
        db.run(text);
    }
    const auto t = db.quote(table);
    // A lease held by a client of the previous version: it names its columns and writes no label.
    db.run("INSERT INTO " + t + " (name, owner, expires_at, version) VALUES (?, ?, " + facts().in_an_hour + ", 7000)",
           {s::bytes{"held-by-old"}, std::string("0123456789abcdef0123456789abcdef")});
    for (const auto& strategy : {std::string("lease-table"), std::string("optimistic")}) {
        INFO(strategy);
        // Two providers starting at once on the old table: both add the column or find it.
        std::vector<distlock::provider> ps;
        std::mutex ps_mutex;
        std::vector<std::thread> starts;
        std::atomic<int> failed{0};
        for (int i = 0; i < 2; ++i)
            starts.emplace_back([&] {
                try {
                    auto p = distlock::connect(
                        with_query(url_of(strategy), "strategy=" + strategy + "&lease=20s&table=" + table));
                    std::lock_guard lk(ps_mutex);
                    ps.push_back(std::move(p));
                } catch (const std::exception& e) {
                    UNSCOPED_INFO(e.what());
                    ++failed;
                }
            });
        for (auto& th : starts) th.join();
        REQUIRE(failed == 0);
        REQUIRE(ps.size() == 2);
        auto& p = ps[0];
        const auto old = p.inspect("held-by-old");
        CHECK(old.held == std::optional<bool>(true));
        CHECK(old.token == std::optional<std::uint64_t>(7000));
        CHECK_FALSE(old.holder.has_value());
        CHECK(has_reason(old, "holder"));
        REQUIRE(old.remaining.has_value());
        CHECK(*old.remaining > 50min);
        CHECK_FALSE(p.mutex("held-by-old").try_lock());
        // New grants carry their label.
        auto m = ps[1].mutex("fresh");
        REQUIRE(m.try_lock_for(5s));
        const auto fresh = p.inspect("fresh");
        CHECK(fresh.holder == std::optional<std::string>(ps[1].holder()));
        CHECK(fresh.token == std::optional<std::uint64_t>(m.token()));
        CHECK(m.token() > 7000);
        m.unlock();
    }
    // A row a labelled grant left behind (a crashed holder), taken over by a client
    // of the previous version, which leaves holder_label alone: its label is not
    // shown for the new grant.
    db.run("INSERT INTO " + t + " (name, owner, expires_at, version, holder_label) VALUES (?, ?, " +
               facts().an_hour_ago + ", 7100, ?)",
           {s::bytes{"taken-over"}, std::string("ffffffffffffffffffffffffffffffff"),
            s::bytes{"ffffffffffffffffffffffffffffffffcrashed-holder"}});
    db.run("UPDATE " + t + " SET owner = ?, expires_at = " + facts().in_an_hour + ", version = 7200 WHERE name = ?",
           {std::string("0123456789abcdef0123456789abcde0"), s::bytes{"taken-over"}});
    auto p = distlock::connect(with_query(url_of("lease-table"), "strategy=lease-table&table=" + table));
    const auto taken = p.inspect("taken-over");
    CHECK(taken.held == std::optional<bool>(true));
    CHECK(taken.token == std::optional<std::uint64_t>(7200));
    CHECK_FALSE(taken.holder.has_value());
    CHECK(has_reason(taken, "holder"));
    drop_lock_tables(db, table);
}

TEST_CASE("an inspect that cannot reach the server is unavailable_error, without the password",
          "[sql][inspect][unavailable]") {
    const auto url = url_of("lease-table");
    const auto at = url.find('@');
    const auto host_end = url.find(':', at);
    const auto port = std::stoi(url.substr(host_end + 1, url.find('/', host_end) - host_end - 1));
    auto proxy = std::make_unique<distlock::test::tcp_proxy>("127.0.0.1", port);
    auto p = distlock::connect(with_port(url, proxy->port()) + "&timeout=2s&connect_timeout=1s&pool=1");
    const auto name = unique_name("inspect-down");
    CHECK(p.inspect(name).held == std::optional<bool>(false));
    proxy.reset();  // the pooled session is cut, and a new one refused
    try {
        (void)p.inspect(name);
        FAIL("inspect answered without a server");
    } catch (const distlock::unavailable_error& e) {
        const std::string what = e.what();
        CHECK(what.find("inspect of") != std::string::npos);
        // The test servers' password is also a word of the messages ("distlock"): look
        // for it as the URL spells it, with the user before and the host after.
        const auto userinfo = url.substr(url.find("://") + 3, at - url.find("://") - 3 + 1);
        CHECK(what.find(userinfo) == std::string::npos);
        CHECK(what.find(":" + password_of(url) + "@") == std::string::npos);
    }
}

TEST_CASE("long and non-ASCII labels: whole in lease rows; on PostgreSQL sessions left out with the reason",
          "[sql][inspect][label]") {
    const std::string long_label = "long-" + distlock::spi::random_token() + std::string(250 - 37, 'x');  // 250 bytes
    const std::string utf8_label = "h\xc3\xb6lder-" + distlock::spi::random_token().substr(0, 8);
    for (const auto& who : {long_label, utf8_label}) {
        for (const auto& strategy : {std::string("lease-table"), std::string("optimistic"), native}) {
            DYNAMIC_SECTION(strategy << " label of " << who.size() << " bytes") {
                const auto url = with_query(url_of(strategy), "strategy=" + strategy + "&lease=20s");
                distlock::provider_options o;
                o.holder = who;
                auto holder_side = distlock::connect(url, o);
                auto p = distlock::connect(url);
                const auto name = unique_name("inspect-label");
                auto m = holder_side.mutex(name);
                REQUIRE(m.try_lock_for(10s));
                const auto info = p.inspect(name);
                REQUIRE(info.held == std::optional<bool>(true));
                if (strategy != native) {
                    CHECK(info.holder == std::optional<std::string>(who));
                } else if (!is_mysql) {
                    CHECK_FALSE(info.holder.has_value());
                    REQUIRE(has_reason(info, "holder"));
                    CHECK(info.unknown.at("holder").find("application_name") != std::string::npos);
                    CHECK(info.token == std::optional<std::uint64_t>(m.token()));  // the token still fits
                }
                m.unlock();
            }
        }
    }
}

TEST_CASE("a lease row's label longer than any holder can have is not passed on by inspect",
          "[sql][inspect][hostile]") {
    // Whoever can write the lock table can store anything in holder_label: a
    // label is 1 to 255 bytes, and a longer one was not written by distlock.
    const auto url = url_of("lease-table");
    auto p = distlock::connect(url);
    raw_sql db(url);
    const auto name = unique_name("huge-label");
    const std::string owner(32, 'a');
    // MySQL's column holds 320 bytes (VARBINARY(320)); PostgreSQL's bytea any length.
    const std::size_t too_long = facts().scheme == "mysql" ? 320 - owner.size() : 100000;
    db.run("INSERT INTO distlock_locks (name, owner, expires_at, version, holder_label) VALUES (?, ?, " +
               facts().in_an_hour + ", 7, ?)",
           {s::bytes{name}, owner, s::bytes{owner + std::string(too_long, 'L')}});
    const auto info = p.inspect(name);
    CHECK(info.held == std::optional<bool>(true));
    CHECK(info.token == std::optional<std::uint64_t>(7));
    CHECK_FALSE(info.holder.has_value());
    REQUIRE(has_reason(info, "holder"));
    CHECK(info.unknown.at("holder").find("longer than any") != std::string::npos);
    distlock::testing::break_lock(p, name);
}
