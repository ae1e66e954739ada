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
#include <functional>
#include <future>
#include <iomanip>
#include <iostream>
#include <mutex>
#include <sstream>
#include <stop_token>
#include <thread>

#include "common.hpp"
#include "distlock/distlock.hpp"
#include "distlock/spi/url.hpp"
#include "process_tree.hpp"
#include "tool.hpp"

namespace distlock::tool {
namespace {

constexpr int exit_not_acquired = 75;  // EX_TEMPFAIL: lock not acquired in time (--conflict-exit-code)
constexpr int exit_lock_lost = 70;     // the lock was lost while the command ran (or while held)

std::atomic<int> g_stop_signal{0};  // the SIGINT/SIGTERM/SIGHUP that ends a wait, or hold

void note_stop(int sig) { g_stop_signal = sig; }

// From here on SIGINT, SIGTERM and SIGHUP are noted in g_stop_signal instead
// of ending the process: a wait ends on them (await_grant), hold releases.
void note_stop_signals() {
    struct sigaction sa {};
    sa.sa_handler = note_stop;
    for (int sig : {SIGINT, SIGTERM, SIGHUP}) ::sigaction(sig, &sa, nullptr);
}

// A stop signal came during a wait: it was cancelled, and what the wait had
// taken is given back as the objects holding it go (their destructors release).
struct interrupted {
    int signal;
};

// Starts an asynchronous acquisition (`start` passes the handler and the stop
// token on to async_lock and its kin) and waits here for its outcome: granted,
// or not within its deadline. A stop signal meanwhile cancels it through the
// library's cancellation (which leaves nothing on the server and lets the next
// waiter in at once) and throws interrupted, as does one that came with the grant.
bool await_grant(const std::function<void(acquire_handler, std::stop_token)>& start) {
    auto outcome = std::make_shared<std::promise<bool>>();
    auto done = outcome->get_future();
    std::stop_source stop;
    start(
        [outcome](std::exception_ptr error, bool granted) {
            if (error) outcome->set_exception(std::move(error));
            else outcome->set_value(granted);
        },
        stop.get_token());
    // A signal handler can only set a flag: it is looked at this often.
    while (done.wait_for(std::chrono::milliseconds(20)) != std::future_status::ready)
        if (g_stop_signal != 0) stop.request_stop();
    bool granted = false;
    try {
        granted = done.get();
    } catch (const cancelled_error&) {
        if (g_stop_signal != 0) throw interrupted{g_stop_signal};
        throw;
    }
    if (g_stop_signal != 0) throw interrupted{g_stop_signal};
    return granted;
}

// The deadline of a wait: none for --wait forever.
std::chrono::steady_clock::time_point wait_deadline(bool forever, std::chrono::steady_clock::time_point deadline) {
    return forever ? std::chrono::steady_clock::time_point::max() : deadline;
}

// What run and hold share: where the lock is and how to take it.
struct lock_settings {
    backend_choice source;  // --backend, --backend-file or the environment
    std::string backend;    // the URL, from source
    std::string name, wait = "forever", lease;
    std::string holder;  // --holder: this process's label (the URL's holder= otherwise)
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
        line << std::put_time(&tm, "%H:%M:%S") << '.' << std::setw(3) << std::setfill('0') << ms << " distlock " << who_
             << ": " << printable(what) << "\n";  // reasons and errors quote servers
        std::lock_guard lk(mutex_);
        std::cerr << line.str() << std::flush;
    }

private:
    const char* who_;
    bool on_;
    mutable std::mutex mutex_;
};

// --verbose: a line per renewal of the process's grants, whatever the
// primitive: the provider's renewal batches (observer::renewed), each grant's
// lease renewed or its session checked in one call to the server.
class renewal_log final : public observer {
public:
    explicit renewal_log(const event_log& log) : log_(log) {}
    void renewed(const renewal_event& e) override {
        std::string line = "renewed: " + std::to_string(e.ok) + " of " + std::to_string(e.batch) + " grant(s) in " +
                           std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(e.latency).count()) +
                           " ms";
        if (e.failed > 0) line += ", " + std::to_string(e.failed) + " not answered";
        if (e.lost > 0) line += ", " + std::to_string(e.lost) + " lost";
        log_(line);
    }

private:
    const event_log& log_;
};

