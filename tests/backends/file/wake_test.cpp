// file:// asynchronous waits' wake-ups (lock_handle::watch_releases): a release
// by another provider wakes the waiters of that name only (mutex, each side of
// the read-write lock), break_lock wakes them too, failed attempts of waiters
// wake nobody, no wake-up comes after the subscription ended, and 1,000
// watched names share one inotify descriptor and one thread. The semaphore has
// no subscription (the core polls).
#include <catch2/catch.hpp>
#include <filesystem>

#include "distlock/spi/backend.hpp"
#include "support.hpp"

namespace distlock::backends::file {
void register_backend(spi::registry&);
}

using namespace std::chrono_literals;
using distlock::test::eventually;
using distlock::test::unique_name;
using clk = std::chrono::steady_clock;
namespace fs = std::filesystem;
namespace spi = distlock::spi;

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

// A provider of its own on `dir`.
std::shared_ptr<spi::backend> provider(const wake_dir& dir) {
    capture_registry r;
    distlock::backends::file::register_backend(r);
    auto u = spi::url::parse("file://" + dir.path.string());
    return r.factory(u);
}

spi::lock_request request(const std::string& name, spi::lock_kind kind = spi::lock_kind::exclusive) {
    spi::lock_request r;
    r.name = name;
    r.kind = kind;
    r.permits = kind == spi::lock_kind::permit ? 1 : 0;
    r.lease = 10s;
    return r;
}

struct wake_count {
    std::atomic<int> n{0};
    spi::wake_sink sink() {
        return spi::wake_sink([this] { n.fetch_add(1); });
    }
};

std::size_t thread_count() {
    return static_cast<std::size_t>(std::distance(fs::directory_iterator("/proc/self/task"), {}));
}
std::size_t fd_count() { return static_cast<std::size_t>(std::distance(fs::directory_iterator("/proc/self/fd"), {})); }

const char* kind_name(spi::lock_kind k) {
    return k == spi::lock_kind::read ? "read" : k == spi::lock_kind::write ? "write" : "exclusive";
}

}  // namespace

TEST_CASE("watch_releases: another provider's release of the name wakes the watcher, another name's does not",
          "[file][async][wake]") {
    for (auto kind : {spi::lock_kind::exclusive, spi::lock_kind::write, spi::lock_kind::read}) {
        DYNAMIC_SECTION(kind_name(kind)) {
            wake_dir dir;
            auto holder = provider(dir), watcher = provider(dir);
            const auto name = unique_name("wake"), other = unique_name("wake-other");
            const auto holds = kind == spi::lock_kind::read ? spi::lock_kind::write : kind;
            auto held = holder->make_lock(request(name, holds));
            auto held_other = holder->make_lock(request(other, holds));
            REQUIRE(held->acquire(clk::now() + 5s, {}));
            REQUIRE(held_other->acquire(clk::now() + 5s, {}));
            auto waiting = watcher->make_lock(request(name, kind));
            wake_count woken;
            auto sub = waiting->watch_releases(woken.sink());
            REQUIRE(sub != nullptr);
            CHECK_FALSE(waiting->acquire(clk::now(), {}));  // one attempt: held
            held_other->release();  // its event comes first on the one inotify queue
            held->release();
            REQUIRE(eventually([&] { return woken.n.load() >= 1; }, 5s));
            CHECK(woken.n.load() == 1);
            auto grant = waiting->acquire(clk::now(), {});
            REQUIRE(grant.has_value());
            // Taken quietly, held for real: another provider cannot take it.
            auto again = holder->make_lock(request(name, holds));
            CHECK_FALSE(again->acquire(clk::now(), {}));
            sub.reset();
            waiting->release();
            CHECK(again->acquire(clk::now(), {}));
            again->release();
        }
    }
}

