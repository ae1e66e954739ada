// distlock's zk:// and Apache Curator's InterProcessMutex (Java) contend for the
// same lock path on the standalone server: exclusion holds both ways, each gets
// the lock after the other releases, and they share one FIFO queue. python3-kazoo's
// Lock is tried too, with and without extra_lock_patterns=["-lock-"]. Then
// Curator's InterProcessReadWriteLock against distlock's shared_mutex, and its
// InterProcessSemaphoreV2 against distlock's semaphore, on the same paths. Last,
// what provider::inspect shows of a Curator holder, and Curator's LeaderLatch
// (CuratorLatch.java) against distlock's election, both ways.
#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <functional>
#include <mutex>
#include <regex>
#include <sstream>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <thread>

#include "child_process.hpp"
#include "distlock/distlock.hpp"
#include "distlock/spi/backend.hpp"
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

// CuratorLock on the lock path `path`; with `credentials` ("user:password"),
// authenticated with digest and creating every node with CREATOR_ALL_ACL.
std::unique_ptr<peer> curator_at(const std::string& path, const std::string& credentials = {}) {
    std::ifstream f(CURATOR_CLASSPATH_FILE);
    std::string cp;
    std::getline(f, cp);
    REQUIRE_FALSE(cp.empty());
    std::vector<std::string> argv{"java", "-Xmx128m", "-cp", cp, "CuratorLock", zk_test::hosts_of(url()), path};
    if (!credentials.empty()) {
        argv.push_back("2000");
        argv.push_back(credentials);
    }
    return std::make_unique<peer>(argv);
}
// CuratorLock on the lock path of `name` under the test URL's base path.
std::unique_ptr<peer> curator(const std::string& name, const std::string& credentials = {}) {
    return curator_at(lock_path(name), credentials);
}

std::unique_ptr<peer> kazoo(const std::string& name, bool curator_patterns) {
    std::vector<std::string> argv{"/usr/bin/python3", KAZOO_SCRIPT, zk_test::hosts_of(url()), lock_path(name)};
    if (curator_patterns) argv.push_back("--curator-patterns");
    return std::make_unique<peer>(argv);
}

bool kazoo_available() { return ::access("/usr/lib/python3/dist-packages/kazoo/recipe/lock.py", R_OK) == 0; }

// `m` waits while `holder` holds (its answer to "lock" was `locked`), and gets
// the lock with a larger token once `holder` unlocks.
void waits_until_peer_unlocks(distlock::mutex& m, peer& holder, const std::string& locked) {
    std::atomic<bool> got{false};
    std::thread waiter([&] {
        m.lock();
        got = true;
    });
    std::this_thread::sleep_for(300ms);
    CHECK_FALSE(got.load());
    CHECK(holder.ask("unlock") == "unlocked");
    CHECK(eventually([&] { return got.load(); }, 10s));
    waiter.join();
    CHECK(m.token() > peer::token_of(locked));
}

}  // namespace

