// distlock run: run a command only while holding a lock (flock(1) across hosts).
// distlock hold: take a lock and hold it until SIGINT/SIGTERM (etcdctl lock
// without a command).
// distlock elect: run a command only while leading an election (etcdctl elect
// with a command).
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <chrono>
#include <cstring>
#include <iomanip>
#include <iostream>
#include <mutex>
#include <sstream>
#include <thread>
#include <variant>

#include "common.hpp"
#include "distlock/distlock.hpp"
#include "tool.hpp"

extern char** environ;

namespace distlock::tool {
namespace {

constexpr int exit_not_acquired = 75;  // EX_TEMPFAIL: lock not acquired in time (--conflict-exit-code)
constexpr int exit_lock_lost = 70;     // the lock was lost while the command ran (or while held)

std::atomic<pid_t> g_child{0};
std::atomic<int> g_stop_signal{0};  // hold: the SIGINT/SIGTERM that ends it

void forward_signal(int sig) {
    pid_t c = g_child.load();
    if (c > 0) ::kill(c, sig);
}

void note_stop(int sig) { g_stop_signal = sig; }

// What run and hold share: where the lock is and how to take it.
struct lock_settings {
    std::string backend, name, wait = "forever", lease;
    int conflict_exit_code = exit_not_acquired;
    bool quiet = false, verbose = false;
    bool shared = false;        // --shared: the read side of the read-write lock `name`
    bool write = false;         // --write: its write side
    std::uint32_t permits = 0;  // --permits N: a permit of the semaphore `name` of N (0: the mutex)
    bool elect = false;         // distlock elect: leadership of the election `name`
    std::string id;             // elect --id: the candidate's id (default: the provider's holder label)
};

struct run_settings : lock_settings {
    std::vector<std::string> command;
    std::string shell;  // -c: a command line for /bin/sh
    std::string kill_after = "10s";
};

// --verbose: one line per event on stderr, with the wall-clock time.
class event_log {
public:
    event_log(const char* who, bool on) : who_(who), on_(on) {}
    void operator()(const std::string& what) const {
        if (!on_) return;
        const auto now = std::chrono::system_clock::now();
        const auto t = std::chrono::system_clock::to_time_t(now);
        const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
        std::tm tm{};
        ::localtime_r(&t, &tm);
        std::ostringstream line;
        line << std::put_time(&tm, "%H:%M:%S") << '.' << std::setw(3) << std::setfill('0') << ms << " distlock "
             << who_ << ": " << what << "\n";
        std::lock_guard lk(mutex_);
        std::cerr << line.str() << std::flush;
    }

private:
    const char* who_;
    bool on_;
    mutable std::mutex mutex_;
};

// --verbose: a line each time the lock's lease was renewed (its end moved on),
// seen by polling mutex::valid_until() from the loops that wait anyway.
class renewal_watch {
public:
    void operator()(const mutex& m, const event_log& log) {
        const auto until = m.valid_until();
        if (!until || (last_ && *until <= *last_)) return;
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(*until - std::chrono::steady_clock::now());
        log(std::string(last_ ? "renewed" : "lease") + " '" + m.name() + "': valid for " + std::to_string(left.count()) +
            " ms more");
        last_ = until;
    }

private:
    std::optional<std::chrono::steady_clock::time_point> last_;
};

// A lock taken as `s` says, reporting a loss through `lost` (set once, with why):
// the mutex, the read side of a read-write lock, or a semaphore's permit.
struct held_lock {
    provider locks;
    std::variant<mutex, shared_mutex, semaphore, election> lock;
    std::uint64_t token = 0;
    bool read_side = false;  // of a shared_mutex
    void unlock() noexcept {
        if (auto* m = std::get_if<mutex>(&lock)) m->unlock();
        if (auto* rw = std::get_if<shared_mutex>(&lock)) read_side ? rw->unlock_shared() : rw->unlock();
        if (auto* sem = std::get_if<semaphore>(&lock)) sem->release();
        if (auto* e = std::get_if<election>(&lock)) e->resign();
    }
    // --verbose shows renewals of a mutex (the other primitives do not say when their lease ends).
    void watch_renewals(renewal_watch& w, const event_log& log) const {
        if (const auto* m = std::get_if<mutex>(&lock)) w(*m, log);
    }
};

// What --shared / --permits make of the lock, for messages.
std::string what_lock(const lock_settings& s) {
    if (s.elect) return "leadership of '" + s.name + "'";
    if (s.shared) return "read side of '" + s.name + "'";
    if (s.write) return "write side of '" + s.name + "'";
    if (s.permits > 0) return "a permit of '" + s.name + "' (" + std::to_string(s.permits) + ")";
    return "'" + s.name + "'";
}

struct loss {
    std::atomic<bool> happened{false};
    std::mutex mutex;
    std::string reason;
    std::chrono::steady_clock::time_point at{};
};

// Takes the lock; nullopt when not acquired within --wait (message printed).
std::optional<held_lock> take(const lock_settings& s, const char* who, const event_log& log, loss& lost,
                              std::function<void()> on_lost = {}) {
    if (s.name.empty()) throw invalid_argument_error(errc::invalid_argument, who, "--name is empty");
    auto locks = connect(s.backend);
    lock_options opts;
    if (!s.lease.empty()) opts.lease = parse_duration(s.lease);
    opts.on_lost = [&lost, &log, on_lost = std::move(on_lost)](const lock_event& e) {
        {
            std::lock_guard lk(lost.mutex);
            lost.reason = e.reason;
            lost.at = std::chrono::steady_clock::now();
        }
        lost.happened = true;
        log("lost (token " + std::to_string(e.token) + "): " + e.reason);
        if (on_lost) on_lost();
    };
    opts.on_error = [&log](const lock_event& e, const error& err) { log("error (token " + std::to_string(e.token) + "): " + err.what()); };
    if (int(s.shared) + int(s.write) + int(s.permits > 0) > 1)
        throw invalid_argument_error(errc::invalid_argument, who, "give one of --shared, --write and --permits");
    const bool forever = s.wait == "forever";
    const auto wait = forever ? std::chrono::milliseconds{0} : parse_duration(s.wait);
    const auto deadline = std::chrono::steady_clock::now() + wait;
    log("acquiring " + what_lock(s) + " on " + redact(s.backend) + (forever ? "" : " within " + s.wait));
    std::optional<held_lock> held;
    if (s.elect) {
        election_options eo;
        eo.id = s.id;
        eo.lease = opts.lease;
        eo.on_lost = opts.on_lost;
        eo.on_error = opts.on_error;
        auto e = locks.election(s.name, eo);
        if (forever ? (e.campaign(), true) : e.campaign(std::chrono::duration_cast<std::chrono::milliseconds>(wait))) {
            const auto token = e.term();
            log("leading as '" + e.id() + "'");
            held.emplace(held_lock{std::move(locks), std::move(e), token});
        }
    } else if (s.shared || s.write) {
        auto rw = locks.shared_mutex(s.name, opts);
        bool got;
        if (s.shared) got = forever ? (rw.lock_shared(), true) : rw.try_lock_shared_until(deadline);
        else got = forever ? (rw.lock(), true) : rw.try_lock_until(deadline);
        if (got) {
            const auto token = s.shared ? rw.shared_token() : rw.token();
            held.emplace(held_lock{std::move(locks), std::move(rw), token, s.shared});
        }
    } else if (s.permits > 0) {
        auto sem = locks.semaphore(s.name, s.permits, opts);
        if (forever ? (sem.acquire(), true) : sem.try_acquire_until(deadline)) {
            const auto token = sem.token();
            held.emplace(held_lock{std::move(locks), std::move(sem), token});
        }
    } else {
        auto m = locks.mutex(s.name, opts);
        if (forever ? (m.lock(), true) : m.try_lock_until(deadline)) {
            const auto token = m.token();
            const bool leased = m.valid_until().has_value();
            held.emplace(held_lock{std::move(locks), std::move(m), token});
            if (!leased) log("no lease: held until released or the session ends");
        }
    }
    if (!held) {
        if (!s.quiet)
            std::cerr << "distlock " << who << ": " << what_lock(s) << " not acquired within " << s.wait << " ("
                      << wait.count() << " ms)\n";
        return std::nullopt;
    }
    log("acquired " + what_lock(s) + ", fencing token " + std::to_string(held->token));
    return held;
}

int run_command(const run_settings& s) {
    const char* who = s.elect ? "elect" : "run";
    if (!s.shell.empty() && !s.command.empty())
        throw invalid_argument_error(errc::invalid_argument, who, "give either -c 'command line' or a command, not both");
    std::vector<std::string> args = s.shell.empty() ? s.command : std::vector<std::string>{"/bin/sh", "-c", s.shell};
    if (args.empty()) throw invalid_argument_error(errc::invalid_argument, who, "no command given (CMD ARGS... or -c 'command line')");
    const auto kill_after = parse_duration(s.kill_after);
    event_log log(who, s.verbose);
    loss lost;
    auto held = take(s, who, log, lost, [] {
        if (pid_t c = g_child.load(); c > 0) ::kill(c, SIGTERM);
    });
    if (!held) return s.conflict_exit_code;

    // Everything the child needs is prepared before fork: only exec follows it.
    std::vector<std::string> env_strings;
    for (char** e = environ; *e; ++e)
        if (std::strncmp(*e, "DISTLOCK_FENCING_TOKEN=", 23) != 0 && std::strncmp(*e, "DISTLOCK_LOCK_NAME=", 19) != 0)
            env_strings.emplace_back(*e);
    env_strings.push_back("DISTLOCK_FENCING_TOKEN=" + std::to_string(held->token));
    env_strings.push_back("DISTLOCK_LOCK_NAME=" + s.name);
    std::vector<char*> envp, argv;
    for (auto& e : env_strings) envp.push_back(e.data());
    envp.push_back(nullptr);
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);

