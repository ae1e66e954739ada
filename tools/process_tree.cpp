#include "process_tree.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <set>
#include <stdexcept>
#include <unordered_map>

#include "distlock/error.hpp"

extern char** environ;

namespace distlock::tool {
namespace {

bool g_ignored[NSIG] = {};          // note_inherited_signals(): ignored when this process started
std::atomic<int> g_forward_fd{-1};  // the running guard's orders, for forward()

// One record of the pipes between distlock and its guard: a kind, a value, and
// for a start order a payload of that many bytes after it. 8 bytes are written
// at once, so records never interleave (PIPE_BUF).
constexpr std::size_t record_size = 8;

void put_record(char* out, char what, int value) noexcept {
    std::memset(out, 0, record_size);
    out[0] = what;
    std::memcpy(out + 4, &value, sizeof value);
}

int record_value(const char* in) noexcept {
    int v = 0;
    std::memcpy(&v, in + 4, sizeof v);
    return v;
}

// Repeats `io` (::read or ::write) until `size` bytes went; false at end of
// file or on an error.
template <class Io, class Byte>
bool all_of(Io io, int fd, Byte* data, std::size_t size) noexcept {
    while (size > 0) {
        const ssize_t n = io(fd, data, size);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return false;
        data += n;
        size -= static_cast<std::size_t>(n);
    }
    return true;
}

bool write_all(int fd, const char* data, std::size_t size) noexcept { return all_of(::write, fd, data, size); }
bool read_all(int fd, char* data, std::size_t size) noexcept { return all_of(::read, fd, data, size); }

void say(const std::string& line) noexcept { (void)write_all(2, line.data(), line.size()); }

// Reaps every child that has ended, each passed to `reaped`; false once none is
// left (ECHILD), true while some still run.
template <class Reaped>
bool reap_ended(Reaped&& reaped) {
    for (;;) {
        int status = 0;
        const pid_t pid = ::waitpid(-1, &status, WNOHANG);
        if (pid > 0) {
            reaped(pid, status);
            continue;
        }
        if (pid < 0 && errno == EINTR) continue;
        return !(pid < 0 && errno == ECHILD);
    }
}

// The parent of `pid` from /proc/<pid>/stat ("pid (comm) state ppid ..."; comm
// may hold spaces and parentheses, so the fields are read after the last ')').
std::optional<pid_t> parent_of(const char* pid) {
    const std::string path = std::string("/proc/") + pid + "/stat";
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return std::nullopt;
    char buf[512];
    const ssize_t n = ::read(fd, buf, sizeof buf - 1);
    ::close(fd);
    if (n <= 0) return std::nullopt;
    buf[n] = '\0';
    const char* close = std::strrchr(buf, ')');
    int ppid = 0;
    if (close == nullptr || std::sscanf(close + 1, " %*c %d", &ppid) != 1) return std::nullopt;
    return ppid;
}

// Sends `sig` to every descendant; the pids it was not allowed to signal.
std::vector<pid_t> signal_descendants(int sig) {
    std::vector<pid_t> denied;
    for (pid_t pid : descendants(::getpid()))
        if (::kill(pid, sig) != 0 && errno == EPERM) denied.push_back(pid);
    return denied;
}

// In the command's process, between fork and exec: what it inherits is only
// what it should (no descriptor above 2, default SIGPIPE, an empty mask), and
// it dies with its guard.
[[noreturn]] void exec_command(pid_t guard, std::vector<char*>& argv, std::vector<char*>& envp,
                               const std::string& cannot) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != guard) ::_exit(127);  // the guard died before the line above
    for (int sig = 1; sig < NSIG; ++sig)
        if (sig != SIGKILL && sig != SIGSTOP) ::signal(sig, g_ignored[sig] && sig != SIGPIPE ? SIG_IGN : SIG_DFL);
    sigset_t none;
    ::sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    if (::close_range(3, ~0U, 0) != 0)  // a kernel before 5.9: one by one
        for (int fd = 3, top = static_cast<int>(::sysconf(_SC_OPEN_MAX)); fd < top; ++fd) ::close(fd);
    ::execvpe(argv[0], argv.data(), envp.data());
    // As a shell does: 127 when there is no such command, 126 when it cannot run.
    const int err = errno;
    say(cannot + std::strerror(err) + "\n");
    ::_exit(err == ENOENT || err == ENOTDIR ? 127 : 126);
}

// The guard process (see process_tree.hpp). Single-threaded: a fork of a
// process that had not started a thread.
class guard_process {
public:
    guard_process(std::string who, int orders, int reports, std::vector<std::string> argv, std::vector<std::string> env)
        : who_(std::move(who)), orders_(orders), reports_(reports), argv_(std::move(argv)), env_(std::move(env)) {}

