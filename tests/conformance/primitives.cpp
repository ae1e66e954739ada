// The lock contract for the primitives beyond the mutex: the read-write lock
// (provider::shared_mutex), the semaphore (provider::semaphore) and the
// multi-lock (provider::multi_lock), proved against one backend URL per run.
// Cases tagged [needs:read_write] / [needs:semaphore] are not applicable, with
// the backend's reason, where it declares that primitive unsupported.
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <thread>
#include <vector>

#include "child_process.hpp"
#include "distlock/distlock.hpp"
#include "distlock/spi/backend.hpp"
#include "distlock/testing.hpp"
#include "suite.hpp"
#include "support.hpp"

using namespace std::chrono_literals;
using distlock::test::backend_url;
using distlock::test::child_process;
using distlock::test::eventually;
using distlock::test::unique_name;
using clk = std::chrono::steady_clock;

namespace distlock::test {

std::string temp_path(const std::string& what) {
    auto dir = std::filesystem::temp_directory_path();
    return (dir / ("distlock-conf-" + what + "-" + distlock::spi::random_token().substr(0, 8))).string();
}

counted_processes::counted_processes(const std::string& what, int procs, std::vector<std::string> args)
    : path_(temp_path(what)), counters_(map_counters(path_, true)) {
    args.at(3) = path_;
    std::vector<std::unique_ptr<child_process>> kids;
    for (int i = 0; i < procs; ++i) kids.push_back(run_helper(args));
    for (auto& k : kids) CHECK(k->wait_exit() == 0);
}
counted_processes::~counted_processes() { std::filesystem::remove(path_); }

std::uint64_t token_in(const std::string& line) { return std::stoull(line.substr(line.find(' ') + 1)); }

std::chrono::milliseconds crash_bound(const provider& p) {
    return p.caps().crash_release_bound + p.default_lease() + 10s;
}

}  // namespace distlock::test

namespace {

using distlock::test::connect_under_test;
using distlock::test::counted_processes;
using distlock::test::crash_bound;
using distlock::test::run_helper;
using distlock::test::temp_path;
using distlock::test::token_in;

}  // namespace

// ---- what a backend offers --------------------------------------------------------

TEST_CASE("a primitive the backend does not support is refused with its reason", "[primitives][input]") {
    auto p = connect_under_test();
    const auto name = unique_name("unsupported");
    if (p.caps().supports(distlock::feature::read_write)) {
        CHECK_NOTHROW(p.shared_mutex(name));
    } else {
        try {
            (void)p.shared_mutex(name);
            FAIL("shared_mutex() did not throw");
        } catch (const distlock::unsupported_error& e) {
            CHECK_THAT(e.what(), Catch::Contains(std::string(p.caps().why_not(distlock::feature::read_write))));
        }
    }
    if (p.caps().supports(distlock::feature::semaphore)) {
        CHECK_NOTHROW(p.semaphore(name, 2));
        CHECK_THROWS_AS(p.semaphore(name, 0), distlock::invalid_argument_error);
    } else {
        try {
            (void)p.semaphore(name, 2);
            FAIL("semaphore() did not throw");
        } catch (const distlock::unsupported_error& e) {
            CHECK_THAT(e.what(), Catch::Contains(std::string(p.caps().why_not(distlock::feature::semaphore))));
        }
    }
    CHECK_THROWS_AS(p.multi_lock({}), distlock::invalid_argument_error);
    CHECK_THROWS_AS(p.multi_lock({name, ""}), distlock::invalid_argument_error);
}

// ---- read-write lock ------------------------------------------------------------

TEST_CASE("readers of several connections hold a read-write lock at once", "[rw][needs:read_write]") {
    auto a = connect_under_test();
    auto b = connect_under_test();
    auto c = connect_under_test();
    const auto name = unique_name("rw-readers");
    auto r1 = a.shared_mutex(name);
    auto r2 = b.shared_mutex(name);
    auto w = c.shared_mutex(name);
    REQUIRE(r1.try_lock_shared_for(10s));
    CHECK(r1.held_shared());
    CHECK_FALSE(r1.held());
    REQUIRE(r2.try_lock_shared_for(10s));  // beside r1
    CHECK(r1.held_shared());
    CHECK(r2.held_shared());
    CHECK_FALSE(w.try_lock());  // a writer is kept out by readers
    CHECK_FALSE(w.try_lock_for(300ms));
    r1.unlock_shared();
    CHECK_FALSE(w.try_lock());  // r2 still reads
    r2.unlock_shared();
    CHECK_FALSE(r2.held_shared());
    REQUIRE(w.try_lock_for(10s));
    CHECK(w.held());
    CHECK_FALSE(r1.try_lock_shared());  // a writer keeps readers out
    CHECK_FALSE(r2.try_lock_shared_for(300ms));
    auto w2 = a.shared_mutex(name);
    CHECK_FALSE(w2.try_lock());  // and writers
    w.unlock();
    CHECK_FALSE(w.held());
    REQUIRE(r1.try_lock_shared_for(10s));
    r1.unlock_shared();
}

