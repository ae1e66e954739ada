// file:// asynchronous waits' wake-ups (lock_handle::watch_releases): a release
// by another provider wakes the waiters of that name only (mutex, each side of
// the read-write lock), break_lock wakes them too, failed attempts of waiters
// wake nobody, no wake-up comes after the subscription ended, and 1,000
// watched names share one inotify descriptor and one thread; async_lock hands
// off with one attempt per wake-up. The semaphore has no subscription (the
// core polls).
#include "wake_counting.hpp"

namespace distlock::backends::file {
void register_backend(spi::registry&);
}

using namespace std::chrono_literals;
using distlock::test::eventually;
using distlock::test::unique_name;
using clk = std::chrono::steady_clock;
namespace fs = std::filesystem;
namespace spi = distlock::spi;
using namespace wake_support;

namespace {

struct wake_dir {
    fs::path path = fs::temp_directory_path() / unique_name("distlock-file-wake");
    wake_dir() {
        fs::create_directories(path);
        fs::permissions(path, fs::perms::owner_all, fs::perm_options::replace);
    }
    ~wake_dir() {
        std::error_code ec;
        fs::remove_all(path, ec);
    }
};

class capture_registry final : public spi::registry {
public:
    void add(std::string, spi::factory f) override { factory = std::move(f); }
    spi::factory factory;
};

// A backend of its own on `url`'s directory.
std::shared_ptr<spi::backend> make_backend(const std::string& url) {
    capture_registry r;
    distlock::backends::file::register_backend(r);
    auto u = spi::url::parse(url);
    return r.factory(u);
}
std::shared_ptr<spi::backend> provider(const wake_dir& dir) { return make_backend("file://" + dir.path.string()); }

}  // namespace

TEST_CASE("watch_releases: another provider's release of the name wakes the watcher, another name's does not",
          "[file][async][wake]") {
    for (auto kind : {spi::lock_kind::exclusive, spi::lock_kind::write, spi::lock_kind::read}) {
        DYNAMIC_SECTION(kind_name(kind)) {
            wake_dir dir;
            auto holder = provider(dir), watcher = provider(dir);
            const auto name = unique_name("wake");
            const auto holds = kind == spi::lock_kind::read ? spi::lock_kind::write : kind;
            auto waiting = check_release_wakes(*holder, *watcher, holds, kind, name, unique_name("wake-other"));
            // Taken quietly, held for real: another provider cannot take it.
            auto again = holder->make_lock(request(name, holds));
            CHECK_FALSE(again->acquire(clk::now(), {}));
            waiting->release();
            CHECK(again->acquire(clk::now(), {}));
            again->release();
        }
    }
}

TEST_CASE("watch_releases: waiters' failed attempts wake nobody", "[file][async][wake]") {
    wake_dir dir;
    auto holder = provider(dir), watcher = provider(dir);
    const auto name = unique_name("quiet"), marker = unique_name("marker");
    auto held = holder->make_lock(request(name));
    auto held_marker = holder->make_lock(request(marker));
    REQUIRE(held->acquire(clk::now() + 5s, {}));
    REQUIRE(held_marker->acquire(clk::now() + 5s, {}));
    auto a = watcher->make_lock(request(name)), b = watcher->make_lock(request(name));
    auto m = watcher->make_lock(request(marker));
    wake_count a_woken, b_woken, m_woken;
    auto a_sub = a->watch_releases(a_woken.sink());
    auto b_sub = b->watch_releases(b_woken.sink());
    auto m_sub = m->watch_releases(m_woken.sink());
    for (int i = 0; i < 10; ++i) {
        CHECK_FALSE(a->acquire(clk::now(), {}));
        CHECK_FALSE(b->acquire(clk::now(), {}));
    }
    held_marker->release();  // an event queued after every one the attempts could have made
    REQUIRE(eventually([&] { return m_woken.value() == 1; }, 20s));
    CHECK(a_woken.value() == 0);
    CHECK(b_woken.value() == 0);
    held->release();
    REQUIRE(eventually([&] { return a_woken.value() == 1 && b_woken.value() == 1; }, 20s));
}