    [[noreturn]] void run() {
        ::prctl(PR_SET_CHILD_SUBREAPER, 1);
        // Signals are distlock's to handle (a terminal's SIGINT reaches the
        // command directly); a write to distlock after it died must not kill it.
        for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE}) ::signal(sig, SIG_IGN);
        ::signal(SIGCHLD, SIG_DFL);  // inherited ignored, children would vanish unreaped
        sigset_t chld;
        ::sigemptyset(&chld);
        ::sigaddset(&chld, SIGCHLD);
        ::sigprocmask(SIG_BLOCK, &chld, nullptr);
        const int children = ::signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
        for (;;) {
            pollfd p[2] = {{orders_, POLLIN, 0}, {children, POLLIN, 0}};
            // Without a signalfd, look for exits every 20 ms.
            const int n = ::poll(p, children >= 0 ? 2 : 1, children >= 0 ? -1 : 20);
            if (n < 0 && errno != EINTR) break;
            if (children >= 0 && (p[1].revents & POLLIN)) {
                signalfd_siginfo info;
                while (::read(children, &info, sizeof info) > 0) {}
            }
            reap();
            if (p[0].revents != 0) {
                obey();
                reap();  // a start that failed leaves nothing to wait for
            }
        }
        finish();
    }

private:
    // Reports are gathered and written at once: an exit and "gone" found in
    // one pass reach distlock together, so that it never takes the moment
    // between them for processes left behind.
    void report(char what, int value) {
        char rec[record_size];
        put_record(rec, what, value);
        out_.append(rec, sizeof rec);
    }
    void send() noexcept {
        (void)write_all(reports_, out_.data(), out_.size());  // distlock gone: EPIPE, ignored
        out_.clear();
    }

    void reaped(pid_t pid, int status) {
        if (pid == command_) {
            report(command_guard::report::exited, status);
            command_ = 0;
        }
    }

    // Reaps what has ended; once the command was started and nothing is left, reports gone and exits.
    void reap() {
        if (!reap_ended([this](pid_t pid, int status) { reaped(pid, status); }) &&
            command_ >= 0) {  // started (or failed to), and all gone
            report(command_guard::report::gone, 0);
            send();
            ::_exit(0);
        }
        send();
    }

    [[noreturn]] void finish() {
        kill_all_descendants(who_, [this](pid_t pid, int status) { reaped(pid, status); });
        report(command_guard::report::gone, 0);
        send();
        ::_exit(0);
    }

    void obey() {
        char rec[record_size];
        if (!read_all(orders_, rec, sizeof rec)) finish();  // distlock died, or closed its end
        const int value = record_value(rec);
        switch (rec[0]) {
            case 'S': {
                std::string payload(static_cast<std::size_t>(std::max(value, 0)), '\0');
                if (!read_all(orders_, payload.data(), payload.size())) finish();
                start(payload);
                break;
            }
            case 'T':
                signal_descendants(SIGTERM);
                signal_descendants(SIGCONT);  // a stopped process gets to handle it
                break;
            case 'F': signal_descendants(value); break;
            case 'K': finish();
            default: break;
        }
    }

    // payload: "NAME=value" entries added to the environment, each ended by a NUL.
    void start(const std::string& payload) {
        if (command_ != -1) return;  // once
        std::vector<std::string> env = env_;
        for (std::size_t at = 0; at < payload.size();) {
            const auto end = std::min(payload.find('\0', at), payload.size());
            env.push_back(payload.substr(at, end - at));
            at = end + 1;
        }
        std::vector<char*> argv, envp;
        for (auto& a : argv_) argv.push_back(a.data());
        argv.push_back(nullptr);
        for (auto& e : env) envp.push_back(e.data());
        envp.push_back(nullptr);
        const std::string cannot = "distlock " + who_ + ": cannot execute " + argv_[0] + ": ";
        const pid_t self = ::getpid();
        const pid_t pid = ::fork();
        if (pid == 0) exec_command(self, argv, envp, cannot);
        if (pid < 0) {
            report(command_guard::report::failed, errno);
            command_ = 0;  // nothing to wait for: gone follows
            return;
        }
        command_ = pid;
        report(command_guard::report::started, pid);
        send();
    }

    std::string who_;
    int orders_, reports_;
    std::vector<std::string> argv_, env_;
    pid_t command_ = -1;  // -1 not started, 0 ended (or never started), else running
    std::string out_;     // reports not yet sent
};

}  // namespace

void note_inherited_signals() {
    for (int sig = 1; sig < NSIG; ++sig) {
        struct sigaction old {};
        if (::sigaction(sig, nullptr, &old) == 0)
            g_ignored[sig] = (old.sa_flags & SA_SIGINFO) == 0 && old.sa_handler == SIG_IGN;
    }
}

std::vector<pid_t> descendants(pid_t root) {
    std::unordered_multimap<pid_t, pid_t> children;  // parent -> child
    if (DIR* proc = ::opendir("/proc")) {
        while (const dirent* e = ::readdir(proc)) {
            if (!std::all_of(e->d_name, e->d_name + std::strlen(e->d_name),
                             [](char c) { return c >= '0' && c <= '9'; }))
                continue;
            if (const auto ppid = parent_of(e->d_name))
                children.emplace(*ppid, static_cast<pid_t>(std::atol(e->d_name)));
        }
        ::closedir(proc);
    }
    std::vector<pid_t> out;
    std::vector<pid_t> todo{root};
    while (!todo.empty()) {
        const pid_t parent = todo.back();
        todo.pop_back();
        const auto [first, last] = children.equal_range(parent);
        for (auto it = first; it != last; ++it)
            if (it->second != root && std::find(out.begin(), out.end(), it->second) == out.end()) {
                out.push_back(it->second);
                todo.push_back(it->second);
            }
    }
    return out;
}

