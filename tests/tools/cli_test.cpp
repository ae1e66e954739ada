// The distlock tool, driven as a user would: exit statuses, the fencing token
// handed to the child, flash-sale's JSON report.
#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <thread>

#include "child_process.hpp"
#include "distlock/distlock.hpp"
#include "distlock/spi/url.hpp"
#include "distlock/testing.hpp"
#include "support.hpp"
#include "tcp_proxy.hpp"

using namespace std::chrono_literals;

extern char** environ;

namespace {

// The tool under test: DISTLOCK_TEST_CLI (to try the tests against another
// build, such as the code before a change), else the one built beside them.
const std::string& cli() {
    static const std::string path = distlock::test::env("DISTLOCK_TEST_CLI").empty()
                                        ? std::string(DISTLOCK_CLI)
                                        : distlock::test::env("DISTLOCK_TEST_CLI");
    return path;
}

distlock::test::command_result run(const std::string& args) {
    return distlock::test::run_command(cli() + " " + args + " 2>/dev/null");
}

std::string lock_dir() {
    static const std::string dir = [] {
        auto d =
            std::filesystem::temp_directory_path() / ("distlock-cli-" + distlock::test::unique_name("t").substr(2));
        std::filesystem::create_directories(d);
        return d.string();
    }();
    return dir;
}

// Breaks `name` once a `distlock run` of another process holds it (a loaded
// machine may take a while to start the run), so that the run is what loses it.
void break_once_held(const distlock::provider& locks, const std::string& name) {
    distlock::test::eventually([&] { return locks.inspect(name).held == true; }, std::chrono::seconds(60));
    distlock::testing::break_lock(locks, name);
}

}  // namespace

TEST_CASE("run passes the fencing token and returns the command's status", "[cli][run]") {
    const auto url = "file://" + lock_dir();
    auto r = run("run --backend " + url + " --name job -- sh -c 'echo token=$DISTLOCK_FENCING_TOKEN; exit 3'");
    CHECK(r.status == 3);
    CHECK(r.out.rfind("token=", 0) == 0);
    auto first = std::stoull(r.out.substr(6));
    CHECK(first > 0);
    auto again = run("run --backend " + url + " --name job -- sh -c 'echo $DISTLOCK_FENCING_TOKEN'");
    CHECK(again.status == 0);
    CHECK(std::stoull(again.out) > first);
}

TEST_CASE("run exits 75 when the lock is not acquired in time", "[cli][run]") {
    const auto url = "file://" + lock_dir();
    auto locks = distlock::connect(url);
    auto m = locks.mutex("busy");
    m.lock();
    auto r = run("run --backend " + url + " --name busy --wait 200ms -- true");
    CHECK(r.status == 75);
    m.unlock();
    CHECK(run("run --backend " + url + " --name busy --wait 5s -- true").status == 0);
}

TEST_CASE("bad URLs and arguments give usage errors", "[cli]") {
    CHECK(run("run --backend nosuch://x --name a -- true").status == 64);
    CHECK(run("run --backend file:///tmp --name a").status != 0);
    CHECK(run("bench --backend memory:// --mode sideways").status != 0);
}

TEST_CASE("--version prints the library's version, the SPI's and the backend modules, and exits 0", "[cli]") {
    auto r = run("--version");
    CHECK(r.status == 0);
    const auto first = r.out.substr(0, r.out.find('\n'));
    CHECK(first == "distlock " + std::string(distlock::version()) + " (SPI " +
                       std::to_string(DISTLOCK_SPI_VERSION_MAJOR) + "." + std::to_string(DISTLOCK_SPI_VERSION_MINOR) +
                       ")");
    CHECK(distlock::version() == DISTLOCK_VERSION_STRING);
    const auto modules = distlock::backend_modules();
    if (modules.empty()) {
        CHECK(r.out.find("backends: built in (no modules)") != std::string::npos);
    } else {  // a modules build: each module and where it is
        for (const auto& m : modules) {
            INFO(r.out);
            CHECK(r.out.find("module " + m.name + ": " + (m.path.empty() ? "not installed" : m.path)) !=
                  std::string::npos);
        }
    }
}

TEST_CASE("schemes --verbose says where each scheme comes from and where modules are looked for", "[cli]") {
    const auto r = run("schemes --verbose");
    CHECK(r.status == 0);
    INFO(r.out);
    CHECK(r.out.rfind("module path: ", 0) == 0);
    CHECK(r.out.find("memory\tbuilt in\n") != std::string::npos);
    for (const auto& m : distlock::backend_modules())
        for (const auto& scheme : m.schemes)
            CHECK(r.out.find(scheme + "\tmodule " + m.file + ": ") != std::string::npos);
    // Each scheme of `schemes` is on a line of its own in --verbose.
    const auto plain = run("schemes").out;
    std::size_t at = 0;
    for (std::size_t nl; (nl = plain.find('\n', at)) != std::string::npos; at = nl + 1)
        CHECK(r.out.find("\n" + plain.substr(at, nl - at) + "\t") != std::string::npos);
}

TEST_CASE("run takes a command with options of its own without --, a shell line with -c, and -E", "[cli][run]") {
    const auto url = "file://" + lock_dir();
    auto plain = run("run --backend " + url + " --name opts ls -d /");  // -d is ls's, not run's
    CHECK(plain.status == 0);
    CHECK(plain.out == "/\n");
    auto dashes = run("run --backend " + url + " --name opts echo x -- y");  // a -- after the command is its own
    CHECK(dashes.out == "x -- y\n");
    auto shell = run("run --backend " + url + " --name opts -c 'echo token=$DISTLOCK_FENCING_TOKEN; exit 4'");
    CHECK(shell.status == 4);
    CHECK(shell.out.rfind("token=", 0) == 0);
    CHECK(run("run --backend " + url + " --name opts -c true -- false").status == 64);  // both
    CHECK(run("run --bogus --backend " + url + " --name opts true").status == 64);
    auto locks = distlock::connect(url);
    auto m = locks.mutex("conflict");
    m.lock();
    CHECK(run("run --backend " + url + " --name conflict --wait 0 -E 3 -- true").status == 3);
    CHECK(run("run --backend " + url + " --name conflict --wait 100ms -- true").status == 75);
    m.unlock();
}

TEST_CASE("the default lock directory of flash-sale and bench is not under /tmp", "[cli]") {
    for (const char* sub : {"flash-sale", "bench"}) {
        auto help =
            distlock::test::run_command("env -u DISTLOCK_BACKEND XDG_RUNTIME_DIR= " + cli() + " " + sub + " --help");
        INFO(help.out);
        const auto at = help.out.find("--backend TEXT=file://");
        REQUIRE(at != std::string::npos);
        CHECK(help.out.compare(at + 22, 5, "/tmp/") != 0);
        CHECK(help.out.find("/distlock/", at) != std::string::npos);
    }
}

TEST_CASE("DISTLOCK_BACKEND is the default backend, and durations read alike everywhere", "[cli]") {
    const auto url = "file://" + lock_dir();
    auto r = distlock::test::run_command("DISTLOCK_BACKEND=" + url + " " + cli() +
                                         " run --name env -- echo from-env 2>/dev/null");
    CHECK(r.status == 0);
    CHECK(r.out == "from-env\n");
    CHECK(run("run --backend " + url + " --name env --wait 1m30s -- true").status == 0);
    CHECK(run("flash-sale --backend " + url + " --processes 1 --requests 20 --stock 5 --wait 1m30s --quiet").status ==
          0);
    CHECK(run("flash-sale --backend " + url + " --processes 1 --requests 20 --stock 5 --wait 2.5 --quiet").status == 0);
    CHECK(run("bench --backend memory:// --seconds 300ms --quiet").status == 0);
    CHECK(run("flash-sale --backend " + url + " --wait soon").status == 64);
    // A check interval longer than the run: on a loaded machine a file:// lock
    // held past its check (200 ms by default) is checked, and says so.
    auto v = distlock::test::run_command(cli() + " run --backend '" + url +
                                         "?check=1h' --name verbose --verbose -- true 2>&1");
    CHECK(v.status == 0);
    for (const char* event : {"acquiring 'verbose'", "acquired 'verbose', fencing token", "started true",
                              "the command exited with status 0", "released 'verbose'",
                              "no lease: held until released"})  // file://: the kernel holds it, nothing renews
        CHECK(v.out.find(event) != std::string::npos);
    CHECK(v.out.find("renewed") == std::string::npos);  // nothing checked a file:// lock within its check
}

TEST_CASE("hold takes the lock, prints name and token, and releases it on SIGTERM", "[cli][hold]") {
    const auto url = "file://" + lock_dir();
    distlock::test::child_process hold({cli(), "hold", "--backend", url, "--name", "held"});
    const auto line = hold.read_line(10s);
    REQUIRE(line.rfind("held ", 0) == 0);
    CHECK(std::stoull(line.substr(5)) > 0);
    CHECK(run("run --backend " + url + " --name held --wait 0 -- true").status == 75);  // it holds
    REQUIRE(hold.signal(SIGTERM));
    CHECK(hold.wait_exit_for(10s) == 0);
    CHECK(run("run --backend " + url + " --name held --wait 0 -- true").status == 0);  // released
}

TEST_CASE("a command that ignores SIGTERM after the lock is lost gets SIGKILL after --kill-after", "[cli][run]") {
    const auto url = "file://" + lock_dir() + "?check=50ms";
    auto locks = distlock::connect(url);
    std::thread breaker([&] { break_once_held(locks, "stubborn"); });
    const auto t0 = std::chrono::steady_clock::now();
    // exec: sleep itself ignores SIGTERM (an ignored signal stays ignored across exec).
    auto r =
        run("run --backend '" + url + "' --name stubborn --kill-after 300ms -- sh -c 'trap \"\" TERM; exec sleep 30'");
    const auto took = std::chrono::steady_clock::now() - t0;
    breaker.join();
    CHECK(r.status == 70);
    CHECK(took < 10s);  // not the 30 s of the stubborn command
}

TEST_CASE("every documented exit status, for every subcommand", "[cli][exit]") {
    auto status = [](const std::string& args) { return run(args).status; };
    // 0: help.
    CHECK(status("--help") == 0);
    CHECK(status("run --help") == 0);
    // 64: bad arguments, whatever the argument parser's own codes would be.
    CHECK(status("") == 64);                             // no subcommand
    CHECK(status("flash-sale --bogus 10s") == 64);       // an option it does not know
    CHECK(status("flash-sale --wait soon") == 64);       // not a duration
    CHECK(status("flash-sale --processes many") == 64);  // not a number
    CHECK(status("bench --backend memory:// --mode sideways") == 64);
    CHECK(status("bench --backend memory:// --seconds 0") == 64);
    CHECK(status("run --backend file:///tmp/x --bogus --name n -- true") == 64);  // an option run does not know
    CHECK(status("run --name n -- true") == 64);                                  // no --backend
    CHECK(status("run --backend nosuch://x --name a -- true") == 64);             // unknown scheme
    CHECK(status("schemes --bogus") == 64);
    // 77: access denied (a directory nobody may create, even root).
    CHECK(status("run --backend file:///sys/distlock-denied --name a -- true") == 77);
    CHECK(status("flash-sale --backend file:///sys/distlock-denied --processes 1 --requests 5") == 77);
    // 126 / 127: the command cannot run, said on stderr.
    const auto url = "file://" + lock_dir();
    auto missing =
        distlock::test::run_command(cli() + " run --backend " + url + " --name exec -- /nonexistent/cmd 2>&1");
    CHECK(missing.status == 127);
    CHECK(missing.out.find("cannot execute /nonexistent/cmd: No such file or directory") != std::string::npos);
    CHECK(status("run --backend " + url + " --name exec -- /etc/passwd") == 126);
    // 70: the lock lost while the command ran (the command gets SIGTERM).
    {
        auto locks = distlock::connect(url + "?check=50ms");
        std::thread breaker([&] { break_once_held(locks, "lost-while-running"); });
        auto r = run("run --backend '" + url + "?check=50ms' --name lost-while-running -- sleep 30");
        breaker.join();
        CHECK(r.status == 70);
    }
    // 69: the backend unavailable (a closed port), one line per failed worker.
    const auto schemes = run("schemes").out;
    if (schemes.find("redis") != std::string::npos) {
        const std::string down = "redis://127.0.0.1:1?connect_timeout=200ms";
        CHECK(status("run --backend " + down + " --name a -- true") == 69);
        auto sale = distlock::test::run_command(cli() + " flash-sale --backend '" + down +
                                                "' --processes 1 --concurrency 4 --requests 8 2>&1");
        CHECK(sale.status == 69);
        CHECK(sale.out.find("distlock: worker 0: redis: cannot connect") != std::string::npos);
        CHECK(sale.out.find("worker distlock") == std::string::npos);  // no two messages on one line
        CHECK(status("bench --backend '" + down + "' --processes 3 --seconds 1") == 69);
    }
}

