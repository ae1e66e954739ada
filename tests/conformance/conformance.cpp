// The lock contract of DESIGN.md, proved against one backend URL per run.
// Cases tagged [needs:<feature>] are excluded (and listed as not applicable)
// when the backend declares that feature unsupported, with its reason.
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "child_process.hpp"
#include "distlock/distlock.hpp"
#include "distlock/spi/backend.hpp"
#include "distlock/testing.hpp"
#include "suite.hpp"
#include "support.hpp"
#include "tcp_proxy.hpp"

using namespace std::chrono_literals;
using distlock::test::backend_url;
using distlock::test::child_process;
using distlock::test::eventually;
using distlock::test::unique_name;
using clk = std::chrono::steady_clock;

namespace {

using distlock::test::connect_under_test;
using distlock::test::run_helper;

std::chrono::milliseconds lease_of(const distlock::provider& p) { return p.default_lease(); }

std::string temp_dir() {
    auto dir = std::filesystem::temp_directory_path() / ("distlock-conf-" + distlock::spi::random_token().substr(0, 8));
    std::filesystem::create_directories(dir);
    return dir.string();
}

}  // namespace

// ---- 1. exclusion -----------------------------------------------------------

TEST_CASE("two connections never hold the lock at once", "[contract][exclusion]") {
    auto a = connect_under_test();
    auto b = connect_under_test();
    const auto name = unique_name("exclusion");
    constexpr int threads = 6, rounds = 15;
    distlock::test::critical_section section;  // its counter is not atomic: the lock must protect it
    std::vector<std::thread> pool;
    distlock::test::thread_errors errors;
    for (int t = 0; t < threads; ++t) {
        pool.emplace_back([&, t] {
            errors.run([&] {
                auto m = (t % 2 == 0 ? a : b).mutex(name);
                for (int i = 0; i < rounds; ++i) {
                    std::lock_guard guard(m);
                    section.pass(100us);
                }
            });
        });
    }
    for (auto& th : pool) th.join();
    CHECK(errors.all() == "");
    CHECK(section.max_inside.load() == 1);
    CHECK(section.counter == threads * rounds);
}

TEST_CASE("threads sharing one mutex object take turns in-process", "[contract][exclusion]") {
    auto p = connect_under_test();
    auto m = p.mutex(unique_name("shared-object"));
    long counter = 0;
    std::vector<std::thread> pool;
    distlock::test::thread_errors errors;
    for (int t = 0; t < 4; ++t) {
        pool.emplace_back([&] {
            errors.run([&] {
                for (int i = 0; i < 20; ++i) {
                    std::unique_lock lk(m);
                    long v = counter;
                    std::this_thread::yield();
                    counter = v + 1;
                }
            });
        });
    }
    for (auto& th : pool) th.join();
    CHECK(errors.all() == "");
    CHECK(counter == 80);
    CHECK_FALSE(m.held());
}

TEST_CASE("processes increment a shared counter file exactly", "[contract][exclusion][needs:cross_process]") {
    const auto name = unique_name("processes");
    const auto dir = temp_dir();
    const auto file = dir + "/counter";
    { std::ofstream(file) << 0 << '\n'; }
    constexpr int procs = 3, rounds = 20;
    std::vector<std::unique_ptr<child_process>> kids;
    for (int i = 0; i < procs; ++i)
        kids.push_back(run_helper({"count", backend_url(), name, file, std::to_string(rounds)}));
    for (auto& k : kids) CHECK(k->wait_exit() == 0);
    long total = -1;
    std::ifstream(file) >> total;
    CHECK(total == procs * rounds);
    std::filesystem::remove_all(dir);
}

// ---- 2. try_lock, timeouts, hand-off -------------------------------------------

TEST_CASE("try_lock fails at once while another connection holds", "[contract][waiting]") {
    auto a = connect_under_test();
    auto b = connect_under_test();
    const auto name = unique_name("try-lock");
    auto holder = a.mutex(name);
    REQUIRE(holder.try_lock());
    CHECK(holder.held());
    auto other = b.mutex(name);
    auto t0 = clk::now();
    CHECK_FALSE(other.try_lock());
    CHECK(clk::now() - t0 < 3s);  // "at once": no waiting for the holder (generous bound: no hang)
    CHECK_FALSE(other.held());
    holder.unlock();
    CHECK(other.try_lock());
    other.unlock();
}

