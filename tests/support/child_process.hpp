// A child process for the test programs: a helper beside the test binary, a
// peer speaking a line protocol (Curator, kazoo), a private server emulator.
// Its stdout is on a pipe read line by line with a time limit; its stdin is a
// pipe too when asked for. The destructor kills it if it still runs.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace distlock::test {

struct child_options {
    // Variables set (or replaced) in the child's environment; the rest is inherited.
    std::vector<std::pair<std::string, std::string>> env = {};
    // true: the child's stdin is a pipe written by say(); false: it inherits ours.
    bool stdin_pipe = false;
};

class child_process {
public:
    // Starts argv[0] (an absolute path, or a name looked up in PATH) with argv.
    // stderr is inherited. Throws std::runtime_error when the pipes or the fork
    // fail; a program that cannot be executed exits with 127.
    explicit child_process(const std::vector<std::string>& argv, child_options options = {});
    // SIGKILL (and SIGCONT, should it be stopped) and reap, if it still runs.
    ~child_process();
    child_process(const child_process&) = delete;
    child_process& operator=(const child_process&) = delete;

    // -1 once it has been reaped (wait_exit, wait_exit_for, kill_hard).
    pid_t pid() const { return pid_; }

    // Writes `line` and '\n' to its stdin (stdin_pipe only). false when that
    // fails: no stdin pipe, input closed, or the child closed its end (no SIGPIPE).
    bool say(const std::string& line);
    // Closes its stdin (it reads end of file). Harmless when already closed.
    void close_input();

    // The next line of its stdout without the '\n', or "" when none came within
    // `limit` or the output ended (a last line without '\n' is returned as is).
    std::string read_line(std::chrono::milliseconds limit);

    // Sends `sig` (SIGSTOP, SIGCONT, ...); false when it is not running or kill() failed.
    bool signal(int sig);

    // Waits for it to exit: its exit status, or 128 + the signal that ended it
    // (-1 when that cannot be known). Once reaped, the same value again.
    int wait_exit();
    // The same, or nullopt when it still runs after `limit` (it is left running).
    std::optional<int> wait_exit_for(std::chrono::milliseconds limit);
    // SIGKILL now (and SIGCONT, should it be stopped) and reap. Harmless once reaped.
    void kill_hard();

private:
    int reaped(int status);
    int wait_blocking();

    pid_t pid_ = -1;
    int in_ = -1;   // our end of its stdin, or -1
    int out_ = -1;  // our end of its stdout
    bool eof_ = false;
    int status_ = -1;  // the status once reaped
    std::string buf_;  // read, not yet returned
};

// The path of `program` in the directory of the running test binary.
std::string beside_test(const std::string& program);

}  // namespace distlock::test
