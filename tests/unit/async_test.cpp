// The core's asynchronous acquisitions on memory:// (no server): outcomes,
// hand-offs through the in-process queue, timeouts, cancellation, the
// destructor of a mutex with a wait pending, the awaitables, the read-write
// lock's and the semaphore's async forms, and the bounded thread count with
// thousands of waiters.
#include <catch2/catch.hpp>

#include <dirent.h>

#include <atomic>
#include <coroutine>
#include <future>
#include <memory>
#include <stop_token>
#include <thread>
#include <vector>

#include "async_wait.hpp"
#include "distlock/distlock.hpp"
#include "distlock/spi/backend.hpp"

using namespace std::chrono_literals;

namespace {

// One acquisition's handler and outcome, failing the test when none came.
struct pending {
    distlock::test::async_wait wait;
    distlock::acquire_handler handler() { return wait.handler(); }
    bool ready() { return wait.ready(); }
    distlock::test::async_outcome get() {
        bool arrived = false;
        auto got = wait.get(arrived, 20s);
        REQUIRE(arrived);
        return got;
    }
};

void released(distlock::mutex& m) {
    REQUIRE(distlock::test::released([&](distlock::release_handler h) { m.async_unlock(std::move(h)); }));
}

std::size_t thread_count() {
    std::size_t n = 0;
    if (DIR* d = opendir("/proc/self/task")) {
        while (auto* e = readdir(d))
            if (e->d_name[0] != '.') ++n;
        closedir(d);
    }
    return n;
}

bool is_cancelled(const std::exception_ptr& e) {
    return distlock::test::errc_of(e) == static_cast<int>(distlock::errc::cancelled);
}

std::string space(const char* what) { return std::string("memory://async-") + what; }

// A coroutine that starts at once and whose end the test waits for.
struct detached {
    struct promise_type {
        detached get_return_object() { return {}; }
        std::suspend_never initial_suspend() noexcept { return {}; }
        std::suspend_never final_suspend() noexcept { return {}; }
        void return_void() {}
        void unhandled_exception() { std::terminate(); }
    };
};

}  // namespace

TEST_CASE("async_lock grants on a worker thread, and async_unlock gives it back", "[async]") {
    auto p = distlock::connect(space("grant"));
    auto m = p.mutex("a");
    pending first;
    m.async_lock(5s, first.handler());
    const auto got = first.get();
    CHECK_FALSE(got.error);
    CHECK(got.granted);
    CHECK(got.thread != std::this_thread::get_id());
    CHECK(m.held());
    released(m);
    CHECK_FALSE(m.held());
    auto other = p.mutex("a");
    CHECK(other.try_lock());  // nothing left behind
    other.unlock();
}

TEST_CASE("async waiters of one name queue and are handed the lock in turn", "[async]") {
    auto p = distlock::connect(space("queue"));
    auto q = distlock::connect(space("queue"));  // another provider: another client of the same space
    auto holder = q.mutex("hot");
    REQUIRE(holder.try_lock());
    std::vector<distlock::mutex> ms;
    std::vector<std::unique_ptr<pending>> waits;
    for (int i = 0; i < 5; ++i) {
        ms.push_back(p.mutex("hot"));
        waits.push_back(std::make_unique<pending>());
        ms.back().async_lock(20s, waits.back()->handler());
    }
    std::this_thread::sleep_for(50ms);
    for (auto& w : waits) CHECK_FALSE(w->ready());
    holder.unlock();
    for (std::size_t i = 0; i < ms.size(); ++i) {
        const auto got = waits[i]->get();
        CHECK(got.granted);
        CHECK(ms[i].held());
        for (std::size_t j = i + 1; j < ms.size(); ++j) CHECK_FALSE(waits[j]->ready());
        released(ms[i]);
    }
}

TEST_CASE("an async wait ends at its deadline with (no error, not granted) and leaves nothing", "[async]") {
    auto p = distlock::connect(space("timeout"));
    auto holder = p.mutex("t");
    REQUIRE(holder.try_lock());
    auto m = p.mutex("t");
    pending w;
    m.async_lock(150ms, w.handler());
    const auto got = w.get();
    CHECK_FALSE(got.error);
    CHECK_FALSE(got.granted);
    CHECK_FALSE(m.held());
    holder.unlock();
    auto after = p.mutex("t");
    CHECK(after.try_lock());
}

