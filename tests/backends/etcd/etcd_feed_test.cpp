// etcd:// the release feed (backends/etcd/etcd_release_feed.hpp) under hostile
// writes to the lock prefix, against one member (DISTLOCK_TEST_ETCD_URL):
// keys of about 1 MiB written and deleted one by one, one revision deleting
// more than a stream line may hold, and keys outside distlock's layout. The
// feed's window stays within its bound, and an async_lock waiter parked on
// another name is still granted on its holder's release event, in few attempts.
//
// The waiter's provider runs over a gateway of this test's own (scheme
// etcd-feed://, the etcd lock engine as the built-in backend uses it), so that
// its feed's window and the waiter's attempts can be counted.
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "../wake_counting.hpp"
#include "../wake_support.hpp"
#include "etcd/etcd_gateway.hpp"
#include "etcd/etcd_lock.hpp"
#include "etcd/etcd_release_feed.hpp"
#include "etcd_support.hpp"

namespace spi = distlock::spi;
namespace wake = distlock::test::wake;
namespace etcd = distlock::backends::etcd;
using namespace std::chrono_literals;
using distlock::test::unique_name;

namespace {

std::string url() { return distlock::test::env("DISTLOCK_TEST_ETCD_URL"); }

// About 1 MiB: etcd 3.4 takes requests up to 1.5 MiB (--max-request-bytes).
constexpr std::size_t kKeyBytes = 1000 * 1000;
constexpr std::size_t kWindowBytes = std::size_t{1} << 20;  // the feed's bound (etcd_release_feed.cpp)

// The etcd engine over a gateway this test can reach.
class feed_backend final : public spi::backend {
public:
    feed_backend(distlock::backends::http::options o, etcd::settings s) : gateway_(std::move(o), std::move(s)) {}
    std::string_view name() const noexcept override { return "etcd-feed"; }
    const distlock::capabilities& caps() const noexcept override { return caps_; }
    std::unique_ptr<spi::lock_handle> make_lock(const spi::lock_request& r) override {
        return etcd::make_lock(gateway_, r);
    }
    void keepalive_batch(std::span<spi::lock_handle* const> handles,
                         std::span<spi::keepalive_result> results) override {
        const auto before = gateway_.requests();
        etcd::keepalive_batch(gateway_, handles, results);
        std::lock_guard lk(m_);
        batches_.emplace_back(handles.size(), gateway_.requests() - before);
    }
    etcd::gateway& gateway() { return gateway_; }
    // Each renewal call so far: its handles and the requests it sent.
    std::vector<std::pair<std::size_t, std::uint64_t>> batches() {
        std::lock_guard lk(m_);
        return batches_;
    }

private:
    std::mutex m_;
    std::vector<std::pair<std::size_t, std::uint64_t>> batches_;
    etcd::gateway gateway_;
    distlock::capabilities caps_;
};

std::atomic<feed_backend*> last_backend{nullptr};

// A provider over a new feed_backend of the member, whose attempts
// wake_support::attempts_of() counts per name.
distlock::provider feed_provider() {
    wake_support::register_counting("etcd-feed", [] {
        auto u = spi::url::parse(url());
        etcd::settings s;
        s.prefix = u.path();
        auto b =
            std::make_shared<feed_backend>(distlock::backends::http::options_from_url(u, "etcd", 2379), std::move(s));
        last_backend = b.get();
        return std::shared_ptr<spi::backend>(b);
    });
    return distlock::connect("etcd-feed://member");
}
int attempts(const std::string& name) { return wake_support::attempts_of(name); }

// A waiter parked on `name`, held elsewhere, polled only every 5 minutes:
// before that, only a release event lets it in.
struct parked {
    std::string name;
    distlock::mutex m;
    wake::outcome o;
    parked(const distlock::provider& p, const std::string& n) : name(n), m(p.mutex(n, patient())) {
        m.async_lock(600s, o.handler());
        for (int i = 0; i < 200 && attempts(name) == 0; ++i) std::this_thread::sleep_for(10ms);
        REQUIRE(attempts(name) == 1);
    }
    static distlock::lock_options patient() {
        distlock::lock_options o;
        o.lease = 30s;
        o.retry_min = 300s;
        o.retry_max = 300s;
        return o;
    }
};

// A name held on one provider, a waiter parked on it on a feed provider. The
// holder's lease outlasts the member's pauses while it writes and deletes the
// tests' megabytes (the URL's 2 s lease expired in one, on a loaded machine,
// and the waiter was granted before the release the test waits for).
struct scene {
    distlock::test::etcd_direct direct{url()};
    distlock::provider holders = distlock::connect(url());
    distlock::provider waiters = feed_provider();
    etcd::release_feed& feed = last_backend.load()->gateway().releases();
    distlock::mutex holder;
    std::unique_ptr<parked> w;
    explicit scene(const std::string& name) : holder(holders.mutex(name, holding())) {
        holder.lock();
        w = std::make_unique<parked>(waiters, name);
        REQUIRE(feed.watchers() >= 1);
    }
    static distlock::lock_options holding() {
        distlock::lock_options o;
        o.lease = 30s;
        return o;
    }
};

// Waits until the feed has seen the store up to `revision`.
void feed_reaches(etcd::release_feed& f, long long revision) {
    for (int i = 0; i < 600 && f.kept().resume_from <= revision; ++i) std::this_thread::sleep_for(50ms);
    REQUIRE(f.kept().resume_from > revision);
}

// The holder lets go: the waiter is granted in at most 3 attempts (its
// first, the woken one, and one for a wake the feed could not vouch for).
void handed_over(distlock::mutex& holder, parked& w) {
    holder.unlock();
    REQUIRE(w.o.wait(120s));  // its safety poll is 300 s away: only a release event gets here
    REQUIRE_FALSE(w.o.error);
    REQUIRE(w.o.granted);
    CHECK(attempts(w.name) <= 3);
    w.m.unlock();
}

}  // namespace