TEST_CASE("flash-sale and bench refuse processes that the backend cannot exclude", "[cli]") {
    // memory:// locks live in one process: two processes would both "hold" and oversell.
    auto both = distlock::test::run_command(cli() + " flash-sale --backend memory:// --processes 2 --quiet 2>&1");
    CHECK(both.status == 64);
    CHECK(both.out.find("2 processes cannot share memory://") != std::string::npos);
    CHECK(both.out.find("in-process") != std::string::npos);  // the backend's own reason
    CHECK(run("bench --backend memory:// --processes 2 --seconds 1 --quiet").status == 64);
    CHECK(run("flash-sale --backend memory:// --processes 1 --requests 50 --stock 10 --quiet").status == 0);
}

TEST_CASE("a file:// token never repeats after its lock file is deleted", "[cli][file]") {
    const auto dir = lock_dir() + "/tokens";
    auto locks = distlock::connect("file://" + dir);
    auto m = locks.mutex("again");
    m.lock();
    const auto first = m.token();
    m.unlock();
    m.lock();
    CHECK(m.token() == first + 1);
    const auto second = m.token();
    m.unlock();
    std::filesystem::remove(dir + "/again");  // a cleaner, or an operator
    m.lock();
    CHECK(m.token() > second);
    m.unlock();
    std::filesystem::remove_all(dir);  // the whole directory
    auto fresh = distlock::connect("file://" + dir).mutex("again");
    fresh.lock();
    CHECK(fresh.token() > second);
    fresh.unlock();
}

TEST_CASE("a locked flash sale sells exactly the stock", "[cli][flash-sale]") {
    const auto url = "file://" + lock_dir();
    for (int segments : {1, 3}) {
        auto r = run("flash-sale --backend " + url +
                     " --json --quiet --requests 300 --concurrency 40 --stock 25 "
                     "--segments " +
                     std::to_string(segments));
        INFO(r.out);
        REQUIRE(r.status == 0);
        auto j = nlohmann::json::parse(r.out);
        CHECK(j["sold"] == 25);
        CHECK(j["oversold"] == 0);
        CHECK(j["stock_left"] == 0);
        CHECK(j["requests"] == 300);
        for (const char* key : {"elapsed_ms", "throughput_rps", "p50_ms", "p99_ms"}) CHECK(j.contains(key));
        // A purchase waited for the lock: not the µs of an answer from the sold-out flag.
        CHECK(j["purchase_p50_ms"].get<double>() > 0);
        CHECK(j["purchase_p99_ms"].get<double>() >= j["purchase_p50_ms"].get<double>());
    }
}

TEST_CASE("bench reports cycles and, for embedded backends, no floor", "[cli][bench]") {
    auto r = run("bench --backend memory:// --seconds 0.3 --json --quiet --threads 2");
    REQUIRE(r.status == 0);
    auto j = nlohmann::json::parse(r.out);
    CHECK(j["cycles"].get<long>() > 0);
    CHECK(j["cycles_per_s"].get<double>() > 0);
    CHECK(j["p99_us"].get<double>() >= j["p50_us"].get<double>());
    CHECK(j["floor_rtt_us"].is_null());
    CHECK(j["floor_ratio"].is_null());
    CHECK(j["native_floor_us"].is_null());  // no server lock of its own either
    CHECK(j["native_ratio"].is_null());
}

TEST_CASE("bench on file:// leaves no lock file behind, in any mode, and nothing else is touched", "[cli][bench]") {
    const auto dir = std::filesystem::path(lock_dir()) / distlock::test::unique_name("bench-dir");
    std::filesystem::create_directories(dir);
    {
        std::ofstream(dir / "someone-elses.lock") << "x";  // a file of the directory's: it stays
    }
    const auto url = "file://" + dir.string();
    for (const auto* how : {"--threads 2", "--mode contended --threads 2 --processes 2", "--primitive rw --writers 1",
                            "--primitive semaphore --permits 2", "--async --waiters 20 --handoffs 5"}) {
        INFO(how);
        auto r = run("bench --backend '" + url + "' --seconds 0.3 --json --quiet " + how);
        CHECK(r.status == 0);
        std::vector<std::string> left;
        for (const auto& e : std::filesystem::directory_iterator(dir)) left.push_back(e.path().filename().string());
        CHECK(left == std::vector<std::string>{"someone-elses.lock"});
    }
    // With a query and a trailing slash, the same.
    CHECK(run("bench --backend '" + url + "/?sync=false' --seconds 0.2 --json --quiet").status == 0);
    CHECK(std::distance(std::filesystem::directory_iterator(dir), std::filesystem::directory_iterator{}) == 1);
}

TEST_CASE("bench --mode contended reports the hand-offs between processes: waiting grants, from the grant before",
          "[cli][bench][handoff]") {
    const auto dir = std::filesystem::path(lock_dir()) / distlock::test::unique_name("bench-handoff");
    std::filesystem::create_directories(dir);
    auto r = run("bench --backend 'file://" + dir.string() +
                 "' --mode contended --threads 1 --processes 3 --seconds 1 --json --quiet");
    REQUIRE(r.status == 0);
    const auto j = nlohmann::json::parse(r.out);
    // Three processes on one name: most grants went to a process that was waiting.
    REQUIRE(j.contains("handoffs"));
    CHECK(j["handoffs"].get<long>() > 0);
    CHECK(j["handoffs"].get<long>() < j["cycles"].get<long>());  // the first grant is no hand-off
    CHECK(j["handoff_p50_us"].get<double>() > 0);
    CHECK(j["handoff_p50_us"].get<double>() <= j["handoff_p99_us"].get<double>());
    CHECK_FALSE(j.contains("handoff_p50_rt"));  // file:// has no round trip to count them in
    // Uncontended, nobody waits: no hand-off is reported.
    CHECK_FALSE(
        nlohmann::json::parse(run("bench --backend memory:// --seconds 0.2 --json --quiet").out).contains("handoffs"));
    std::filesystem::remove_all(dir);
}

TEST_CASE("bench --observe measures with a metrics observer attached", "[cli][bench][observe]") {
    auto plain = run("bench --backend memory:// --seconds 0.3 --json --quiet");
    auto observed = run("bench --backend memory:// --seconds 0.3 --json --quiet --observe");
    REQUIRE(plain.status == 0);
    REQUIRE(observed.status == 0);
    CHECK(nlohmann::json::parse(plain.out)["observed"] == false);
    auto j = nlohmann::json::parse(observed.out);
    CHECK(j["observed"] == true);
    CHECK(j["cycles"].get<long>() > 0);
}

TEST_CASE("bench --hold keeps every lock held and reports what renewing them costs", "[cli][bench][hold]") {
    // memory:// has no leases: nothing to renew, every lock still held.
    {
        auto r = run("bench --backend memory:// --hold 500 --seconds 0.3 --json --quiet");
        REQUIRE(r.status == 0);
        auto j = nlohmann::json::parse(r.out);
        CHECK(j["mode"] == "hold");
        CHECK(j["held"] == 500);
        CHECK(j["still_held"] == 500);
        CHECK(j["all_kept"] == true);
        CHECK(j["renewal_calls"] == 0);
        CHECK(j["late_ms"].is_null());
        CHECK(j["cpu_share_of_one_core"].get<double>() >= 0);
    }
    CHECK(run("bench --backend memory:// --hold 0 --quiet").status == 64);
    CHECK(run("bench --backend memory:// --hold 10 --mode contended --quiet").status == 64);
    // A lease server: 1,000 locks over about three renewal periods (lease 2 s,
    // renewed every 667 ms), each renewed before its lease ran out, the calls
    // batched (far fewer than the grants they renew).
    const auto url = distlock::test::env("DISTLOCK_TEST_REDIS_URL");
    if (url.empty()) {
        WARN("not applicable without DISTLOCK_TEST_REDIS_URL: the lease part");
        return;
    }
    auto r = run("bench --backend '" + url + "' --hold 1000 --seconds 2 --json --quiet");
    INFO(r.out);
    REQUIRE(r.status == 0);
    auto j = nlohmann::json::parse(r.out);
    CHECK(j["all_kept"] == true);
    CHECK(j["still_held"] == 1000);
    CHECK(j["losses"] == 0);
    CHECK(j["renewals_failed"] == 0);
    const auto calls = j["renewal_calls"].get<long>();
    CHECK(calls >= 2);
    CHECK(j["renewed_ok"].get<long>() >= 1000);  // every lock renewed at least once
    CHECK(j["grants_per_call"].get<double>() > 10);
    CHECK(j["least_left_ms"]["min"].get<double>() > 0);
    CHECK(j["late_ms"]["max"].get<double>() < j["lease_ms"].get<double>());
}

TEST_CASE("run --shared reads beside other readers, --write alone, --permits N holds one of N",
          "[cli][run][primitives]") {
    const auto url = "file://" + lock_dir();
    auto locks = distlock::connect(url);
    {
        auto rw = locks.shared_mutex("report");
        rw.lock_shared();  // another reader
        auto r =
            run("run --backend " + url + " --name report --shared --wait 5s -- sh -c 'echo $DISTLOCK_FENCING_TOKEN'");
        CHECK(r.status == 0);
        CHECK(std::stoull(r.out) > rw.shared_token());  // tokens of one sequence
        CHECK(run("run --backend " + url + " --name report --write --wait 200ms -- true").status == 75);
        rw.unlock_shared();
        rw.lock();  // a writer keeps readers out
        CHECK(run("run --backend " + url + " --name report --shared --wait 200ms -- true").status == 75);
        rw.unlock();
        CHECK(run("run --backend " + url + " --name report --write --wait 5s -- true").status == 0);
        // The read-write lock of a name is not its mutex.
        auto m = locks.mutex("report");
        m.lock();
        CHECK(run("run --backend " + url + " --name report --shared --wait 5s -- true").status == 0);
        m.unlock();
    }
    {
        auto sem = locks.semaphore("pool", 2);
        REQUIRE(sem.try_acquire());
        CHECK(run("run --backend " + url + " --name pool --permits 2 --wait 5s -- true").status == 0);  // the second
        REQUIRE(sem.try_acquire());
        CHECK(run("run --backend " + url + " -n 2 --name pool --wait 200ms -- true").status == 75);  // none left
        CHECK(run("run --backend " + url + " -n 3 --name pool --wait 1s -- true").status == 64);     // another size
        sem.release();
        sem.release();
    }
    // hold prints the token of what it holds.
    distlock::test::child_process hold({cli(), "hold", "--backend", url, "--name", "pool", "--permits", "1"});
    const auto line = hold.read_line(10s);
    REQUIRE(line.rfind("pool ", 0) == 0);
    CHECK(run("run --backend " + url + " --name pool -n 1 --wait 200ms -- true").status == 75);
    REQUIRE(hold.signal(SIGTERM));
    CHECK(hold.wait_exit_for(10s) == 0);
    // Bad combinations are usage errors.
    CHECK(run("run --backend " + url + " --name x --shared --write -- true").status == 64);
    CHECK(run("run --backend " + url + " --name x --shared -n 2 -- true").status == 64);
    CHECK(run("run --backend " + url + " --name x -n 0 -- true").status == 64);
}