void kill_all_descendants(const std::string& who, const std::function<void(pid_t, int)>& reaped) {
    std::set<pid_t> named;
    for (int round = 0;; ++round) {
        for (pid_t pid : signal_descendants(SIGKILL))
            if (named.insert(pid).second)
                say("distlock " + who + ": cannot stop process " + std::to_string(pid) +
                    " (it changed its user: Operation not permitted); waiting for it to exit\n");
        if (!reap_ended(reaped)) return;  // nothing left: a subreaper has every orphan of its tree
        // A process just killed takes a moment to die; then back off to 100 ms
        // for one that cannot be killed (EPERM, or stuck in the kernel).
        ::usleep(static_cast<useconds_t>(std::min(1000 << std::min(round, 7), 100000)));
    }
}

command_guard::command_guard(std::string who, std::vector<std::string> argv, std::vector<std::string> drop)
    : who_(std::move(who)) {
    if (::access("/proc/self/stat", R_OK) != 0)
        throw unavailable_error(errc::unavailable, who_,
                                "cannot read /proc, where it finds the processes of the command to stop them");
    // Should the guard die, its orphans come here, and next() stops them.
    ::prctl(PR_SET_CHILD_SUBREAPER, 1);
    std::vector<std::string> env;
    for (char** e = environ; *e != nullptr; ++e) {
        const std::string entry(*e);
        const auto name = entry.substr(0, entry.find('='));
        if (std::find(drop.begin(), drop.end(), name) == drop.end()) env.push_back(entry);
    }
    int orders[2], reports[2];
    if (::pipe2(orders, O_CLOEXEC) != 0) throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
    if (::pipe2(reports, O_CLOEXEC) != 0) {
        const int err = errno;
        ::close(orders[0]);
        ::close(orders[1]);
        throw std::runtime_error(std::string("pipe: ") + std::strerror(err));
    }
    std::cout.flush();
    std::cerr.flush();
    pid_ = ::fork();
    if (pid_ == 0) {
        ::close(orders[1]);
        ::close(reports[0]);
        guard_process(who_, orders[0], reports[1], std::move(argv), std::move(env)).run();
    }
    const int err = errno;
    ::close(orders[0]);
    ::close(reports[1]);
    orders_ = orders[1];
    reports_ = reports[0];
    if (pid_ < 0) {
        ::close(orders_);
        ::close(reports_);
        throw std::runtime_error(std::string("fork: ") + std::strerror(err));
    }
    g_forward_fd = orders_;
}

command_guard::~command_guard() {
    g_forward_fd = -1;
    ::close(orders_);  // the guard kills what still runs and exits
    reap_guard();
    if (!gone_) kill_all_descendants(who_, [](pid_t, int) {});  // anything it left came here
    ::close(reports_);
}

void command_guard::reap_guard() noexcept {
    if (pid_ <= 0) return;
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {}
    pid_ = -1;
}

void command_guard::order(char what, int value, const std::string& payload) {
    char rec[record_size];
    put_record(rec, what, value);
    std::string all(rec, sizeof rec);
    all += payload;
    (void)write_all(orders_, all.data(), all.size());  // a guard that died is found by next()
}

void command_guard::start(const std::vector<std::string>& env) {
    std::string payload;
    for (const auto& e : env) payload.append(e).push_back('\0');
    order('S', static_cast<int>(payload.size()), payload);
}

void command_guard::terminate() { order('T', 0); }
void command_guard::kill() { order('K', 0); }

void command_guard::forward(int sig) noexcept {
    const int fd = g_forward_fd.load();
    if (fd < 0) return;
    char rec[record_size];
    put_record(rec, 'F', sig);
    (void)write_all(fd, rec, sizeof rec);
}

std::optional<command_guard::report> command_guard::next(std::chrono::milliseconds limit) {
    if (gone_) return report{report::gone, 0};
    while (pending_.size() < record_size) {
        pollfd p{reports_, POLLIN, 0};
        const int n = ::poll(&p, 1, static_cast<int>(limit.count()));
        if (n < 0 && errno == EINTR) return std::nullopt;
        if (n == 0) return std::nullopt;
        char buf[256];
        const ssize_t r = ::read(reports_, buf, sizeof buf);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {  // the guard died without saying gone: its orphans came here
            say("distlock " + who_ + ": the guard process ended unexpectedly; stopping what it left\n");
            kill_all_descendants(who_, [this](pid_t pid, int) {
                if (pid == pid_) pid_ = -1;
            });
            gone_ = true;
            return report{report::gone, 0};
        }
        pending_.append(buf, static_cast<std::size_t>(r));
    }
    report out{pending_[0], record_value(pending_.data())};
    pending_.erase(0, record_size);
    if (out.what == report::gone) {
        reap_guard();
        gone_ = true;
    }
    return out;
}

}  // namespace distlock::tool
