// What the wake-up tests of file://, redis:// and postgres:// share
// (tests/backends/{file,redis,postgres}/wake_test.cpp), on top of wake_support.hpp: a wake sink that
// counts, the process's threads, descriptors and sockets, and a "counting"
// scheme that wraps a backend to count the core's attempts (acquire() calls)
// per lock name, with the end-to-end check that async_lock hands off after a
// release with one attempt per wake-up instead of polling.
#pragma once

#include <atomic>
#include <catch2/catch.hpp>
#include <filesystem>
#include <functional>
#include <future>
#include <map>
#include <mutex>
#include <set>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "distlock/distlock.hpp"
#include "distlock/spi/backend.hpp"
#include "support.hpp"
#include "wake_support.hpp"

namespace wake_support {

namespace spi = distlock::spi;
using namespace std::chrono_literals;

using distlock::test::fd_count;
using distlock::test::socket_count;
using distlock::test::thread_count;
using distlock::test::wake::request;
// Wake-ups received by a sink.
using wake_count = distlock::test::wake::counter;

inline const char* kind_name(spi::lock_kind k) {
    switch (k) {
        case spi::lock_kind::read: return "read";
        case spi::lock_kind::write: return "write";
        case spi::lock_kind::permit: return "permit";
        default: return "exclusive";
    }
}

// `holder` holds `name` and `other` as `holds`; a handle of `watcher` waits
// for `name` as `kind`, watching: one failed attempt, then the releases of
// `other` and of `name` (in that order, on one stream of events) wake it
// exactly once, and its next attempt is granted. Returns that handle, holding
// the lock, its subscription ended.
inline std::unique_ptr<spi::lock_handle> check_release_wakes(spi::backend& holder, spi::backend& watcher,
                                                             spi::lock_kind holds, spi::lock_kind kind,
                                                             const std::string& name, const std::string& other) {
    using clk = std::chrono::steady_clock;
    auto held = holder.make_lock(request(name, holds));
    auto held_other = holder.make_lock(request(other, holds));
    REQUIRE(held->acquire(clk::now() + 5s, {}));
    REQUIRE(held_other->acquire(clk::now() + 5s, {}));
    auto waiting = watcher.make_lock(request(name, kind));
    wake_count woken;
    auto sub = waiting->watch_releases(woken.sink());
    REQUIRE(sub != nullptr);
    CHECK_FALSE(waiting->acquire(clk::now(), {}));  // one attempt: held
    held_other->release();                          // its event comes first
    held->release();
    REQUIRE(distlock::test::eventually([&] { return woken.value() >= 1; }, 20s));
    CHECK(woken.value() == 1);
    REQUIRE(waiting->acquire(clk::now(), {}));  // the attempt the wake-up asks for
    return waiting;
}

// `holder` holds `name` (a mutex); a handle of `watcher` for it watches.
struct watched_wait {
    std::unique_ptr<spi::lock_handle> held, waiting;
    wake_count woken;
    std::unique_ptr<spi::wake_subscription> sub;
    watched_wait(spi::backend& holder, spi::backend& watcher, const std::string& name)
        : held(holder.make_lock(request(name))), waiting(watcher.make_lock(request(name))) {
        REQUIRE(held->acquire(std::chrono::steady_clock::now() + 5s, {}));
        sub = waiting->watch_releases(woken.sink());
        REQUIRE(sub != nullptr);
    }
};

// Two handles of `watcher` watch `name`, which `holder` holds; one
// subscription ends before the release: the other alone is woken.
inline void check_no_wake_after_end(spi::backend& holder, spi::backend& watcher, const std::string& name) {
    auto held = holder.make_lock(request(name));
    REQUIRE(held->acquire(std::chrono::steady_clock::now() + 5s, {}));
    auto kept = watcher.make_lock(request(name)), dropped = watcher.make_lock(request(name));
    wake_count kept_woken, dropped_woken;
    auto kept_sub = kept->watch_releases(kept_woken.sink());
    auto dropped_sub = dropped->watch_releases(dropped_woken.sink());
    dropped_sub.reset();
    held->release();
    REQUIRE(distlock::test::eventually([&] { return kept_woken.value() >= 1; }, 20s));
    CHECK(dropped_woken.value() == 0);  // the same event
}

// `n` handles of one provider watching the names `<prefix>-0` .. `<prefix>-<n-1>`.
struct many_watchers {
    std::vector<std::unique_ptr<spi::lock_handle>> handles;
    std::vector<std::unique_ptr<spi::wake_subscription>> subs;
    std::vector<wake_count> woken;
    many_watchers(spi::backend& watcher, const std::string& prefix, int n) : woken(static_cast<std::size_t>(n)) {
        for (int i = 0; i < n; ++i) {
            handles.push_back(watcher.make_lock(request(prefix + "-" + std::to_string(i))));
            subs.push_back(handles.back()->watch_releases(woken[static_cast<std::size_t>(i)].sink()));
            REQUIRE(subs.back() != nullptr);
        }
    }
    // A release of `<prefix>-7` by `holder` wakes that watcher alone.
    void check_one_woken(spi::backend& holder, const std::string& prefix) {
        auto held = holder.make_lock(request(prefix + "-7"));
        REQUIRE(held->acquire(std::chrono::steady_clock::now() + 5s, {}));
        held->release();
        REQUIRE(distlock::test::eventually([&] { return woken[7].value() == 1; }, 20s));
        int total = 0;
        for (auto& w : woken) total += w.value();
        CHECK(total == 1);
    }
};

// acquire() calls per lock name through every counting backend of the process,
// counted as they end.
inline int attempts_of(const std::string& name, int add = 0) {
    static std::mutex m;
    static std::map<std::string, int> counts;
    std::lock_guard lk(m);
    return counts[name] += add;
}

// watch_releases() calls per lock name through every counting backend of the process.
inline int subscriptions_of(const std::string& name, int add = 0) {
    static std::mutex m;
    static std::map<std::string, int> counts;
    std::lock_guard lk(m);
    return counts[name] += add;
}

class counting_handle final : public spi::lock_handle {
public:
    counting_handle(std::unique_ptr<spi::lock_handle> inner, std::string name)
        : inner_(std::move(inner)), name_(std::move(name)) {}
    // Counted when it ends (returned or threw): an attempt seen as made has seen
    // the lock as it was then. Counted on entry, a slow first attempt (under
    // ThreadSanitizer) could still be under way at check_event_handoff's release,
    // and be granted by it: one attempt in all.
    std::optional<spi::grant> acquire(spi::deadline until, const spi::loss_sink& lost) override {
        struct count_at_end {
            const std::string& name;
            ~count_at_end() { attempts_of(name, 1); }
        } at_end{name_};
        return inner_->acquire(until, lost);
    }
    void release() override { inner_->release(); }
    std::chrono::milliseconds check_interval() const override { return inner_->check_interval(); }
    std::chrono::milliseconds validity() const override { return inner_->validity(); }
    std::unique_ptr<spi::wake_subscription> watch_releases(spi::wake_sink wake) override {
        subscriptions_of(name_, 1);
        return inner_->watch_releases(std::move(wake));
    }
    spi::lock_handle* inner() const noexcept { return inner_.get(); }

private:
    std::unique_ptr<spi::lock_handle> inner_;
    std::string name_;
};

class counting_backend final : public spi::backend {
public:
    explicit counting_backend(std::shared_ptr<spi::backend> inner) : inner_(std::move(inner)) {}
    std::string_view name() const noexcept override { return inner_->name(); }
    const distlock::capabilities& caps() const noexcept override { return inner_->caps(); }
    std::unique_ptr<spi::lock_handle> make_lock(const spi::lock_request& r) override {
        return std::make_unique<counting_handle>(inner_->make_lock(r), r.name);
    }
    std::chrono::milliseconds default_lease() const override { return inner_->default_lease(); }
    void keepalive_batch(std::span<spi::lock_handle* const> handles,
                         std::span<spi::keepalive_result> results) override {
        std::vector<spi::lock_handle*> inner;
        for (auto* h : handles) inner.push_back(static_cast<counting_handle*>(h)->inner());
        inner_->keepalive_batch(inner, results);
    }
    distlock::lock_info inspect(std::string_view name, spi::lock_kind kind) override {
        return inner_->inspect(name, kind);
    }
    void break_lock(std::string_view name) override { inner_->break_lock(name); }

private:
    std::shared_ptr<spi::backend> inner_;
};

// Registers `scheme` (once per process): connect("<scheme>://x") gives a
// provider over `make()`'s backend whose attempts attempts_of() counts.
inline void register_counting(const std::string& scheme, std::function<std::shared_ptr<spi::backend>()> make) {
    static std::mutex m;
    static std::set<std::string> done;
    std::lock_guard lk(m);
    if (!done.insert(scheme).second) return;
    distlock::register_backend(scheme, [make = std::move(make)](spi::url&) -> std::shared_ptr<spi::backend> {
        return std::make_shared<counting_backend>(make());
    });
}

// `holder` (any provider of the backend) holds `name`; `waiter` (a counting
// provider of it) waits for it by async_lock. The waiter makes one attempt,
// then none while the lock stays held (a poll by retry_max = 50 ms would make
// about ten in the half second it is held), and one more, granted, when the
// release is announced: one attempt per wake-up. The core's safety poll (2 s
// with a 60 s lease) is allowed for, should the machine be that slow.
inline void check_event_handoff(const distlock::provider& holder, const distlock::provider& waiter,
                                const std::string& name) {
    distlock::lock_options opts;
    opts.lease = 60s;
    opts.retry_min = 50ms;
    opts.retry_max = 50ms;
    auto held = holder.mutex(name, opts);
    REQUIRE(held.try_lock());
    auto waiting = waiter.mutex(name, opts);
    std::promise<bool> outcome;
    waiting.async_lock(30s, [&](std::exception_ptr error, bool granted) {
        if (error) outcome.set_exception(error);
        else outcome.set_value(granted);
    });
    REQUIRE(distlock::test::eventually([&] { return attempts_of(name) >= 1; }, 30s));
    const auto first = std::chrono::steady_clock::now();
    // The core's safety polls (one per 2 s) since the first attempt: none
    // unless the machine is so loaded that the half second lasts 2 s.
    const auto safety_polls = [&] { return static_cast<int>((std::chrono::steady_clock::now() - first) / 2s); };
    std::this_thread::sleep_for(500ms);
    CHECK(attempts_of(name) <= 1 + safety_polls());  // no polling while held
    held.unlock();
    auto f = outcome.get_future();
    REQUIRE(f.wait_for(30s) == std::future_status::ready);
    CHECK(f.get());
    CHECK(attempts_of(name) >= 2);
    CHECK(attempts_of(name) <= 2 + safety_polls());  // one attempt per wake-up
    waiting.unlock();
}

// Two mutexes of `waiter` (a counting provider) on `name`: the first holds
// it, the second waits by async_lock, queued behind it in the provider's
// gate. The release hands the gate over, and the waiter is granted by one
// attempt with no subscription to release events: the lock is free when an
// in-process holder hands it on (the subscription would cost a round trip
// before the attempt, on Redis a SUBSCRIBE and an UNSUBSCRIBE).
inline void check_gate_handoff(const distlock::provider& waiter, const std::string& name) {
    distlock::lock_options opts;
    opts.lease = 60s;
    auto first = waiter.mutex(name, opts), second = waiter.mutex(name, opts);
    REQUIRE(first.try_lock());
    const int attempts = attempts_of(name), subscriptions = subscriptions_of(name);
    std::promise<bool> outcome;
    second.async_lock(30s, [&](std::exception_ptr error, bool granted) {
        if (error) outcome.set_exception(error);
        else outcome.set_value(granted);
    });
    std::this_thread::sleep_for(100ms);
    CHECK(attempts_of(name) == attempts);  // queued in the gate: no request
    first.unlock();
    auto f = outcome.get_future();
    REQUIRE(f.wait_for(30s) == std::future_status::ready);
    CHECK(f.get());
    CHECK(attempts_of(name) - attempts == 1);
    CHECK(subscriptions_of(name) - subscriptions == 0);
    second.unlock();
}

}  // namespace wake_support