TEST_CASE("bench measures read-write and semaphore cycles", "[cli][bench][primitives]") {
    auto rw = run("bench --backend memory:// --seconds 300ms --quiet --json --primitive rw --threads 2 --writers 1");
    REQUIRE(rw.status == 0);
    auto j = nlohmann::json::parse(rw.out);
    CHECK(j["primitive"] == "rw");
    CHECK(j["writers"] == 1);
    CHECK(j["reads"].get<long>() > 0);
    CHECK(j["writes"].get<long>() > 0);
    CHECK(j["cycles"].get<long>() == j["reads"].get<long>() + j["writes"].get<long>());
    auto sem =
        run("bench --backend memory:// --seconds 300ms --quiet --json --primitive semaphore --permits 3 --mode "
            "contended --threads 4");
    REQUIRE(sem.status == 0);
    auto k = nlohmann::json::parse(sem.out);
    CHECK(k["primitive"] == "semaphore");
    CHECK(k["permits"] == 3);
    CHECK(k["cycles"].get<long>() > 0);
    CHECK(run("bench --backend memory:// --seconds 300ms --quiet --writers 1").status == 64);  // not rw
    CHECK(run("bench --backend memory:// --seconds 300ms --quiet --primitive rw --writers 3").status ==
          64);  // > threads
    CHECK(run("bench --backend memory:// --seconds 300ms --quiet --primitive lock").status != 0);
}

TEST_CASE("status shows the holder's label and token, as text and JSON, and a free lock as free", "[cli][status]") {
    const auto url = "file://" + lock_dir();
    auto free_lock = run("status --backend " + url + " --name watched --json");
    REQUIRE(free_lock.status == 0);
    auto j = nlohmann::json::parse(free_lock.out);
    CHECK(j["held"] == false);
    CHECK(j["holder"].is_null());
    CHECK(j["waiters"].is_null());
    CHECK(j["unknown"]["waiters"].get<std::string>().find("flock") != std::string::npos);

    distlock::provider_options o;
    o.holder = "billing-7";
    auto locks = distlock::connect(url, o);
    auto m = locks.mutex("watched");
    m.lock();
    j = nlohmann::json::parse(run("status --backend " + url + " --name watched --json").out);
    CHECK(j["held"] == true);
    CHECK(j["holder"] == "billing-7");
    CHECK(j["token"] == m.token());
    CHECK(j["remaining_ms"].is_null());
    CHECK(j["unknown"].contains("remaining"));
    const auto text = run("status --backend " + url + " --name watched").out;
    CHECK(text.find("held: yes\n") != std::string::npos);
    CHECK(text.find("holder: billing-7\n") != std::string::npos);
    CHECK(text.find("token: " + std::to_string(m.token()) + "\n") != std::string::npos);
    CHECK(text.find("remaining: unknown (no lease") != std::string::npos);
    m.unlock();
    CHECK(run("status --backend " + url + " --name watched").out.find("held: no\n") != std::string::npos);
    CHECK(run("status --backend " + url + " --name ''").status == 64);
    CHECK(run("status --name x").status == 64);  // no --backend
    // A password never shows, even in JSON's backend field.
    const auto schemes = run("schemes").out;
    if (schemes.find("redis") != std::string::npos) {
        auto r =
            distlock::test::run_command(cli() +
                                        " status --backend 'redis://:hunter2-secret@127.0.0.1:1?connect_timeout=200ms'"
                                        " --name x --json 2>&1");
        CHECK(r.status == 69);
        CHECK(r.out.find("hunter2-secret") == std::string::npos);
    }
}

TEST_CASE("elect runs the command while leading, with the term, and exits 75 when another leads", "[cli][elect]") {
    const auto url = "file://" + lock_dir();
    auto r = run("elect --backend " + url +
                 " --name leader-job --id cli-a -- sh -c 'echo term=$DISTLOCK_FENCING_TOKEN; "
                 "exit 4'");
    CHECK(r.status == 4);
    REQUIRE(r.out.rfind("term=", 0) == 0);
    CHECK(std::stoull(r.out.substr(5)) > 0);

    auto locks = distlock::connect(url);
    distlock::election_options o;
    o.id = "in-process";
    auto e = locks.election("leader-job", o);
    REQUIRE(e.campaign(5s));
    CHECK(run("elect --backend " + url + " --name leader-job --wait 200ms -- true").status == 75);
    auto shown = nlohmann::json::parse(run("status --backend " + url + " --name leader-job --election --json").out);
    CHECK(shown["held"] == true);
    CHECK(shown["holder"] == "in-process");
    CHECK(shown["kind"] == "election");
    e.resign();
    // While the command runs, status names it as the leader.
    auto inner = run("elect --backend " + url + " --name leader-job --id cli-b -- " + cli() + " status --backend " +
                     url + " --name leader-job --election");
    CHECK(inner.status == 0);
    CHECK(inner.out.find("holder: cli-b\n") != std::string::npos);
    CHECK(run("elect --backend " + url + " --name leader-job --id 'bad\tid' -- true").status == 64);
}

// ---------------------------------------------------------------------------
// Issue 23: run, hold and elect keep what they start together, hand it no
// secret and no connection; readers and plain holders exclude each other; the
// default directory is never another user's; no argument is echoed with its
// password.

namespace {

// A finished run of the tool: its exit status (128 + the signal that ended
// it), stdout and stderr.
struct outcome {
    int status = -1;
    std::string out, err;
};

// Our environment with `set` set and `unset` removed, and without the test
// URLs (DISTLOCK_TEST_*: they hold the servers' passwords, which tests look
// for in what the tool hands on).
std::vector<std::string> environment_with(const std::vector<std::pair<std::string, std::string>>& set,
                                          const std::vector<std::string>& unset) {
    std::vector<std::string> out;
    for (char** e = environ; *e != nullptr; ++e) {
        const std::string entry(*e);
        const auto name = entry.substr(0, entry.find('='));
        bool drop = std::find(unset.begin(), unset.end(), name) != unset.end() || name.rfind("DISTLOCK_TEST_", 0) == 0;
        for (const auto& kv : set) drop = drop || kv.first == name;
        if (!drop) out.push_back(entry);
    }
    for (const auto& [k, v] : set) out.push_back(k + "=" + v);
    return out;
}

struct spawn_options {
    std::vector<std::pair<std::string, std::string>> env = {};
    std::vector<std::string> unset = {};
    // Between fork and exec (async-signal-safe calls only): signals, descriptors.
    void (*setup)() = nullptr;
    bool close_stdout = false;  // stdout is a pipe whose reader has gone
    bool close_stderr = false;
    std::string cwd = {};  // the directory it starts in (ours when empty)
};

// Runs argv to its end (at most 60 s) and returns what it did. Stops reading
// once the process exits, so that a descendant it leaves behind holding the
// pipes cannot hold the test (the code before issue 23 left them).
outcome spawn(std::vector<std::string> argv, const spawn_options& o = {}) {
    auto env = environment_with(o.env, o.unset);
    std::vector<char*> args, envp;
    for (auto& a : argv) args.push_back(a.data());
    args.push_back(nullptr);
    for (auto& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    // Throws rather than REQUIRE: the mixed-semantics test calls this from threads.
    // Our own 0, 1 and 2 open (ctest may start us without some), so that no
    // pipe below takes their place; the tool's stdin is /dev/null.
    for (int fd = 0; fd <= 2; ++fd)
        if (::fcntl(fd, F_GETFD) < 0) ::open("/dev/null", O_RDWR);
    const int null_in = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    int out[2], err[2];
    if (::pipe2(out, O_CLOEXEC) != 0) throw std::runtime_error("pipe failed");
    if (::pipe2(err, O_CLOEXEC) != 0) throw std::runtime_error("pipe failed");
    if (o.close_stdout) ::close(out[0]);
    if (o.close_stderr) ::close(err[0]);
    const pid_t pid = ::fork();
    if (pid < 0) throw std::runtime_error("fork failed");
    if (pid == 0) {
        ::dup2(null_in, 0);
        ::dup2(out[1], 1);
        ::dup2(err[1], 2);
        if (o.setup) o.setup();
        if (!o.cwd.empty() && ::chdir(o.cwd.c_str()) != 0) ::_exit(126);
        ::execve(args[0], args.data(), envp.data());
        ::_exit(127);
    }
    ::close(null_in);
    ::close(out[1]);
    ::close(err[1]);
    outcome r;
    std::vector<pollfd> fds;
    if (!o.close_stdout) fds.push_back({out[0], POLLIN, 0});
    if (!o.close_stderr) fds.push_back({err[0], POLLIN, 0});
    auto drain = [&](bool block) {
        for (auto& p : fds) {
            if (p.fd < 0) continue;
            pollfd q{p.fd, POLLIN, 0};
            while (::poll(&q, 1, block ? 20 : 0) > 0) {
                char buf[4096];
                const ssize_t n = ::read(p.fd, buf, sizeof buf);
                if (n <= 0) break;
                (p.fd == out[0] ? r.out : r.err).append(buf, static_cast<std::size_t>(n));
                block = false;
            }
        }
    };
    const auto until = std::chrono::steady_clock::now() + 60s;
    int status = 0;
    for (;;) {
        drain(true);
        const pid_t w = ::waitpid(pid, &status, WNOHANG);
        if (w == pid) break;
        if (std::chrono::steady_clock::now() > until) ::kill(pid, SIGKILL);
    }
    drain(false);
    if (!o.close_stdout) ::close(out[0]);
    if (!o.close_stderr) ::close(err[0]);
    r.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return r;
}

outcome spawn_cli(std::vector<std::string> args, const spawn_options& o = {}) {
    args.insert(args.begin(), cli());
    return spawn(std::move(args), o);
}

// A process runs (a zombie does not: it is dead, only not yet reaped).
bool alive(pid_t pid) {
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string line;
    if (!std::getline(stat, line)) return false;
    const auto close = line.rfind(')');
    return close != std::string::npos && close + 2 < line.size() && line[close + 2] != 'Z' && line[close + 2] != 'X';
}

// The pid a command wrote to `path` (waits up to 10 s for it); 0 when none came.
pid_t pid_in(const std::string& path) {
    pid_t pid = 0;
    distlock::test::eventually(
        [&] {
            std::ifstream f(path);
            std::string text;
            if (!std::getline(f, text) || text.empty()) return false;
            pid = static_cast<pid_t>(std::stol(text));
            return true;
        },
        10s);
    return pid;
}

// Kills what a test left behind (the code before issue 23 leaves processes).
struct survivors {
    std::vector<pid_t> pids;
    ~survivors() {
        for (pid_t p : pids)
            if (p > 0 && alive(p)) ::kill(p, SIGKILL);
    }
};

std::string fresh_dir(const std::string& base) {
    const auto d = lock_dir() + "/" + distlock::test::unique_name(base).substr(2);
    std::filesystem::create_directories(d);
    return d;
}

std::string read_file(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), {});
}

// A URL of the running servers that carries a password, or "" (none configured).
// The password of a URL with one (between the first ':' after "//" and the last '@').
std::string password_of(const std::string& url) {
    const auto rest = url.find("://") + 3;
    const auto at = url.rfind('@');
    const auto colon = url.find(':', rest);
    return url.substr(colon + 1, at - colon - 1);
}

// A test server's URL with a password that is looked for in what the tool
// shows: not one such as the SQL servers' "distlock", which the paths of the
// tool and its files hold anyway.
std::string url_with_password() {
    for (const char* var : {"DISTLOCK_TEST_REDIS_CLUSTER_URL", "DISTLOCK_TEST_REDIS_SENTINEL_URL",
                            "DISTLOCK_TEST_POSTGRES_URL", "DISTLOCK_TEST_MYSQL_URL"}) {
        const auto url = distlock::test::env(var);
        if (!url.empty() && distlock::spi::redact_url(url) != url &&
            password_of(url).find("distlock") == std::string::npos)
            return url;
    }
    return {};
}

}  // namespace

TEST_CASE("run stops background children after the lock is lost: sleep 300 & sleep 301 & wait", "[cli][run][tree]") {
    const auto dir = fresh_dir("tree");
    const auto url = "file://" + lock_dir() + "?check=50ms";
    survivors left;
    distlock::test::child_process run_cmd({cli(), "run", "--backend", url, "--name", "bg", "--kill-after", "500ms",
                                           "-c",
                                           "sleep 300 >/dev/null 2>&1 & echo $! > " + dir +
                                               "/a; sleep 301 >/dev/null 2>&1 & echo $! > " + dir + "/b; wait"});
    const pid_t a = pid_in(dir + "/a"), b = pid_in(dir + "/b");
    left.pids = {a, b};
    REQUIRE(a > 0);
    REQUIRE(b > 0);
    CHECK(alive(a));
    CHECK(alive(b));
    distlock::testing::break_lock(distlock::connect(url), "bg");
    const auto status = run_cmd.wait_exit_for(10s);
    REQUIRE(status);
    CHECK(*status == 70);
    // At run's exit, every process it started is gone already.
    CHECK_FALSE(alive(a));
    CHECK_FALSE(alive(b));
}

