// distlock's zk:// and Apache Curator's InterProcessMutex (Java) contend for the
// same lock path on the standalone server: exclusion holds both ways, each gets
// the lock after the other releases, and they share one FIFO queue. python3-kazoo's
// Lock is tried too, with and without extra_lock_patterns=["-lock-"].
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <thread>

#include "child_process.hpp"
#include "distlock/distlock.hpp"
#include "support.hpp"
#include "zk_raw.hpp"
#include "zk_support.hpp"

using namespace std::chrono_literals;
using distlock::test::eventually;
using distlock::test::unique_name;

namespace {

std::string url() { return distlock::test::env("DISTLOCK_TEST_ZK_URL"); }
std::string lock_path(const std::string& name) { return zk_test::base_of(url()) + "/" + name; }

// A peer process speaking the line protocol of CuratorLock.java / kazoo_lock.py:
// it says "ready" once started, and "quit" ends it.
class peer {
public:
    explicit peer(const std::vector<std::string>& argv) : proc_(argv, {.stdin_pipe = true}) {
        auto hello = read_line(30s);
        INFO("peer " << argv[0] << " said '" << hello << "'");
        REQUIRE(hello == "ready");
    }
    ~peer() {
        proc_.say("quit");
        proc_.close_input();
        proc_.wait_exit_for(5s);  // then proc_'s destructor kills it
    }

    void say(const std::string& line) { proc_.say(line); }
    // The next line, or "" when nothing came within `limit`.
    std::string read_line(std::chrono::milliseconds limit) { return proc_.read_line(limit); }
    std::string ask(const std::string& line, std::chrono::milliseconds limit = 20s) {
        say(line);
        return read_line(limit);
    }
    static std::uint64_t token_of(const std::string& locked_line) { return std::stoull(locked_line.substr(7)); }

private:
    distlock::test::child_process proc_;
};

std::unique_ptr<peer> curator(const std::string& name) {
    std::ifstream f(CURATOR_CLASSPATH_FILE);
    std::string cp;
    std::getline(f, cp);
    REQUIRE_FALSE(cp.empty());
    return std::make_unique<peer>(
        std::vector<std::string>{"java", "-Xmx128m", "-cp", cp, "CuratorLock", zk_test::hosts_of(url()), lock_path(name)});
}

std::unique_ptr<peer> kazoo(const std::string& name, bool curator_patterns) {
    std::vector<std::string> argv{"/usr/bin/python3", KAZOO_SCRIPT, zk_test::hosts_of(url()), lock_path(name)};
    if (curator_patterns) argv.push_back("--curator-patterns");
    return std::make_unique<peer>(argv);
}

bool kazoo_available() { return ::access("/usr/lib/python3/dist-packages/kazoo/recipe/lock.py", R_OK) == 0; }

}  // namespace

TEST_CASE("Curator holds: distlock is excluded, then gets the lock once Curator releases", "[interop][curator]") {
    const auto name = unique_name("cur-first");
    auto java = curator(name);
    auto locked = java->ask("lock");
    REQUIRE(locked.rfind("locked ", 0) == 0);
    const auto java_token = peer::token_of(locked);

    auto p = distlock::connect(url());
    auto m = p.mutex(name);
    CHECK_FALSE(m.try_lock());
    CHECK_FALSE(m.try_lock_for(300ms));
    std::atomic<bool> got{false};
    std::thread waiter([&] {
        m.lock();
        got = true;
    });
    std::this_thread::sleep_for(300ms);
    CHECK_FALSE(got.load());
    CHECK(java->ask("unlock") == "unlocked");
    CHECK(eventually([&] { return got.load(); }, 10s));
    waiter.join();
    CHECK(m.token() > java_token);
    // Now distlock holds: Curator is excluded.
    CHECK(java->ask("try 300") == "timeout");
    m.unlock();
    auto again = java->ask("try 5000");
    CHECK(again.rfind("locked ", 0) == 0);
    CHECK(java->ask("unlock") == "unlocked");
}

TEST_CASE("distlock holds: Curator is excluded, then gets the lock once distlock releases", "[interop][curator]") {
    const auto name = unique_name("dl-first");
    auto p = distlock::connect(url());
    auto m = p.mutex(name);
    REQUIRE(m.try_lock());
    const auto token = m.token();
    auto java = curator(name);
    CHECK(java->ask("try 300") == "timeout");
    // Curator sees distlock's node as the holder among its participants.
    auto nodes = java->ask("nodes");
    CHECK(nodes.rfind("nodes _c_", 0) == 0);
    java->say("lock");
    CHECK(java->read_line(700ms).empty());  // still waiting
    m.unlock();
    auto locked = java->read_line(10s);
    REQUIRE(locked.rfind("locked ", 0) == 0);
    CHECK(peer::token_of(locked) > token);
    CHECK_FALSE(p.mutex(name).try_lock());
    CHECK(java->ask("unlock") == "unlocked");
    CHECK(p.mutex(name).try_lock_for(5s));
}

