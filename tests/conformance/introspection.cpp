// The lock contract for what can be seen from outside: provider::inspect and
// holder labels, and leader election (provider::election), proved against one
// backend URL per run. A field a backend cannot know must be declared with its
// reason (lock_info::unknown); whether a lock is held must be known.
#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include "child_process.hpp"
#include "distlock/distlock.hpp"
#include "distlock/spi/backend.hpp"
#include "distlock/testing.hpp"
#include "suite.hpp"
#include "support.hpp"

using namespace std::chrono_literals;
using distlock::test::backend_url;
using distlock::test::eventually;
using distlock::test::unique_name;
using clk = std::chrono::steady_clock;

namespace {

using distlock::test::connect_under_test;
using distlock::test::counted_processes;
using distlock::test::crash_bound;
using distlock::test::run_helper;
using distlock::test::token_in;

distlock::provider connect_as(const std::string& holder) {
    distlock::provider_options o;
    o.holder = holder;
    return distlock::connect(backend_url(), o);
}

// A label no other run uses.
std::string label(const std::string& what) { return what + "-" + distlock::spi::random_token().substr(0, 8); }

// Every field that applies and is empty has its reason.
void check_declared(const distlock::lock_info& info) {
    auto declared = [&](const char* field, bool present) {
        INFO("field " << field);
        if (!present) CHECK_FALSE(info.unknown.count(field) == 0);
        if (!present && info.unknown.count(field)) CHECK_FALSE(info.unknown.at(field).empty());
    };
    declared("held", info.held.has_value());
    declared("waiters", info.waiters.has_value());
    if (info.held.value_or(false)) {
        declared("holder", info.holder.has_value());
        declared("token", info.token.has_value());
        declared("remaining", info.remaining.has_value());
    }
}

// What inspect shows of a lock held by a provider labelled `who`, with its token.
void check_held_by(const distlock::provider& p, const distlock::lock_info& info, const std::string& who,
                   std::uint64_t token, std::chrono::milliseconds lease) {
    check_declared(info);
    REQUIRE(info.held == std::optional<bool>(true));
    if (info.holder) CHECK(*info.holder == who);
    if (info.token && p.caps().supports(distlock::feature::fencing)) CHECK(*info.token == token);
    if (info.remaining) {
        CHECK(info.remaining->count() > 0);
        CHECK(*info.remaining <= lease);
    }
}

}  // namespace

// ---- inspect -----------------------------------------------------------------------

TEST_CASE("inspect shows a lock nobody holds as free, and knows whether it is held", "[inspect][needs:inspect]") {
    auto p = connect_under_test();
    const auto name = unique_name("inspect-free");
    auto info = p.inspect(name);
    CHECK(info.name == name);
    check_declared(info);
    REQUIRE(info.held.has_value());  // the one thing every backend must know
    CHECK_FALSE(*info.held);
    CHECK_FALSE(info.holder.has_value());
    if (info.waiters) CHECK(*info.waiters == 0u);
}

TEST_CASE("inspect shows the holder's label, token and lease, and the lock free after release",
          "[inspect][needs:inspect]") {
    const auto who = label("inspect-holder");
    auto holder_side = connect_as(who);
    CHECK(holder_side.holder() == who);
    auto p = connect_under_test();
    const auto name = unique_name("inspect-held");
    auto m = holder_side.mutex(name);
    REQUIRE(m.try_lock_for(10s));
    check_held_by(p, p.inspect(name), who, m.token(), p.default_lease());
    m.unlock();
    CHECK(eventually([&] { return p.inspect(name).held == std::optional<bool>(false); }, 5s));
}