TEST_CASE("run stops a setsid'ed and a double-forked grandchild after the lock is lost", "[cli][run][tree]") {
    const auto dir = fresh_dir("escape");
    const auto url = "file://" + lock_dir() + "?check=50ms";
    survivors left;
    // setsid: a session of its own; setsid -f: a session of its own and
    // re-parented (its parent exits at once); ( ... & ): a plain double fork.
    distlock::test::child_process run_cmd({cli(), "run", "--backend", url, "--name", "escape", "--kill-after", "500ms",
                                           "-c",
                                           "setsid sleep 300 >/dev/null 2>&1 & echo $! > " + dir +
                                               "/setsid; "
                                               "setsid -f sh -c 'echo $$ > " +
                                               dir +
                                               "/detached; exec sleep 301' >/dev/null 2>&1; "
                                               "(sleep 302 >/dev/null 2>&1 & echo $! > " +
                                               dir +
                                               "/orphan); "
                                               "sh -c 'trap \"\" TERM; echo $$ > " +
                                               dir +
                                               "/stubborn; exec setsid sleep 303' >/dev/null 2>&1 & "
                                               "wait"});
    const pid_t s = pid_in(dir + "/setsid"), d = pid_in(dir + "/detached"), o = pid_in(dir + "/orphan"),
                st = pid_in(dir + "/stubborn");
    left.pids = {s, d, o, st};
    REQUIRE(s > 0);
    REQUIRE(d > 0);
    REQUIRE(o > 0);
    REQUIRE(st > 0);
    for (pid_t p : left.pids) CHECK(alive(p));
    const auto t0 = std::chrono::steady_clock::now();
    distlock::testing::break_lock(distlock::connect(url), "escape");
    const auto status = run_cmd.wait_exit_for(10s);
    REQUIRE(status);
    CHECK(*status == 70);
    // The one that ignores SIGTERM (in a session of its own) needed --kill-after's SIGKILL.
    CHECK(std::chrono::steady_clock::now() - t0 >= 500ms);
    for (pid_t p : left.pids) CHECK_FALSE(alive(p));
}

TEST_CASE("--kill-after reaches a grandchild that ignores SIGTERM, and run exits only after it is gone",
          "[cli][run][tree]") {
    const auto dir = fresh_dir("kill-after");
    const auto url = "file://" + lock_dir() + "?check=50ms";
    survivors left;
    distlock::test::child_process run_cmd(
        {cli(), "run", "--backend", url, "--name", "stubborn-grandchild", "--kill-after", "700ms", "-c",
         "sh -c 'trap \"\" TERM; echo $$ > " + dir + "/g; exec sleep 300' >/dev/null 2>&1 & wait"});
    const pid_t g = pid_in(dir + "/g");
    left.pids = {g};
    REQUIRE(g > 0);
    const auto t0 = std::chrono::steady_clock::now();
    distlock::testing::break_lock(distlock::connect(url), "stubborn-grandchild");
    // The shell dies of SIGTERM at once; run still waits for the grandchild.
    std::this_thread::sleep_for(300ms);
    CHECK_FALSE(run_cmd.wait_exit_for(0ms));
    CHECK(alive(g));
    const auto status = run_cmd.wait_exit_for(10s);
    REQUIRE(status);
    CHECK(*status == 70);
    CHECK(std::chrono::steady_clock::now() - t0 >= 700ms);
    CHECK_FALSE(alive(g));
}

TEST_CASE("processes a command left behind are stopped before its lock is released", "[cli][run][tree]") {
    const auto dir = fresh_dir("left-behind");
    const auto url = "file://" + lock_dir();
    survivors left;
    distlock::test::child_process run_cmd({cli(), "run", "--backend", url, "--name", "left-behind", "--kill-after",
                                           "1500ms", "-c",
                                           "sleep 300 >/dev/null 2>&1 & echo $! > " + dir +
                                               "/plain; "
                                               "sh -c 'trap \"\" TERM; echo $$ > " +
                                               dir +
                                               "/stubborn; exec sleep 301' >/dev/null 2>&1 & "
                                               "sleep 0.2; exit 5"});
    const pid_t plain = pid_in(dir + "/plain"), stubborn = pid_in(dir + "/stubborn");
    left.pids = {plain, stubborn};
    REQUIRE(plain > 0);
    REQUIRE(stubborn > 0);
    // The command has exited; the one that ignores SIGTERM still runs, and the lock is still held.
    std::this_thread::sleep_for(500ms);
    CHECK_FALSE(alive(plain));  // SIGTERM
    CHECK(alive(stubborn));
    CHECK(spawn_cli({"run", "--backend", url, "--name", "left-behind", "--wait", "0", "--", "true"}).status == 75);
    const auto status = run_cmd.wait_exit_for(10s);
    REQUIRE(status);
    CHECK(*status == 5);  // the command's own status
    CHECK_FALSE(alive(stubborn));
    CHECK(spawn_cli({"run", "--backend", url, "--name", "left-behind", "--wait", "0", "--", "true"}).status == 0);
}

TEST_CASE("the command's whole tree dies when distlock is killed with SIGKILL", "[cli][run][elect][tree]") {
    for (const char* sub : {"run", "elect"}) {
        DYNAMIC_SECTION(sub) {
            const auto dir = fresh_dir("sigkill");
            survivors left;
            distlock::test::child_process run_cmd({cli(), sub, "--backend", "file://" + lock_dir(), "--name",
                                                   distlock::test::unique_name("sigkill"), "-c",
                                                   "sleep 300 >/dev/null 2>&1 & echo $! > " + dir +
                                                       "/child; "
                                                       "setsid -f sh -c 'echo $$ > " +
                                                       dir +
                                                       "/detached; exec sleep 301' >/dev/null 2>&1; "
                                                       "echo $$ > " +
                                                       dir + "/shell; wait"});
            const pid_t child = pid_in(dir + "/child"), detached = pid_in(dir + "/detached"),
                        shell = pid_in(dir + "/shell");
            left.pids = {child, detached, shell};
            REQUIRE(child > 0);
            REQUIRE(detached > 0);
            REQUIRE(shell > 0);
            run_cmd.kill_hard();
            for (pid_t p : left.pids) CHECK(distlock::test::eventually([&] { return !alive(p); }, 5s));
        }
    }
}

// The parent of `pid` (from /proc), 0 when unknown.
pid_t parent_pid(pid_t pid) {
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string line;
    if (!std::getline(stat, line)) return 0;
    const auto close = line.rfind(')');
    if (close == std::string::npos || close + 4 > line.size()) return 0;
    return static_cast<pid_t>(std::atol(line.c_str() + close + 4));
}

TEST_CASE("should the guard process itself be killed, distlock stops what it left", "[cli][run][tree]") {
    const auto dir = fresh_dir("guard");
    const auto name = distlock::test::unique_name("guard");
    survivors left;
    distlock::test::child_process run_cmd({cli(), "run", "--backend", "file://" + lock_dir(), "--name", name, "-c",
                                           "setsid -f sh -c 'echo $$ > " + dir +
                                               "/detached; exec sleep 301' >/dev/null 2>&1; "
                                               "sleep 300 >/dev/null 2>&1 & echo $! > " +
                                               dir + "/child; echo $$ > " + dir + "/shell; wait"});
    const pid_t detached = pid_in(dir + "/detached"), child = pid_in(dir + "/child"), shell = pid_in(dir + "/shell");
    left.pids = {detached, child, shell};
    REQUIRE(shell > 0);
    const pid_t guard = parent_pid(shell);
    REQUIRE(guard > 0);
    if (guard == run_cmd.pid()) {
        WARN("not applicable: the tool under test starts the command itself, without a guard process");
        return;
    }
    REQUIRE(parent_pid(guard) == run_cmd.pid());
    ::kill(guard, SIGKILL);
    const auto status = run_cmd.wait_exit_for(10s);
    REQUIRE(status);
    CHECK(*status != 0);
    for (pid_t p : left.pids) CHECK_FALSE(alive(p));
    // And the lock was released after them.
    CHECK(spawn_cli({"run", "--backend", "file://" + lock_dir(), "--name", name, "--wait", "0", "--", "true"}).status ==
          0);
}