// A lock taken as `s` says, reporting a loss through `lost` (set once, with why).
// The plain form holds the mutex NAME and then the write side of the
// read-write lock NAME, both until release, so that it excludes readers
// (--shared) as flock(1) excludes flock -s; --write holds the same two (see
// take_exclusive for the backends where one of them is the whole exclusion).
struct held_lock {
    explicit held_lock(provider p) : locks(std::move(p)) {}
    provider locks;
    std::optional<mutex> m;          // the mutex NAME: plain and --write
    std::optional<shared_mutex> rw;  // the read-write lock NAME: its read side (--shared) or write side
    std::optional<semaphore> sem;    // --permits
    std::optional<election> leader;  // elect
    std::uint64_t token = 0;
    bool read_side = false;  // of rw
    bool holds = false;      // everything it was to take, taken
    // Once it holds: gives back all it took, the read-write lock first.
    void unlock() noexcept {
        if (rw) read_side ? rw->unlock_shared() : rw->unlock();
        if (m) m->unlock();
        if (sem) sem->release();
        if (leader) leader->resign();
    }
};

// What --shared / --permits make of the lock, for messages (the name escaped).
std::string what_lock(const lock_settings& s) {
    const auto name = printable(s.name);
    if (s.elect) return "leadership of '" + name + "'";
    if (s.shared) return "read side of '" + name + "'";
    if (s.write) return "write side of '" + name + "'";
    if (s.permits > 0) return "a permit of '" + name + "' (" + std::to_string(s.permits) + ")";
    return "'" + name + "'";
}

struct loss {
    std::atomic<bool> happened{false};
    std::mutex mutex;
    std::string reason;
    std::chrono::steady_clock::time_point at{};
};

// zk:// keeps one queue of nodes per name for the mutex and the read-write
// lock (Curator's layout: a mutex node counts as a writer for readers and
// writers), so there its mutex already is the write side; taking both would
// queue the second behind the first for ever.
bool mutex_is_write_side(const std::string& url) { return spi::url::parse(url).scheme() == "zk"; }

// The mutex and then the write side of the read-write lock of the name, until
// `deadline` (forever: no deadline); false (nothing held) when either is not
// had in time. Without read-write locks on the backend, the mutex alone; where
// the mutex is the write side, the one --write or the plain form names.
bool take_exclusive(held_lock& h, const lock_settings& s, const lock_options& opts, bool forever,
                    std::chrono::steady_clock::time_point deadline, const event_log& log) {
    const auto no_rw = h.locks.caps().why_not(feature::read_write);
    if (s.write && !no_rw.empty())
        throw unsupported_error(errc::unsupported, "",
                                "--write: the backend has no read-write lock (" + std::string(no_rw) + ")");
    const bool one_queue = no_rw.empty() && mutex_is_write_side(s.backend);
    if (!s.write || !one_queue) {
        auto& m = h.m.emplace(h.locks.mutex(s.name, opts));
        if (!await_grant([&](acquire_handler done, std::stop_token stop) {
                m.async_lock(wait_deadline(forever, deadline), std::move(done), std::move(stop));
            }))
            return false;
        if (!no_rw.empty()) {
            log("the backend has no read-write lock (" + std::string(no_rw) +
                "): the mutex alone (no reader can exist)");
            return true;
        }
        if (one_queue) {
            log("the mutex '" + s.name +
                "' is the write side of its read-write lock on this backend (one queue per name)");
            return true;
        }
    }
    auto& rw = h.rw.emplace(h.locks.shared_mutex(s.name, opts));
    if (await_grant([&](acquire_handler done, std::stop_token stop) {
            rw.async_lock(wait_deadline(forever, deadline), std::move(done), std::move(stop));
        })) {
        if (h.m) log("holding the mutex '" + s.name + "' and the write side of its read-write lock (readers kept out)");
        return true;
    }
    if (h.m) h.m->unlock();
    return false;
}