TEST_CASE("try_lock_for gives up after about its duration", "[contract][waiting]") {
    auto a = connect_under_test();
    auto b = connect_under_test();
    const auto name = unique_name("try-lock-for");
    auto holder = a.mutex(name);
    holder.lock();
    auto other = b.mutex(name);
    auto t0 = clk::now();
    CHECK_FALSE(other.try_lock_for(400ms));
    auto waited = clk::now() - t0;
    CHECK(waited >= 390ms);
    CHECK(waited < 400ms + 5s);  // bounded: no hang past the deadline
    holder.unlock();
}

TEST_CASE("a waiter gets the lock soon after release", "[contract][waiting]") {
    auto a = connect_under_test();
    auto b = connect_under_test();
    const auto name = unique_name("handoff");
    auto holder = a.mutex(name);
    holder.lock();
    std::atomic<bool> got{false};
    std::uint64_t waiter_token = 0;
    distlock::test::thread_errors errors;
    std::thread waiter([&] {
        errors.run([&] {
            auto m = b.mutex(name);
            m.lock();
            waiter_token = m.token();
            got = true;
            m.unlock();
        });
    });
    std::this_thread::sleep_for(300ms);
    CHECK_FALSE(got.load());  // still waiting while held
    auto holder_token = holder.token();
    holder.unlock();
    CHECK(eventually([&] { return got.load(); }, 10s));
    waiter.join();
    CHECK(errors.all() == "");
    if (holder_token != 0) CHECK(waiter_token > holder_token);
}

TEST_CASE("try_lock_until accepts other clocks", "[contract][waiting]") {
    auto a = connect_under_test();
    auto b = connect_under_test();
    const auto name = unique_name("until");
    auto holder = a.mutex(name);
    holder.lock();
    auto other = b.mutex(name);
    CHECK_FALSE(other.try_lock_until(std::chrono::system_clock::now() + 200ms));
    holder.unlock();
    CHECK(other.try_lock_until(std::chrono::system_clock::now() + 5s));
    other.unlock();
}

// ---- 3. only the owner releases --------------------------------------------------

TEST_CASE("a stale handle's unlock after its lease expired never frees the next owner's lock",
          "[contract][owner][needs:lease_expiry]") {
    auto a = connect_under_test();
    auto b = connect_under_test();
    auto c = connect_under_test();
    const auto name = unique_name("stale-expiry");
    distlock::lock_options no_renew;
    no_renew.auto_renew = false;
    auto stale = a.mutex(name, no_renew);
    REQUIRE(stale.try_lock());
    const auto lease = lease_of(a);
    CHECK(eventually([&] { return !stale.held(); }, lease + 5s));  // reported lost once the lease passed
    auto next = b.mutex(name);
    REQUIRE(next.try_lock_for(lease + 10s));
    stale.unlock();  // must not free `next`'s lock
    auto third = c.mutex(name);
    CHECK_FALSE(third.try_lock());
    CHECK(next.held());
    next.unlock();
    CHECK(third.try_lock_for(10s));
}

TEST_CASE("a stale handle's unlock after its lock was broken never frees the next owner's lock",
          "[contract][owner][needs:break_lock]") {
    auto a = connect_under_test();
    auto b = connect_under_test();
    auto c = connect_under_test();
    const auto name = unique_name("stale-broken");
    auto stale = a.mutex(name);
    REQUIRE(stale.try_lock());
    // A waiter already queued when the lock is broken gets it (no need to retry).
    auto next = b.mutex(name);
    std::atomic<bool> got{false};
    distlock::test::thread_errors errors;
    std::jthread waiter(  // joined however the case ends (a throwing break_lock: a failure, not an abort)
        [&] { errors.run([&] { got = next.try_lock_for(lease_of(b) + 10s); }); });
    std::this_thread::sleep_for(200ms);
    distlock::testing::break_lock(a, name);
    waiter.join();
    CHECK(errors.all() == "");
    REQUIRE(got.load());
    stale.unlock();
    auto third = c.mutex(name);
    CHECK_FALSE(third.try_lock());
    CHECK(next.held());
    next.unlock();
}

TEST_CASE("unlock when not held does nothing", "[contract][owner]") {
    auto a = connect_under_test();
    auto b = connect_under_test();
    const auto name = unique_name("not-held");
    auto m = a.mutex(name);
    m.unlock();
    CHECK_FALSE(m.held());
    CHECK(m.token() == 0);
    auto holder = b.mutex(name);
    holder.lock();
    m.unlock();  // another connection's handle that never locked
    CHECK(holder.held());
    CHECK_FALSE(a.mutex(name).try_lock());
    holder.unlock();
    holder.unlock();  // twice: still fine
    CHECK(m.try_lock());
    m.unlock();
}