TEST_CASE("inspect counts a waiter exactly, or declares why it cannot", "[inspect][needs:inspect]") {
    auto p = connect_under_test();
    auto holder_side = connect_under_test();
    auto waiter_side = connect_under_test();
    const auto name = unique_name("inspect-waiters");
    auto m = holder_side.mutex(name);
    REQUIRE(m.try_lock_for(10s));
    const auto first = p.inspect(name);
    check_declared(first);
    if (!first.waiters) {
        WARN("waiters not counted: " << first.unknown.at("waiters"));  // declared: checked above
        return;
    }
    CHECK(*first.waiters == 0u);
    std::atomic<bool> got{false};
    std::thread t([&] {
        auto w = waiter_side.mutex(name);
        if (w.try_lock_for(20s)) {
            got = true;
            w.unlock();
        }
    });
    CHECK(eventually([&] { return p.inspect(name).waiters.value_or(0) == 1; }, 10s));
    m.unlock();
    t.join();
    CHECK(got);
}

// ---- inspect_read_write, inspect_semaphore ------------------------------------------

namespace {
// Every field of a read-write lock's or a semaphore's info that applies and is
// empty has its reason; so do the fields of each grant listed.
void declared(const std::map<std::string, std::string>& unknown, const std::string& field, bool present) {
    INFO("field " << field);
    if (present) return;
    REQUIRE(unknown.count(field) == 1);
    CHECK_FALSE(unknown.at(field).empty());
}
void check_grants_declared(const std::map<std::string, std::string>& unknown,
                           const std::vector<distlock::grant_info>& g, const std::string& prefix) {
    for (const auto& one : g) {
        declared(unknown, prefix + ".holder", one.holder.has_value());
        declared(unknown, prefix + ".token", one.token.has_value());
        declared(unknown, prefix + ".remaining", one.remaining.has_value());
    }
}
void check_declared(const distlock::read_write_info& info) {
    declared(info.unknown, "write_held", info.write_held.has_value());
    declared(info.unknown, "readers", info.readers.has_value());
    declared(info.unknown, "writers_waiting", info.writers_waiting.has_value());
    if (info.write_held.value_or(false)) {
        declared(info.unknown, "writer", info.writer.has_value());
        if (info.writer) check_grants_declared(info.unknown, {*info.writer}, "writer");
    }
    if (info.readers) check_grants_declared(info.unknown, *info.readers, "readers");
}
void check_declared(const distlock::semaphore_info& info) {
    declared(info.unknown, "size", info.size.has_value());
    declared(info.unknown, "permits", info.permits.has_value());
    declared(info.unknown, "free", info.free.has_value());
    if (info.permits) check_grants_declared(info.unknown, *info.permits, "permits");
}
// Two grants listed: where their labels (and, with `tokens`, their tokens)
// are known, they are the holders' (in any order).
void check_grants(const std::vector<distlock::grant_info>& grants, std::vector<std::string> labels, bool tokens,
                  std::vector<std::uint64_t> want) {
    std::vector<std::string> seen;
    std::vector<std::uint64_t> got;
    for (const auto& g : grants) {
        if (g.holder) seen.push_back(*g.holder);
        if (g.token) got.push_back(*g.token);
    }
    for (auto* v : {&seen, &labels}) std::sort(v->begin(), v->end());
    std::sort(got.begin(), got.end());
    std::sort(want.begin(), want.end());
    if (seen.size() == 2) CHECK(seen == labels);
    if (tokens && got.size() == 2) CHECK(got == want);
}
}  // namespace