TEST_CASE("threads of one object read together and write alone", "[rw][needs:read_write]") {
    auto p = connect_under_test();
    auto rw = p.shared_mutex(unique_name("rw-threads"));
    std::atomic<int> readers{0}, writers{0}, max_readers{0}, violations{0};
    std::atomic<int> stage{0};
    distlock::test::thread_errors errors;
    std::vector<std::thread> pool;
    for (int t = 0; t < 3; ++t) {
        pool.emplace_back([&] {
            errors.run([&] {
                std::shared_lock lk(rw);
                if (!rw.held_shared()) ++violations;  // (Catch2's CHECK is not for other threads)
                distlock::test::raise_max(max_readers, ++readers);
                ++stage;
                eventually([&] { return stage.load() >= 3; }, 10s);  // all three inside together
                if (writers.load() != 0) ++violations;
                --readers;
            });
        });
    }
    for (auto& th : pool) th.join();
    CHECK(errors.all() == "");
    CHECK(max_readers.load() == 3);
    pool.clear();
    for (int t = 0; t < 4; ++t) {
        pool.emplace_back([&, t] {
            errors.run([&] {
                for (int i = 0; i < 10; ++i) {
                    if ((t + i) % 2 == 0) {
                        std::unique_lock lk(rw);
                        if (++writers != 1 || readers.load() != 0) ++violations;
                        std::this_thread::sleep_for(200us);
                        --writers;
                    } else {
                        std::shared_lock lk(rw);
                        ++readers;
                        if (writers.load() != 0) ++violations;
                        std::this_thread::sleep_for(200us);
                        --readers;
                    }
                }
            });
        });
    }
    for (auto& th : pool) th.join();
    CHECK(errors.all() == "");
    CHECK(violations.load() == 0);
}

TEST_CASE("a reader in another process reads beside this one and keeps writers out",
          "[rw][needs:read_write][needs:cross_process]") {
    auto p = connect_under_test();
    const auto name = unique_name("rw-process");
    auto reader = run_helper({"hold-read", backend_url(), name});
    auto line = reader->read_line(120s);
    REQUIRE(line.rfind("read ", 0) == 0);
    auto rw = p.shared_mutex(name);
    CHECK_FALSE(rw.try_lock());
    REQUIRE(rw.try_lock_shared_for(10s));  // observed at once with the other process's reader
    rw.unlock_shared();
    auto writer = run_helper({"hold-write", backend_url(), unique_name("rw-process-w")});
    REQUIRE(writer->read_line(120s).rfind("write ", 0) == 0);
}

TEST_CASE("processes reading and writing never overlap a writer with anyone",
          "[rw][needs:read_write][needs:cross_process]") {
    constexpr int procs = 3, rounds = 16;
    counted_processes run("rw", procs, {"rw-mix", backend_url(), unique_name("rw-mix"), "", std::to_string(rounds)});
    const auto& c = run.counters();
    CHECK(c.violations.load() == 0);
    CHECK(c.max_writers.load() <= 1);
    CHECK(c.rounds.load() == procs * rounds);
}

