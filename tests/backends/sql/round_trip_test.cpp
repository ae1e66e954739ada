// The SQL strategies at their round-trip floor, counted, not timed: the
// server's own counters (statements of a user of its own on MariaDB,
// transactions of a database of its own on PostgreSQL: see the dialect's
// facts) and the client's round trips, per uncontended lock()+unlock() and for
// the batched renewal of 1,000 held leases.
#include <catch2/catch.hpp>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "distlock/distlock.hpp"
#include "distlock/spi/backend.hpp"
#include "sql_test_support.hpp"
#include "support.hpp"

using namespace std::chrono_literals;
using namespace sql_test;
using distlock::test::unique_name;

namespace {

std::string count_url() {
    const auto var = "DISTLOCK_TEST_" + facts().env + "_COUNT_URL";
    auto u = distlock::test::env(var.c_str());
    if (u.empty()) FAIL(var << " is not set (integration/backends.sh up)");
    return u;
}

struct measured {
    std::int64_t server = 0;        // the server's count over a provider's whole life
    std::uint64_t round_trips = 0;  // of the cycles alone
};

// A provider's whole life on the count URL: `cycles` uncontended lock()+unlock()
// after one to warm up (connections made, tables there). What the provider does
// besides the cycles (its start, its connections) is the same whatever `cycles`
// is, so the difference of two runs is the cycles' own cost.
// `primitive`: "mutex", or a side of the read-write lock ("read", "write"), or
// a permit of a semaphore of 2 ("permit").
// The server's count once a provider is gone: the server may count its last
// statements (its disconnection among them) a moment after the client closed,
// more so under load, so read until two reads 50 ms apart agree.
std::int64_t settled_count(raw_sql& monitor) {
    auto count = facts().server_count(monitor);
    for (int i = 0; i < 40; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        const auto again = facts().server_count(monitor);
        if (again == count) break;
        count = again;
    }
    return count;
}

measured run_cycles(const std::string& query, int cycles, const std::string& primitive = "mutex") {
    raw_sql monitor(url_of("lease-table"));
    const auto before = facts().server_count(monitor);
    measured m;
    {
        auto p = distlock::connect(count_url() + "?" + query + "&lease=30s");
        const auto name = unique_name("count");
        auto lock = p.mutex(name);
        auto rw = p.shared_mutex(name);
        auto sem = p.semaphore(name, 2);
        auto cycle = [&] {
            if (primitive == "mutex") {
                lock.lock();
                REQUIRE(lock.token() > 0);
                lock.unlock();
            } else if (primitive == "read") {
                rw.lock_shared();
                REQUIRE(rw.shared_token() > 0);
                rw.unlock_shared();
            } else if (primitive == "write") {
                rw.lock();
                REQUIRE(rw.token() > 0);
                rw.unlock();
            } else {
                sem.acquire();
                REQUIRE(sem.token() > 0);
                sem.release();
            }
        };
        cycle();
        const auto rt0 = s::connection::round_trip_counter().load();
        for (int i = 0; i < cycles; ++i) cycle();
        m.round_trips = s::connection::round_trip_counter().load() - rt0;
    }
    m.server = settled_count(monitor) - before;
    return m;
}

// The difference of the server's counts of two kinds of run, `longer()` minus
// `shorter()`. Another client of the count user or database (an autovacuum
// worker, a pool connection opened by a background thread) can only add to a
// run, to the shorter as well as the longer, so the fewest of each over up to
// five tries is taken apart: the difference of two tries alone could come out
// too low as well as too high.
template <class Shorter, class Longer>
std::int64_t fewest_difference(Shorter&& shorter, Longer&& longer, std::int64_t expected) {
    std::int64_t fewest_a = -1, fewest_b = -1;
    for (int attempt = 0; attempt < 5 && (fewest_a < 0 || fewest_b - fewest_a != expected); ++attempt) {
        const std::int64_t a = shorter(), b = longer();
        if (fewest_a < 0 || a < fewest_a) fewest_a = a;
        if (fewest_b < 0 || b < fewest_b) fewest_b = b;
    }
    return fewest_b - fewest_a;
}

// The server's count of `many - few` cycles (and each run's round trips checked).
std::int64_t server_count_of_cycles(const std::string& query, const std::string& primitive, int few, int many,
                                    std::int64_t expected, int round_trips_per_cycle) {
    auto cycles = [&](int n) {
        const auto m = run_cycles(query, n, primitive);
        CHECK(m.round_trips == static_cast<std::uint64_t>(round_trips_per_cycle) * n);
        return m.server;
    };
    return fewest_difference([&] { return cycles(few); }, [&] { return cycles(many); }, expected);
}

}  // namespace

TEST_CASE("an uncontended cycle costs exactly its strategy's statements and round trips, counted by the server",
          "[sql][count]") {
    constexpr int few = 5, many = 45;
    for (const auto& [query, cost] : facts().per_cycle) {
        DYNAMIC_SECTION(query) {
            const std::int64_t expected = std::int64_t{cost.server} * (many - few);
            const auto fewest = server_count_of_cycles(query, "mutex", few, many, expected, cost.round_trips);
            INFO(facts().count_unit << " per cycle: " << double(fewest) / (many - few));
            CHECK(fewest == expected);
        }
    }
}