// Takes the lock; nullopt when not acquired within --wait (message printed).
std::optional<held_lock> take(const lock_settings& s, const char* who, const event_log& log, loss& lost) {
    if (s.name.empty()) throw invalid_argument_error(errc::invalid_argument, who, "--name is empty");
    if (int(s.shared) + int(s.write) + int(s.permits > 0) > 1)
        throw invalid_argument_error(errc::invalid_argument, who, "give one of --shared, --write and --permits");
    // Every argument is checked before connecting: a bad --wait or --lease is
    // a usage error even while the server is down.
    const bool forever = s.wait == "forever";
    const auto wait = forever ? std::chrono::milliseconds{0} : parse_duration(s.wait);
    lock_options opts;
    if (!s.lease.empty()) {
        opts.lease = parse_duration(s.lease);
        if (opts.lease.count() <= 0)  // as the URL's lease= (0 would mean the backend's default)
            throw invalid_argument_error(errc::invalid_argument, who, "--lease must be positive");
    }
    provider_options po;
    po.holder = s.holder;
    if (s.verbose) po.observer = std::make_shared<renewal_log>(log);
    held_lock h(connect(s.backend, po));
    opts.on_lost = [&lost, &log](const lock_event& e) {
        {
            std::lock_guard lk(lost.mutex);
            if (!lost.happened) {  // the first of its locks to go says why
                lost.reason = e.reason;
                lost.at = std::chrono::steady_clock::now();
            }
        }
        lost.happened = true;
        log("lost (token " + std::to_string(e.token) + "): " + e.reason);
    };
    opts.on_error = [&log](const lock_event& e, const error& err) {
        log("error (token " + std::to_string(e.token) + "): " + err.what());
    };
    const auto deadline = std::chrono::steady_clock::now() + wait;
    log("acquiring " + what_lock(s) + " on " + redact(s.backend) + (forever ? "" : " within " + s.wait));
    if (s.elect) {
        election_options eo;
        eo.id = s.id;
        eo.lease = opts.lease;
        eo.on_lost = opts.on_lost;
        eo.on_error = opts.on_error;
        auto& e = h.leader.emplace(h.locks.election(s.name, eo));
        h.holds = await_grant([&](acquire_handler done, std::stop_token stop) {
            e.async_campaign(wait_deadline(forever, deadline), std::move(done), std::move(stop));
        });
        if (h.holds) {
            h.token = e.term();
            log("leading as '" + e.id() + "'");
        } else {
            h.leader.reset();
        }
    } else if (s.shared) {
        auto& rw = h.rw.emplace(h.locks.shared_mutex(s.name, opts));
        h.read_side = true;
        h.holds = await_grant([&](acquire_handler done, std::stop_token stop) {
            rw.async_lock_shared(wait_deadline(forever, deadline), std::move(done), std::move(stop));
        });
        if (h.holds) h.token = rw.shared_token();
    } else if (s.permits > 0) {
        auto& sem = h.sem.emplace(h.locks.semaphore(s.name, s.permits, opts));
        h.holds = await_grant([&](acquire_handler done, std::stop_token stop) {
            sem.async_acquire(wait_deadline(forever, deadline), std::move(done), std::move(stop));
        });
        if (h.holds) h.token = sem.token();
        else h.sem.reset();
    } else {
        h.holds = take_exclusive(h, s, opts, forever, deadline, log);
        // The plain form's token is the mutex's, as it always was (a resource
        // fenced by `run NAME` keeps its sequence); --write's is the read-write
        // lock's, the sequence its readers' tokens come from.
        if (h.holds) h.token = s.write ? h.rw->token() : h.m->token();
        if (h.holds && h.m) {
            if (const auto until = h.m->valid_until())
                log("lease '" + s.name + "': valid for " +
                    std::to_string(
                        std::chrono::duration_cast<std::chrono::milliseconds>(*until - std::chrono::steady_clock::now())
                            .count()) +
                    " ms");
            else log("no lease: held until released or the session ends");
        }
    }
    if (!h.holds) {
        if (!s.quiet)
            std::cerr << "distlock " << who << ": " << what_lock(s) << " not acquired within " << s.wait << " ("
                      << wait.count() << " ms)\n";
        return std::nullopt;
    }
    log("acquired " + what_lock(s) + ", fencing token " + std::to_string(h.token));
    return std::optional<held_lock>(std::move(h));
}