TEST_CASE("distlock and Curator waiters share one FIFO queue", "[interop][curator]") {
    const auto name = unique_name("fifo");
    auto a = distlock::connect(url());
    auto b = distlock::connect(url());
    auto first = a.mutex(name);
    REQUIRE(first.try_lock());
    auto java = curator(name);
    zk_test::raw_zk raw(zk_test::hosts_of(url()));
    java->say("lock");  // queued second
    REQUIRE(eventually([&] { return raw.children(lock_path(name)).size() == 2; }, 10s));
    std::atomic<bool> third_got{false};
    std::thread third([&] {
        auto m = b.mutex(name);
        m.lock();
        third_got = true;
        m.unlock();
    });
    REQUIRE(eventually([&] { return raw.children(lock_path(name)).size() == 3; }, 10s));  // queued third
    first.unlock();
    auto locked = java->read_line(10s);
    CHECK(locked.rfind("locked ", 0) == 0);  // Curator, queued before, goes first
    std::this_thread::sleep_for(300ms);
    CHECK_FALSE(third_got.load());
    CHECK(java->ask("unlock") == "unlocked");
    CHECK(eventually([&] { return third_got.load(); }, 10s));
    third.join();
}

TEST_CASE("kazoo with extra_lock_patterns=[\"-lock-\"] and distlock exclude each other", "[interop][kazoo]") {
    if (!kazoo_available()) {
        WARN("python3-kazoo is not installed: apt-get install python3-kazoo");
        return;
    }
    const auto name = unique_name("kazoo");
    auto py = kazoo(name, true);
    auto locked = py->ask("lock");
    REQUIRE(locked.rfind("locked ", 0) == 0);
    auto p = distlock::connect(url());
    auto m = p.mutex(name);
    CHECK_FALSE(m.try_lock());
    CHECK(py->ask("unlock") == "unlocked");
    REQUIRE(m.try_lock_for(5s));
    CHECK(m.token() > peer::token_of(locked));
    CHECK(py->ask("try 300") == "timeout");
    py->say("lock");
    CHECK(py->read_line(500ms).empty());
    m.unlock();
    auto after = py->read_line(10s);
    CHECK(after.rfind("locked ", 0) == 0);
    CHECK(py->ask("unlock") == "unlocked");
}

TEST_CASE("kazoo without extra patterns ignores distlock's (and Curator's) nodes; distlock still sees kazoo's",
          "[interop][kazoo]") {
    if (!kazoo_available()) {
        WARN("python3-kazoo is not installed: apt-get install python3-kazoo");
        return;
    }
    const auto name = unique_name("kazoo-plain");
    auto p = distlock::connect(url());
    auto m = p.mutex(name);
    REQUIRE(m.try_lock());
    auto py = kazoo(name, false);
    // The documented incompatibility: kazoo's default Lock only counts "__lock__"
    // nodes as contenders, so it takes the lock although distlock holds it.
    CHECK(py->ask("try 1000").rfind("locked ", 0) == 0);
    CHECK(py->ask("unlock") == "unlocked");
    m.unlock();
    // The other way round, distlock orders kazoo's "__lock__<seq>" nodes by
    // their sequence, so it waits for a kazoo holder.
    REQUIRE(py->ask("lock").rfind("locked ", 0) == 0);
    CHECK_FALSE(m.try_lock());
    CHECK(py->ask("unlock") == "unlocked");
    CHECK(m.try_lock_for(5s));
    m.unlock();
}

namespace {

// Two distlock sessions (threads) and `peer` each increment a counter file
// `rounds` times under the lock, with a pause between read and write: any
// overlap loses increments.
long count_together(const std::string& name, peer& other, int rounds) {
    const auto file = std::filesystem::temp_directory_path() / ("distlock-interop-" + name.substr(name.rfind(':') + 1));
    { std::ofstream(file) << 0 << '\n'; }
    other.say("count " + file.string() + " " + std::to_string(rounds));
    std::vector<std::thread> pool;
    for (int t = 0; t < 2; ++t) {
        pool.emplace_back([&] {
            auto p = distlock::connect(url());  // a session of its own
            auto m = p.mutex(name);
            for (int i = 0; i < rounds; ++i) {
                std::lock_guard guard(m);
                long v = 0;
                std::ifstream(file) >> v;
                std::this_thread::sleep_for(1ms);
                std::ofstream(file, std::ios::trunc) << v + 1 << '\n';
            }
        });
    }
    for (auto& t : pool) t.join();
    CHECK(other.read_line(60s) == "counted");
    long total = -1;
    std::ifstream(file) >> total;
    std::filesystem::remove(file);
    return total;
}

}  // namespace

TEST_CASE("distlock and Curator increment one counter file exactly under one lock", "[interop][curator]") {
    const auto name = unique_name("counter-curator");
    auto java = curator(name);
    CHECK(count_together(name, *java, 30) == 90);
}

TEST_CASE("distlock and kazoo (with the Curator pattern) increment one counter file exactly", "[interop][kazoo]") {
    if (!kazoo_available()) {
        WARN("python3-kazoo is not installed: apt-get install python3-kazoo");
        return;
    }
    const auto name = unique_name("counter-kazoo");
    auto py = kazoo(name, true);
    CHECK(count_together(name, *py, 30) == 90);
}