TEST_CASE("cancelling an async wait ends it with cancelled_error; the next waiter gets the lock at once", "[async]") {
    auto p = distlock::connect(space("cancel"));
    auto holder = p.mutex("c");
    REQUIRE(holder.try_lock());
    auto m = p.mutex("c"), next = p.mutex("c");
    std::stop_source stop;
    pending cancelled, after;
    m.async_lock(1h, cancelled.handler(), stop.get_token());
    next.async_lock(1h, after.handler());
    std::this_thread::sleep_for(30ms);
    stop.request_stop();
    const auto got = cancelled.get();
    CHECK(is_cancelled(got.error));
    CHECK_FALSE(got.granted);
    CHECK_FALSE(after.ready());
    holder.unlock();
    CHECK(after.get().granted);  // not behind the cancelled one
    CHECK(next.held());
    released(next);
}

TEST_CASE("a stop already requested cancels at once", "[async]") {
    auto p = distlock::connect(space("stopped"));
    auto holder = p.mutex("s");
    REQUIRE(holder.try_lock());
    std::stop_source stop;
    stop.request_stop();
    auto m = p.mutex("s");
    pending w;
    m.async_lock(1h, w.handler(), stop.get_token());
    CHECK(is_cancelled(w.get().error));
}

TEST_CASE("destroying a mutex with an async wait pending cancels the wait", "[async]") {
    auto p = distlock::connect(space("destroy"));
    auto holder = p.mutex("d");
    REQUIRE(holder.try_lock());
    pending w;
    {
        auto m = p.mutex("d");
        m.async_lock(1h, w.handler());
        std::this_thread::sleep_for(20ms);
    }
    CHECK(is_cancelled(w.get().error));
    holder.unlock();
    auto again = p.mutex("d");
    CHECK(again.try_lock());
}

TEST_CASE("co_await lock_async / unlock_async, resuming on the given executor", "[async]") {
    auto p = distlock::connect(space("co"));
    auto m = p.mutex("co");
    std::promise<std::pair<bool, bool>> result;
    std::atomic<int> posted{0};
    distlock::executor exec = [&](std::function<void()> f) {
        ++posted;
        std::thread(std::move(f)).detach();
    };
    [](distlock::mutex& mu, distlock::executor ex, std::promise<std::pair<bool, bool>>& out) -> detached {
        const bool got = co_await mu.lock_async(5s, {}, ex);
        const bool held = mu.held();
        co_await mu.unlock_async(ex);
        out.set_value({got, held && !mu.held()});
    }(m, exec, result);
    auto f = result.get_future();
    REQUIRE(f.wait_for(20s) == std::future_status::ready);
    const auto [got, held] = f.get();
    CHECK(got);
    CHECK(held);
    CHECK(posted == 2);
}

TEST_CASE("co_await lock_async throws cancelled_error after a stop", "[async]") {
    auto p = distlock::connect(space("co-cancel"));
    auto holder = p.mutex("x");
    REQUIRE(holder.try_lock());
    auto m = p.mutex("x");
    std::stop_source stop;
    std::promise<bool> thrown;
    [](distlock::mutex& mu, std::stop_token st, std::promise<bool>& out) -> detached {
        try {
            (void)co_await mu.lock_async(1h, st);
            out.set_value(false);
        } catch (const distlock::cancelled_error&) {
            out.set_value(true);
        }
    }(m, stop.get_token(), thrown);
    std::this_thread::sleep_for(20ms);
    stop.request_stop();
    auto f = thrown.get_future();
    REQUIRE(f.wait_for(20s) == std::future_status::ready);
    CHECK(f.get());
}