// ---- 4. crash safety -------------------------------------------------------------------

TEST_CASE("a holder killed with SIGKILL is released and a waiter proceeds",
          "[contract][crash][needs:cross_process][needs:crash_release]") {
    auto p = connect_under_test();
    const auto name = unique_name("crash");
    auto holder = run_helper({"hold", backend_url(), name});
    auto line = holder->read_line(120s);
    REQUIRE(line.rfind("locked", 0) == 0);
    std::uint64_t dead_token = std::stoull(line.substr(7));
    auto waiter = p.mutex(name);
    CHECK_FALSE(waiter.try_lock());
    holder->kill_hard();
    auto bound = p.caps().crash_release_bound + lease_of(p) + 10s;
    auto t0 = clk::now();
    REQUIRE(waiter.try_lock_for(bound));
    INFO("released after " << std::chrono::duration_cast<std::chrono::milliseconds>(clk::now() - t0).count() << " ms");
    if (p.caps().supports(distlock::feature::fencing)) CHECK(waiter.token() > dead_token);
    waiter.unlock();
}

// ---- 5. renewal -----------------------------------------------------------------------

TEST_CASE("a holder working past several lease lengths keeps the lock", "[contract][renewal][needs:lease_expiry]") {
    auto a = connect_under_test();
    auto b = connect_under_test();
    const auto lease = lease_of(a);
    INFO("default lease " << lease.count() << " ms: give the test URL a short lease (lease=2s)");
    REQUIRE(lease <= 10s);
    const auto name = unique_name("renewal");
    distlock::test::loss_recorder rec;
    auto holder = a.mutex(name, rec.options());
    CHECK_FALSE(holder.valid_until().has_value());  // not held
    const auto asked = clk::now();
    holder.lock();
    // The lease runs from when the acquire was sent: it ends within a lease of now.
    const auto first = holder.valid_until();
    REQUIRE(first.has_value());
    CHECK(*first > asked);
    CHECK(*first <= clk::now() + lease);
    auto other = b.mutex(name);
    const auto start = clk::now();
    int probes = 0;
    while (clk::now() - start < 3 * lease + lease / 2) {
        std::this_thread::sleep_for(lease / 4);
        CHECK_FALSE(other.try_lock());
        ++probes;
    }
    CHECK(probes >= 3);  // probed all along (fewer than 14 on a loaded machine)
    CHECK(holder.held());
    CHECK(rec.lost() == 0);
    // Renewals moved the lease's end on: past where the first grant ended.
    const auto last = holder.valid_until();
    REQUIRE(last.has_value());
    CHECK(*last > *first + lease);
    holder.unlock();
    CHECK_FALSE(holder.valid_until().has_value());
    CHECK(other.try_lock_for(5s));
    other.unlock();
}

// ---- 6. loss is reported ------------------------------------------------------------------

TEST_CASE("a holder learns when its lock is removed on the server",
          "[contract][loss][needs:loss_detection][needs:break_lock]") {
    auto a = connect_under_test();
    const auto name = unique_name("loss");
    distlock::test::loss_recorder rec;
    auto holder = a.mutex(name, rec.options());
    holder.lock();
    const auto token = holder.token();
    distlock::testing::break_lock(a, name);
    const auto bound = std::max<std::chrono::milliseconds>(5s, 2 * lease_of(a));
    CHECK(eventually([&] { return !holder.held(); }, bound));
    CHECK(rec.wait_lost(1, 2s));
    CHECK_FALSE(rec.wait_lost(2, 200ms));  // once
    const auto seen = rec.losses();
    REQUIRE(seen.size() == 1);
    CHECK(seen[0].name == name);
    CHECK(seen[0].token == token);
    CHECK_FALSE(seen[0].reason.empty());
    CHECK(holder.token() == 0);
    holder.unlock();  // never throws, even though the lock is gone
    auto again = a.mutex(name);
    CHECK(again.try_lock_for(lease_of(a) + 10s));
    again.unlock();
}