TEST_CASE("Curator holds: distlock is excluded, then gets the lock once Curator releases", "[interop][curator]") {
    const auto name = unique_name("cur-first");
    auto java = curator(name);
    auto locked = java->ask("lock");
    REQUIRE(locked.rfind("locked ", 0) == 0);

    auto p = distlock::connect(url());
    auto m = p.mutex(name);
    CHECK_FALSE(m.try_lock());
    CHECK_FALSE(m.try_lock_for(300ms));
    waits_until_peer_unlocks(m, *java, locked);
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

// ---- read-write lock and semaphore -------------------------------------------------

namespace {

// The record of numbers shared with CuratorLock.java's rwmix / permits (see
// there), updated under a POSIX record lock; fcntl locks do not exclude the
// threads of one process, so a process-wide mutex is taken too.
std::mutex record_mutex;
void update_record(const std::string& file, const std::function<void(long*)>& change) {
    std::lock_guard guard(record_mutex);
    int fd = ::open(file.c_str(), O_RDWR | O_CLOEXEC);
    if (fd < 0) throw std::runtime_error("cannot open " + file);
    struct flock fl {};
    fl.l_type = F_WRLCK;
    fl.l_whence = SEEK_SET;
    if (::fcntl(fd, F_SETLKW, &fl) != 0) {
        ::close(fd);
        throw std::runtime_error("cannot lock " + file);
    }
    char buf[512];
    auto n = ::pread(fd, buf, sizeof buf - 1, 0);
    buf[n > 0 ? n : 0] = 0;
    long v[4] = {0, 0, 0, 0};
    std::istringstream(buf) >> v[0] >> v[1] >> v[2] >> v[3];
    change(v);
    const auto out = std::to_string(v[0]) + " " + std::to_string(v[1]) + " " + std::to_string(v[2]) + " " +
                     std::to_string(v[3]) + "\n";
    bool ok = ::ftruncate(fd, 0) == 0 && ::pwrite(fd, out.data(), out.size(), 0) == static_cast<ssize_t>(out.size());
    ::close(fd);  // releases the record lock
    if (!ok) throw std::runtime_error("cannot write " + file);
}
std::vector<long> read_record(const std::string& file) {
    std::vector<long> v(4, -1);
    std::ifstream in(file);
    in >> v[0] >> v[1] >> v[2] >> v[3];
    return v;
}
std::string record_file(const std::string& name) {
    auto f =
        (std::filesystem::temp_directory_path() / ("distlock-interop-" + name.substr(name.rfind(':') + 1))).string();
    std::ofstream(f) << "0 0 0 0\n";
    return f;
}

}  // namespace

TEST_CASE("a Curator writer keeps distlock's readers and writers out, and a distlock writer keeps Curator's out",
          "[interop][curator][rw]") {
    const auto name = unique_name("cur-rw");
    auto java = curator(name);
    auto locked = java->ask("wlock");
    REQUIRE(locked.rfind("locked ", 0) == 0);
    const auto java_token = peer::token_of(locked);
    auto p = distlock::connect(url());
    auto rw = p.shared_mutex(name);
    CHECK_FALSE(rw.try_lock_shared());
    CHECK_FALSE(rw.try_lock_shared_for(300ms));
    CHECK_FALSE(rw.try_lock());
    CHECK(java->ask("wunlock") == "unlocked");
    REQUIRE(rw.try_lock_for(5s));
    CHECK(rw.token() > java_token);
    CHECK(java->ask("rtry 300") == "timeout");
    CHECK(java->ask("wtry 300") == "timeout");
    rw.unlock();
    auto again = java->ask("wtry 5000");
    CHECK(again.rfind("locked ", 0) == 0);
    CHECK(java->ask("wunlock") == "unlocked");
}

TEST_CASE("Curator's and distlock's readers read together and keep writers of both out", "[interop][curator][rw]") {
    const auto name = unique_name("cur-readers");
    auto java = curator(name);
    auto writer_java = curator(name);
    REQUIRE(java->ask("rlock").rfind("locked ", 0) == 0);
    auto p = distlock::connect(url());
    auto q = distlock::connect(url());
    auto reader = p.shared_mutex(name);
    auto writer = q.shared_mutex(name);
    REQUIRE(reader.try_lock_shared_for(5s));  // beside Curator's reader
    CHECK(reader.held_shared());
    CHECK_FALSE(writer.try_lock());
    CHECK(writer_java->ask("wtry 300") == "timeout");
    CHECK(java->ask("runlock") == "unlocked");
    CHECK_FALSE(writer.try_lock());  // distlock's reader still reads
    CHECK(writer_java->ask("wtry 300") == "timeout");
    CHECK(java->ask("rtry 3000").rfind("locked ", 0) == 0);  // Curator reads beside distlock's reader
    reader.unlock_shared();
    CHECK(java->ask("runlock") == "unlocked");
    REQUIRE(writer.try_lock_for(5s));
    writer.unlock();
}

TEST_CASE("a distlock writer waiting behind a Curator reader holds back Curator readers that come later (FIFO)",
          "[interop][curator][rw]") {
    const auto name = unique_name("cur-rw-fifo");
    auto first = curator(name);
    auto later = curator(name);
    zk_test::raw_zk raw(zk_test::hosts_of(url()));
    REQUIRE(first->ask("rlock").rfind("locked ", 0) == 0);
    auto p = distlock::connect(url());
    std::atomic<bool> got{false};
    std::thread waiter([&] {
        auto rw = p.shared_mutex(name);
        rw.lock();
        got = true;
        std::this_thread::sleep_for(200ms);
        rw.unlock();
    });
    REQUIRE(eventually([&] { return raw.children(lock_path(name)).size() == 2; }, 10s));  // the writer is queued
    CHECK(later->ask("rtry 500") == "timeout");                                           // behind the waiting writer
    CHECK_FALSE(got.load());
    CHECK(first->ask("runlock") == "unlocked");
    CHECK(eventually([&] { return got.load(); }, 10s));
    waiter.join();
    CHECK(later->ask("rtry 5000").rfind("locked ", 0) == 0);
    CHECK(later->ask("runlock") == "unlocked");
}

TEST_CASE("Curator and distlock reading and writing in turn never overlap a writer with anyone",
          "[interop][curator][rw]") {
    const auto name = unique_name("cur-rwmix");
    const auto file = record_file(name);
    auto java = curator(name);
    constexpr int rounds = 20;
    java->say("rwmix " + file + " " + std::to_string(rounds));
    std::atomic<int> failures{0};
    std::vector<std::thread> pool;
    for (int t = 0; t < 2; ++t) {
        pool.emplace_back([&, t] {
            try {
                auto p = distlock::connect(url());  // a session of its own
                auto rw = p.shared_mutex(name);
                for (int i = 0; i < rounds; ++i) {
                    const bool write = (i + t) % 2 == 1;
                    if (write) rw.lock();
                    else rw.lock_shared();
                    update_record(file, [&](long* v) {
                        if (write ? (v[0] != 0 || v[1] != 0) : v[1] != 0) ++v[2];
                        ++v[write ? 1 : 0];
                    });
                    std::this_thread::sleep_for(2ms);
                    update_record(file, [&](long* v) {
                        --v[write ? 1 : 0];
                        ++v[3];
                    });
                    if (write) rw.unlock();
                    else rw.unlock_shared();
                }
            } catch (...) {
                ++failures;
            }
        });
    }
    for (auto& th : pool) th.join();
    CHECK(java->read_line(120s) == "mixed");
    CHECK(failures.load() == 0);
    auto v = read_record(file);
    INFO("readers writers violations rounds: " << v[0] << " " << v[1] << " " << v[2] << " " << v[3]);
    CHECK(v[2] == 0);
    CHECK(v[3] == 3 * rounds);
    CHECK(v[0] == 0);
    CHECK(v[1] == 0);
    std::filesystem::remove(file);
}

TEST_CASE("Curator's and distlock's leases count together against one semaphore size",
          "[interop][curator][semaphore]") {
    const auto name = unique_name("cur-sem");
    auto java = curator(name);
    auto leased = java->ask("lease 2 5000");
    REQUIRE(leased.rfind("leased ", 0) == 0);
    const auto java_token = std::stoull(leased.substr(7));
    auto a = distlock::connect(url());
    auto b = distlock::connect(url());
    auto s1 = a.semaphore(name, 2);
    auto s2 = b.semaphore(name, 2);
    REQUIRE(s1.try_acquire_for(5s));  // the second of two
    CHECK(s1.token() > java_token);
    CHECK_FALSE(s2.try_acquire());
    CHECK_FALSE(s2.try_acquire_for(300ms));
    CHECK(java->ask("lease 2 300") == "timeout");
    CHECK(java->ask("return") == "returned");
    REQUIRE(s2.try_acquire_for(5s));  // the permit Curator gave back
    CHECK(java->ask("lease 2 300") == "timeout");
    s1.release();
    CHECK(java->ask("lease 2 5000").rfind("leased ", 0) == 0);
    CHECK(java->ask("return") == "returned");
    s2.release();
}

TEST_CASE("Curator and distlock holders together never exceed the semaphore's size", "[interop][curator][semaphore]") {
    const auto name = unique_name("cur-permits");
    const auto file = record_file(name);
    auto java = curator(name);
    constexpr int rounds = 20, size = 2;
    java->say("permits " + std::to_string(size) + " " + file + " " + std::to_string(rounds));
    std::atomic<int> failures{0};
    std::vector<std::thread> pool;
    for (int t = 0; t < 3; ++t) {
        pool.emplace_back([&] {
            try {
                auto p = distlock::connect(url());
                auto s = p.semaphore(name, size);
                for (int i = 0; i < rounds; ++i) {
                    distlock::permit_guard g(s);
                    update_record(file, [](long* v) {
                        ++v[0];
                        v[1] = std::max(v[1], v[0]);
                    });
                    std::this_thread::sleep_for(2ms);
                    update_record(file, [](long* v) {
                        --v[0];
                        ++v[2];
                    });
                }
            } catch (...) {
                ++failures;
            }
        });
    }
    for (auto& th : pool) th.join();
    CHECK(java->read_line(120s) == "permitted");
    CHECK(failures.load() == 0);
    auto v = read_record(file);
    INFO("inside max rounds: " << v[0] << " " << v[1] << " " << v[2]);
    CHECK(v[1] <= size);
    CHECK(v[1] >= 1);
    CHECK(v[2] == 4 * rounds);
    CHECK(v[0] == 0);
    std::filesystem::remove(file);
}

// ---- inspect and LeaderLatch ---------------------------------------------------------

namespace {

std::unique_ptr<peer> curator_latch(const std::string& name) {
    std::ifstream f(CURATOR_CLASSPATH_FILE);
    std::string cp;
    std::getline(f, cp);
    REQUIRE_FALSE(cp.empty());
    return std::make_unique<peer>(std::vector<std::string>{"java", "-Xmx128m", "-cp", cp, "CuratorLatch",
                                                           zk_test::hosts_of(url()), lock_path(name)});
}

bool curator_leads(peer& java) {
    auto has = java.ask("has");
    REQUIRE((has == "has true" || has == "has false"));
    return has == "has true";
}

}  // namespace

TEST_CASE(
    "inspect of a lock Curator holds shows Curator's node data (its IP address) and its czxid; distlock's label "
    "is ignored by Curator",
    "[interop][curator][inspect]") {
    const auto name = unique_name("cur-inspect");
    auto java = curator(name);
    auto locked = java->ask("lock");
    REQUIRE(locked.rfind("locked ", 0) == 0);
    zk_test::raw_zk raw(zk_test::hosts_of(url()));
    auto kids = raw.children(lock_path(name));
    REQUIRE(kids.size() == 1);
    const auto data = raw.data(lock_path(name) + "/" + kids[0]);

    distlock::provider_options o;
    o.holder = "dl-waiter";
    auto p = distlock::connect(url(), o);
    auto info = p.inspect(name);
    CHECK(info.held == std::optional<bool>(true));
    CHECK(info.token == std::optional<std::uint64_t>(peer::token_of(locked)));
    CHECK(info.waiters == std::optional<std::uint32_t>(0));
    // CuratorFrameworkFactory's default node data: the local address as text.
    INFO("Curator's node data '" << data << "'");
    CHECK(std::regex_match(data, std::regex("[0-9.]+|[0-9a-fA-F:%.a-z]+")));
    CHECK(info.holder == std::optional<std::string>(data));

    // A distlock waiter, labelled: counted, and Curator's queue still works
    // with its node's data in it.
    auto m = p.mutex(name);
    std::atomic<bool> got{false};
    std::thread t([&] {
        m.lock();
        got = true;
    });
    CHECK(eventually([&] { return p.inspect(name).waiters == std::optional<std::uint32_t>(1); }, 10s));
    CHECK(java->ask("nodes").rfind("nodes _c_", 0) == 0);
    CHECK(java->ask("unlock") == "unlocked");
    CHECK(eventually([&] { return got.load(); }, 10s));
    t.join();
    info = p.inspect(name);
    CHECK(info.holder == std::optional<std::string>("dl-waiter"));
    CHECK(info.token == std::optional<std::uint64_t>(m.token()));
    CHECK(java->ask("try 300") == "timeout");
    m.unlock();
    CHECK(java->ask("try 5000").rfind("locked ", 0) == 0);
    CHECK(java->ask("unlock") == "unlocked");
}

TEST_CASE("Curator's LeaderLatch leads: a distlock candidate waits and sees Curator's id; it leads once Curator closes",
          "[interop][curator][election]") {
    const auto name = unique_name("latch-cur");
    const std::string curator_id = "curator-" + distlock::spi::random_token().substr(0, 8);
    auto java = curator_latch(name);
    REQUIRE(java->ask("start " + curator_id) == "started");
    REQUIRE(java->ask("await 10000") == "leader");
    auto node = java->ask("node");
    REQUIRE(node.rfind("node ", 0) == 0);
    const auto curator_czxid = std::stoull(node.substr(5));

    auto p = distlock::connect(url());
    distlock::election_options o;
    o.id = "distlock-" + distlock::spi::random_token().substr(0, 8);
    auto e = p.election(name, o);
    CHECK_FALSE(e.campaign(500ms));
    CHECK_FALSE(e.is_leader());
    auto seen = e.leader();
    CHECK(seen.held == std::optional<bool>(true));
    CHECK(seen.holder == std::optional<std::string>(curator_id));
    CHECK(seen.token == std::optional<std::uint64_t>(curator_czxid));
    CHECK(curator_leads(*java));
    CHECK(java->ask("leader") == "leader " + curator_id);

    // distlock queues behind Curator's node; Curator closes its latch.
    std::atomic<bool> leads{false};
    std::thread t([&] { leads = e.campaign(20s); });
    CHECK(eventually([&] { return e.leader().waiters == std::optional<std::uint32_t>(1); }, 10s));
    CHECK(java->ask("leader") == "leader " + curator_id);  // Curator still sees itself first
    int both = 0;
    auto check_one = [&] {
        const bool c = curator_leads(*java);
        if (c && e.is_leader()) ++both;
    };
    check_one();
    CHECK(java->ask("close") == "closed");
    CHECK(eventually(
        [&] {
            check_one();
            return leads.load();
        },
        10s));
    t.join();
    CHECK(e.is_leader());
    CHECK(e.term() > curator_czxid);
    CHECK(e.leader().holder == std::optional<std::string>(o.id));
    // A fresh Curator latch on the path now sees distlock as leader.
    auto java2 = curator_latch(name);
    REQUIRE(java2->ask("start curator-late") == "started");
    CHECK(java2->ask("await 500") == "timeout");
    CHECK(java2->ask("leader") == "leader " + o.id);
    CHECK_FALSE(curator_leads(*java2));
    CHECK(both == 0);
    e.resign();
    CHECK(java2->ask("await 10000") == "leader");
}

TEST_CASE(
    "distlock leads: Curator's LeaderLatch does not lead and names distlock's id; after resign Curator leads, "
    "never both at once",
    "[interop][curator][election]") {
    const auto name = unique_name("latch-dl");
    auto p = distlock::connect(url());
    distlock::election_options o;
    o.id = "distlock-" + distlock::spi::random_token().substr(0, 8);
    auto e = p.election(name, o);
    REQUIRE(e.campaign(10s));

    auto java = curator_latch(name);
    const std::string curator_id = "curator-" + distlock::spi::random_token().substr(0, 8);
    REQUIRE(java->ask("start " + curator_id) == "started");
    CHECK(java->ask("await 700") == "timeout");
    CHECK_FALSE(curator_leads(*java));
    CHECK(java->ask("leader") == "leader " + o.id);
    auto seen = e.leader();
    CHECK(seen.holder == std::optional<std::string>(o.id));
    CHECK(seen.waiters == std::optional<std::uint32_t>(1));  // Curator's latch node
    CHECK(seen.token == std::optional<std::uint64_t>(e.term()));

    // Sample both sides through the handover: never two leaders.
    int both = 0, samples = 0;
    auto sample = [&] {
        const bool dl = e.is_leader();
        const bool cur = curator_leads(*java);
        const bool dl_after = e.is_leader();
        ++samples;
        if (cur && (dl || dl_after)) ++both;
        return cur;
    };
    CHECK_FALSE(sample());
    e.resign();
    CHECK_FALSE(e.is_leader());
    CHECK(eventually([&] { return sample(); }, 10s));
    CHECK(java->ask("await 100") == "leader");
    CHECK(java->ask("leader") == "leader " + curator_id);
    CHECK(e.leader().holder == std::optional<std::string>(curator_id));
    CHECK(both == 0);
    INFO(samples << " samples");
    CHECK(samples >= 2);
    // distlock campaigns again: it waits behind Curator.
    CHECK_FALSE(e.campaign(300ms));
    CHECK(java->ask("close") == "closed");
    CHECK(e.campaign(10s));
    e.resign();
}

// ---- ACLs: one identity shares a lock with Curator ---------------------------------

namespace {

constexpr const char* kOwner = "dl-owner:owner-pw";
std::string url_as(const std::string& credentials, const std::string& base = zk_test::base_of(url())) {
    return "zk://" + credentials + "@" + zk_test::hosts_of(url()) + base + "?session_timeout=2s";
}
bool owner_only(const std::vector<std::string>& acl) {
    return acl.size() == 1 && acl[0].rfind("digest:dl-owner:", 0) == 0 && acl[0].size() > 3 &&
           acl[0].substr(acl[0].size() - 3) == ":31";
}

}  // namespace

TEST_CASE("with the same digest credentials and creator ACLs, Curator and distlock share one lock both ways",
          "[interop][curator][acl]") {
    zk_test::raw_zk owner(zk_test::hosts_of(url()));
    owner.add_digest(kOwner);
    auto p = distlock::connect(url_as(kOwner));
    SECTION("distlock makes the lock path") {
        const auto name = unique_name("acl-dl-first");
        auto m = p.mutex(name);
        REQUIRE(m.try_lock());
        CHECK(owner_only(owner.acl(lock_path(name))));
        auto java = curator(name, kOwner);
        CHECK(java->ask("try 300") == "timeout");  // Curator queued in distlock's lock path, and left
        m.unlock();
        auto got = java->ask("try 5000");
        REQUIRE(got.rfind("locked ", 0) == 0);
        CHECK(peer::token_of(got) > m.token());
        auto kids = owner.children(lock_path(name));
        REQUIRE(kids.size() == 1);
        CHECK(owner_only(owner.acl(lock_path(name) + "/" + kids[0])));  // Curator's own node: creator-only too
        CHECK_FALSE(m.try_lock());
        CHECK(java->ask("unlock") == "unlocked");
        CHECK(m.try_lock_for(5s));
        m.unlock();
    }
    SECTION("Curator makes the lock path") {
        const auto name = unique_name("acl-cur-first");
        auto java = curator(name, kOwner);
        auto locked = java->ask("lock");
        REQUIRE(locked.rfind("locked ", 0) == 0);
        CHECK(owner_only(owner.acl(lock_path(name))));
        auto m = p.mutex(name);
        CHECK_FALSE(m.try_lock());  // distlock may queue in Curator's path (same identity)
        waits_until_peer_unlocks(m, *java, locked);
        m.unlock();
    }
}

TEST_CASE(
    "a Curator client of another identity, or without credentials, can neither take nor block a creator-only lock",
    "[interop][curator][acl]") {
    // Under a base path of the owner's (under an open one, another identity
    // could make a free lock's path first: see docs/backends/zookeeper.md).
    zk_test::raw_zk owner(zk_test::hosts_of(url()));
    owner.add_digest(kOwner);
    const auto base = "/distlock-acl-" + distlock::spi::random_token().substr(0, 8);
    REQUIRE(owner.create_private(base) == ZOK);
    const auto name = unique_name("acl-cur-intruder");
    const auto path = base + "/" + name;
    auto p = distlock::connect(url_as(kOwner, base));
    auto m = p.mutex(name);
    REQUIRE(m.try_lock());
    auto intruder = curator_at(path, "dl-intruder:intruder-pw");
    CHECK(intruder->ask("try 300") == "error");  // NoAuth: it cannot queue
    auto anonymous = curator_at(path);
    CHECK(anonymous->ask("try 300") == "error");
    m.unlock();
    CHECK(intruder->ask("try 300") == "error");  // free, but still not theirs
    CHECK(m.try_lock());                         // nothing of theirs is in the way
    m.unlock();
    owner.remove(path);
    CHECK(owner.remove(base) == ZOK);
}