// A wait ended by a stop signal: said (unless --quiet), and 128 + the signal.
int interrupted_wait(const interrupted& i, const lock_settings& s, const char* who, const event_log& log) {
    log("signal " + std::to_string(i.signal) + " during the wait: cancelled, nothing held");
    if (!s.quiet)
        std::cerr << "distlock " << who << ": " << ::strsignal(i.signal) << " while waiting for " << what_lock(s)
                  << ": the wait was cancelled, nothing is held\n";
    return 128 + i.signal;
}

// The signals run forwards to the command's whole tree; one a terminal sent
// (the kernel's) already reached the command's process group, and is not sent twice.
void forward_signal(int sig, siginfo_t* info, void*) {
    if (info == nullptr || info->si_code != SI_KERNEL) command_guard::forward(sig);
}

std::string status_text(int status) {
    return WIFEXITED(status) ? "exited with status " + std::to_string(WEXITSTATUS(status))
                             : "ended by signal " + std::to_string(WTERMSIG(status));
}

int run_command(run_settings& s) {
    const char* who = s.elect ? "elect" : "run";
    if (!s.shell.empty() && !s.command.empty())
        throw invalid_argument_error(errc::invalid_argument, who,
                                     "give either -c 'command line' or a command, not both");
    std::vector<std::string> args = s.shell.empty() ? s.command : std::vector<std::string>{"/bin/sh", "-c", s.shell};
    if (args.empty())
        throw invalid_argument_error(errc::invalid_argument, who,
                                     "no command given (CMD ARGS... or -c 'command line')");
    const auto kill_after = parse_duration(s.kill_after);
    s.backend = s.source.resolve(who);
    event_log log(who, s.verbose);
    // The command sees no secret: DISTLOCK_BACKEND goes when it holds one
    // (--backend-file or DISTLOCK_BACKEND_FILE keep the URL out altogether).
    std::vector<std::string> drop{"DISTLOCK_FENCING_TOKEN", "DISTLOCK_LOCK_NAME"};
    if (const char* url = std::getenv("DISTLOCK_BACKEND"); url != nullptr && redact(url) != url)
        drop.emplace_back("DISTLOCK_BACKEND");
    loss lost;
    // Declared before the guard so that, even when an exception unwinds, the
    // guard's end (which kills and waits for the whole tree) comes first and
    // the lock's release after it.
    std::optional<held_lock> held;
    // Before connecting: no thread runs yet, so the guard is a plain fork.
    command_guard guard(who, args, drop);
    note_stop_signals();
    try {
        if (auto taken = take(s, who, log, lost)) held.emplace(std::move(*taken));
        else return s.conflict_exit_code;
    } catch (const interrupted& i) {
        return interrupted_wait(i, s, who, log);
    }
    if (lost.happened) {  // before anything started
        held->unlock();
        if (!s.quiet)
            std::cerr << "distlock " << who << ": " << what_lock(s) << " was lost before the command started\n";
        return exit_lock_lost;
    }

    struct sigaction sa {};
    sa.sa_sigaction = forward_signal;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    for (int sig : {SIGINT, SIGTERM, SIGHUP}) ::sigaction(sig, &sa, nullptr);
    if (g_stop_signal != 0) {  // between the grant and the line above: the command never starts
        held->unlock();
        return interrupted_wait(interrupted{g_stop_signal}, s, who, log);
    }
    guard.start({"DISTLOCK_FENCING_TOKEN=" + std::to_string(held->token), "DISTLOCK_LOCK_NAME=" + s.name});

    // Until the whole tree is gone: once the lock is lost, or once the command
    // exited leaving processes behind, they all get SIGTERM, and SIGKILL
    // --kill-after later (after a loss, the next holder may be running).
    int status = 0;
    bool exited = false, termed = false, killed = false, left_behind = false, lost_seen = false;
    int fork_error = 0;
    std::optional<std::chrono::steady_clock::time_point> kill_at;
    auto kill_no_later_than = [&kill_at](std::chrono::steady_clock::time_point t) {
        if (!kill_at || t < *kill_at) kill_at = t;
    };
    for (bool gone = false; !gone;) {
        if (lost.happened && !lost_seen) {
            lost_seen = true;
            std::lock_guard lk(lost.mutex);
            kill_no_later_than(lost.at + kill_after);
        }
        if (exited && !termed && !lost_seen) {
            left_behind = true;
            kill_no_later_than(std::chrono::steady_clock::now() + kill_after);
        }
        if ((lost_seen || left_behind) && !termed) {
            guard.terminate();
            termed = true;
            log(lost_seen ? "sent SIGTERM to the command's processes"
                          : "the command left processes running: sent them SIGTERM");
        }
        if (kill_at && !killed && std::chrono::steady_clock::now() >= *kill_at) {
            guard.kill();
            killed = true;
            log("processes still ran " + s.kill_after + " after SIGTERM: sent SIGKILL");
        }
        // The reports that came, all of them before acting (an exit and
        // "gone" are written together when nothing is left).
        for (auto r = guard.next(std::chrono::milliseconds(20)); r; r = guard.next(std::chrono::milliseconds(0))) {
            if (r->what == command_guard::report::started) {
                log("started " + args[0] + " (pid " + std::to_string(r->value) + ")");
            } else if (r->what == command_guard::report::exited) {
                status = r->value;
                exited = true;
                log("the command " + status_text(status));
            } else if (r->what == command_guard::report::failed) {
                fork_error = r->value;
            } else if (r->what == command_guard::report::gone) {
                gone = true;
                break;
            }
        }
    }
    for (int sig : {SIGINT, SIGTERM, SIGHUP}) ::signal(sig, SIG_DFL);
    held->unlock();
    log("released " + what_lock(s));
    if (fork_error != 0) throw std::runtime_error(std::string("fork: ") + std::strerror(fork_error));
    const char* sent = killed ? "SIGTERM, then SIGKILL" : "SIGTERM";
    if (lost.happened) {
        if (!s.quiet) {
            std::lock_guard lk(lost.mutex);
            std::cerr << "distlock " << who << ": " << what_lock(s) << " was lost while the command ran ("
                      << printable(lost.reason) << "); the command and every process it started were sent " << sent
                      << "\n";
        }
        return exit_lock_lost;
    }
    if (left_behind && !s.quiet)
        std::cerr << "distlock " << who << ": the command " << status_text(status)
                  << " but left processes running; they were sent " << sent << " before the release\n";
    if (!exited) return 128 + SIGKILL;  // not seen: the guard died
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    return 128 + WTERMSIG(status);
}

