// distlock run: run a command only while holding a lock (flock(1) across hosts).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <cstring>
#include <iostream>

#include "distlock/distlock.hpp"
#include "tool.hpp"

extern char** environ;

namespace distlock::tool {
namespace {

constexpr int exit_not_acquired = 75;  // EX_TEMPFAIL: lock not acquired in time
constexpr int exit_lock_lost = 70;     // the lock was lost while the command ran (it got SIGTERM)

std::atomic<pid_t> g_child{0};

void forward_signal(int sig) {
    pid_t c = g_child.load();
    if (c > 0) ::kill(c, sig);
}

struct settings {
    std::string backend, name, wait = "forever", lease;
    std::vector<std::string> command;
    bool quiet = false;
};

int run_command(const settings& s) {
    if (s.command.empty()) throw invalid_argument_error(errc::invalid_argument, "run", "no command given after --");
    auto locks = connect(s.backend);
    lock_options opts;
    if (!s.lease.empty()) opts.lease = parse_duration(s.lease);
    std::atomic<bool> lost{false};
    std::string lost_reason;
    opts.on_lost = [&](const lock_event& e) {
        lost_reason = e.reason;
        lost = true;
        pid_t c = g_child.load();
        if (c > 0) ::kill(c, SIGTERM);
    };
    auto m = locks.mutex(s.name, opts);
    bool acquired = s.wait == "forever" ? (m.lock(), true) : m.try_lock_for(parse_duration(s.wait));
    if (!acquired) {
        if (!s.quiet) std::cerr << "distlock run: lock '" << s.name << "' not acquired within " << s.wait << "\n";
        return exit_not_acquired;
    }
    // Everything the child needs is prepared before fork: only exec follows it.
    std::vector<std::string> env_strings;
    for (char** e = environ; *e; ++e)
        if (std::strncmp(*e, "DISTLOCK_FENCING_TOKEN=", 23) != 0 && std::strncmp(*e, "DISTLOCK_LOCK_NAME=", 19) != 0)
            env_strings.emplace_back(*e);
    env_strings.push_back("DISTLOCK_FENCING_TOKEN=" + std::to_string(m.token()));
    env_strings.push_back("DISTLOCK_LOCK_NAME=" + s.name);
    std::vector<char*> envp, argv;
    for (auto& e : env_strings) envp.push_back(e.data());
    envp.push_back(nullptr);
    std::vector<std::string> args = s.command;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);

    struct sigaction sa {};
    sa.sa_handler = forward_signal;
    ::sigaction(SIGINT, &sa, nullptr);
    ::sigaction(SIGTERM, &sa, nullptr);
    ::sigaction(SIGHUP, &sa, nullptr);
    const std::string cannot = "distlock run: cannot execute " + s.command[0] + ": ";  // made before fork
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
    if (lost) ::kill(pid, SIGTERM);  // lost between acquire and fork
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    g_child = 0;
    m.unlock();
    if (lost) {
        std::cerr << "distlock run: lock '" << s.name << "' was lost while the command ran (" << lost_reason
                  << "); the command was sent SIGTERM\n";
        return exit_lock_lost;
    }
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    return 128 + WTERMSIG(status);
}

}  // namespace

void add_run(CLI::App& app, std::function<int()>& action) {
    auto s = std::make_shared<settings>();
    auto* cmd = app.add_subcommand("run", "Run a command only while holding a lock");
    cmd->add_option("--backend", s->backend, "Lock backend URL")->required();
    cmd->add_option("--name", s->name, "Lock name")->required();
    cmd->add_option("--wait", s->wait, "How long to wait for the lock (e.g. 10s, 0 = try once, forever)")
        ->capture_default_str();
    cmd->add_option("--lease", s->lease, "Lease length (default: the URL's lease= or the backend's)");
    cmd->add_flag("--quiet,-q", s->quiet, "No messages on stderr");
    cmd->add_option("command", s->command, "The command and its arguments (after --)")->required();
    cmd->footer(
        "Exit status: the command's; 75 when the lock was not acquired in time; 70 when the lock was lost while the\n"
        "command ran (it was sent SIGTERM); 127 when the command does not exist, 126 when it cannot be executed;\n"
        "64 bad arguments, 69 backend unavailable, 77 access denied. The command sees DISTLOCK_FENCING_TOKEN and\n"
        "DISTLOCK_LOCK_NAME.");
    cmd->callback([s, &action] { action = [s] { return run_command(*s); }; });
}

}  // namespace distlock::tool