TEST_CASE("inspect_read_write shows the writer, each reader and the writers waiting, or declares why not",
          "[inspect][read_write][needs:read_write][needs:inspect_primitives]") {
    auto p = connect_under_test();
    const auto r1 = label("reader-a"), r2 = label("reader-b"), w = label("writer");
    auto readers_a = connect_as(r1), readers_b = connect_as(r2), writer_side = connect_as(w);
    const auto name = unique_name("inspect-rw");
    const bool tokens = p.caps().supports(distlock::feature::fencing);

    auto free = p.inspect_read_write(name);
    CHECK(free.name == name);
    check_declared(free);
    REQUIRE(free.write_held == std::optional<bool>(false));  // as inspect's held: always known
    if (free.readers) CHECK(free.readers->empty());
    if (free.writers_waiting) CHECK(*free.writers_waiting == 0u);

    auto a = readers_a.shared_mutex(name);
    auto b = readers_b.shared_mutex(name);
    REQUIRE(a.try_lock_shared_for(10s));
    REQUIRE(b.try_lock_shared_for(10s));
    auto two = p.inspect_read_write(name);
    check_declared(two);
    CHECK(two.write_held == std::optional<bool>(false));
    REQUIRE(two.readers.has_value());  // who reads is the point of it
    CHECK(two.readers->size() == 2u);
    check_grants(*two.readers, {r1, r2}, tokens, {a.shared_token(), b.shared_token()});

    // A writer waits for them, and is counted where the backend counts.
    std::atomic<bool> wrote{false};
    std::thread t([&] {
        auto wr = writer_side.shared_mutex(name);
        if (wr.try_lock_for(30s)) {
            wrote = true;
            wr.unlock();
        }
    });
    if (two.writers_waiting) {
        CHECK(eventually([&] { return p.inspect_read_write(name).writers_waiting.value_or(0) == 1; }, 10s));
    } else {
        WARN("writers waiting not counted: " << two.unknown.at("writers_waiting"));  // declared: checked above
    }
    a.unlock_shared();
    b.unlock_shared();
    t.join();
    CHECK(wrote);

    auto wr = writer_side.shared_mutex(name);
    REQUIRE(wr.try_lock_for(10s));
    auto written = p.inspect_read_write(name);
    check_declared(written);
    REQUIRE(written.write_held == std::optional<bool>(true));
    if (written.writer && written.writer->holder) CHECK(*written.writer->holder == w);
    if (written.writer && written.writer->token && tokens) CHECK(*written.writer->token == wr.token());
    if (written.readers) CHECK(written.readers->empty());
    wr.unlock();
    CHECK(eventually([&] { return p.inspect_read_write(name).write_held == std::optional<bool>(false); }, 5s));
}

TEST_CASE("inspect_semaphore shows the size, each permit and the free ones, or declares why not",
          "[inspect][semaphore][needs:semaphore][needs:inspect_primitives]") {
    auto p = connect_under_test();
    const auto h1 = label("permit-a"), h2 = label("permit-b");
    auto side_a = connect_as(h1), side_b = connect_as(h2);
    const auto name = unique_name("inspect-sem");
    auto free = p.inspect_semaphore(name);
    CHECK(free.name == name);
    check_declared(free);
    REQUIRE(free.permits.has_value());
    CHECK(free.permits->empty());

    auto a = side_a.semaphore(name, 3);
    auto b = side_b.semaphore(name, 3);
    REQUIRE(a.try_acquire_for(10s));
    REQUIRE(b.try_acquire_for(10s));
    auto two = p.inspect_semaphore(name);
    check_declared(two);
    REQUIRE(two.permits.has_value());
    CHECK(two.permits->size() == 2u);
    check_grants(*two.permits, {h1, h2}, p.caps().supports(distlock::feature::fencing), {a.token(), b.token()});
    if (two.size) CHECK(*two.size == 3u);
    if (two.free) CHECK(*two.free == 1u);
    a.release();
    b.release();
    CHECK(eventually(
        [&] { return p.inspect_semaphore(name).permits.value_or(std::vector<distlock::grant_info>{1}).empty(); }, 5s));
}

TEST_CASE("inspect_read_write and inspect_semaphore where the backend has no such primitive: unsupported_error",
          "[inspect]") {
    auto p = connect_under_test();
    if (p.caps().supports(distlock::feature::read_write))
        (void)p.inspect_read_write(unique_name("rw-supported"));  // no throw
    else CHECK_THROWS_AS(p.inspect_read_write(unique_name("rw")), distlock::unsupported_error);
    if (p.caps().supports(distlock::feature::semaphore)) (void)p.inspect_semaphore(unique_name("sem-supported"));
    else CHECK_THROWS_AS(p.inspect_semaphore(unique_name("sem")), distlock::unsupported_error);
    CHECK_THROWS_AS(p.inspect_read_write(""), distlock::invalid_argument_error);  // names as everywhere
}