int hold_lock(lock_settings& s) {
    event_log log("hold", s.verbose);
    loss lost;
    note_stop_signals();
    s.backend = s.source.resolve("hold");
    std::optional<held_lock> held;
    try {
        held = take(s, "hold", log, lost);
    } catch (const interrupted& i) {
        return interrupted_wait(i, s, "hold", log);
    }
    if (!held) return s.conflict_exit_code;
    // One line a script can read: the name and the fencing token.
    std::cout << printable(s.name) << " " << held->token << std::endl;
    while (g_stop_signal == 0 && !lost.happened) {
        ::poll(nullptr, 0, 50);
    }
    if (g_stop_signal != 0) log("signal " + std::to_string(g_stop_signal.load()) + ": releasing");
    held->unlock();
    log("released " + what_lock(s));
    if (lost.happened) {
        if (!s.quiet) {
            std::lock_guard lk(lost.mutex);
            std::cerr << "distlock hold: " << what_lock(s) << " was lost (" << printable(lost.reason) << ")\n";
        }
        return exit_lock_lost;
    }
    return 0;
}

void add_lock_options(CLI::App* cmd, lock_settings& s, bool primitives = true) {
    add_backend_options(cmd, s.source, "Lock backend URL (default: $DISTLOCK_BACKEND)");
    cmd->add_option("--name", s.name, s.elect ? "Election name" : "Lock name")->required();
    auto* wait = cmd->add_option("--wait,-w", s.wait,
                                 "How long to wait for the lock (10s, 1m30s, 0 = try once; default forever)")
                     ->capture_default_str();
    cmd->add_flag_callback(
           "--nonblock,--nb", [&s] { s.wait = "0"; }, "Try once, do not wait (flock's -n; the same as --wait 0)")
        ->excludes(wait);
    cmd->add_option("--holder", s.holder,
                    "This process's label, shown to others as the holder (consul lock's -name; default: the URL's "
                    "holder=, else host:pid)");
    cmd->add_option("--lease", s.lease, "Lease length (default: the URL's lease= or the backend's)");
    cmd->add_option("--conflict-exit-code,-E", s.conflict_exit_code,
                    "Exit status when the lock is not acquired in time")
        ->capture_default_str()
        ->check(CLI::Range(0, 255));
    cmd->add_flag("--quiet,-q", s.quiet, "No messages on stderr");
    cmd->add_flag("--verbose,-v", s.verbose,
                  "Acquire, renewal, loss, release (and the command's) events on stderr, with times");
    if (!primitives) return;
    auto* shared =
        cmd->add_flag("--shared,-s", s.shared,
                      "Take the read side of the read-write lock NAME (readers hold it together, as flock -s; "
                      "a plain holder or --write keeps them out)");
    auto* write = cmd->add_flag("--write", s.write,
                                "Take the mutex NAME and the write side of the read-write lock NAME, as the plain form "
                                "does, with the read-write lock's fencing token (the sequence its readers' tokens come "
                                "from) instead of the mutex's");
    auto* permits =
        cmd->add_option("--permits,-n", s.permits,
                        "Take one permit of the semaphore NAME of N permits (at most N holders at once). -n follows "
                        "consul lock -n (the limit), not flock -n: not waiting is --nonblock or -w 0 here")
            ->check(CLI::Range(1u, 1000000u))
            ->excludes(shared)
            ->excludes(write);
    shared->excludes(write);
    cmd->add_flag("--exclusive,-x")
        ->description("The plain form, said explicitly (flock -x): see NAME alone below")
        ->excludes(shared)
        ->excludes(permits);
}

}  // namespace