TEST_CASE("a loss that unlock() finds is reported once, through on_lost and never on_error",
          "[contract][loss][needs:break_lock]") {
    auto a = connect_under_test();
    const auto name = unique_name("loss-at-unlock");
    distlock::test::loss_recorder rec;
    auto holder = a.mutex(name, rec.options());
    holder.lock();
    const auto token = holder.token();
    distlock::testing::break_lock(a, name);
    holder.unlock();  // at once: the release, if nothing else, finds the grant gone
    CHECK(rec.wait_lost(1, 2s));
    CHECK_FALSE(rec.wait_lost(2, 200ms));  // once
    const auto seen = rec.losses();
    REQUIRE_FALSE(seen.empty());
    CHECK(seen[0].token == token);
    std::string error_text;
    for (const auto& [event, code] : rec.error_events()) error_text += event.reason + "\n";
    INFO("on_error: " << error_text);
    CHECK(rec.errors() == 0);
}

TEST_CASE("a grant whose reply comes after its lease has run out is not held",
          "[contract][lease][needs:lease_expiry]") {
    // A's replies from the server(s) come 1.5 s late through proxies, longer than
    // its 1 s lease: the server grants A, the grant expires there before A hears
    // of it, and B takes the lock. A must never believe it holds while B does.
    std::vector<std::unique_ptr<distlock::test::tcp_proxy>> proxies;
    const auto slow_url = distlock::test::through_proxies(backend_url(), proxies);
    REQUIRE_FALSE(proxies.empty());
    auto a = distlock::connect(slow_url);
    auto b = connect_under_test();
    const auto name = unique_name("late-grant");
    distlock::lock_options opts;
    opts.lease = 1s;
    auto ma = a.mutex(name, opts);
    auto mb = b.mutex(name, opts);
    REQUIRE(ma.try_lock_for(10s));  // opens A's connections while the network is fast
    ma.unlock();
    for (auto& p : proxies) p->delay_replies(1500ms);

    std::atomic<bool> done{false};
    std::atomic<int> both{0};
    std::thread watch([&] {  // held() of both, every 2 ms
        while (!done) {
            if (ma.held() && mb.held()) ++both;
            std::this_thread::sleep_for(2ms);
        }
    });
    bool a_got = false, b_got = false;
    distlock::test::thread_errors errors;
    std::thread slow([&] {
        errors.run([&] {
            try {
                a_got = ma.try_lock_for(3s);
            } catch (const distlock::unavailable_error&) {  // a backend whose timeout is below the delay
            }
            if (a_got) {
                std::this_thread::sleep_for(300ms);
                ma.unlock();
            }
        });
    });
    std::this_thread::sleep_for(200ms);  // A's request has reached the server by now
    // A's grants come and go (each is a lease of 1 s, its next attempt comes a
    // delayed reply later); B gets the name in a gap or after A's last attempt:
    // one of up to three statements (optimistic SQL) begun before A's 3 s
    // deadline, 1.5 s per reply, plus its lease: 8.5 s at most.
    b_got = mb.try_lock_for(10s);
    if (b_got) {
        std::this_thread::sleep_for(3s);  // past A's deadline
        mb.unlock();
    }
    slow.join();
    done = true;
    watch.join();
    for (auto& p : proxies) p->delay_replies(0ms);
    CHECK(errors.all().empty());
    INFO("A acquired: " << a_got << ", B acquired: " << b_got);
    CHECK(b_got);
    CHECK(both.load() == 0);
}

// ---- 7. fencing ------------------------------------------------------------------------------

TEST_CASE("fencing tokens strictly increase across grants of one name", "[contract][fencing][needs:fencing]") {
    auto a = connect_under_test();
    auto b = connect_under_test();
    const auto name = unique_name("fencing");
    auto ma = a.mutex(name);
    auto mb = b.mutex(name);
    std::uint64_t last = 0;
    for (int i = 0; i < 8; ++i) {
        auto& m = i % 3 == 0 ? mb : ma;
        CHECK(m.token() == 0);
        REQUIRE(m.try_lock_for(10s));
        INFO("grant " << i << " token " << m.token() << " previous " << last);
        CHECK(m.token() > last);
        last = m.token();
        m.unlock();
    }
}

// ---- 8. bad input ----------------------------------------------------------------------------

TEST_CASE("empty and oversized names are invalid arguments", "[contract][input]") {
    auto p = connect_under_test();
    CHECK_THROWS_AS(p.mutex(""), distlock::invalid_argument_error);
    CHECK_THROWS_AS(p.mutex(std::string(distlock::max_name_length + 1, 'x')), distlock::invalid_argument_error);
    auto longest = p.mutex(unique_name("") + std::string(distlock::max_name_length - 20, 'y'));
    CHECK(longest.try_lock_for(10s));
    longest.unlock();
}

