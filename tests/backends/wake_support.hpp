// Checks shared by the backends' tests of release events for asynchronous
// waits (spi::lock_handle::watch_releases): a backend opened directly through
// its registration, a counting wake sink, the process's threads and sockets,
// and the two end-to-end runs through the public API (mutex::async_lock).
#pragma once

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "distlock/distlock.hpp"
#include "distlock/spi/backend.hpp"
#include "distlock/spi/url.hpp"
#include "process_counts.hpp"
#include "support.hpp"

namespace distlock::test::wake {

using namespace std::chrono_literals;
using clk = std::chrono::steady_clock;

// The backend of `url` as the core sees it, made by the scheme's registration.
inline std::shared_ptr<spi::backend> open_backend(void (*register_fn)(spi::registry&), const std::string& url) {
    struct capture final : spi::registry {
        spi::factory f;
        void add(std::string, spi::factory g) override { f = std::move(g); }
    } c;
    register_fn(c);
    auto u = spi::url::parse(url);
    return c.f(u);
}

// A request for `name` as `kind` (a permit of a semaphore of `permits`, 1 by default).
inline spi::lock_request request(const std::string& name, spi::lock_kind kind = spi::lock_kind::exclusive,
                                 std::uint32_t permits = 0) {
    spi::lock_request r;
    r.name = name;
    r.kind = kind;
    r.permits = permits != 0 ? permits : kind == spi::lock_kind::permit ? 1 : 0;
    r.lease = 30s;
    r.renew_interval = 10s;
    r.holder = "wake-test";
    return r;
}

// A wake sink that counts its calls.
struct counter {
    std::shared_ptr<std::atomic<int>> n = std::make_shared<std::atomic<int>>(0);
    spi::wake_sink sink() const {
        return spi::wake_sink([n = n] { n->fetch_add(1); });
    }
    int value() const { return n->load(); }
};

// One attempt that must not be granted (the lock is held elsewhere).
inline void attempt_fails(spi::lock_handle& h) {
    auto g = h.acquire(clk::now(), spi::loss_sink{});
    REQUIRE_FALSE(g.has_value());
}

// A handle of its own name, subscribed, that took and gave back its lock
// once: the provider's connections and threads are all up afterwards. Keep
// it while counting them.
struct warm {
    std::unique_ptr<spi::lock_handle> handle;
    std::unique_ptr<spi::wake_subscription> sub;
};
inline warm warm_up(spi::backend& b) {
    warm w;
    w.handle = b.make_lock(request(unique_name("wake-warm")));
    w.sub = w.handle->watch_releases(spi::wake_sink{});
    REQUIRE(w.handle->acquire(clk::now(), spi::loss_sink{}).has_value());
    w.handle->release();
    return w;
}

inline int threads() { return static_cast<int>(thread_count()); }
inline int sockets() { return static_cast<int>(socket_count()); }

// Options under which only a release event wakes a waiter before 2 s: the
// safety poll (max(retry_max, min(lease/4, 2 s))) and the backoff without a
// subscription are both 2 s.
inline lock_options slow_poll() {
    lock_options o;
    o.lease = 30s;
    o.retry_min = 2000ms;
    o.retry_max = 2000ms;
    return o;
}
inline constexpr auto kPoll = 2000ms;

// Waits for an async_lock's handler.
struct outcome {
    std::mutex m;
    std::condition_variable cv;
    bool done = false, granted = false;
    std::exception_ptr error;
    clk::time_point at;
    acquire_handler handler() {
        return [this](std::exception_ptr e, bool g) {
            std::lock_guard lk(m);
            done = true;
            granted = g;
            error = e;
            at = clk::now();
            cv.notify_all();
        };
    }
    bool wait(std::chrono::milliseconds limit) {
        std::unique_lock lk(m);
        return cv.wait_for(lk, limit, [&] { return done; });
    }
};

// `rounds` hand-offs between the providers a and b, each to a waiter of the
// other one that is parked (its first attempt failed) when the holder lets
// go. Returns how many were granted before that waiter's first safety poll
// could have fired (its async_lock call + kPoll): only a release event can
// do that (waiters that are not woken get none). The whole chain must also
// take less than `rounds` polls (a coarse bound: each round sleeps 100 ms).
inline int chained_handoffs(const provider& a, const provider& b, const std::string& name, int rounds) {
    auto holder = std::make_unique<distlock::mutex>(a.mutex(name, slow_poll()));
    holder->lock();
    int early = 0;
    const auto began = clk::now();
    for (int i = 0; i < rounds; ++i) {
        const provider& next = i % 2 == 0 ? b : a;
        auto waiter = std::make_unique<distlock::mutex>(next.mutex(name, slow_poll()));
        outcome o;
        const auto called = clk::now();
        waiter->async_lock(30s, o.handler());
        std::this_thread::sleep_for(100ms);  // its first attempt fails, it parks
        {
            std::lock_guard lk(o.m);
            REQUIRE_FALSE(o.done);
        }
        holder->unlock();
        REQUIRE(o.wait(20s));
        REQUIRE_FALSE(o.error);
        REQUIRE(o.granted);
        REQUIRE(waiter->held());
        if (o.at < called + kPoll) ++early;
        holder = std::move(waiter);
    }
    holder->unlock();
    CHECK(clk::now() - began < rounds * kPoll);
    std::printf("%d of %d hand-offs before the waiter's first safety poll\n", early, rounds);
    return early;
}

// `per_provider` async_lock waiters on each of a and b, all on `name` at
// once, each releasing as soon as it is granted: every one is granted in
// turn, never two at once, with strictly increasing fencing tokens (when the
// backend has them).
inline void many_waiters(const provider& a, const provider& b, const std::string& name, int per_provider) {
    std::vector<std::unique_ptr<distlock::mutex>> ms;
    for (int i = 0; i < 2 * per_provider; ++i)
        ms.push_back(std::make_unique<distlock::mutex>((i % 2 ? b : a).mutex(name, slow_poll())));
    std::mutex m;
    std::condition_variable cv;
    int finished = 0, granted = 0, failures = 0, overlaps = 0, regressions = 0;
    std::uint64_t last_token = 0;
    std::atomic<int> inside{0};
    for (auto& mu : ms) {
        auto* self = mu.get();
        self->async_lock(180s, [&, self](std::exception_ptr e, bool g) {
            if (g) {
                if (inside.fetch_add(1) != 0) overlaps++;
                std::this_thread::sleep_for(1ms);  // a holder overlapping this one would show
                const auto token = self->token();
                {
                    std::lock_guard lk(m);
                    if (token != 0 && token <= last_token) ++regressions;
                    last_token = std::max(last_token, token);
                }
                inside.fetch_sub(1);
                self->async_unlock([&] {
                    std::lock_guard lk(m);
                    ++finished;
                    ++granted;
                    cv.notify_all();
                });
                return;
            }
            std::lock_guard lk(m);
            ++finished;
            if (e || !g) ++failures;
            cv.notify_all();
        });
    }
    std::unique_lock lk(m);
    REQUIRE(cv.wait_for(lk, 240s, [&] { return finished == 2 * per_provider; }));
    CHECK(granted == 2 * per_provider);
    CHECK(failures == 0);
    CHECK(overlaps == 0);
    CHECK(regressions == 0);
}

// ---- the checks, each run by the backends' own test programs ---------------
using opener = std::shared_ptr<spi::backend> (*)();

// How many wake-ups a subscription may get that no release caused: 0, or 1
// for a backend that cannot vouch for the attempt a waiter made before its
// event stream was up (etcd's feed wakes such a waiter once, when the stream
// starts). Set by the test program.
inline int unvouched_wakes = 0;

// The wake-ups so far of a subscription whose lock is still held elsewhere.
inline int settled(const counter& woken) {
    std::this_thread::sleep_for(300ms);
    const int n = woken.value();
    CHECK(n <= unvouched_wakes);
    return n;
}

inline void woken_by_release_only(opener open, const std::string& url) {
    auto b = open();
    auto other = connect(url);
    const auto name = unique_name("wake");
    const auto elsewhere = unique_name("wake-other");
    auto holder = other.mutex(name);
    holder.lock();

    auto h = b->make_lock(request(name));
    counter woken;
    auto sub = h->watch_releases(woken.sink());
    REQUIRE(sub);
    attempt_fails(*h);
    settled(woken);
    {
        auto x = other.mutex(elsewhere);
        x.lock();
        x.unlock();
    }
    auto third = connect(url);
    auto rival = third.mutex(name);
    for (int i = 0; i < 5; ++i) REQUIRE_FALSE(rival.try_lock());
    attempt_fails(*h);
    std::this_thread::sleep_for(500ms);
    const int before = settled(woken);
    holder.unlock();
    REQUIRE(eventually([&] { return woken.value() > before; }, 10s));
    REQUIRE(h->acquire(clk::now(), spi::loss_sink{}).has_value());
    h->release();
}

// The other kinds: `hold` takes the blocking side on another provider and
// returns its release.
inline void kind_woken(opener open, spi::lock_kind kind, std::uint32_t permits,
                       const std::function<std::function<void()>(const provider&, const std::string&)>& hold,
                       const std::string& url) {
    auto b = open();
    auto other = connect(url);
    const auto name = unique_name("wake-kind");
    auto let_go = hold(other, name);
    auto h = b->make_lock(request(name, kind, permits));
    counter woken;
    auto sub = h->watch_releases(woken.sink());
    attempt_fails(*h);
    settled(woken);
    const int before = settled(woken);
    let_go();
    REQUIRE(eventually([&] { return woken.value() > before; }, 10s));
    REQUIRE(h->acquire(clk::now(), spi::loss_sink{}).has_value());
    h->release();
}
inline void each_kind_woken(opener open, const std::string& url) {
    SECTION("a writer waits for a reader") {
        kind_woken(
            open, spi::lock_kind::write, 0,
            [](const provider& p, const std::string& n) {
                auto rw = std::make_shared<shared_mutex>(p.shared_mutex(n));
                rw->lock_shared();
                return std::function<void()>([rw] { rw->unlock_shared(); });
            },
            url);
    }
    SECTION("a reader waits for a writer") {
        kind_woken(
            open, spi::lock_kind::read, 0,
            [](const provider& p, const std::string& n) {
                auto rw = std::make_shared<shared_mutex>(p.shared_mutex(n));
                rw->lock();
                return std::function<void()>([rw] { rw->unlock(); });
            },
            url);
    }
    SECTION("a permit waits for one of two") {
        kind_woken(
            open, spi::lock_kind::permit, 2,
            [&url](const provider& p, const std::string& n) {
                auto s1 = std::make_shared<semaphore>(p.semaphore(n, 2));
                auto s2 = std::make_shared<semaphore>(p.semaphore(n, 2));
                s1->acquire();
                s2->acquire();
                // A rival's failed attempts wake nobody.
                auto q = connect(url);
                auto rival = q.semaphore(n, 2);
                for (int i = 0; i < 3; ++i) REQUIRE_FALSE(rival.try_acquire());
                return std::function<void()>([s1, s2] { s1->release(); });
            },
            url);
    }
}

// No wake-up reaches a destroyed subscription, while another of the same
// name still hears; then none at all.
inline void none_after_unsubscribe(opener open, const std::string& url) {
    auto b = open();
    auto other = connect(url);
    const auto name = unique_name("unwatch");
    auto holder = other.mutex(name);
    holder.lock();
    auto h = b->make_lock(request(name));
    auto h2 = b->make_lock(request(name));
    counter woken, kept;
    auto sub = h->watch_releases(woken.sink());
    auto sub2 = h2->watch_releases(kept.sink());
    attempt_fails(*h);
    attempt_fails(*h2);
    const int kept0 = settled(kept);
    sub.reset();
    const int gone = woken.value();
    holder.unlock();
    REQUIRE(eventually([&] { return kept.value() > kept0; }, 10s));
    std::this_thread::sleep_for(300ms);
    CHECK(woken.value() == gone);
    // A backend that keeps a subscribed waiter's place (zk://'s queue node)
    // has h2 next: its attempt takes the lock, before the holder takes it again.
    if (auto g = h2->acquire(clk::now(), spi::loss_sink{})) h2->release();
    holder.lock();
    attempt_fails(*h2);
    sub2.reset();
    const int before = kept.value();
    holder.unlock();
    std::this_thread::sleep_for(500ms);
    CHECK(kept.value() == before);
}

// A thousand subscriptions of distinct names add at most one thread and one
// socket (none for a backend that watches on its existing connection).
inline void thousand_share(opener open, const std::string& url) {
    auto b = open();
    auto probe = warm_up(*b);
    auto other = connect(url);  // the releasing client's threads and sockets are not counted
    auto holder = other.mutex(unique_name("many-holder"));
    holder.lock();
    holder.unlock();
    const int threads0 = threads(), sockets0 = sockets();
    std::vector<std::unique_ptr<spi::lock_handle>> hs;
    std::vector<std::unique_ptr<spi::wake_subscription>> subs;
    counter woken;
    const auto prefix = unique_name("many");
    for (int i = 0; i < 1000; ++i) {
        hs.push_back(b->make_lock(request(prefix + "-" + std::to_string(i))));
        subs.push_back(hs.back()->watch_releases(woken.sink()));
    }
    std::printf("1000 subscriptions: %+d threads, %+d sockets\n", threads() - threads0, sockets() - sockets0);
    CHECK(threads() - threads0 <= 1);
    CHECK(sockets() - sockets0 <= 1);
    holder = other.mutex(prefix + "-999");
    holder.lock();
    attempt_fails(*hs.back());
    holder.unlock();
    REQUIRE(eventually([&] { return woken.value() >= 1; }, 10s));
    CHECK(threads() - threads0 <= 1);
    CHECK(sockets() - sockets0 <= 1);
    subs.clear();
    hs.clear();
}

// An asynchronous writer keeps its place for its whole wait, as a blocked one
// does: a reader of another provider that comes while it waits behind a
// reader of a third one is held back; the writer gets in once that first
// reader leaves, and the late reader after the writer. A second asynchronous
// writer, cancelled while it waits, takes its place with it: the late reader
// gets in at once.
inline void async_writer_keeps_its_place(const provider& a, const provider& b, const provider& c,
                                         const std::string& name) {
    auto first = a.shared_mutex(name);
    first.lock_shared();
    auto writer = b.shared_mutex(name);
    outcome w;
    writer.async_lock(60s, w.handler());
    std::this_thread::sleep_for(200ms);  // it attempted, and waits
    auto late = c.shared_mutex(name);
    CHECK_FALSE(late.try_lock_shared_for(300ms));  // held back by the waiting writer
    {
        std::lock_guard lk(w.m);
        REQUIRE_FALSE(w.done);
    }
    first.unlock_shared();
    REQUIRE(w.wait(30s));
    REQUIRE_FALSE(w.error);
    REQUIRE(w.granted);
    CHECK_FALSE(late.try_lock_shared());
    writer.unlock();
    REQUIRE(late.try_lock_shared_for(30s));
    late.unlock_shared();

    first.lock_shared();
    std::stop_source stop;
    outcome cancelled;
    writer.async_lock(60s, cancelled.handler(), stop.get_token());
    std::this_thread::sleep_for(200ms);
    CHECK_FALSE(late.try_lock_shared_for(300ms));
    stop.request_stop();
    REQUIRE(cancelled.wait(30s));
    CHECK_FALSE(cancelled.granted);
    CHECK(late.try_lock_shared_for(5s));  // the place went with the wait
    late.unlock_shared();
    first.unlock_shared();
}

}  // namespace distlock::test::wake