TEST_CASE("an uncontended read, write or permit cycle costs exactly its statements and round trips",
          "[sql][count][primitives]") {
    constexpr int few = 5, many = 45;
    for (const auto& [query, primitive, cost] : facts().per_primitive_cycle) {
        DYNAMIC_SECTION(primitive << " on " << query) {
            const std::int64_t expected = std::int64_t{cost.server} * (many - few);
            const auto fewest = server_count_of_cycles(query, primitive, few, many, expected, cost.round_trips);
            INFO(facts().count_unit << " per cycle: " << double(fewest) / (many - few));
            CHECK(fewest == expected);
        }
    }
}

TEST_CASE("inspect costs exactly one statement and one round trip on every strategy", "[sql][count][inspect]") {
    constexpr int few = 5, many = 45;
    std::vector<std::string> queries;
    for (const auto& [query, cost] : facts().per_cycle) queries.push_back(query);
    for (const auto& query : queries) {
        DYNAMIC_SECTION(query) {
            // A provider's whole life on the count URL: a lock held, then `n` inspects
            // of it (a lease long enough that no renewal or session check falls in).
            auto inspects = [&](int n) {
                raw_sql monitor(url_of("lease-table"));
                const auto before = facts().server_count(monitor);
                {
                    auto p = distlock::connect(count_url() + "?" + query + "&lease=60s");
                    const auto name = unique_name("count-inspect");
                    auto lock = p.mutex(name);
                    lock.lock();
                    REQUIRE(p.inspect(name).held == std::optional<bool>(true));  // warm: the pool has a session
                    const auto rt0 = s::connection::round_trip_counter().load();
                    for (int i = 0; i < n; ++i) REQUIRE(p.inspect(name).held == std::optional<bool>(true));
                    CHECK(s::connection::round_trip_counter().load() - rt0 == static_cast<std::uint64_t>(n));
                    lock.unlock();
                }
                return settled_count(monitor) - before;
            };
            const std::int64_t expected = many - few;  // MariaDB: one statement; PostgreSQL: one transaction
            const auto fewest =
                fewest_difference([&] { return inspects(few); }, [&] { return inspects(many); }, expected);
            INFO(facts().count_unit << " per inspect: " << double(fewest) / (many - few));
            CHECK(fewest == expected);
        }
    }
}

TEST_CASE("1,000 held leases are renewed by one statement in one round trip", "[sql][count]") {
    constexpr std::size_t held = 1000;
    // A provider's life with `held` leases taken and released, renewed once in
    // between when `renew`; the difference is the renewal's cost.
    auto run = [&](bool renew) {
        raw_sql monitor(url_of("lease-table"));
        const auto before = facts().server_count(monitor);
        std::uint64_t round_trips = 0;
        {
            auto u = distlock::spi::url::parse(count_url() + "?strategy=lease-table");
            auto settings = s::take_settings(u, facts().scheme, facts().native);
            auto backend = s::make_backend(facts().make_dialect(u, settings.conn), settings);
            std::vector<std::unique_ptr<distlock::spi::lock_handle>> locks;
            std::vector<distlock::spi::lock_handle*> handles;
            const auto base = unique_name("renew");
            for (std::size_t i = 0; i < held; ++i) {
                distlock::spi::lock_request r;
                r.name = base + "/" + std::to_string(i);
                r.lease = 60s;
                locks.push_back(backend->make_lock(r));
                REQUIRE(locks.back()->acquire(distlock::spi::clock::now() + 5s, {}));
                handles.push_back(locks.back().get());
            }
            if (renew) {
                std::vector<distlock::spi::keepalive_result> results(held, distlock::spi::keepalive_result::failed(""));
                const auto rt0 = s::connection::round_trip_counter().load();
                backend->keepalive_batch(handles, results);
                round_trips = s::connection::round_trip_counter().load() - rt0;
                for (const auto& r : results) REQUIRE(r.state == distlock::spi::keepalive_result::status::ok);
            }
            for (auto& l : locks) l->release();
        }
        return std::pair{settled_count(monitor) - before, round_trips};
    };
    const auto fewest = fewest_difference([&] { return run(false).first; },
                                          [&] {
                                              const auto with = run(true);
                                              CHECK(with.second == 1);
                                              return with.first;
                                          },
                                          1);
    CHECK(fewest == 1);  // one UPDATE (PostgreSQL: one transaction) for all 1,000
}

TEST_CASE("bench's native floor is the server's own lock and unlock, two round trips on a pooled session",
          "[sql][count]") {
    auto p = distlock::connect(url_of(facts().native));
    REQUIRE(p.native_cycle().has_value());  // warm: the pool has its session
    const auto rt0 = s::connection::round_trip_counter().load();
    const auto took = p.native_cycle();
    CHECK(s::connection::round_trip_counter().load() - rt0 == 2);
    REQUIRE(took.has_value());
    CHECK(took->count() > 0);
    // Nothing is left held: a lock of the strategy itself is still taken at once.
    auto m = p.mutex(unique_name("after-floor"));
    CHECK(m.try_lock());
    m.unlock();
}