    struct sigaction sa {};
    sa.sa_handler = forward_signal;
    ::sigaction(SIGINT, &sa, nullptr);
    ::sigaction(SIGTERM, &sa, nullptr);
    ::sigaction(SIGHUP, &sa, nullptr);
    const std::string cannot = std::string("distlock ") + who + ": cannot execute " + args[0] + ": ";  // made before fork
    pid_t pid = ::fork();
    if (pid < 0) throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
    if (pid == 0) {
        ::execvpe(argv[0], argv.data(), envp.data());
        // As a shell does: 127 when there is no such command, 126 when it cannot run.
        const int err = errno;
        const char* why = std::strerror(err);
        (void)!::write(2, cannot.data(), cannot.size());
        (void)!::write(2, why, std::strlen(why));
        (void)!::write(2, "\n", 1);
        ::_exit(err == ENOENT || err == ENOTDIR ? 127 : 126);
    }
    g_child = pid;
    log("started " + args[0] + " (pid " + std::to_string(pid) + ")");
    if (lost.happened) ::kill(pid, SIGTERM);  // lost between acquire and fork
    // Wait for the command; once the lock is lost it has had SIGTERM, and it gets
    // SIGKILL when it still runs --kill-after later (the next holder may be running).
    int status = 0;
    bool killed = false;
    renewal_watch renewals;
    for (;;) {
        if (s.verbose) held->watch_renewals(renewals, log);
        const pid_t r = ::waitpid(pid, &status, WNOHANG);
        if (r == pid || (r < 0 && errno != EINTR)) break;
        if (lost.happened && !killed) {
            std::chrono::steady_clock::time_point at;
            {
                std::lock_guard lk(lost.mutex);
                at = lost.at;
            }
            if (std::chrono::steady_clock::now() - at >= kill_after) {
                ::kill(pid, SIGKILL);
                killed = true;
                log("the command still ran " + s.kill_after + " after SIGTERM: sent SIGKILL");
            }
        }
        ::poll(nullptr, 0, 20);
    }
    g_child = 0;
    log(WIFEXITED(status) ? "the command exited with status " + std::to_string(WEXITSTATUS(status))
                          : "the command ended by signal " + std::to_string(WTERMSIG(status)));
    held->unlock();
    log("released " + what_lock(s));
    if (lost.happened) {
        if (!s.quiet) {
            std::lock_guard lk(lost.mutex);
            std::cerr << "distlock " << who << ": " << what_lock(s) << " was lost while the command ran (" << lost.reason
                      << "); the command was sent SIGTERM" << (killed ? ", then SIGKILL" : "") << "\n";
        }
        return exit_lock_lost;
    }
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    return 128 + WTERMSIG(status);
}

int hold_lock(const lock_settings& s) {
    event_log log("hold", s.verbose);
    loss lost;
    struct sigaction sa {};
    sa.sa_handler = note_stop;
    ::sigaction(SIGINT, &sa, nullptr);
    ::sigaction(SIGTERM, &sa, nullptr);
    ::sigaction(SIGHUP, &sa, nullptr);
    auto held = take(s, "hold", log, lost);
    if (!held) return s.conflict_exit_code;
    // One line a script can read: the name and the fencing token.
    std::cout << s.name << " " << held->token << std::endl;
    renewal_watch renewals;
    while (g_stop_signal == 0 && !lost.happened) {
        if (s.verbose) held->watch_renewals(renewals, log);
        ::poll(nullptr, 0, 50);
    }
    if (g_stop_signal != 0) log("signal " + std::to_string(g_stop_signal.load()) + ": releasing");
    held->unlock();
    log("released " + what_lock(s));
    if (lost.happened) {
        if (!s.quiet) {
            std::lock_guard lk(lost.mutex);
            std::cerr << "distlock hold: " << what_lock(s) << " was lost (" << lost.reason << ")\n";
        }
        return exit_lock_lost;
    }
    return 0;
}

void add_lock_options(CLI::App* cmd, lock_settings& s, bool primitives = true) {
    cmd->add_option("--backend", s.backend, "Lock backend URL (default: $DISTLOCK_BACKEND)")
        ->envname("DISTLOCK_BACKEND")
        ->required();
    cmd->add_option("--name", s.name, "Lock name")->required();
    cmd->add_option("--wait", s.wait, "How long to wait for the lock (10s, 1m30s, 0 = try once; default forever)")
        ->capture_default_str();
    cmd->add_option("--lease", s.lease, "Lease length (default: the URL's lease= or the backend's)");
    cmd->add_option("--conflict-exit-code,-E", s.conflict_exit_code,
                    "Exit status when the lock is not acquired in time")
        ->capture_default_str()
        ->check(CLI::Range(0, 255));
    cmd->add_flag("--quiet,-q", s.quiet, "No messages on stderr");
    cmd->add_flag("--verbose,-v", s.verbose, "Acquire, renewal, loss, release (and the command's) events on stderr, with times");
    if (!primitives) return;
    auto* shared = cmd->add_flag("--shared", s.shared,
                                 "Take the read side of the read-write lock NAME (readers hold it together)");
    auto* write = cmd->add_flag("--write", s.write,
                                "Take the write side of the read-write lock NAME (alone, readers kept out); without "
                                "--shared, --write or --permits the lock is the mutex NAME");
    cmd->add_option("--permits,-n", s.permits,
                    "Take one permit of the semaphore NAME of N permits (at most N holders at once, like consul lock -n)")
        ->check(CLI::Range(1u, 1000000u))
        ->excludes(shared)
        ->excludes(write);
    shared->excludes(write);
}

}  // namespace