TEST_CASE("a writer waiting behind a stream of readers gets in", "[rw][policy][needs:read_write]") {
    // Readers of three connections overlap without a gap: without a writer
    // policy the writer would wait for ever.
    std::vector<distlock::provider> conns;
    for (int i = 0; i < 3; ++i) conns.push_back(connect_under_test());
    auto w = connect_under_test();
    const auto name = unique_name("rw-policy");
    std::atomic<bool> stop{false}, writer_in{false};
    std::atomic<int> reading{0}, overlaps{0};
    distlock::test::thread_errors errors;
    std::vector<std::thread> readers;
    for (int t = 0; t < 3; ++t) {
        readers.emplace_back([&, t] {
            errors.run([&] {
                auto rw = conns[t].shared_mutex(name);
                std::this_thread::sleep_for(t * 60ms);
                while (!stop.load()) {
                    if (!rw.try_lock_shared_for(2s)) continue;
                    if (writer_in.load()) ++overlaps;
                    ++reading;
                    std::this_thread::sleep_for(150ms);
                    --reading;
                    rw.unlock_shared();
                }
            });
        });
    }
    REQUIRE(eventually([&] { return reading.load() >= 2; }, 30s));  // the stream is flowing
    auto writer = w.shared_mutex(name);
    const auto bound = 20s + 3 * w.caps().crash_release_bound;
    const auto t0 = clk::now();
    const bool got = writer.try_lock_for(bound);
    const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(clk::now() - t0);
    if (got) {
        writer_in = true;
        CHECK(reading.load() == 0);
        std::this_thread::sleep_for(100ms);
        writer_in = false;
        writer.unlock();
    }
    stop = true;
    for (auto& th : readers) th.join();
    INFO("the writer waited " << waited.count() << " ms");
    CHECK(got);
    CHECK(overlaps.load() == 0);
    CHECK(errors.all() == "");
}

TEST_CASE("a crashed reader or writer is released",
          "[rw][crash][needs:read_write][needs:cross_process][needs:crash_release]") {
    auto p = connect_under_test();
    // Both at once (each on a name of its own), so that their bounds run together.
    struct crashed {
        std::string side, name;
        std::unique_ptr<child_process> holder;
        std::uint64_t token = 0;
    };
    std::vector<crashed> crashes;
    for (const std::string side : {"read", "write"}) {
        auto name = unique_name("rw-crash-" + side);
        crashes.push_back({side, name, run_helper({"hold-" + side, backend_url(), name})});
    }
    for (auto& c : crashes) {
        INFO(c.side);
        auto line = c.holder->read_line(120s);
        REQUIRE(line.rfind(c.side + " ", 0) == 0);
        c.token = token_in(line);
        CHECK_FALSE(p.shared_mutex(c.name).try_lock());
    }
    for (auto& c : crashes) c.holder->kill_hard();
    for (auto& c : crashes) {
        INFO(c.side);
        auto rw = p.shared_mutex(c.name);
        const bool got = rw.try_lock_for(crash_bound(p));
        if (!got && p.caps().supports(distlock::feature::inspect_primitives)) {
            // What still keeps the writer out, as the server shows it.
            const auto info = p.inspect_read_write(c.name);
            auto opt = [](const auto& v) { return v ? std::to_string(*v) : std::string("unknown"); };
            // Whether the same try succeeds at once from this provider and from a new
            // one: tells a server state that keeps writers out from a client that is stuck.
            auto again = [&](const distlock::provider& q) {
                try {
                    auto w = q.shared_mutex(c.name);
                    if (!w.try_lock_for(2s)) return std::string("busy");
                    w.unlock();
                    return std::string("taken");
                } catch (const std::exception& e) {
                    return std::string("error: ") + e.what();
                }
            };
            const auto here = again(p);
            const auto fresh = again(connect_under_test());
            FAIL_CHECK("not taken within the bound; the server shows write held: "
                       << (info.write_held ? (*info.write_held ? "yes" : "no") : "unknown")
                       << ", readers: " << (info.readers ? std::to_string(info.readers->size()) : "unknown")
                       << ", writers waiting: " << opt(info.writers_waiting) << "; a try of 2 s right after: " << here
                       << " (this provider), " << fresh << " (a new provider)");
        }
        REQUIRE(got);
        if (p.caps().supports(distlock::feature::fencing)) CHECK(rw.token() > c.token);
        rw.unlock();
    }
}

TEST_CASE("read and write tokens strictly increase", "[rw][fencing][needs:read_write][needs:fencing]") {
    auto a = connect_under_test();
    auto b = connect_under_test();
    const auto name = unique_name("rw-tokens");
    auto x = a.shared_mutex(name);
    auto y = b.shared_mutex(name);
    x.lock();
    const auto w1 = x.token();
    CHECK(w1 > 0);
    CHECK(x.shared_token() == 0);
    x.unlock();
    CHECK(x.token() == 0);
    REQUIRE(x.try_lock_shared_for(10s));
    const auto r1 = x.shared_token();
    REQUIRE(y.try_lock_shared_for(10s));
    const auto r2 = y.shared_token();
    CHECK(r1 > w1);
    CHECK(r2 > r1);
    x.unlock_shared();
    y.unlock_shared();
    REQUIRE(y.try_lock_for(10s));
    CHECK(y.token() > r2);
    y.unlock();
}