TEST_CASE("semaphore permits and read-write sides taken asynchronously", "[async]") {
    auto p = distlock::connect(space("prims"));
    SECTION("a semaphore of 2: the third waits for a release") {
        auto s = p.semaphore("sem", 2);
        pending a, b, c;
        s.async_acquire(5s, a.handler());
        s.async_acquire(5s, b.handler());
        CHECK(a.get().granted);
        CHECK(b.get().granted);
        s.async_acquire(20s, c.handler());
        std::this_thread::sleep_for(50ms);
        CHECK_FALSE(c.ready());
        REQUIRE(distlock::test::released([&](distlock::release_handler h) { s.async_release(std::move(h)); }));
        CHECK(c.get().granted);
        CHECK(s.held() == 2);
    }
    SECTION("readers together, a writer after them") {
        auto rw = p.shared_mutex("rw");
        pending r1, r2, w;
        rw.async_lock_shared(5s, r1.handler());
        rw.async_lock_shared(5s, r2.handler());
        CHECK(r1.get().granted);
        CHECK(r2.get().granted);
        auto writer = p.shared_mutex("rw");
        writer.async_lock(20s, w.handler());
        std::this_thread::sleep_for(50ms);
        CHECK_FALSE(w.ready());
        for (int i = 0; i < 2; ++i)
            REQUIRE(distlock::test::released([&](distlock::release_handler h) { rw.async_unlock_shared(h); }));
        CHECK(w.get().granted);
        CHECK(writer.held());
    }
}

TEST_CASE("a multi-lock taken asynchronously: all parts or none", "[async]") {
    auto p = distlock::connect(space("multi"));
    auto blocker = p.mutex("m-b");
    REQUIRE(blocker.try_lock());
    auto ml = p.multi_lock({"m-c", "m-a", "m-b"});
    pending timed_out;
    ml.async_lock(150ms, timed_out.handler());
    const auto got = timed_out.get();
    CHECK_FALSE(got.granted);
    CHECK_FALSE(got.error);
    auto a = p.mutex("m-a");
    CHECK(a.try_lock());  // the part taken before the blocked one was given back
    a.unlock();
    pending later;
    ml.async_lock(20s, later.handler());
    std::this_thread::sleep_for(50ms);
    CHECK_FALSE(later.ready());
    blocker.unlock();
    CHECK(later.get().granted);
    CHECK(ml.held());
    REQUIRE(distlock::test::released([&](distlock::release_handler h) { ml.async_unlock(std::move(h)); }));
    CHECK_FALSE(ml.held());
    auto c = p.mutex("m-c");
    CHECK(c.try_lock());
}

TEST_CASE("destroying a multi-lock with an async acquisition pending ends it cancelled", "[async]") {
    auto p = distlock::connect(space("multi-gone"));
    auto blocker = p.mutex("g-b");
    REQUIRE(blocker.try_lock());
    pending w;
    {
        auto ml = p.multi_lock({"g-a", "g-b"});
        ml.async_lock(1h, w.handler());
        std::this_thread::sleep_for(30ms);
    }
    CHECK(is_cancelled(w.get().error));
    auto a = p.mutex("g-a");
    CHECK(a.try_lock());
}

TEST_CASE("an election campaigned asynchronously leads after the leader resigns", "[async]") {
    auto p = distlock::connect(space("elect"));
    distlock::election_options o1, o2;
    o1.id = "one";
    o2.id = "two";
    auto first = p.election("e", o1), second = p.election("e", o2);
    pending a, b;
    first.async_campaign(5s, a.handler());
    CHECK(a.get().granted);
    second.async_campaign(20s, b.handler());
    std::this_thread::sleep_for(50ms);
    CHECK_FALSE(b.ready());
    pending again;
    first.async_campaign(5s, again.handler());  // leads already: at once
    CHECK(again.get().granted);
    REQUIRE(distlock::test::released([&](distlock::release_handler h) { first.async_resign(std::move(h)); }));
    CHECK(b.get().granted);
    CHECK(second.is_leader());
}

TEST_CASE("memory:// wakes an async waiter on release, not on its next poll", "[async]") {
    auto p = distlock::connect(space("wake"));
    auto holder = p.mutex("w");
    REQUIRE(holder.try_lock());
    distlock::lock_options slow;  // polls 5 s apart: only a wake-up can grant within that
    slow.retry_min = 5s;
    slow.retry_max = 5s;
    auto m = p.mutex("w", slow);
    pending w;
    m.async_lock(60s, w.handler());
    std::this_thread::sleep_for(50ms);  // its first attempt has failed: it is parked
    const auto released_at = std::chrono::steady_clock::now();
    holder.unlock();
    CHECK(w.get().granted);
    CHECK(std::chrono::steady_clock::now() - released_at < 2500ms);  // half the poll: not the poll
}