namespace {
// run and elect: the lock options, the command after them, run_command().
void add_command_runner(CLI::App* cmd, std::shared_ptr<run_settings> s, std::function<int()>& action) {
    cmd->add_option("-c,--command", s->shell, "A command line run by /bin/sh -c (instead of CMD ARGS...)");
    cmd->add_option("--kill-after", s->kill_after,
                    std::string("When the ") + (s->elect ? "leadership" : "lock") +
                        " is lost the command gets SIGTERM, and SIGKILL this much later")
        ->capture_default_str();
    // Everything from the first argument that is not one of the command's own
    // options is the command, its options included (no -- needed; -- still works).
    cmd->prefix_command();
    const std::string name = cmd->get_name();
    cmd->callback([s, cmd, name, &action] {
        s->command = cmd->remaining();
        const auto& after = args_after_dashes();
        if (!s->command.empty() && s->command[0].size() > 1 && s->command[0][0] == '-')
            throw CLI::ExtrasError(name, s->command);  // an option it does not know, before any command
        if (!s->command.empty() && !after.empty()) {  // "CMD ARGS -- MORE": the "--" is the command's own
            s->command.push_back("--");
            s->command.insert(s->command.end(), after.begin(), after.end());
        }
        if (s->command.empty()) s->command = after;
        action = [s] { return run_command(*s); };
    });
}
}  // namespace