TEST_CASE("a holder label is the URL's holder=, the options' or host:pid, and bad labels are refused",
          "[inspect][input]") {
    const auto url = backend_url();
    const auto sep = url.find('?') == std::string::npos ? "?" : "&";
    CHECK(distlock::connect(url + sep + "holder=from-the-url").holder() == "from-the-url");
    distlock::provider_options o;
    o.holder = "from-options";
    CHECK(distlock::connect(url + sep + "holder=from-the-url", o).holder() == "from-options");
    const auto fallback = connect_under_test().holder();
    CHECK(fallback.size() > 2);
    CHECK(fallback.substr(fallback.rfind(':') + 1) == std::to_string(::getpid()));
    for (const auto& bad : {std::string(256, 'x'), std::string("tab\there")}) {
        o.holder = bad;
        CHECK_THROWS_AS(distlock::connect(url, o), distlock::invalid_argument_error);
    }
    distlock::election_options e;
    e.id = std::string("new\nline");
    CHECK_THROWS_AS(connect_under_test().election(unique_name("bad-id"), e), distlock::invalid_argument_error);
    CHECK_THROWS_AS(connect_under_test().inspect(""), distlock::invalid_argument_error);
}

// ---- leader election ----------------------------------------------------------------

TEST_CASE("leader() agrees with the elected candidate and resign hands leadership over", "[election][needs:inspect]") {
    auto a = connect_under_test();
    auto b = connect_under_test();
    const auto name = unique_name("elect");
    distlock::election_options oa, ob;
    oa.id = label("cand-a");
    ob.id = label("cand-b");
    std::atomic<int> losses{0};
    oa.on_lost = [&](const distlock::lock_event&) { ++losses; };
    auto ea = a.election(name, oa);
    auto eb = b.election(name, ob);
    CHECK(ea.id() == oa.id);
    CHECK_FALSE(ea.is_leader());
    auto before = eb.leader();
    check_declared(before);
    CHECK(before.held == std::optional<bool>(false));

    REQUIRE(ea.campaign(10s));
    CHECK(ea.is_leader());
    CHECK(ea.campaign(0ms));  // already leading: at once
    CHECK_FALSE(eb.campaign(300ms));
    CHECK_FALSE(eb.is_leader());
    auto seen = eb.leader();
    check_held_by(b, seen, oa.id, ea.term(), b.default_lease());
    if (seen.holder) CHECK(*seen.holder == oa.id);

    ea.resign();
    CHECK_FALSE(ea.is_leader());
    REQUIRE(eb.campaign(crash_bound(b)));
    CHECK(eb.is_leader());
    auto now = ea.leader();
    check_held_by(a, now, ob.id, eb.term(), a.default_lease());
    if (a.caps().supports(distlock::feature::fencing) && ea.term() == 0) CHECK(eb.term() > 0);
    eb.resign();
    CHECK(losses == 0);  // resigning is not losing
}

TEST_CASE("candidates of separate providers never lead at once", "[election][exclusion]") {
    const auto name = unique_name("elect-threads");
    constexpr int candidates = 3, terms = 4;
    std::atomic<int> leading{0}, most{0}, terms_done{0}, disagreements{0};
    distlock::test::thread_errors errors;
    std::vector<std::thread> threads;
    for (int i = 0; i < candidates; ++i)
        threads.emplace_back([&, i] {
            errors.run([&] {
                auto p = connect_under_test();
                distlock::election_options o;
                o.id = "thread-" + std::to_string(i);
                auto e = p.election(name, o);
                for (int t = 0; t < terms; ++t) {
                    if (!e.campaign(60s)) throw std::runtime_error("no leadership within 60 s");
                    distlock::test::raise_max(most, ++leading);
                    const auto info = e.leader();
                    if (info.holder && *info.holder != o.id) ++disagreements;
                    std::this_thread::sleep_for(5ms);
                    --leading;
                    e.resign();
                    ++terms_done;
                }
            });
        });
    for (auto& t : threads) t.join();
    CHECK(errors.all().empty());
    CHECK(terms_done == candidates * terms);
    CHECK(most == 1);
    CHECK(disagreements == 0);
}