TEST_CASE("etcd: 1 MiB keys deleted under the prefix keep the feed's window within 1 MiB, the waiter is granted",
          "[etcd][async][feed]") {
    scene sc(unique_name("etcd-feed-big"));
    auto& direct = sc.direct;
    auto& feed = sc.feed;
    auto& w = *sc.w;

    // 24 keys of 1 MB on another name, each written then deleted: 24 MB of
    // deleted keys pass through a window of 1 MiB.
    const auto dir = direct.prefix() + "/" + unique_name("hostile") + "/";
    long long last = 0;
    for (int i = 0; i < 24; ++i) {
        const auto key = dir + std::to_string(i) + std::string(kKeyBytes, 'k');
        direct.call("/v3/kv/put", {{"key", direct.b64(key)}, {"value", ""}});
        auto del = direct.call("/v3/kv/deleterange", {{"key", direct.b64(key)}});
        REQUIRE(del.value("deleted", std::string("0")) == "1");
        last = distlock::test::etcd_direct::num(del["header"], "revision");
        CHECK(feed.kept().bytes <= kWindowBytes);
    }
    feed_reaches(feed, last);
    const auto k = feed.kept();
    std::printf("window after 24 MB of deleted keys: %zu entries, %zu bytes (at most %zu)\n", k.entries, k.bytes,
                k.most_bytes);
    CHECK(k.bytes <= kWindowBytes);
    CHECK(k.most_bytes <= kWindowBytes);
    CHECK(k.most_bytes >= kKeyBytes);  // the big keys did go through it
    {
        std::lock_guard lk(w.o.m);
        REQUIRE_FALSE(w.o.done);  // nothing of that concerned the waiter
    }
    CHECK(attempts(w.name) <= 2);  // at most one unvouched wake
    handed_over(sc.holder, w);
}

TEST_CASE("etcd: foreign keys and one revision deleting 14 MB under the prefix do not stall the feed",
          "[etcd][async][feed]") {
    scene sc(unique_name("etcd-feed-foreign"));
    auto& direct = sc.direct;
    auto& feed = sc.feed;
    const auto streams = feed.streams_started();

    // Keys distlock never writes: the prefix's own key, bytes that are not
    // UTF-8, no directory, a directory of an empty name; then 14 keys of 1 MB
    // deleted by one request, one revision whose events (about 19 MB as JSON)
    // pass a line's limit (16 MiB) unless the member splits them.
    const auto p = direct.prefix() + "/";
    const std::string bad = std::string("\xff\xfe\x00/", 4);
    std::vector<std::string> foreign{p, p + bad, p + "no-directory", p + "/empty-name", p + bad + bad};
    const auto dir = p + unique_name("hostile-range") + "/";
    for (int i = 0; i < 14; ++i) foreign.push_back(dir + std::to_string(i) + std::string(kKeyBytes, 'r'));
    for (const auto& key : foreign) {
        auto put = direct.call("/v3/kv/put", {{"key", direct.b64(key)}, {"value", direct.b64("x")}});
        REQUIRE(put.contains("header"));
    }
    long long last = 0;
    for (int i = 0; i < 5; ++i) {
        auto del = direct.call("/v3/kv/deleterange", {{"key", direct.b64(foreign[i])}});
        last = distlock::test::etcd_direct::num(del["header"], "revision");
    }
    auto end = dir;
    end.back() = static_cast<char>(end.back() + 1);
    auto del = direct.call("/v3/kv/deleterange", {{"key", direct.b64(dir)}, {"range_end", direct.b64(end)}});
    REQUIRE(del.value("deleted", std::string("0")) == "14");
    last = distlock::test::etcd_direct::num(del["header"], "revision");

    feed_reaches(feed, last);
    CHECK(feed.streams_started() == streams);  // the stream never broke
    CHECK(feed.kept().bytes <= kWindowBytes);
    CHECK(attempts(sc.w->name) <= 2);
    handed_over(sc.holder, *sc.w);
}