TEST_CASE("asking again from a thread that holds the read-write lock is refused", "[rw][std][needs:read_write]") {
    auto p = connect_under_test();
    auto rw = p.shared_mutex(unique_name("rw-again"));
    rw.lock_shared();
    CHECK_THROWS_AS(rw.lock_shared(), distlock::would_deadlock_error);
    CHECK_THROWS_AS(rw.try_lock(), distlock::would_deadlock_error);
    rw.unlock_shared();
    rw.unlock_shared();  // not held: nothing
    rw.lock();
    CHECK_THROWS_AS(rw.try_lock_shared(), distlock::would_deadlock_error);
    CHECK_THROWS_AS(rw.lock(), distlock::would_deadlock_error);
    rw.unlock();
    {
        std::shared_lock lk(rw, 5s);
        CHECK(lk.owns_lock());
        CHECK(rw.held_shared());
    }
    {
        std::unique_lock lk(rw, 5s);
        CHECK(lk.owns_lock());
        CHECK(rw.held());
    }
    CHECK_FALSE(rw.held());
    CHECK_FALSE(rw.held_shared());
    auto moved = std::move(rw);
    CHECK(moved.try_lock());
    moved.unlock();
}

// ---- semaphore -------------------------------------------------------------------

TEST_CASE("a semaphore grants at most its permits at once", "[semaphore][needs:semaphore]") {
    auto a = connect_under_test();
    auto b = connect_under_test();
    auto c = connect_under_test();
    const auto name = unique_name("sem");
    auto s1 = a.semaphore(name, 2);
    auto s2 = b.semaphore(name, 2);
    auto s3 = c.semaphore(name, 2);
    CHECK(s1.permits() == 2);
    CHECK(s1.held() == 0);
    REQUIRE(s1.try_acquire_for(10s));
    REQUIRE(s2.try_acquire_for(10s));
    CHECK(s1.held() == 1);
    CHECK_FALSE(s3.try_acquire());
    CHECK_FALSE(s3.try_acquire_for(300ms));
    s1.release();
    CHECK(s1.held() == 0);
    s1.release();  // none held: nothing
    REQUIRE(s3.try_acquire_for(10s));
    CHECK_FALSE(s1.try_acquire());
    s2.release();
    s3.release();
    // One object may hold several permits.
    REQUIRE(s1.try_acquire_for(10s));
    REQUIRE(s1.try_acquire_for(10s));
    CHECK(s1.held() == 2);
    CHECK_FALSE(s2.try_acquire());
    {
        s1.release();
        distlock::permit_guard g(s2);
        CHECK(s2.held() == 1);
        CHECK_FALSE(s3.try_acquire());
    }
    CHECK(s2.held() == 0);
    s1.release();
    CHECK(s3.try_acquire_for(10s));
    s3.release();
}

TEST_CASE("threads of several connections never exceed the permits", "[semaphore][needs:semaphore]") {
    auto a = connect_under_test();
    auto b = connect_under_test();
    const auto name = unique_name("sem-threads");
    std::atomic<int> inside{0}, max_inside{0}, rounds{0};
    distlock::test::thread_errors errors;
    std::vector<std::thread> pool;
    for (int t = 0; t < 6; ++t) {
        pool.emplace_back([&, t] {
            errors.run([&] {
                auto s = (t % 2 == 0 ? a : b).semaphore(name, 2);
                for (int i = 0; i < 8; ++i) {
                    distlock::permit_guard g(s);
                    distlock::test::raise_max(max_inside, ++inside);
                    std::this_thread::sleep_for(1ms);
                    --inside;
                    ++rounds;
                }
            });
        });
    }
    for (auto& th : pool) th.join();
    CHECK(errors.all() == "");
    CHECK(max_inside.load() <= 2);
    CHECK(max_inside.load() >= 1);
    CHECK(rounds.load() == 48);
}

TEST_CASE("processes never hold more permits than the semaphore has",
          "[semaphore][needs:semaphore][needs:cross_process]") {
    constexpr int procs = 4, rounds = 10;
    counted_processes run("sem", procs,
                          {"permits", backend_url(), unique_name("sem-procs"), "", std::to_string(rounds), "2"});
    const auto& c = run.counters();
    CHECK(c.max_holders.load() <= 2);
    CHECK(c.rounds.load() == procs * rounds);
}