TEST_CASE("watch_releases: no wake-up after the subscription is destroyed", "[file][async][wake]") {
    wake_dir dir;
    auto holder = provider(dir), watcher = provider(dir);
    check_no_wake_after_end(*holder, *watcher, unique_name("wake-gone"));
}

TEST_CASE("watch_releases: break_lock wakes the waiters of the name", "[file][async][wake]") {
    wake_dir dir;
    auto holder = provider(dir), watcher = provider(dir);
    const auto name = unique_name("broken");
    watched_wait w(*holder, *watcher, name);
    watcher->break_lock(name);  // a fresh file renamed into place
    REQUIRE(eventually([&] { return w.woken.value() >= 1; }, 20s));
    CHECK(w.waiting->acquire(clk::now(), {}).has_value());  // the fresh file is free
    w.sub.reset();
    w.waiting->release();
}

TEST_CASE("watch_releases: 1,000 watched names share one inotify descriptor and one thread",
          "[file][async][wake][bounded]") {
    wake_dir dir;
    auto holder = provider(dir), watcher = provider(dir);
    const auto threads = thread_count(), fds = fd_count();
    const auto prefix = unique_name("many");
    many_watchers many(*watcher, prefix, 1000);
    CHECK(thread_count() - threads <= 1);  // the watcher's thread
    CHECK(fd_count() - fds <= 3);          // its inotify descriptor and its stop pipe
    many.check_one_woken(*holder, prefix);
}

TEST_CASE("watch_releases: a semaphore permit has no subscription (the core polls)", "[file][async][wake]") {
    wake_dir dir;
    auto watcher = provider(dir);
    auto h = watcher->make_lock(request(unique_name("permit"), spi::lock_kind::permit));
    CHECK(h->watch_releases(spi::wake_sink{}) == nullptr);
}

TEST_CASE("async_lock hands off after a release with one attempt per wake-up, and in the process with no subscription",
          "[file][async][wake][e2e]") {
    wake_dir dir;
    const auto url = "file://" + dir.path.string();
    register_counting("count-file", [url] { return make_backend(url); });
    auto holder = distlock::connect(url), waiter = distlock::connect("count-file://x");
    check_event_handoff(holder, waiter, unique_name("handoff"));
    check_gate_handoff(waiter, unique_name("gate-handoff"));
}

TEST_CASE("the semaphore's async wait polls: the count sees it (the control of the case above)",
          "[file][async][wake][e2e]") {
    wake_dir dir;
    const auto url = "file://" + dir.path.string();
    register_counting("count-file-sem", [url] { return make_backend(url); });
    auto holder = distlock::connect(url), waiter = distlock::connect("count-file-sem://x");
    const auto name = unique_name("sem-poll");
    distlock::lock_options opts;
    opts.retry_min = 50ms;
    opts.retry_max = 50ms;
    auto held = holder.semaphore(name, 1, opts);
    REQUIRE(held.try_acquire());
    auto waiting = waiter.semaphore(name, 1, opts);
    std::promise<bool> outcome;
    waiting.async_acquire(30s, [&](std::exception_ptr, bool granted) { outcome.set_value(granted); });
    REQUIRE(eventually([&] { return attempts_of(name) >= 1; }, 30s));
    std::this_thread::sleep_for(500ms);
    CHECK(attempts_of(name) >= 4);  // polled every 50 ms: what check_event_handoff would catch
    held.release();
    auto f = outcome.get_future();
    REQUIRE(f.wait_for(10s) == std::future_status::ready);
    CHECK(f.get());
    waiting.release();
}

TEST_CASE("an asynchronous writer keeps the turnstile while it waits, and gives it up with its wait",
          "[file][async][rw][policy]") {
    wake_dir dir;
    const auto url = "file://" + dir.path.string();
    auto a = distlock::connect(url), b = distlock::connect(url), c = distlock::connect(url);
    distlock::test::wake::async_writer_keeps_its_place(a, b, c, unique_name("writer-place"));
}