// The process's waiters of one name queue in the core's gate, one of them
// subscribed and attempting at a time: each hand-off costs one attempt, not
// one per waiter (a herd of 60 would make about 1,800).
TEST_CASE("etcd: 60 async waiters of one name are handed it in turn, one attempt each", "[etcd][async][feed]") {
    auto holders = distlock::connect(url());
    auto waiters = feed_provider();
    const auto name = unique_name("etcd-feed-herd");
    auto holder = holders.mutex(name);
    holder.lock();
    constexpr int n = 60;
    std::vector<std::unique_ptr<distlock::mutex>> ms;
    std::mutex m;
    std::condition_variable cv;
    int granted = 0, failed = 0;
    for (int i = 0; i < n; ++i) ms.push_back(std::make_unique<distlock::mutex>(waiters.mutex(name, parked::patient())));
    for (auto& mu : ms) {
        auto* self = mu.get();
        self->async_lock(600s, [&, self](std::exception_ptr e, bool g) {
            if (!g || e) {
                std::lock_guard lk(m);
                ++failed;
                cv.notify_all();
                return;
            }
            self->async_unlock([&] {
                std::lock_guard lk(m);
                ++granted;
                cv.notify_all();
            });
        });
    }
    for (int i = 0; i < 500 && attempts(name) == 0; ++i) std::this_thread::sleep_for(10ms);
    std::this_thread::sleep_for(500ms);
    const int parked_after = attempts(name);
    CHECK(parked_after <= 2);  // the gate's first, and one more when unvouched
    holder.unlock();
    std::unique_lock lk(m);
    // Polled every 5 minutes: only release events hand the name on.
    REQUIRE(cv.wait_for(lk, 120s, [&] { return granted + failed == n; }));
    CHECK(granted == n);
    const int handing = attempts(name) - parked_after;
    std::printf("%d waiters of one name granted in turn in %d attempts\n", n, handing);
    CHECK(handing <= 2 * n);  // one per hand-off, and one more for an unvouched wake
}