namespace {
// A backend whose attempts follow a script: 'b' busy, 'u' unavailable_error,
// 'g' granted (then busy again). No server: for the core's handling of errors
// that come while an asynchronous acquisition waits.
class scripted_handle final : public distlock::spi::lock_handle {
public:
    explicit scripted_handle(std::shared_ptr<std::string> script) : script_(std::move(script)) {}
    std::optional<distlock::spi::grant> acquire(distlock::spi::deadline, const distlock::spi::loss_sink&) override {
        const char step = next_ < script_->size() ? (*script_)[next_++] : 'b';
        if (step == 'u') distlock::throw_error(distlock::errc::unavailable, "scripted", "no answer");
        if (step == 'g') return distlock::spi::grant{7, distlock::spi::clock::now()};
        return std::nullopt;
    }
    void release() override {}

private:
    std::shared_ptr<std::string> script_;
    std::size_t next_ = 0;
};

class scripted_backend final : public distlock::spi::backend {
public:
    explicit scripted_backend(std::shared_ptr<std::string> script) : script_(std::move(script)) {
        caps_.unsupported[distlock::feature::lease_expiry] = "scripted";
    }
    std::string_view name() const noexcept override { return "scripted"; }
    const distlock::capabilities& caps() const noexcept override { return caps_; }
    std::unique_ptr<distlock::spi::lock_handle> make_lock(const distlock::spi::lock_request&) override {
        return std::make_unique<scripted_handle>(script_);
    }

private:
    std::shared_ptr<std::string> script_;
    distlock::capabilities caps_;
};

// A provider of the scripted backend whose attempts follow `script`.
distlock::provider scripted(const std::string& script) {
    static auto next = std::make_shared<std::string>();
    static const bool registered = [] {
        distlock::register_backend("unit-scripted", [](distlock::spi::url&) {
            return std::make_shared<scripted_backend>(std::make_shared<std::string>(*next));
        });
        return true;
    }();
    (void)registered;
    *next = script;
    return distlock::connect("unit-scripted://x");
}
}  // namespace

TEST_CASE("an async wait rides out an unavailable server between its attempts; a first attempt's error ends it",
          "[async]") {
    SECTION("busy, no answer twice, then granted: granted") {
        auto p = scripted("buug");
        auto m = p.mutex("s");
        pending w;
        m.async_lock(20s, w.handler());
        const auto got = w.get();
        CHECK_FALSE(got.error);
        CHECK(got.granted);
        CHECK(m.token() == 7);
    }
    SECTION("no answer at the first attempt: the error, at once") {
        auto p = scripted("ug");
        auto m = p.mutex("s");
        pending w;
        m.async_lock(20s, w.handler());
        const auto got = w.get();
        CHECK(distlock::test::errc_of(got.error) == static_cast<int>(distlock::errc::unavailable));
        CHECK_FALSE(got.granted);
    }
    SECTION("no answer for longer than the wait: the error, not a timeout") {
        auto p = scripted("b" + std::string(1000, 'u'));
        auto m = p.mutex("s");
        pending w;
        m.async_lock(600ms, w.handler());
        const auto got = w.get();
        CHECK(distlock::test::errc_of(got.error) == static_cast<int>(distlock::errc::unavailable));
    }
}

TEST_CASE("ten thousand pending async acquisitions hold a bounded number of threads", "[async]") {
    auto p = distlock::connect(space("many"));
    auto q = distlock::connect(space("many"));
    auto holder = q.mutex("n0");
    REQUIRE(holder.try_lock());
    const auto before = thread_count();
    constexpr int n = 10000;
    std::vector<distlock::mutex> ms;
    ms.reserve(n);
    std::atomic<int> granted{0}, failed{0};
    for (int i = 0; i < n; ++i) {
        ms.push_back(p.mutex("n0"));
        ms.back().async_lock(60s, [&, i](std::exception_ptr e, bool g) {
            if (e || !g) {
                ++failed;
                return;
            }
            ++granted;
            ms[i].async_unlock();  // hands over to the next one
        });
    }
    std::this_thread::sleep_for(100ms);
    const auto during = thread_count();
    INFO("threads before " << before << ", with " << n << " pending " << during);
    CHECK(during <= before + 6);  // the provider's four workers, and room for its renewal and callback threads
    CHECK(during <= 16);          // the bound for the whole process
    CHECK(granted == 0);
    holder.unlock();
    for (int i = 0; i < 600 && granted + failed < n; ++i) std::this_thread::sleep_for(100ms);
    CHECK(failed == 0);
    CHECK(granted == n);
}