TEST_CASE("the command inherits no password-bearing DISTLOCK_BACKEND; --backend-file keeps the URL out of ps",
          "[cli][run][secret]") {
    const auto secret_url = url_with_password();
    if (secret_url.empty()) {
        WARN("not applicable: no server URL with a password is configured (integration/.run/backends.env)");
        return;
    }
    const auto password = password_of(secret_url);
    REQUIRE(password.size() >= 4);
    const auto name = distlock::test::unique_name("secret");
    // From the environment: the command does not see it.
    auto r = spawn_cli({"run", "--name", name, "--", "/usr/bin/env"}, {{{"DISTLOCK_BACKEND", secret_url}}});
    REQUIRE(r.status == 0);
    CHECK(r.out.find("DISTLOCK_LOCK_NAME=") != std::string::npos);
    CHECK(r.out.find("DISTLOCK_BACKEND=") == std::string::npos);
    CHECK(r.out.find(password) == std::string::npos);
    // A URL without a secret stays (a nested distlock may use it).
    const auto plain_url = "file://" + lock_dir();
    r = spawn_cli({"run", "--name", name, "--", "/usr/bin/env"}, {{{"DISTLOCK_BACKEND", plain_url}}});
    CHECK(r.out.find("DISTLOCK_BACKEND=" + plain_url + "\n") != std::string::npos);

    // From a file: neither distlock's command line nor its environment holds it.
    const auto dir = fresh_dir("backend-file");
    const auto file = dir + "/url";
    { std::ofstream(file) << secret_url << "\n"; }
    std::filesystem::permissions(file, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
    distlock::test::child_options without_test_urls;
    for (char** e = environ; *e != nullptr; ++e)
        if (std::string_view(*e).rfind("DISTLOCK_TEST_", 0) == 0)
            without_test_urls.env.emplace_back(std::string(*e).substr(0, std::string_view(*e).find('=')), "");
    distlock::test::child_process hold({cli(), "hold", "--backend-file", file, "--name", name}, without_test_urls);
    const auto line = hold.read_line(15s);
    REQUIRE(line.rfind(name + " ", 0) == 0);
    const auto proc = "/proc/" + std::to_string(hold.pid());
    CHECK(read_file(proc + "/cmdline").find(password) == std::string::npos);
    CHECK(read_file(proc + "/environ").find(password) == std::string::npos);
    CHECK(spawn_cli({"run", "--backend-file", file, "--name", name, "--wait", "0", "--", "true"}).status == 75);
    REQUIRE(hold.signal(SIGTERM));
    CHECK(hold.wait_exit_for(10s) == 0);
    // The variable works the same; the command sees the file's name, never its content.
    r = spawn_cli({"run", "--name", name, "--", "sh", "-c", "env; cat /proc/$PPID/cmdline /proc/$PPID/environ"},
                  {{{"DISTLOCK_BACKEND_FILE", file}}, {"DISTLOCK_BACKEND"}});
    CHECK(r.status == 0);
    CHECK(r.out.find("DISTLOCK_BACKEND_FILE=" + file) != std::string::npos);
    CHECK(r.out.find(password) == std::string::npos);
    CHECK(spawn_cli({"status", "--backend-file", file, "--name", name}).status == 0);
}

TEST_CASE("--backend-file refuses a file others may change or read, and never shows its content", "[cli][secret]") {
    const auto dir = fresh_dir("backend-file-checks");
    const auto good = "file://" + lock_dir();
    const std::string secret = "redis://:s3cr3t-in-file@127.0.0.1:1?connect_timeout=200ms";
    auto write = [&](const std::string& name, const std::string& content, std::filesystem::perms mode) {
        const auto path = dir + "/" + name;
        { std::ofstream(path, std::ios::binary) << content; }
        std::filesystem::permissions(path, mode);
        return path;
    };
    using p = std::filesystem::perms;
    const auto mine = p::owner_read | p::owner_write;
    auto attempt = [&](const std::vector<std::string>& args, const spawn_options& o = {}) {
        auto r = spawn_cli(args, o);
        CHECK(r.err.find("s3cr3t-in-file") == std::string::npos);
        CHECK(r.out.find("s3cr3t-in-file") == std::string::npos);
        return r;
    };
    const auto n = distlock::test::unique_name("bf");
    // One line, its newline dropped.
    CHECK(attempt({"run", "--backend-file", write("ok", good + "\n", mine), "--name", n, "--", "true"}).status == 0);
    CHECK(attempt({"run", "--backend-file", write("crlf", good + "\r\n", mine), "--name", n, "--", "true"}).status ==
          0);
    // A secret readable by others; anything writable by group or others.
    auto r = attempt({"status", "--backend-file", write("world", secret, mine | p::others_read), "--name", n});
    CHECK(r.status == 77);
    CHECK(r.err.find("readable by others") != std::string::npos);
    r = attempt({"status", "--backend-file", write("gw", good, mine | p::group_write), "--name", n});
    CHECK(r.status == 77);
    CHECK(r.err.find("writable by group or others") != std::string::npos);
    // A readable URL without a secret is fine.
    CHECK(attempt({"status", "--backend-file", write("public", good, mine | p::others_read), "--name", n}).status == 0);
    // A secret the owner alone reads is used (and fails to connect: 69), its password never shown.
    r = attempt({"status", "--backend-file", write("private", secret, mine), "--name", n});
    CHECK(r.status == 69);
    // Not one URL on one line; too long; empty; not a regular file; missing.
    CHECK(attempt({"status", "--backend-file", write("two", secret + "\n" + good, mine), "--name", n}).status == 64);
    CHECK(attempt({"status", "--backend-file", write("long", std::string(20000, 'a'), mine), "--name", n}).status ==
          64);
    CHECK(attempt({"status", "--backend-file", write("empty", "\n", mine), "--name", n}).status == 64);
    REQUIRE(::mkfifo((dir + "/fifo").c_str(), 0600) == 0);
    CHECK(attempt({"status", "--backend-file", dir + "/fifo", "--name", n}).status == 64);  // not waiting for a writer
    CHECK(attempt({"status", "--backend-file", dir + "/none", "--name", n}).status == 64);
    // Another user's file (it would choose our server).
    const auto theirs = write("theirs", good, mine | p::group_read | p::others_read);
    if (::geteuid() == 0) {
        REQUIRE(::chown(theirs.c_str(), 65534, 65534) == 0);
        r = attempt({"status", "--backend-file", theirs, "--name", n});
        CHECK(r.status == 77);
        CHECK(r.err.find("another user") != std::string::npos);
    }
    // One source at a time.
    CHECK(attempt({"status", "--backend", good, "--backend-file", write("both", good, mine), "--name", n}).status ==
          64);
    CHECK(attempt({"status", "--name", n}, {{{"DISTLOCK_BACKEND", good}, {"DISTLOCK_BACKEND_FILE", dir + "/ok"}}})
              .status == 64);
    // The command line wins over the environment.
    CHECK(attempt({"status", "--backend-file", dir + "/ok", "--name", n}, {{{"DISTLOCK_BACKEND", "nosuch://x"}}})
              .status == 0);
    // Every subcommand that takes --backend takes --backend-file.
    {
        distlock::test::child_process hold({cli(), "hold", "--backend-file", dir + "/ok", "--name", n});
        CHECK(hold.read_line(10s).rfind(n + " ", 0) == 0);
        hold.signal(SIGTERM);
        CHECK(hold.wait_exit_for(10s) == 0);
    }
    CHECK(attempt({"flash-sale", "--backend-file", dir + "/ok", "--processes", "1", "--requests", "5", "--quiet"})
              .status == 0);
    CHECK(attempt({"bench", "--backend-file", dir + "/ok", "--seconds", "0.2", "--quiet"}).status == 0);
    CHECK(attempt({"elect", "--backend-file", dir + "/ok", "--name", n, "--", "true"}).status == 0);
}

TEST_CASE("the command inherits no descriptor above 2", "[cli][run][fd]") {
    std::vector<std::string> urls{"file://" + lock_dir()};
    if (const auto u = url_with_password(); !u.empty()) urls.push_back(u);  // a server: sockets
    for (const auto& url : urls) {
        INFO(distlock::spi::redact_url(url));
        // fd 5 is open in distlock (inherited from us, as a caller's stray descriptor would be).
        auto r = spawn_cli(
            {"run", "--backend", url, "--name", distlock::test::unique_name("fd"), "--", "sh", "-c", "ls /proc/$$/fd"},
            {{}, {}, [] {
                 const int fd = ::open("/dev/null", O_RDONLY);
                 ::dup2(fd, 5);
             }});
        INFO(r.err);
        REQUIRE(r.status == 0);
        CHECK(r.out == "0\n1\n2\n");
    }
}

TEST_CASE("SIGPIPE never kills distlock; the command gets it by default, with an empty signal mask", "[cli][signal]") {
    const auto url = "file://" + lock_dir();
    const auto name = distlock::test::unique_name("pipe");
    // distlock writes to a stderr and a stdout whose readers have gone.
    auto r = spawn_cli({"run", "--backend", url, "--name", name, "--verbose", "--", "sh", "-c", "sleep 0.1; exit 3"},
                       {{}, {}, nullptr, false, true});
    CHECK(r.status == 3);
    r = spawn_cli({"hold", "--backend", url, "--name", name, "--wait", "0", "--lease", "bogus"},
                  {{}, {}, nullptr, true, true});
    CHECK(r.status == 64);
    CHECK(spawn_cli({"schemes"}, {{}, {}, nullptr, true, false}).status == 0);
    // Started with SIGPIPE ignored and SIGUSR1 blocked, as a careless caller may.
    r = spawn_cli({"run", "--backend", url, "--name", name, "--", "grep", "-E", "^Sig(Blk|Ign)", "/proc/self/status"},
                  {{}, {}, [] {
                       ::signal(SIGPIPE, SIG_IGN);
                       ::signal(SIGHUP, SIG_IGN);  // nohup
                       sigset_t usr1;
                       sigemptyset(&usr1);
                       sigaddset(&usr1, SIGUSR1);
                       ::sigprocmask(SIG_BLOCK, &usr1, nullptr);
                   }});
    REQUIRE(r.status == 0);
    INFO(r.out);
    auto mask = [&](const std::string& field) {
        const auto at = r.out.find(field + ":\t");
        REQUIRE(at != std::string::npos);
        return std::stoull(r.out.substr(at + field.size() + 2, 16), nullptr, 16);
    };
    CHECK(mask("SigBlk") == 0);
    const auto ignored = mask("SigIgn");
    CHECK((ignored & (1ULL << (SIGPIPE - 1))) == 0);
    CHECK((ignored & (1ULL << (SIGHUP - 1))) != 0);  // what nohup ignores stays ignored
}

namespace {
// Every URL of the running servers (each DISTLOCK_TEST_*_URL), once each, and
// file://, with the variable that names it.
std::vector<std::pair<std::string, std::string>> every_url() {
    std::vector<std::pair<std::string, std::string>> urls{{"file", "file://" + lock_dir()}};
    for (char** e = environ; *e != nullptr; ++e) {
        const std::string entry(*e);
        const auto eq = entry.find('=');
        const auto var = entry.substr(0, eq);
        if (var.rfind("DISTLOCK_TEST_", 0) != 0 || var.size() < 4 || var.substr(var.size() - 4) != "_URL") continue;
        const auto url = entry.substr(eq + 1);
        if (std::none_of(urls.begin(), urls.end(), [&](const auto& u) { return u.second == url; }))
            urls.emplace_back(var, url);
    }
    if (urls.size() == 1) WARN("only file:// tried: no server URL is configured (integration/.run/backends.env)");
    return urls;
}

// Checks run on many URLs at once, six at a time (more only loads the two
// CPUs of CI), each in its own thread: what they find is reported at the end,
// on the test's thread (failures, URLs not applicable, exceptions).
struct per_url_checks {
    std::mutex mutex;
    std::vector<std::string> failures, skipped;
    distlock::test::thread_errors errors;

    void fail(const std::string& var, const std::string& what) {
        std::lock_guard lk(mutex);
        failures.push_back(var + ": " + what);
    }
    void skip(const std::string& var, std::string_view why) {
        std::lock_guard lk(mutex);
        skipped.push_back(var + " (" + std::string(why) + ")");
    }
    void run(const std::vector<std::pair<std::string, std::string>>& urls,
             const std::function<void(const std::string& var, const std::string& url)>& check) {
        std::atomic<std::size_t> next{0};
        std::vector<std::thread> threads;
        for (int worker = 0; worker < 6; ++worker)
            threads.emplace_back([&] {
                for (std::size_t i = next++; i < urls.size(); i = next++)
                    errors.run([&] { check(urls[i].first, urls[i].second); });
            });
        for (auto& t : threads) t.join();
        for (const auto& s : skipped) WARN("not applicable: " << s);
        INFO(errors.all());
        CHECK(errors.all().empty());
        for (const auto& f : failures) FAIL_CHECK(f);
    }
};
}  // namespace

TEST_CASE("readers and a plain holder of one name exclude each other, on every backend with read-write locks",
          "[cli][run][hold][rw][every-url]") {
    const auto urls = every_url();
    per_url_checks checks;
    // Holders take a 10 s lease, so that a loaded machine does not lose them.
    distlock::lock_options long_lease;
    long_lease.lease = 10s;
    checks.run(urls, [&](const std::string& var, const std::string& url) {
        auto fail = [&](const std::string& what) { checks.fail(var, what); };
        auto locks = distlock::connect(url);
        if (const auto why = locks.caps().why_not(distlock::feature::read_write); !why.empty()) {
            // The plain form takes the mutex alone there, and says so.
            const auto r = spawn_cli({"run", "--backend", url, "--name", distlock::test::unique_name("rw"), "--verbose",
                                      "--wait", "5s", "--", "true"});
            if (r.status != 0 || r.err.find("the mutex alone") == std::string::npos)
                fail("without read-write locks, plain run: status " + std::to_string(r.status));
            checks.skip(var, why);
            return;
        }
        if (const auto why = locks.caps().why_not(distlock::feature::cross_process); !why.empty()) {
            checks.skip(var, why);
            return;
        }
        const auto name = distlock::test::unique_name("rw");
        // run --wait 0 with `flags`: its status; what it said goes into the failure that follows.
        std::string said;
        auto attempt = [&](const std::vector<std::string>& flags) {
            std::vector<std::string> args{"run", "--backend", url, "--name", name, "--wait", "0", "--lease", "10s"};
            args.insert(args.end(), flags.begin(), flags.end());
            args.insert(args.end(), {"--", "true"});
            const auto r = spawn_cli(args);
            said = " (status " + std::to_string(r.status) + ": " + r.err + ")";
            return r.status;
        };
        // A reader (the read side, as run --shared takes it) keeps a plain run out.
        auto rw = locks.shared_mutex(name, long_lease);
        rw.lock_shared();
        if (attempt({}) != 75) fail("a reader held; plain run was not refused" + said);
        rw.unlock_shared();
        // A plain holder keeps readers, --write and library users of either lock out.
        {
            distlock::test::child_process hold({cli(), "hold", "--backend", url, "--name", name, "--lease", "10s"});
            if (hold.read_line(15s).rfind(name + " ", 0) != 0) {
                fail("plain hold did not take the lock");
                return;
            }
            if (attempt({"--shared"}) != 75) fail("a plain holder held; run --shared was not refused" + said);
            if (attempt({"--write"}) != 75) fail("a plain holder held; run --write was not refused" + said);
            if (rw.try_lock_shared()) {
                rw.unlock_shared();
                fail("a plain holder held; a library reader got in");
            }
            hold.signal(SIGTERM);
            if (hold.wait_exit_for(15s) != 0) fail("plain hold did not end with 0 on SIGTERM");
        }
        // --write keeps a plain run out.
        {
            distlock::test::child_process hold(
                {cli(), "hold", "--backend", url, "--name", name, "--write", "--lease", "10s"});
            if (hold.read_line(15s).rfind(name + " ", 0) != 0) {
                fail("hold --write did not take the lock");
                return;
            }
            if (attempt({}) != 75) fail("hold --write held; plain run was not refused" + said);
            hold.signal(SIGTERM);
            if (hold.wait_exit_for(15s) != 0) fail("hold --write did not end with 0 on SIGTERM");
        }
        // Free again: readers share.
        if (attempt({"--shared"}) != 0) fail("run --shared on a free name did not run" + said);
    });
    CHECK(checks.skipped.size() < urls.size());
}

TEST_CASE("status shows the mutex, the read-write lock and the semaphore as the server does, on every backend",
          "[cli][status][every-url]") {
    const auto urls = every_url();
    per_url_checks checks;
    distlock::lock_options long_lease;
    long_lease.lease = 10s;  // a loaded machine does not lose them meanwhile
    checks.run(urls, [&](const std::string& var, const std::string& url) {
        auto fail = [&](const std::string& what) { checks.fail(var, what); };
        const auto name = distlock::test::unique_name("status");
        distlock::provider_options o;
        o.holder = "status-" + distlock::test::unique_name("h").substr(0, 24);
        auto locks = distlock::connect(url, o);
        const bool tokens = locks.caps().supports(distlock::feature::fencing);
        auto status = [&]() -> nlohmann::json {
            const auto r = spawn_cli({"status", "--backend", url, "--name", name, "--json"});
            if (r.status != 0) {
                fail("status exited " + std::to_string(r.status) + ": " + r.err);
                return nlohmann::json::object();
            }
            return nlohmann::json::parse(r.out, nullptr, false);
        };
        // A field is shown, or its reason is under "unknown": never both empty.
        auto shown = [&](const nlohmann::json& j, const std::string& field, const std::string& what) {
            if (!j.is_object() || !j.contains(field)) {
                fail(what + ": no " + field);
                return false;
            }
            if (!j.at(field).is_null()) return true;
            if (!j.contains("unknown") || !j["unknown"].contains(field))
                fail(what + ": " + field + " empty, no reason");
            return false;
        };
        // One grant of a list: its label ours, its token `token` where shown.
        auto one_grant = [&](const nlohmann::json& j, const std::string& field, std::uint64_t token,
                             const std::string& what) {
            if (!shown(j, field, what)) return;
            if (!j.at(field).is_array() || j.at(field).size() != 1) {
                fail(what + ": " + field + " is " + j.at(field).dump() + ", not one grant");
                return;
            }
            const auto& g = j.at(field).at(0);
            const auto holder = g.value("holder", nlohmann::json()), got = g.value("token", nlohmann::json());
            if (!holder.is_null() && holder != o.holder) fail(what + ": holder " + holder.dump());
            if (tokens && !got.is_null() && got != token) fail(what + ": token " + got.dump());
        };

        auto m = locks.mutex(name, long_lease);
        m.lock();
        auto j = status();
        if (j["held"] != true) fail("mutex held: status says held " + j["held"].dump());
        if (shown(j, "holder", "mutex") && j["holder"] != o.holder) fail("mutex: holder " + j["holder"].dump());
        if (tokens && shown(j, "token", "mutex") && j["token"] != m.token()) fail("mutex: token " + j["token"].dump());
        m.unlock();

        if (locks.caps().supports(distlock::feature::read_write)) {
            auto rw = locks.shared_mutex(name, long_lease);
            rw.lock_shared();
            j = status();
            const auto& r = j["read_write"];
            if (!r.is_object()) fail("read-write lock: no read_write section");
            else {
                if (r.value("write_held", nlohmann::json()) != false) fail("a reader holds: write_held not false");
                one_grant(r, "readers", rw.shared_token(), "read-write lock");
            }
            rw.unlock_shared();
            rw.lock();
            j = status();
            if (j["read_write"]["write_held"] != true)
                fail("a writer holds: write_held " + j["read_write"]["write_held"].dump());
            rw.unlock();
        } else if (!status()["read_write"].is_null()) {
            fail("no read-write locks, but a read_write section");
        }

        // Given back: free wherever it is shown (before the semaphore: on Redis
        // strategy=reentrant, Redisson's semaphore leaves its count in the
        // name's key, which a mutex inspect then reports held).
        j = status();
        if (j["held"] != false) fail("all released: held " + j["held"].dump());
        if (j["read_write"].is_object() && j["read_write"]["write_held"] == true) fail("all released: write_held");
        const auto text = spawn_cli({"status", "--backend", url, "--name", name});
        if (text.status != 0 || text.out.find("held: no\n") == std::string::npos)
            fail("text status: " + std::to_string(text.status) + ": " + text.out + text.err);

        if (locks.caps().supports(distlock::feature::semaphore)) {
            auto sem = locks.semaphore(name, 3, long_lease);
            sem.acquire();
            j = status();
            const auto& p = j["semaphore"];
            if (!p.is_object()) fail("semaphore: no semaphore section");
            else {
                one_grant(p, "permits", sem.token(), "semaphore");
                if (shown(p, "size", "semaphore") && p.at("size") != 3) fail("semaphore: size " + p.at("size").dump());
                if (shown(p, "free", "semaphore") && p.at("free") != 2) fail("semaphore: free " + p.at("free").dump());
            }
            sem.release();
            j = status();
            if (j["semaphore"]["permits"].is_array() && !j["semaphore"]["permits"].empty())
                fail("all released: permits " + j["semaphore"]["permits"].dump());
        } else if (!status()["semaphore"].is_null()) {
            fail("no semaphores, but a semaphore section");
        }
    });
}

TEST_CASE("the default lock directory is never one another user can create or enter", "[cli][default-dir]") {
    const auto help_default = [](const spawn_options& o) {
        const auto r = spawn_cli({"flash-sale", "--help"}, o);
        const auto at = r.out.find("--backend TEXT=");
        if (at == std::string::npos) return std::string();
        return r.out.substr(at + 15, r.out.find_first_of(" \n", at + 15) - at - 15);
    };
    const auto dir = fresh_dir("xdg");
    std::filesystem::permissions(dir, std::filesystem::perms::owner_all);
    // XDG_RUNTIME_DIR of this user, mode 0700: used.
    CHECK(help_default({{{"XDG_RUNTIME_DIR", dir}}, {"DISTLOCK_BACKEND"}}) == "file://" + dir + "/distlock/flash-sale");
    // Mode 0755, or another user's (root through sudo -E): ignored.
    std::filesystem::permissions(dir, std::filesystem::perms::owner_all | std::filesystem::perms::group_read |
                                          std::filesystem::perms::group_exec | std::filesystem::perms::others_read |
                                          std::filesystem::perms::others_exec);
    CHECK(help_default({{{"XDG_RUNTIME_DIR", dir}}}).find(dir) == std::string::npos);
    std::filesystem::permissions(dir, std::filesystem::perms::owner_all);
    CHECK(help_default({{{"XDG_RUNTIME_DIR", "/tmp"}}}).find("/tmp") == std::string::npos);
    if (::geteuid() != 0) {
        WARN("not applicable: root's default directory (the tests do not run as root)");
        return;
    }
    REQUIRE(::chown(dir.c_str(), 65534, 65534) == 0);
    CHECK(help_default({{{"XDG_RUNTIME_DIR", dir}}}) == "file:///run/distlock/flash-sale");
    REQUIRE(::chown(dir.c_str(), 0, 0) == 0);
    // Root: /run/distlock, made 0700, never /run/lock/distlock (mode 1777 above it:
    // any user may create it first). A user planted one there.
    const std::string planted = "/run/lock/distlock";
    bool we_planted = false;
    if (std::filesystem::exists("/run/lock") && !std::filesystem::exists(planted)) {
        const auto r = distlock::test::run_command("runuser -u nobody -- mkdir " + planted + " 2>&1");
        we_planted = r.status == 0;
    }
    auto r = spawn_cli({"flash-sale", "--processes", "1", "--requests", "5", "--stock", "2", "--quiet", "--name",
                        distlock::test::unique_name("default")},
                       {{}, {"DISTLOCK_BACKEND", "DISTLOCK_BACKEND_FILE", "XDG_RUNTIME_DIR"}});
    CHECK(r.status == 0);
    if (we_planted) {
        CHECK(std::filesystem::is_empty(planted));
        std::filesystem::remove_all(planted);
    }
    struct stat st {};
    REQUIRE(::lstat("/run/distlock", &st) == 0);
    CHECK(S_ISDIR(st.st_mode));
    CHECK(st.st_uid == 0u);
    CHECK((st.st_mode & 077) == 0);
    // A user without a usable XDG_RUNTIME_DIR or HOME has no default: told to give --backend.
    const auto as_nobody = [](const std::vector<std::string>& args) {
        std::vector<std::string> all{"/usr/bin/setpriv",
                                     "--reuid=65534",
                                     "--regid=65534",
                                     "--clear-groups",
                                     "/usr/bin/env",
                                     "-u",
                                     "XDG_RUNTIME_DIR",
                                     "-u",
                                     "DISTLOCK_BACKEND",
                                     "HOME=/nonexistent",
                                     cli()};
        all.insert(all.end(), args.begin(), args.end());
        return spawn(all);
    };
    r = as_nobody({"flash-sale", "--help"});
    REQUIRE(r.status == 0);
    CHECK(r.out.find("--backend TEXT=") == std::string::npos);
    r = as_nobody({"bench", "--seconds", "0.2", "--quiet"});
    CHECK(r.status == 64);
    CHECK(r.err.find("--backend") != std::string::npos);
    // An XDG directory of ours whose distlock/ another user planted (or a symlink): refused.
    const auto xdg = fresh_dir("xdg-planted");
    std::filesystem::permissions(xdg, std::filesystem::perms::owner_all);
    std::filesystem::create_directory_symlink("/tmp", xdg + "/distlock");
    r = spawn_cli({"bench", "--seconds", "0.2", "--quiet"}, {{{"XDG_RUNTIME_DIR", xdg}}, {"DISTLOCK_BACKEND"}});
    CHECK(r.status == 77);
    CHECK(r.err.find(xdg + "/distlock") != std::string::npos);
}

TEST_CASE("no argument is echoed with its password, in any parse error", "[cli][secret]") {
    const auto url = "file://" + lock_dir();
    const std::vector<std::vector<std::string>> cases{
        {"status", "--backend", url, "--name", "n", "redis://:hunter2-stray@127.0.0.1:1"},  // not expected
        {"redis://:hunter2-stray@127.0.0.1:1"},                                             // not a subcommand
        {"status", "--backend", url, "--name", "n", "--bogus=redis://:hunter2-stray@h"},    // unknown option
        {"flash-sale", "--wait", "redis://:hunter2-stray@h"},                               // not a duration
        {"run", "--backend", url, "--name", "n", "--wait", "redis://:hunter2-stray@h", "--", "true"},
        {"status", "--backend", url, "--name", "n", "postgres://u@h/db?password=hunter2-stray"},
        {"bench", "--processes", "redis://u:hunter2-stray@h"},
        {"run", "--backend", "redis://:hunter2-stray@127.0.0.1:1?connect_timeout=100ms", "--name", "n", "--", "true"},
    };
    for (const auto& args : cases) {
        const auto r = spawn_cli(args);
        INFO(r.err);
        CHECK(r.status != 0);
        CHECK(r.err.find("hunter2-stray") == std::string::npos);
        CHECK(r.out.find("hunter2-stray") == std::string::npos);
    }
    const auto stray = spawn_cli(cases[0]);
    CHECK(stray.status == 64);
    CHECK(stray.err.find("redis://:***@127.0.0.1:1") != std::string::npos);  // shown, redacted
}

// The subcommands as `distlock --help` lists them: a new one is covered by the
// case below with no edit here.
std::vector<std::string> listed_subcommands() {
    const auto help = run("--help");
    REQUIRE(help.status == 0);
    std::vector<std::string> names;
    std::istringstream in(help.out);
    bool listing = false;
    for (std::string line; std::getline(in, line);) {
        if (line == "Subcommands:") listing = true;
        else if (listing && line.rfind("  ", 0) == 0 && line.size() > 2 && line[2] != ' ')
            names.push_back(line.substr(2, line.find(' ', 2) - 2));
        else if (listing) break;
    }
    return names;
}

TEST_CASE("every subcommand --help lists answers --help, and refuses an unknown option with 64, unechoed",
          "[cli][exit][secret]") {
    const auto names = listed_subcommands();
    for (const char* known : {"flash-sale", "bench", "run", "hold", "elect", "status", "schemes"})
        CHECK(std::find(names.begin(), names.end(), known) != names.end());
    for (const auto& n : names) {
        INFO(n);
        CHECK(run(n + " --help").status == 0);
        const auto r = spawn_cli({n, "--bogus=redis://:hunter2-stray@h"});
        CHECK(r.status == 64);
        CHECK(r.err.find("hunter2-stray") == std::string::npos);
        CHECK(r.out.find("hunter2-stray") == std::string::npos);
    }
}

TEST_CASE("distlock loads no shared library from the directory it is run in", "[cli][rpath]") {
    // A build-tree RUNPATH ending with ':' (CMake's padding for the install-time
    // rewrite) is an empty element: glibc's ld.so searches the current directory
    // for it. Files that are no library at all, under the names the tool needs,
    // make such a search fail loudly ("file too short") rather than run code.
    const auto dir = fresh_dir("rpath-cwd");
    for (const char* name : {"libgcc_s.so.1", "libstdc++.so.6", "libm.so.6", "libc.so.6", "libdistlock.so.0",
                             "libcurl.so.4", "libcrypto.so.3"})
        std::ofstream(dir + "/" + name) << "not a library\n";
    const auto r = spawn_cli({"schemes"}, {.unset = {"LD_LIBRARY_PATH", "LD_PRELOAD"}, .cwd = dir});
    INFO(r.err);
    CHECK(r.status == 0);
    CHECK(r.out.find("memory") != std::string::npos);
}

namespace {

// Text a terminal shows as it is: no control byte but '\n' (no ESC, BEL, CR,
// DEL), no C1 control (U+0080..U+009F).
bool terminal_safe(const std::string& text) {
    for (std::size_t i = 0; i < text.size(); ++i) {
        const auto c = static_cast<unsigned char>(text[i]);
        if ((c < 0x20 && c != '\n') || c == 0x7f) return false;
        if (c == 0xc2 && i + 1 < text.size() && static_cast<unsigned char>(text[i + 1]) < 0xa0) return false;
    }
    return true;
}

// The lines of `text` that begin with `prefix`.
int lines_starting(const std::string& text, const std::string& prefix) {
    int n = 0;
    for (std::size_t at = 0; at < text.size(); at = text.find('\n', at) + 1) {
        if (text.compare(at, prefix.size(), prefix) == 0) ++n;
        if (text.find('\n', at) == std::string::npos) break;
    }
    return n;
}

// `path` as a URL path: every byte but unreserved ones and '/' percent-encoded.
std::string url_path(const std::string& path) {
    static constexpr char hex[] = "0123456789ABCDEF";
    std::string out;
    for (unsigned char c : path) {
        if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '/' || c == '-' ||
            c == '_' || c == '.') {
            out += static_cast<char>(c);
        } else {
            out += '%';
            out += hex[c >> 4];
            out += hex[c & 15];
        }
    }
    return out;
}

// What an attacker stores as a label, a name or a directory: an OSC that
// retitles the terminal, a clear screen, and a forged line.
const std::string hostile_text = "x\x1b]0;pwned\a\x1b[2J\nwaiters: 0";

}  // namespace