TEST_CASE("a SIGKILLed holder's permit comes back",
          "[semaphore][crash][needs:semaphore][needs:cross_process][needs:crash_release]") {
    auto p = connect_under_test();
    const auto name = unique_name("sem-crash");
    auto holder = run_helper({"hold-permit", backend_url(), name, "1"});
    auto line = holder->read_line(120s);
    REQUIRE(line.rfind("permit ", 0) == 0);
    const auto dead = token_in(line);
    auto s = p.semaphore(name, 1);
    CHECK_FALSE(s.try_acquire());
    holder->kill_hard();
    REQUIRE(s.try_acquire_for(crash_bound(p)));
    if (p.caps().supports(distlock::feature::fencing)) CHECK(s.token() > dead);
    s.release();
}

TEST_CASE("a permit that is not renewed expires and is reported lost",
          "[semaphore][renewal][needs:semaphore][needs:lease_expiry]") {
    auto a = connect_under_test();
    auto b = connect_under_test();
    const auto name = unique_name("sem-expiry");
    distlock::test::loss_recorder rec;
    distlock::lock_options no_renew;
    no_renew.auto_renew = false;
    auto stale = a.semaphore(name, 1, rec.options(no_renew));
    REQUIRE(stale.try_acquire_for(10s));
    const auto token = stale.token();
    const auto lease = a.default_lease();
    CHECK(eventually([&] { return stale.held() == 0; }, lease + 5s));
    CHECK(rec.wait_lost(1, 5s));
    const auto seen = rec.losses();
    REQUIRE(seen.size() == 1);
    CHECK(seen[0].name == name);
    CHECK(seen[0].token == token);
    auto next = b.semaphore(name, 1);
    REQUIRE(next.try_acquire_for(lease + 10s));
    stale.release();  // the stale permit's release must not free `next`'s
    CHECK_FALSE(a.semaphore(name, 1).try_acquire());
    next.release();
}

TEST_CASE("a semaphore asked with another number of permits than its holders use is refused",
          "[semaphore][input][needs:semaphore][needs:permit_limit]") {
    auto a = connect_under_test();
    auto b = connect_under_test();
    // A name without digits, so that the sizes found in the message are the sizes.
    auto name = unique_name("sem-mismatch");
    for (auto& c : name)
        if (c >= '0' && c <= '9') c = static_cast<char>('g' + (c - '0'));
    auto seven = a.semaphore(name, 7);
    REQUIRE(seven.try_acquire_for(10s));
    auto nine = b.semaphore(name, 9);
    try {
        (void)nine.try_acquire_for(2s);
        FAIL("a semaphore of 9 was granted beside a holder of a semaphore of 7");
    } catch (const distlock::invalid_argument_error& e) {
        CHECK_THAT(e.what(), Catch::Contains("7"));
        CHECK_THAT(e.what(), Catch::Contains("9"));
    }
    CHECK(nine.held() == 0);
    seven.release();
}

TEST_CASE("permit tokens strictly increase", "[semaphore][fencing][needs:semaphore][needs:fencing]") {
    auto a = connect_under_test();
    auto b = connect_under_test();
    const auto name = unique_name("sem-tokens");
    auto s = a.semaphore(name, 2);
    auto t = b.semaphore(name, 2);
    REQUIRE(s.try_acquire_for(10s));
    const auto t1 = s.token();
    REQUIRE(t.try_acquire_for(10s));
    const auto t2 = t.token();
    CHECK(t1 > 0);
    CHECK(t2 > t1);
    s.release();
    CHECK(s.token() == 0);
    REQUIRE(s.try_acquire_for(10s));
    CHECK(s.token() > t2);
    s.release();
    t.release();
}

// ---- multi-lock -------------------------------------------------------------------