namespace {
// run and elect: the lock options, the command after them, run_command().
void add_command_runner(CLI::App* cmd, std::shared_ptr<run_settings> s, std::function<int()>& action) {
    cmd->add_option("-c,--command", s->shell, "A command line run by /bin/sh -c (instead of CMD ARGS...)");
    cmd->add_option("--kill-after", s->kill_after,
                    std::string("When the ") + (s->elect ? "leadership" : "lock") +
                        " is lost, the command and every process it started get SIGTERM, and SIGKILL this much later; "
                        "so do the processes it leaves running when it exits, before the release")
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
        if (!s->command.empty() && !after.empty()) {   // "CMD ARGS -- MORE": the "--" is the command's own
            s->command.push_back("--");
            s->command.insert(s->command.end(), after.begin(), after.end());
        }
        if (s->command.empty()) s->command = after;
        action = [s] { return run_command(*s); };
    });
}
}  // namespace

namespace {
// What run and elect say of the processes they start, in their help.
const char* const process_tree_help =
    "The command and every process it starts, at any depth (a new session or process group, a double fork\n"
    "included), are stopped before the release: on a loss, or when the command exits leaving some running, they\n"
    "get SIGTERM and, --kill-after later, SIGKILL; if distlock itself dies, even by SIGKILL, they are killed.\n"
    "The command inherits no descriptor above 2, SIGPIPE at its default, an empty signal mask, and no\n"
    "DISTLOCK_BACKEND that holds a password (--backend-file keeps the URL out of ps and the environment).\n";
// What the plain form means beside --shared, in the help of run and hold.
const char* const lock_forms_help =
    "NAME alone takes the mutex NAME and then the write side of the read-write lock NAME, both until the\n"
    "release: it excludes readers (--shared) as flock excludes flock -s, other plain holders, --write, and\n"
    "library users of either lock. Its DISTLOCK_FENCING_TOKEN is the mutex's. On a backend without read-write\n"
    "locks (redlock://) it takes the mutex alone, and on zk://, whose mutex already is the write side (one\n"
    "queue per name, as Curator lays it out), the mutex alone too (both said under --verbose).\n";
}  // namespace