void add_run(CLI::App& app, std::function<int()>& action) {
    auto s = std::make_shared<run_settings>();
    auto* cmd = app.add_subcommand("run", "Run a command only while holding a lock");
    add_lock_options(cmd, *s);
    cmd->footer(
        "Usage: distlock run --backend URL --name NAME [OPTIONS] [--] CMD ARGS...  or  ... -c 'COMMAND LINE'\n"
        "Exit status: the command's; 75 (or --conflict-exit-code) when the lock was not acquired in time; 70 when\n"
        "the lock was lost while the command ran (it was sent SIGTERM, then SIGKILL after --kill-after); 127 when\n"
        "the command does not exist, 126 when it cannot be executed; 64 bad arguments, 69 backend unavailable,\n"
        "77 access denied. The command sees DISTLOCK_FENCING_TOKEN and DISTLOCK_LOCK_NAME.");
    add_command_runner(cmd, s, action);
}

void add_elect(CLI::App& app, std::function<int()>& action) {
    auto s = std::make_shared<run_settings>();
    s->elect = true;
    auto* cmd = app.add_subcommand("elect", "Run a command only while leading an election");
    add_lock_options(cmd, *s, false);
    cmd->add_option("--id", s->id, "This candidate's id, shown as the leader (default: the URL's holder=, else host:pid)");
    cmd->footer(
        "Usage: distlock elect --backend URL --name NAME [--id ID] [OPTIONS] [--] CMD ARGS...  or  ... -c 'LINE'\n"
        "Campaigns, runs the command once leading, resigns when it exits. Exit status: the command's; 75 (or\n"
        "--conflict-exit-code) when not leading within --wait; 70 when leadership was lost while the command ran\n"
        "(it was sent SIGTERM, then SIGKILL after --kill-after); 127/126 as for run; 64 bad arguments, 69 backend\n"
        "unavailable, 77 access denied. The command sees DISTLOCK_FENCING_TOKEN (the term) and DISTLOCK_LOCK_NAME.");
    add_command_runner(cmd, s, action);
}

void add_hold(CLI::App& app, std::function<int()>& action) {
    auto s = std::make_shared<lock_settings>();
    auto* cmd = app.add_subcommand("hold", "Take a lock, print its name and fencing token, hold it until SIGINT/SIGTERM");
    add_lock_options(cmd, *s);
    cmd->footer(
        "Prints 'NAME TOKEN' on stdout once held. Exit status: 0 when released after SIGINT/SIGTERM/SIGHUP; 75 (or\n"
        "--conflict-exit-code) when not acquired in time; 70 when the lock was lost while held; 64 bad arguments,\n"
        "69 backend unavailable, 77 access denied.");
    cmd->callback([s, &action] { action = [s] { return hold_lock(*s); }; });
}

}  // namespace distlock::tool