TEST_CASE("multi-locks named in opposite orders neither deadlock nor overlap", "[multi]") {
    auto a = connect_under_test();
    auto b = connect_under_test();
    const auto x = unique_name("multi-x"), y = unique_name("multi-y"), z = unique_name("multi-z");
    distlock::test::critical_section section;  // protected by the multi-locks only
    distlock::test::thread_errors errors;
    std::atomic<int> timeouts{0}, not_held{0};
    std::vector<std::thread> pool;
    for (int t = 0; t < 4; ++t) {
        pool.emplace_back([&, t] {
            errors.run([&] {
                auto all = t % 2 == 0 ? a.multi_lock({x, y, z}) : b.multi_lock({z, y, x});
                for (int i = 0; i < 10; ++i) {
                    std::unique_lock lk(all, 60s);  // a deadlock would run out this bound
                    if (!lk) {
                        ++timeouts;
                        continue;
                    }
                    if (!all.held()) ++not_held;  // (Catch2's CHECK is not for other threads)
                    section.pass(200us);
                }
            });
        });
    }
    for (auto& th : pool) th.join();
    CHECK(errors.all() == "");
    CHECK(timeouts.load() == 0);
    CHECK(not_held.load() == 0);
    CHECK(section.max_inside.load() == 1);
    CHECK(section.counter == 40);
}

TEST_CASE("processes taking overlapping multi-locks in opposite orders finish and exclude each other",
          "[multi][needs:cross_process]") {
    const auto x = unique_name("mp-x"), y = unique_name("mp-y"), z = unique_name("mp-z");
    const auto file = temp_path("multi");
    { std::ofstream(file) << 0 << '\n'; }
    constexpr int rounds = 15;
    auto one = run_helper({"multi", backend_url(), file, std::to_string(rounds), x, y});
    auto two = run_helper({"multi", backend_url(), file, std::to_string(rounds), z, y, x});
    auto three = run_helper({"multi", backend_url(), file, std::to_string(rounds), y, z});
    for (auto* k : {one.get(), two.get(), three.get()}) {
        auto rc = k->wait_exit_for(180s);  // a deadlock would hold them past this
        REQUIRE(rc.has_value());
        CHECK(*rc == 0);
    }
    long total = -1;
    std::ifstream(file) >> total;
    CHECK(total == 3 * rounds);
    std::filesystem::remove(file);
}

TEST_CASE("a multi-lock that times out gives back every part it took", "[multi][waiting]") {
    auto a = connect_under_test();
    auto b = connect_under_test();
    auto c = connect_under_test();
    const auto first = unique_name("multi-a"), second = unique_name("multi-b");
    auto all = a.multi_lock({second, first, second});
    REQUIRE(all.names().size() == 2);  // each name once, in ascending order
    CHECK(all.names()[0] < all.names()[1]);
    auto blocker = b.mutex(all.names()[1]);
    REQUIRE(blocker.try_lock_for(10s));
    CHECK_FALSE(all.try_lock_for(400ms));
    CHECK_FALSE(all.held());
    auto probe = c.mutex(all.names()[0]);  // taken first, then given back
    CHECK(probe.try_lock());
    probe.unlock();
    blocker.unlock();
    {
        std::unique_lock lk(all, 10s);
        REQUIRE(lk.owns_lock());
        CHECK(all.held());
        const auto tokens = all.tokens();
        REQUIRE(tokens.size() == 2);
        if (a.caps().supports(distlock::feature::fencing)) CHECK((tokens[0] > 0 && tokens[1] > 0));
        CHECK_FALSE(c.mutex(all.names()[0]).try_lock());
        CHECK_FALSE(c.mutex(all.names()[1]).try_lock());
    }
    CHECK_FALSE(all.held());
    CHECK(c.mutex(all.names()[1]).try_lock_for(10s));
}

TEST_CASE("losing one part of a multi-lock loses the whole, reported once",
          "[multi][loss][needs:loss_detection][needs:break_lock]") {
    auto a = connect_under_test();
    const auto x = unique_name("ml-x"), y = unique_name("ml-y");
    distlock::test::loss_recorder rec;
    auto all = a.multi_lock({x, y}, rec.options());
    all.lock();
    REQUIRE(all.held());
    distlock::testing::break_lock(a, y);
    const auto bound = std::max<std::chrono::milliseconds>(5s, 2 * a.default_lease());
    CHECK(eventually([&] { return !all.held(); }, bound));
    CHECK(rec.wait_lost(1, 5s));
    CHECK_FALSE(rec.wait_lost(2, 300ms));  // once, though one part only was lost
    const auto seen = rec.losses();
    REQUIRE(seen.size() == 1);
    CHECK(seen[0].name == y);
    all.unlock();  // never throws; gives back the part still held
    auto again = a.mutex(x);
    CHECK(again.try_lock_for(a.default_lease() + 10s));
    again.unlock();
    REQUIRE(all.try_lock_for(a.default_lease() + 10s));  // a new grant is watched afresh
    CHECK(all.held());
    all.unlock();
    CHECK(rec.lost() == 1);
}