TEST_CASE("watch_releases: waiters' failed attempts wake nobody; no wake-up after the subscription ended",
          "[file][async][wake]") {
    wake_dir dir;
    auto holder = provider(dir), watcher = provider(dir);
    const auto name = unique_name("quiet"), marker = unique_name("marker");
    auto held = holder->make_lock(request(name));
    auto held_marker = holder->make_lock(request(marker));
    REQUIRE(held->acquire(clk::now() + 5s, {}));
    REQUIRE(held_marker->acquire(clk::now() + 5s, {}));
    auto a = watcher->make_lock(request(name)), b = watcher->make_lock(request(name));
    auto dropped = watcher->make_lock(request(name)), m = watcher->make_lock(request(marker));
    wake_count a_woken, b_woken, dropped_woken, m_woken;
    auto a_sub = a->watch_releases(a_woken.sink());
    auto b_sub = b->watch_releases(b_woken.sink());
    auto dropped_sub = dropped->watch_releases(dropped_woken.sink());
    auto m_sub = m->watch_releases(m_woken.sink());
    for (int i = 0; i < 10; ++i) {
        CHECK_FALSE(a->acquire(clk::now(), {}));
        CHECK_FALSE(b->acquire(clk::now(), {}));
    }
    held_marker->release();  // an event queued after every one the attempts could have made
    REQUIRE(eventually([&] { return m_woken.n.load() == 1; }, 5s));
    CHECK(a_woken.n.load() == 0);
    CHECK(b_woken.n.load() == 0);
    dropped_sub.reset();
    held->release();
    REQUIRE(eventually([&] { return a_woken.n.load() == 1 && b_woken.n.load() == 1; }, 5s));
    CHECK(dropped_woken.n.load() == 0);
}

TEST_CASE("watch_releases: break_lock wakes the waiters of the name", "[file][async][wake]") {
    wake_dir dir;
    auto holder = provider(dir), watcher = provider(dir);
    const auto name = unique_name("broken");
    auto held = holder->make_lock(request(name));
    REQUIRE(held->acquire(clk::now() + 5s, {}));
    auto waiting = watcher->make_lock(request(name));
    wake_count woken;
    auto sub = waiting->watch_releases(woken.sink());
    watcher->break_lock(name);  // a fresh file renamed into place
    REQUIRE(eventually([&] { return woken.n.load() >= 1; }, 5s));
    CHECK(waiting->acquire(clk::now(), {}).has_value());  // the fresh file is free
    sub.reset();
    waiting->release();
}

TEST_CASE("watch_releases: 1,000 watched names share one inotify descriptor and one thread",
          "[file][async][wake][bounded]") {
    wake_dir dir;
    auto holder = provider(dir), watcher = provider(dir);
    const auto threads = thread_count(), fds = fd_count();
    const auto prefix = unique_name("many");
    constexpr int n = 1000;
    std::vector<std::unique_ptr<spi::lock_handle>> handles;
    std::vector<std::unique_ptr<spi::wake_subscription>> subs;
    std::vector<wake_count> woken(n);
    for (int i = 0; i < n; ++i) {
        handles.push_back(watcher->make_lock(request(prefix + "-" + std::to_string(i))));
        subs.push_back(handles.back()->watch_releases(woken[i].sink()));
        REQUIRE(subs.back() != nullptr);
    }
    CHECK(thread_count() - threads <= 1);  // the watcher's thread
    CHECK(fd_count() - fds <= 3);          // its inotify descriptor and its stop pipe
    auto held = holder->make_lock(request(prefix + "-7"));
    REQUIRE(held->acquire(clk::now() + 5s, {}));
    held->release();
    REQUIRE(eventually([&] { return woken[7].n.load() == 1; }, 5s));
    int total = 0;
    for (auto& w : woken) total += w.n.load();
    CHECK(total == 1);
}

TEST_CASE("watch_releases: a semaphore permit has no subscription (the core polls)", "[file][async][wake]") {
    wake_dir dir;
    auto watcher = provider(dir);
    auto h = watcher->make_lock(request(unique_name("permit"), spi::lock_kind::permit));
    CHECK(h->watch_releases(spi::wake_sink{}) == nullptr);
}