// Blocking waiters wait on their provider's release feed too (no watch of
// their own, which etcd may make "unsynced": up to 100 ms late), each for the
// deletion of the key just ahead of it. Three providers (three feeds), one
// thread each on each of four names: a hand-off wakes exactly one waiter, the
// next in line, of the released name and of no other. Polled every 5 minutes:
// only wake-ups hand the names on.
TEST_CASE("etcd: blocking waiters are woken by the release feed, one wake-up per hand-off", "[etcd][feed][blocking]") {
    constexpr int providers = 3, names = 4;
    auto holders = distlock::connect(url());
    std::vector<distlock::provider> waiters;
    std::vector<etcd::release_feed*> feeds;
    for (int i = 0; i < providers; ++i) {
        waiters.push_back(feed_provider());
        feeds.push_back(&last_backend.load()->gateway().releases());
    }
    auto wakes = [&] {
        std::uint64_t n = 0;
        for (auto* f : feeds) n += f->wakes();
        return n;
    };
    auto watching = [&] {
        std::size_t n = 0;
        for (auto* f : feeds) n += f->watchers();
        return n;
    };
    const auto prefix = unique_name("etcd-feed-blocking");
    std::vector<distlock::mutex> held;
    for (int k = 0; k < names; ++k) {
        held.push_back(holders.mutex(prefix + "-" + std::to_string(k)));
        held.back().lock();
    }
    std::atomic<int> granted{0}, failed{0};
    std::vector<std::atomic<int>> granted_of(names);
    std::vector<std::thread> threads;
    for (int i = 0; i < providers; ++i)
        for (int k = 0; k < names; ++k)
            threads.emplace_back([&, i, k] {
                auto m = waiters[i].mutex(prefix + "-" + std::to_string(k), parked::patient());
                try {
                    if (!m.try_lock_for(120s)) {
                        ++failed;
                        return;
                    }
                } catch (...) {
                    ++failed;
                    return;
                }
                ++granted;
                ++granted_of[k];
                m.unlock();
            });
    // Every waiter in line, every feed's stream made, and the wake-ups of the
    // feeds' first moments (a wait a feed could not yet vouch for is woken
    // once) over: no wake-up for a second.
    CHECK(distlock::test::eventually([&] { return watching() == providers * names; }, 30s));
    CHECK(distlock::test::eventually(
        [&] { return std::all_of(feeds.begin(), feeds.end(), [](auto* f) { return f->kept().resume_from > 0; }); },
        30s));
    bool quiet = false;
    for (int i = 0; i < 20 && !quiet; ++i) {
        const auto last = wakes();
        std::this_thread::sleep_for(1s);
        quiet = wakes() == last;
    }
    CHECK(quiet);
    const auto before = wakes();
    held[0].unlock();
    CHECK(distlock::test::eventually([&] { return granted_of[0] == providers; }, 60s));
    std::this_thread::sleep_for(500ms);
    CHECK(wakes() - before == providers);  // one per hand-off: holder -> 1st -> 2nd -> 3rd
    CHECK(granted == providers);           // nobody of another name
    for (int k = 1; k < names; ++k) held[k].unlock();
    for (auto& t : threads) t.join();
    CHECK(failed == 0);
    CHECK(granted == providers * names);
    CHECK(wakes() - before == providers * names);
}

TEST_CASE("etcd: renewing 300 held locks costs one keepalive, and a key's deletion is still reported",
          "[etcd][feed][renewal][count]") {
    // Each held key used to be read back at every renewal, 64 a txn: 1 + 5
    // requests here, about 1,560 a period at 100,000 locks. A key whose
    // deletion the provider's live release stream will report is not read.
    constexpr std::size_t n = 300;
    distlock::test::etcd_direct direct{url()};
    auto p = feed_provider();
    auto* backend = last_backend.load();
    const auto prefix = unique_name("etcd-feed-renew");
    distlock::lock_options o;
    o.lease = 3s;  // renewed every second
    std::vector<distlock::mutex> held;
    for (std::size_t i = 0; i < n; ++i) {
        held.push_back(p.mutex(prefix + "-" + std::to_string(i), o));
        REQUIRE(held.back().try_lock());
    }
    auto& feed = backend->gateway().releases();
    REQUIRE(distlock::test::eventually([&] { return feed.kept().resume_from > 0; }, 30s));
    // Renewals of every lock that all began after the stream was live.
    const auto seen = backend->batches().size();
    REQUIRE(distlock::test::eventually(
        [&] {
            std::size_t renewed = 0;
            auto b = backend->batches();
            for (std::size_t i = seen; i < b.size(); ++i) renewed += b[i].first;
            return renewed >= 3 * n;
        },
        30s));
    std::size_t handles = 0;
    std::uint64_t requests = 0, calls = 0;
    auto b = backend->batches();
    for (std::size_t i = seen; i < b.size(); ++i) {
        INFO("a renewal call of " << b[i].first << " locks sent " << b[i].second << " requests");
        // One keepalive (one session); at most the first 8 locks, which watch
        // their own key instead of the stream, are read, in one txn.
        CHECK(b[i].second <= 2);
        handles += b[i].first;
        requests += b[i].second;
        ++calls;
    }
    CHECK(requests <= 2 * calls);
    CHECK(calls * 64 < handles);  // fewer requests than one per 64 locks: they are not read back
    for (auto& m : held) CHECK(m.held());
    // A held key deleted behind the provider's back (the 100th lock: on the
    // stream, not on a watch of its own) is reported lost by the stream.
    auto& victim = held[100];
    auto kvs = direct.keys(prefix + "-100");
    REQUIRE(kvs.size() == 1);
    direct.call("/v3/kv/deleterange", {{"key", kvs[0]["key"]}});
    CHECK(distlock::test::eventually([&] { return !victim.held(); }, 10s));
    for (std::size_t i = 0; i < n; ++i) {
        if (i == 100) continue;
        CHECK(held[i].held());
        held[i].unlock();
    }
}