TEST_CASE("names with odd bytes lock independently", "[contract][input]") {
    auto a = connect_under_test();
    auto b = connect_under_test();
    const std::string base = unique_name("odd");
    const std::vector<std::string> names = {
        base + std::string("\0nul", 4),
        base + "/slash/../x",
        base + "'; DROP TABLE locks; --",
        base + "\\back\"quote",
        base + " space\ttab\nline",
        base + "\xe9\x94\x81 \xf0\x9f\x94\x92",
        base + "%2F%00",
        base + "{braces}*?[]",
    };
    std::vector<distlock::mutex> held;
    for (const auto& n : names) {
        held.push_back(a.mutex(n));
        INFO("name #" << held.size());
        REQUIRE(held.back().try_lock_for(10s));
    }
    // Each is held; none of them blocks an unrelated name, and each blocks itself.
    for (const auto& n : names) CHECK_FALSE(b.mutex(n).try_lock());
    auto unrelated = b.mutex(base);
    CHECK(unrelated.try_lock());
    unrelated.unlock();
    for (auto& m : held) m.unlock();
    for (const auto& n : names) {
        auto m = b.mutex(n);
        CHECK(m.try_lock());
        m.unlock();
    }
}

TEST_CASE("unknown schemes and unknown parameters are invalid arguments", "[contract][input]") {
    CHECK_THROWS_AS(distlock::connect("nosuchscheme://127.0.0.1:1"), distlock::invalid_argument_error);
    CHECK_THROWS_AS(distlock::connect("not a url"), distlock::invalid_argument_error);
    const auto& url = backend_url();
    const char sep = url.find('?') == std::string::npos ? '?' : '&';
    CHECK_THROWS_AS(distlock::connect(url + sep + "no_such_parameter=1"), distlock::invalid_argument_error);
    CHECK_THROWS_AS(distlock::connect(url + sep + "lease=soon"), distlock::invalid_argument_error);
}

// ---- the standard-library face ------------------------------------------------------------------

TEST_CASE("std::unique_lock, std::scoped_lock and std::lock_guard work", "[contract][std]") {
    auto a = connect_under_test();
    auto b = connect_under_test();
    const auto n1 = unique_name("std-1"), n2 = unique_name("std-2");
    auto m1 = a.mutex(n1);
    auto m2 = a.mutex(n2);
    {
        std::unique_lock lk(m1, 5s);
        REQUIRE(lk.owns_lock());
        CHECK(m1.held());
        auto contender = b.mutex(n1);
        std::unique_lock other(contender, std::try_to_lock);
        CHECK_FALSE(other.owns_lock());
    }
    CHECK_FALSE(m1.held());
    {
        std::scoped_lock both(m1, m2);
        CHECK(m1.held());
        CHECK(m2.held());
    }
    CHECK_FALSE(m1.held());
    CHECK_FALSE(m2.held());
    {
        std::lock_guard guard(m2);
        CHECK(m2.held());
    }
    auto check = b.mutex(n2);
    CHECK(check.try_lock());
    check.unlock();
}

TEST_CASE("destroying or moving a held mutex behaves", "[contract][std]") {
    auto a = connect_under_test();
    auto b = connect_under_test();
    const auto name = unique_name("lifetime");
    {
        auto m = a.mutex(name);
        m.lock();
        auto moved = std::move(m);
        CHECK(moved.held());
        CHECK_FALSE(m.held());  // NOLINT: moved-from is empty, not held
        CHECK_FALSE(b.mutex(name).try_lock());
    }  // destructor releases
    auto again = b.mutex(name);
    CHECK(again.try_lock_for(5s));
    again.unlock();
}

TEST_CASE("locking again from the holding thread nests or is refused", "[contract][std]") {
    auto a = connect_under_test();
    auto b = connect_under_test();
    const auto name = unique_name("reentry");
    auto m = a.mutex(name);
    m.lock();
    if (a.caps().reentrant) {
        CHECK(m.try_lock());
        m.unlock();
        CHECK(m.held());
        CHECK_FALSE(b.mutex(name).try_lock());
        m.unlock();
        CHECK_FALSE(m.held());
    } else {
        CHECK_THROWS_AS(m.try_lock(), distlock::would_deadlock_error);
        CHECK(m.held());
        m.unlock();
    }
    // Another mutex object for the same name on the same thread would deadlock.
    m.lock();
    auto twin = a.mutex(name);
    CHECK_THROWS_AS(twin.try_lock(), distlock::would_deadlock_error);
    m.unlock();
    CHECK(twin.try_lock());
    twin.unlock();
}