TEST_CASE("status and run show a hostile name, holder label and loss reason escaped, never raw",
          "[cli][status][escape]") {
    const auto dir = fresh_dir("escape");
    const auto url = "file://" + dir;
    // A name echoed back (the library takes any bytes as a name): the same
    // defence whatever the backend makes of labels.
    auto r = spawn_cli({"status", "--backend", url, "--name", hostile_text});
    INFO(r.out << r.err);
    CHECK(r.status == 0);
    CHECK(terminal_safe(r.out));
    CHECK(terminal_safe(r.err));
    CHECK(lines_starting(r.out, "waiters:") == 1);  // the real one, not the forged one
    CHECK(r.out.find("lock: x\\x1b]0;pwned\\x07\\x1b[2J\\x0awaiters: 0\n") != std::string::npos);
    // UTF-8 text shows as it is; a byte that is not UTF-8, or a C1 control in UTF-8, escaped.
    r = spawn_cli({"status", "--backend", url, "--name", "caf\xc3\xa9-\xe2\x82\xac|\xff|\xc2\x9b|\xe2\x80\xae"});
    CHECK(r.status == 0);
    CHECK(r.out.find("lock: caf\xc3\xa9-\xe2\x82\xac|\\xff|\\xc2\\x9b|\\xe2\\x80\\xae\n") != std::string::npos);

    // A holder's label written into the lock file by another tenant of the
    // directory (or by anything else that writes the holder record). Whether
    // the library hands it over or replaces it by "unknown", nothing raw shows.
    distlock::provider_options o;
    o.holder = "billing-7";
    auto locks = distlock::connect(url, o);
    auto m = locks.mutex("planted");
    m.lock();
    {
        std::ofstream f(dir + "/planted.lock", std::ios::binary | std::ios::trunc);  // the same inode, still locked
        f << m.token()
          << " evil\x1b]0;pwned\a\x1b[2J\x1b[31mFAKE\x1b[0m\rwaiters: 0\x0bheld: no\x9b"
             "2J\xc2\x9b"
             "2J\n";
    }
    r = spawn_cli({"status", "--backend", url, "--name", "planted"});
    INFO(r.out << r.err);
    CHECK(r.status == 0);
    CHECK(terminal_safe(r.out));
    CHECK(lines_starting(r.out, "waiters:") == 1);
    CHECK(lines_starting(r.out, "held: yes") == 1);
    CHECK(lines_starting(r.out, "holder: ") == 1);
    CHECK(r.out.find("\x1b") == std::string::npos);
    r = spawn_cli({"status", "--backend", url, "--name", "planted", "--json"});
    CHECK(r.status == 0);
    CHECK(terminal_safe(r.out));  // the JSON encoder's escapes
    CHECK(nlohmann::json::parse(r.out)["held"] == true);
    m.unlock();

    // A loss reason (file:// names the lock file, in a directory whose name
    // whoever made it chose), on stderr and in --verbose's event lines.
    const auto evil_dir = dir + "/" + hostile_text;
    std::filesystem::create_directories(evil_dir);
    std::filesystem::permissions(evil_dir, std::filesystem::perms::owner_all);
    r = spawn_cli({"run", "--backend", "file://" + url_path(evil_dir), "--name", "n", "--verbose", "--", "sh", "-c",
                   "sleep 0.2; rm \"$1\"/n.lock; sleep 10", "sh", evil_dir});
    INFO(r.err);
    CHECK(r.status == 70);
    CHECK(r.err.find("was lost while the command ran") != std::string::npos);
    CHECK(r.err.find("\\x1b]0;pwned\\x07\\x1b[2J\\x0awaiters: 0/n.lock") != std::string::npos);
    CHECK(terminal_safe(r.err));
    CHECK(lines_starting(r.err, "waiters: 0") == 0);
}