TEST_CASE("processes never lead at once, and each sees itself as leader",
          "[election][exclusion][needs:cross_process]") {
    constexpr int procs = 3;
    counted_processes run("elect", procs, {"elect", backend_url(), unique_name("elect-procs"), "", "4"});
    const auto& c = run.counters();
    CHECK(c.rounds.load() == procs * 4);
    CHECK(c.max_holders.load() == 1);
    CHECK(c.violations.load() == 0);  // leader() named another candidate while leading
}

TEST_CASE("a crashed leader is replaced within the backend's bound",
          "[election][crash][needs:cross_process][needs:crash_release]") {
    auto p = connect_under_test();
    const auto name = unique_name("elect-crash");
    const auto dead_id = label("doomed");
    auto leader = run_helper({"lead", backend_url(), name, dead_id});
    auto line = leader->read_line(120s);
    REQUIRE(line.rfind("leader", 0) == 0);
    const auto dead_term = token_in(line);
    distlock::election_options o;
    o.id = label("successor");
    auto e = p.election(name, o);
    CHECK_FALSE(e.campaign(200ms));
    const auto seen = e.leader();
    check_declared(seen);
    if (p.caps().supports(distlock::feature::inspect)) CHECK(seen.held == std::optional<bool>(true));
    if (seen.holder) CHECK(*seen.holder == dead_id);
    leader->kill_hard();
    const auto t0 = clk::now();
    REQUIRE(e.campaign(crash_bound(p)));
    INFO("replaced after " << std::chrono::duration_cast<std::chrono::milliseconds>(clk::now() - t0).count() << " ms");
    if (p.caps().supports(distlock::feature::fencing)) CHECK(e.term() > dead_term);
    const auto now = e.leader();
    if (now.holder) CHECK(*now.holder == o.id);
    e.resign();
}

TEST_CASE("a leader learns when its leadership is removed on the server",
          "[election][loss][needs:break_lock][needs:loss_detection]") {
    auto p = connect_under_test();
    const auto name = unique_name("elect-broken");
    std::atomic<int> lost{0};
    distlock::election_options o;
    o.on_lost = [&](const distlock::lock_event&) { ++lost; };
    auto e = p.election(name, o);
    REQUIRE(e.campaign(10s));
    distlock::testing::break_lock(p, name);
    CHECK(
        eventually([&] { return lost.load() == 1; }, std::max<std::chrono::milliseconds>(p.default_lease() * 3, 10s)));
    CHECK_FALSE(e.is_leader());
    e.resign();
    CHECK(lost == 1);
}

// ---- contention, as the observer is told ----------------------------------------------

TEST_CASE("a grant is reported contended only when it waited for another client", "[observe]") {
    auto metrics = std::make_shared<distlock::metrics>();
    distlock::provider_options o;
    o.observer = metrics;
    auto observed = distlock::connect(backend_url(), o);
    auto other = connect_under_test();
    const auto name = unique_name("contention");
    auto grants = [&](distlock::contention c) {
        const auto all = metrics->snapshot();
        return all.empty() ? 0 : all.at(0).contended[static_cast<std::size_t>(c)];
    };
    auto mine = observed.mutex(name);
    REQUIRE(mine.try_lock_for(10s));  // nobody holds it: never "waited"
    mine.unlock();
    CHECK(grants(distlock::contention::waited) == 0);
    CHECK(grants(distlock::contention::none) + grants(distlock::contention::unknown) == 1);
    const bool says = grants(distlock::contention::none) == 1;

    auto theirs = other.mutex(name);
    REQUIRE(theirs.try_lock_for(10s));
    std::thread release([&] {
        std::this_thread::sleep_for(300ms);
        theirs.unlock();
    });
    const bool got = mine.try_lock_for(crash_bound(observed));
    release.join();
    REQUIRE(got);
    mine.unlock();
    CHECK(grants(distlock::contention::none) == (says ? 1u : 0u));  // never "none" after waiting
    if (says) CHECK(grants(distlock::contention::waited) == 1);     // a backend that tells, tells both ways
    else WARN(observed.scheme() << " does not say whether a grant waited (contention unknown)");
}