void add_run(CLI::App& app, std::function<int()>& action) {
    auto s = std::make_shared<run_settings>();
    auto* cmd = app.add_subcommand("run", "Run a command only while holding a lock");
    add_lock_options(cmd, *s);
    cmd->footer(
        std::string(
            "Usage: distlock run --backend URL --name NAME [OPTIONS] [--] CMD ARGS...  or  ... -c 'COMMAND LINE'\n") +
        lock_forms_help + process_tree_help +
        "Exit status: the command's; 75 (or --conflict-exit-code) when the lock was not acquired in time; 70 when\n"
        "the lock was lost while the command ran; 127 when the command does not exist, 126 when it cannot be\n"
        "executed; 128+N when signal N (SIGINT, SIGTERM, SIGHUP) ended the wait, which leaves nothing held;\n"
        "64 bad arguments, 69 backend unavailable, 77 access denied. The command sees\n"
        "DISTLOCK_FENCING_TOKEN and DISTLOCK_LOCK_NAME.");
    add_command_runner(cmd, s, action);
}

void add_elect(CLI::App& app, std::function<int()>& action) {
    auto s = std::make_shared<run_settings>();
    s->elect = true;
    auto* cmd = app.add_subcommand("elect", "Run a command only while leading an election");
    add_lock_options(cmd, *s, false);
    cmd->add_option("--id", s->id,
                    "This candidate's id, shown as the leader (default: the URL's holder=, else host:pid)");
    cmd->footer(
        std::string(
            "Usage: distlock elect --backend URL --name NAME [--id ID] [OPTIONS] [--] CMD ARGS...  or  ... -c 'LINE'\n"
            "Campaigns, runs the command once leading, resigns when it exits.\n") +
        process_tree_help +
        "Exit status: the command's; 75 (or --conflict-exit-code) when not leading within --wait; 70 when\n"
        "leadership was lost while the command ran; 127/126 and 128+N (a signal during the wait) as for run;\n"
        "64 bad arguments, 69 backend unavailable, 77 access denied. The command sees DISTLOCK_FENCING_TOKEN (the "
        "term) and DISTLOCK_LOCK_NAME.");
    add_command_runner(cmd, s, action);
}

void add_hold(CLI::App& app, std::function<int()>& action) {
    auto s = std::make_shared<lock_settings>();
    auto* cmd =
        app.add_subcommand("hold", "Take a lock, print its name and fencing token, hold it until SIGINT/SIGTERM");
    add_lock_options(cmd, *s);
    cmd->footer(
        std::string(lock_forms_help) +
        "Prints 'NAME TOKEN' on stdout once held. Exit status: 0 when released after SIGINT/SIGTERM/SIGHUP; 75 (or\n"
        "--conflict-exit-code) when not acquired in time; 70 when the lock was lost while held; 128+N when\n"
        "signal N ended the wait (nothing is held then); 64 bad arguments, 69 backend unavailable, 77 access\n"
        "denied. It takes no command: 'distlock run' runs one while holding the lock.");
    cmd->callback([s, &action] { action = [s] { return hold_lock(*s); }; });
}

}  // namespace distlock::tool
