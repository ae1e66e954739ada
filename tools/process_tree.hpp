// The processes a command started, kept together so that every one of them
// stops before its lock is released or reported lost (run, elect).
//
// A guard process, forked before the lock is taken (no thread exists yet, so
// it may run ordinary code), becomes a child subreaper: a descendant that is
// orphaned (double fork, setsid and exit) is re-parented to the guard, never to
// init. The guard starts the command when told to, reaps everything, and finds
// the whole tree by walking /proc (parent chains up to itself), so that a
// descendant in another process group or session is reached too. It takes its
// orders over a pipe; when that pipe reaches end of file (distlock died, even
// by SIGKILL) it kills the whole tree and exits.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace distlock::tool {

// Records which signals this process was started with ignored, for the
// command (what nohup ignores stays ignored; SIGPIPE never does). Call first
// thing in main(), before the tool changes any disposition.
void note_inherited_signals();

// Every process whose parent chain reaches `root` (not `root` itself), read
// from /proc. Empty when /proc cannot be read.
std::vector<pid_t> descendants(pid_t root);

// Sends `sig` to every descendant of this process, then reaps; repeats until
// it has no child left (waitpid: ECHILD). `reaped(pid, status)` sees each
// child reaped. A process it may not signal (EPERM: it changed its user) is
// named once on stderr after `who`, and waited for.
void kill_all_descendants(const std::string& who, const std::function<void(pid_t, int)>& reaped);

class command_guard {
public:
    // What the guard reports.
    struct report {
        enum kind : char { started = 'P', exited = 'X', gone = 'G', failed = 'E' };
        char what;
        int value;  // started: the pid; exited: the wait status; failed: errno
    };

    // Forks the guard for the command `argv`, run with this process's
    // environment without `drop` (variable names), plus what start() adds.
    // `who` prefixes its messages. Call before this process starts any thread.
    command_guard(std::string who, std::vector<std::string> argv, std::vector<std::string> drop);
    // Closes the orders: the guard kills whatever still runs, exits, and is
    // reaped here (this waits for the tree to be gone).
    ~command_guard();
    command_guard(const command_guard&) = delete;
    command_guard& operator=(const command_guard&) = delete;

    // Orders. start: run the command with `env` ("NAME=value") added.
    void start(const std::vector<std::string>& env);
    void terminate();  // SIGTERM (and SIGCONT) to the whole tree
    void kill();       // SIGKILL to the whole tree until none is left; then it reports gone

    // The guard's next report within `limit`; nullopt when none came. A guard
    // that died (its reports end before `gone`) reports gone here, after this
    // process killed what it had left (this process is a subreaper too).
    std::optional<report> next(std::chrono::milliseconds limit);

    // For a signal handler: forward `sig` to the whole tree of the guard that
    // runs now, if any (async-signal-safe).
    static void forward(int sig) noexcept;

private:
    void order(char what, int value, const std::string& payload = {});
    void reap_guard() noexcept;

    std::string who_;
    pid_t pid_ = -1;
    int orders_ = -1;      // ours to write
    int reports_ = -1;     // ours to read
    std::string pending_;  // report bytes read, not yet returned
    bool gone_ = false;
};

}  // namespace distlock::tool
