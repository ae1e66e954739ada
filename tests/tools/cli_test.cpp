// The distlock tool, driven as a user would: exit statuses, the fencing token
// handed to the child, flash-sale's JSON report.
#include <catch2/catch.hpp>
#include <csignal>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "distlock/distlock.hpp"
#include "distlock/testing.hpp"
#include "child_process.hpp"
#include "support.hpp"

using namespace std::chrono_literals;

namespace {

distlock::test::command_result run(const std::string& args) {
    return distlock::test::run_command(std::string(DISTLOCK_CLI) + " " + args + " 2>/dev/null");
}

std::string lock_dir() {
    static const std::string dir = [] {
        auto d = std::filesystem::temp_directory_path() / ("distlock-cli-" + distlock::test::unique_name("t").substr(2));
        std::filesystem::create_directories(d);
        return d.string();
    }();
    return dir;
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

TEST_CASE("--version prints the library's version and exits 0", "[cli]") {
    auto r = run("--version");
    CHECK(r.status == 0);
    CHECK(r.out == "distlock " + std::string(distlock::version()) + "\n");
    CHECK(distlock::version() == DISTLOCK_VERSION_STRING);
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
        auto help = distlock::test::run_command("env -u DISTLOCK_BACKEND XDG_RUNTIME_DIR= " + std::string(DISTLOCK_CLI) +
                                                " " + sub + " --help");
        INFO(help.out);
        const auto at = help.out.find("--backend TEXT=file://");
        REQUIRE(at != std::string::npos);
        CHECK(help.out.compare(at + 22, 5, "/tmp/") != 0);
        CHECK(help.out.find("/distlock/", at) != std::string::npos);
    }
}

TEST_CASE("DISTLOCK_BACKEND is the default backend, and durations read alike everywhere", "[cli]") {
    const auto url = "file://" + lock_dir();
    auto r = distlock::test::run_command("DISTLOCK_BACKEND=" + url + " " + std::string(DISTLOCK_CLI) +
                                         " run --name env -- echo from-env 2>/dev/null");
    CHECK(r.status == 0);
    CHECK(r.out == "from-env\n");
    CHECK(run("run --backend " + url + " --name env --wait 1m30s -- true").status == 0);
    CHECK(run("flash-sale --backend " + url + " --processes 1 --requests 20 --stock 5 --wait 1m30s --quiet").status == 0);
    CHECK(run("flash-sale --backend " + url + " --processes 1 --requests 20 --stock 5 --wait 2.5 --quiet").status == 0);
    CHECK(run("bench --backend memory:// --seconds 300ms --quiet").status == 0);
    CHECK(run("flash-sale --backend " + url + " --wait soon").status == 64);
    auto v = distlock::test::run_command(std::string(DISTLOCK_CLI) + " run --backend " + url +
                                         " --name verbose --verbose -- true 2>&1");
    CHECK(v.status == 0);
    for (const char* event : {"acquiring 'verbose'", "acquired 'verbose', fencing token", "started true",
                              "the command exited with status 0", "released 'verbose'",
                              "no lease: held until released"})  // file://: the kernel holds it, nothing renews
        CHECK(v.out.find(event) != std::string::npos);
    CHECK(v.out.find("renewed") == std::string::npos);
}

TEST_CASE("hold takes the lock, prints name and token, and releases it on SIGTERM", "[cli][hold]") {
    const auto url = "file://" + lock_dir();
    distlock::test::child_process hold({DISTLOCK_CLI, "hold", "--backend", url, "--name", "held"});
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
    std::thread breaker([&] {
        std::this_thread::sleep_for(700ms);
        distlock::testing::break_lock(locks, "stubborn");
    });
    const auto t0 = std::chrono::steady_clock::now();
    // exec: sleep itself ignores SIGTERM (an ignored signal stays ignored across exec).
    auto r = run("run --backend '" + url + "' --name stubborn --kill-after 300ms -- sh -c 'trap \"\" TERM; exec sleep 30'");
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
    CHECK(status("") == 64);                                              // no subcommand
    CHECK(status("flash-sale --bogus 10s") == 64);                        // an option it does not know
    CHECK(status("flash-sale --wait soon") == 64);                        // not a duration
    CHECK(status("flash-sale --processes many") == 64);                   // not a number
    CHECK(status("bench --backend memory:// --mode sideways") == 64);
    CHECK(status("bench --backend memory:// --seconds 0") == 64);
    CHECK(status("run --backend file:///tmp/x --bogus --name n -- true") == 64);  // an option run does not know
    CHECK(status("run --name n -- true") == 64);                          // no --backend
    CHECK(status("run --backend nosuch://x --name a -- true") == 64);     // unknown scheme
    CHECK(status("schemes --bogus") == 64);
    // 77: access denied (a directory nobody may create, even root).
    CHECK(status("run --backend file:///sys/distlock-denied --name a -- true") == 77);
    CHECK(status("flash-sale --backend file:///sys/distlock-denied --processes 1 --requests 5") == 77);
    // 126 / 127: the command cannot run, said on stderr.
    const auto url = "file://" + lock_dir();
    auto missing = distlock::test::run_command(std::string(DISTLOCK_CLI) + " run --backend " + url +
                                               " --name exec -- /nonexistent/cmd 2>&1");
    CHECK(missing.status == 127);
    CHECK(missing.out.find("cannot execute /nonexistent/cmd: No such file or directory") != std::string::npos);
    CHECK(status("run --backend " + url + " --name exec -- /etc/passwd") == 126);
    // 70: the lock lost while the command ran (the command gets SIGTERM).
    {
        auto locks = distlock::connect(url + "?check=50ms");
        std::thread breaker([&] {
            std::this_thread::sleep_for(500ms);
            distlock::testing::break_lock(locks, "lost-while-running");
        });
        auto r = run("run --backend '" + url + "?check=50ms' --name lost-while-running -- sleep 30");
        breaker.join();
        CHECK(r.status == 70);
    }
    // 69: the backend unavailable (a closed port), one line per failed worker.
    const auto schemes = run("schemes").out;
    if (schemes.find("redis") != std::string::npos) {
        const std::string down = "redis://127.0.0.1:1?connect_timeout=200ms";
        CHECK(status("run --backend " + down + " --name a -- true") == 69);
        auto sale = distlock::test::run_command(std::string(DISTLOCK_CLI) + " flash-sale --backend '" + down +
                                                "' --processes 1 --concurrency 4 --requests 8 2>&1");
        CHECK(sale.status == 69);
        CHECK(sale.out.find("distlock: worker 0: redis: cannot connect") != std::string::npos);
        CHECK(sale.out.find("worker distlock") == std::string::npos);  // no two messages on one line
        CHECK(status("bench --backend '" + down + "' --processes 3 --seconds 1") == 69);
    }
}

TEST_CASE("flash-sale and bench refuse processes that the backend cannot exclude", "[cli]") {
    // memory:// locks live in one process: two processes would both "hold" and oversell.
    auto both = distlock::test::run_command(std::string(DISTLOCK_CLI) +
                                            " flash-sale --backend memory:// --processes 2 --quiet 2>&1");
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
        auto r = run("flash-sale --backend " + url + " --json --quiet --requests 300 --concurrency 40 --stock 25 "
                     "--segments " + std::to_string(segments));
        INFO(r.out);
        REQUIRE(r.status == 0);
        auto j = nlohmann::json::parse(r.out);
        CHECK(j["sold"] == 25);
        CHECK(j["oversold"] == 0);
        CHECK(j["stock_left"] == 0);
        CHECK(j["requests"] == 300);
        for (const char* key : {"elapsed_ms", "throughput_rps", "p50_ms", "p99_ms"}) CHECK(j.contains(key));
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

TEST_CASE("run --shared reads beside other readers, --write alone, --permits N holds one of N", "[cli][run][primitives]") {
    const auto url = "file://" + lock_dir();
    auto locks = distlock::connect(url);
    {
        auto rw = locks.shared_mutex("report");
        rw.lock_shared();  // another reader
        auto r = run("run --backend " + url + " --name report --shared --wait 5s -- sh -c 'echo $DISTLOCK_FENCING_TOKEN'");
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
        CHECK(run("run --backend " + url + " -n 3 --name pool --wait 1s -- true").status == 64);  // another size
        sem.release();
        sem.release();
    }
    // hold prints the token of what it holds.
    distlock::test::child_process hold({DISTLOCK_CLI, "hold", "--backend", url, "--name", "pool", "--permits", "1"});
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
    auto sem = run("bench --backend memory:// --seconds 300ms --quiet --json --primitive semaphore --permits 3 --mode contended --threads 4");
    REQUIRE(sem.status == 0);
    auto k = nlohmann::json::parse(sem.out);
    CHECK(k["primitive"] == "semaphore");
    CHECK(k["permits"] == 3);
    CHECK(k["cycles"].get<long>() > 0);
    CHECK(run("bench --backend memory:// --seconds 300ms --quiet --writers 1").status == 64);  // not rw
    CHECK(run("bench --backend memory:// --seconds 300ms --quiet --primitive rw --writers 3").status == 64);  // > threads
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
        auto r = distlock::test::run_command(std::string(DISTLOCK_CLI) +
                                             " status --backend 'redis://:hunter2-secret@127.0.0.1:1?connect_timeout=200ms'"
                                             " --name x --json 2>&1");
        CHECK(r.status == 69);
        CHECK(r.out.find("hunter2-secret") == std::string::npos);
    }
}

TEST_CASE("elect runs the command while leading, with the term, and exits 75 when another leads", "[cli][elect]") {
    const auto url = "file://" + lock_dir();
    auto r = run("elect --backend " + url + " --name leader-job --id cli-a -- sh -c 'echo term=$DISTLOCK_FENCING_TOKEN; "
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
    auto inner = run("elect --backend " + url + " --name leader-job --id cli-b -- " + std::string(DISTLOCK_CLI) +
                     " status --backend " + url + " --name leader-job --election");
    CHECK(inner.status == 0);
    CHECK(inner.out.find("holder: cli-b\n") != std::string::npos);
    CHECK(run("elect --backend " + url + " --name leader-job --id 'bad\tid' -- true").status == 64);
}