TEST_CASE("flash-sale --store writes only a regular file of its own, with one link, made 0600",
          "[cli][flash-sale][store]") {
    const auto dir = fresh_dir("store");
    const auto backend = "file://" + lock_dir();
    auto sale = [&](const std::string& store) {
        return spawn_cli({"flash-sale", "--backend", backend, "--processes", "1", "--requests", "5", "--stock", "3",
                          "--quiet", "--store", store});
    };
    const auto victim = dir + "/victim";
    { std::ofstream(victim, std::ios::binary) << "precious\n"; }
    std::filesystem::permissions(victim, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
    // A planted symlink: refused (77), its target untouched; a dangling one creates nothing.
    REQUIRE(::symlink(victim.c_str(), (dir + "/link").c_str()) == 0);
    auto r = sale(dir + "/link");
    INFO(r.out << r.err);
    CHECK(r.status == 77);
    CHECK(r.err.find("symbolic link") != std::string::npos);
    CHECK(read_file(victim) == "precious\n");
    REQUIRE(::symlink((dir + "/made-by-us").c_str(), (dir + "/dangling").c_str()) == 0);
    CHECK(sale(dir + "/dangling").status == 77);
    CHECK(!std::filesystem::exists(dir + "/made-by-us"));
    // A hard link to a file of ours: another name of something it must not change.
    REQUIRE(::link(victim.c_str(), (dir + "/hard").c_str()) == 0);
    r = sale(dir + "/hard");
    CHECK(r.status == 77);
    CHECK(r.err.find("links") != std::string::npos);
    CHECK(read_file(victim) == "precious\n");
    // Our own file that others may write (they could change the stock
    // mid-run): refused, as --backend-file refuses one.
    const auto open_file = dir + "/0666";
    { std::ofstream(open_file, std::ios::binary) << ""; }
    std::filesystem::permissions(open_file, std::filesystem::perms::all & ~std::filesystem::perms::owner_exec &
                                                ~std::filesystem::perms::group_exec &
                                                ~std::filesystem::perms::others_exec);
    r = sale(open_file);
    CHECK(r.status == 77);
    CHECK(r.err.find("writable by group or others") != std::string::npos);
    // Not a regular file (and no wait for a writer).
    REQUIRE(::mkfifo((dir + "/fifo").c_str(), 0600) == 0);
    CHECK(sale(dir + "/fifo").status == 77);
    // Another user's file.
    if (::geteuid() == 0) {
        const auto theirs = dir + "/theirs";
        { std::ofstream(theirs, std::ios::binary) << ""; }
        std::filesystem::permissions(theirs, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
        REQUIRE(::chown(theirs.c_str(), 65534, 65534) == 0);
        r = sale(theirs);
        CHECK(r.status == 77);
        CHECK(r.err.find("another user") != std::string::npos);
    }
    // A new store is made 0600; an existing one of ours is used.
    const auto fresh = dir + "/fresh";
    r = sale(fresh);
    CHECK(r.status == 0);
    struct stat st {};
    REQUIRE(::stat(fresh.c_str(), &st) == 0);
    CHECK((st.st_mode & 07777) == 0600);
    CHECK(sale(fresh).status == 0);
}

namespace {
// `distlock ARGS` waits for a lock another holds; `sig` comes during the wait.
// It must end the wait at once with 128 + sig, saying so (not be killed by the
// signal, nor hold on until the lock is free), and leave nothing behind: once
// the holder releases, the next acquirer gets the lock at its first attempt.
// "" when it did, else what went wrong.
std::string check_interrupted_wait(const std::vector<std::string>& args, int sig, const std::function<void()>& release,
                                   const std::function<bool()>& next_gets_it_at_once) {
    const auto err = fresh_dir("interrupted") + "/stderr";
    std::vector<std::string> argv{"/bin/sh", "-c", "exec \"$0\" \"$@\" 2>\"$DISTLOCK_TEST_ERR\"", cli()};
    argv.insert(argv.end(), args.begin(), args.end());
    distlock::test::child_process waiter(argv, {.env = {{"DISTLOCK_TEST_ERR", err}}});
    std::this_thread::sleep_for(1500ms);  // connected and waiting (a signal before that is fatal, as it was)
    if (const auto early = waiter.wait_exit_for(0ms)) return "it ended before the signal: " + std::to_string(*early);
    waiter.signal(sig);
    const auto status = waiter.wait_exit_for(15s);
    const auto said = read_file(err);
    if (!status) return "still waiting 15 s after signal " + std::to_string(sig);
    if (*status != 128 + sig) return "exit status " + std::to_string(*status) + " (" + said + ")";
    if (said.find("the wait was cancelled, nothing is held") == std::string::npos)
        return "not ended by distlock itself (it said: " + said + ")";
    release();
    if (!next_gets_it_at_once()) return "after the release, the next acquirer did not get the lock at once";
    return {};
}
}  // namespace

TEST_CASE("a signal during a wait ends it at once with 128+signal and leaves nothing, on every backend",
          "[cli][signal][wait][every-url]") {
    // One URL per scheme and strategy (TLS, clusters and fence tables wait alike), six at a time.
    std::vector<std::pair<std::string, std::string>> urls;
    std::set<std::string> kinds;
    for (const auto& [var, url] : every_url()) {
        auto u = distlock::spi::url::parse(url);
        if (kinds.insert(u.scheme() + "/" + u.take("strategy").value_or("")).second) urls.emplace_back(var, url);
    }
    distlock::lock_options long_lease;
    long_lease.lease = 10s;
    per_url_checks checks;
    checks.run(urls, [&](const std::string& var, const std::string& url) {
        auto locks = distlock::connect(url);
        if (const auto why = locks.caps().why_not(distlock::feature::cross_process); !why.empty()) {
            checks.skip(var, why);
            return;
        }
        const auto name = distlock::test::unique_name("sigwait");
        auto held = locks.mutex(name, long_lease);
        if (!held.try_lock_for(10s)) throw std::runtime_error("the holder did not get the lock");
        auto next = distlock::connect(url).mutex(name, long_lease);
        const auto why = check_interrupted_wait(
            {"hold", "--backend", url, "--name", name, "--lease", "10s"}, SIGINT, [&] { held.unlock(); },
            [&] { return next.try_lock(); });
        if (next.held()) next.unlock();
        if (!why.empty()) checks.fail(var, why);
    });
}

TEST_CASE("a waiter whose server dies exits 69 with one message, on every single-server backend",
          "[cli][wait][every-url]") {
    // The server "dies" for the waiter: its connections through a proxy are
    // closed and the proxy's port refuses. The holder (direct) keeps the lock.
    const std::set<std::string> single{"DISTLOCK_TEST_REDIS_URL", "DISTLOCK_TEST_POSTGRES_URL",
                                       "DISTLOCK_TEST_MYSQL_URL", "DISTLOCK_TEST_ZK_URL",
                                       "DISTLOCK_TEST_ETCD_URL",  "DISTLOCK_TEST_CONSUL_EMULATOR_URL"};
    std::vector<std::pair<std::string, std::string>> urls;
    for (const auto& [var, url] : every_url())
        if (single.count(var)) urls.emplace_back(var, url);
    if (urls.empty()) WARN("no single-server URL configured");
    distlock::lock_options long_lease;
    long_lease.lease = 30s;
    per_url_checks checks;
    checks.run(urls, [&](const std::string& var, const std::string& url) {
        auto fail = [&](const std::string& what) { checks.fail(var, what); };
        const auto name = distlock::test::unique_name("dies");
        auto holder = distlock::connect(url);
        auto m = holder.mutex(name, long_lease);
        m.lock();
        std::vector<std::unique_ptr<distlock::test::tcp_proxy>> proxies;
        const auto proxied = distlock::test::through_proxies(url, proxies);
        const auto err = fresh_dir("dies") + "/stderr";
        distlock::test::child_process waiter(
            {"/bin/sh", "-c", "exec \"$0\" \"$@\" 2>\"$DISTLOCK_TEST_ERR\"", cli(), "run", "--backend", proxied,
             "--name", name, "--wait", "120s", "--", "true"},
            {.env = {{"DISTLOCK_TEST_ERR", err}}});
        std::this_thread::sleep_for(1500ms);  // connected and waiting
        if (const auto early = waiter.wait_exit_for(0ms)) {
            fail("it ended before the server died: " + std::to_string(*early) + " (" + read_file(err) + ")");
            return;
        }
        const auto died = std::chrono::steady_clock::now();
        proxies.clear();
        const auto status = waiter.wait_exit_for(40s);
        const auto took =
            std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - died);
        const auto said = read_file(err);
        if (!status) fail("still waiting 40 s after its server died");
        else if (*status != 69) fail("exit status " + std::to_string(*status) + " (" + said + ")");
        else if (took > 30s) fail("69 only after " + std::to_string(took.count()) + " ms");
        // Its backend not named twice in a row ("etcd: etcd: ..." was seen).
        for (const char* backend : {"redis", "postgres", "mysql", "zookeeper", "zk", "etcd", "consul"})
            if (said.find(std::string(backend) + ": " + backend + ":") != std::string::npos)
                fail("the backend is named twice: " + said);
        m.unlock();
    });
}

TEST_CASE("run, elect, hold --shared and --permits end their wait on SIGTERM, SIGHUP and SIGINT",
          "[cli][signal][wait]") {
    const auto url = "file://" + lock_dir();
    auto locks = distlock::connect(url);
    SECTION("run: the command never starts") {
        const auto name = distlock::test::unique_name("sigrun");
        const auto marker = fresh_dir("sigrun") + "/ran";
        auto held = locks.mutex(name);
        REQUIRE(held.try_lock());
        auto next = locks.mutex(name);
        CHECK(check_interrupted_wait(
                  {"run", "--backend", url, "--name", name, "-c", "touch " + marker}, SIGTERM, [&] { held.unlock(); },
                  [&] { return next.try_lock(); }) == "");
        CHECK_FALSE(std::filesystem::exists(marker));
        next.unlock();
    }
    SECTION("elect") {
        const auto name = distlock::test::unique_name("sigelect");
        auto leader = locks.election(name);
        REQUIRE(leader.campaign(10s));
        auto next = locks.election(name);
        CHECK(check_interrupted_wait(
                  {"elect", "--backend", url, "--name", name, "--", "true"}, SIGHUP, [&] { leader.resign(); },
                  [&] { return next.campaign(0ms); }) == "");
        next.resign();
    }
    SECTION("hold --shared") {
        const auto name = distlock::test::unique_name("sigshared");
        auto writer = locks.shared_mutex(name);
        REQUIRE(writer.try_lock());
        auto next = locks.shared_mutex(name);
        CHECK(check_interrupted_wait(
                  {"hold", "--backend", url, "--name", name, "--shared"}, SIGINT, [&] { writer.unlock(); },
                  [&] { return next.try_lock(); }) == "");
        next.unlock();
    }
    SECTION("hold --permits") {
        const auto name = distlock::test::unique_name("sigpermit");
        auto taken = locks.semaphore(name, 1);
        REQUIRE(taken.try_acquire());
        auto next = locks.semaphore(name, 1);
        CHECK(check_interrupted_wait(
                  {"hold", "--backend", url, "--name", name, "--permits", "1"}, SIGINT, [&] { taken.release(); },
                  [&] { return next.try_acquire(); }) == "");
        next.release();
    }
}

TEST_CASE("arguments after -- are refused with 64 where no command is taken", "[cli][args]") {
    const auto url = "file://" + lock_dir();
    for (const std::vector<std::string>& args :
         {std::vector<std::string>{"hold", "--backend", url, "--name", "dashes", "--", "sleep", "1"},
          {"status", "--backend", url, "--name", "dashes", "--", "x"},
          {"schemes", "--", "x"},
          {"bench", "--backend", "memory://", "--seconds", "100ms", "--quiet", "--", "x"},
          {"flash-sale", "--backend", url, "--processes", "1", "--requests", "5", "--stock", "1", "--quiet", "--",
           "x"}}) {
        const auto r = spawn_cli(args);
        INFO(args[0] << ": " << r.err);
        CHECK(r.status == 64);
        CHECK(r.err.find("unexpected arguments after '--'") != std::string::npos);
    }
    const auto hold = spawn_cli({"hold", "--backend", url, "--name", "dashes", "--", "true"});
    CHECK(hold.err.find("distlock run") != std::string::npos);  // points to the subcommand that runs a command
}

TEST_CASE("a misspelled URL parameter, --wait or --lease is a usage error before connecting, the server down",
          "[cli][args][url][every-url]") {
    // Port 1: nothing listens; a check made after connecting would say 69 instead.
    const std::map<std::string, std::string> down{{"redis", "redis://127.0.0.1:1"},
                                                  {"redis-sentinel", "redis-sentinel://127.0.0.1:1/m"},
                                                  {"redis-cluster", "redis-cluster://127.0.0.1:1"},
                                                  {"redlock", "redlock://127.0.0.1:1,127.0.0.1:2,127.0.0.1:3"},
                                                  {"postgres", "postgres://u:p@127.0.0.1:1/db"},
                                                  {"postgresql", "postgresql://u:p@127.0.0.1:1/db"},
                                                  {"mysql", "mysql://u:p@127.0.0.1:1/db"},
                                                  {"zk", "zk://127.0.0.1:1/base"},
                                                  {"etcd", "etcd://127.0.0.1:1"},
                                                  {"consul", "consul://127.0.0.1:1"}};
    int tried = 0;
    for (const auto& scheme : distlock::schemes()) {
        const auto it = down.find(scheme);
        if (it == down.end()) continue;
        ++tried;
        INFO(scheme);
        const auto sep = it->second.find('?') == std::string::npos ? "?" : "&";
        const auto typo = spawn_cli({"hold", "--backend", it->second + sep + "leas=2s", "--name", "a", "--wait", "0"});
        INFO(typo.err);
        CHECK(typo.status == 64);
        CHECK(typo.err.find("unknown parameter(s) for " + scheme + "://: leas (its parameters: ") != std::string::npos);
        CHECK(spawn_cli({"hold", "--backend", it->second, "--name", "a", "--wait", "10x"}).status == 64);
        CHECK(spawn_cli({"run", "--backend", it->second, "--name", "a", "--lease", "0", "--", "true"}).status == 64);
        // The control: nothing listens there, which the message says.
        const auto down_now = spawn_cli({"hold", "--backend", it->second, "--name", "a", "--wait", "0"});
        INFO(down_now.err);
        CHECK(down_now.status == 69);
        CHECK(down_now.err.find("check the URL's host and port") != std::string::npos);
    }
    CHECK(tried >= 1);
}

TEST_CASE("flock's habits: -w, --nonblock, -s, -x; -n is --permits; --holder is the label others see", "[cli][flock]") {
    const auto url = "file://" + lock_dir();
    auto locks = distlock::connect(url);
    const auto name = distlock::test::unique_name("flock");
    auto m = locks.mutex(name);
    REQUIRE(m.try_lock());
    CHECK(spawn_cli({"run", "--backend", url, "--name", name, "-w", "0", "--", "true"}).status == 75);
    CHECK(spawn_cli({"run", "--backend", url, "--name", name, "--nonblock", "--", "true"}).status == 75);
    CHECK(spawn_cli({"run", "--backend", url, "--name", name, "--nb", "-x", "--", "true"}).status == 75);
    CHECK(spawn_cli({"run", "--backend", url, "--name", name, "--nb", "-w", "1s", "--", "true"}).status == 64);
    m.unlock();
    CHECK(spawn_cli({"run", "--backend", url, "--name", name, "-x", "-w", "5s", "--", "true"}).status == 0);
    CHECK(spawn_cli({"run", "--backend", url, "--name", name, "-x", "-s", "--", "true"}).status == 64);
    // -s is the read side: a reader already there does not keep it out.
    auto rw = locks.shared_mutex(name);
    rw.lock_shared();
    CHECK(spawn_cli({"run", "--backend", url, "--name", name, "-s", "--nb", "--", "true"}).status == 0);
    CHECK(spawn_cli({"run", "--backend", url, "--name", name, "--nb", "--", "true"}).status == 75);
    rw.unlock_shared();
    // -n N: a permit of N, as consul lock -n; --help says it is not flock's -n.
    CHECK(spawn_cli({"run", "--backend", url, "--name", name + "-pool", "-n", "2", "--nb", "--", "true"}).status == 0);
    CHECK(spawn_cli({"run", "--help"}).out.find("not flock -n") != std::string::npos);
    // --holder: what status shows as the holder.
    distlock::test::child_process hold({cli(), "hold", "--backend", url, "--name", name, "--holder", "billing-7"});
    REQUIRE(hold.read_line(10s).rfind(name + " ", 0) == 0);
    const auto status = spawn_cli({"status", "--backend", url, "--name", name});
    CHECK(status.out.find("holder: billing-7") != std::string::npos);
    hold.signal(SIGTERM);
    CHECK(hold.wait_exit_for(10s) == 0);
}

TEST_CASE("unexpected arguments are listed in the order given", "[cli][args]") {
    const auto r = spawn_cli({"bench", "--backend", "memory://", "--timeout", "5"});
    CHECK(r.status == 64);
    CHECK(r.err.find("not expected: --timeout 5") != std::string::npos);
}
