#include "child_process.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <thread>

#include "support.hpp"

extern char** environ;

namespace distlock::test {

namespace {

// Our environment with `overrides` set or replaced: "NAME=value" strings.
std::vector<std::string> environment_with(const std::vector<std::pair<std::string, std::string>>& overrides) {
    std::vector<std::string> out;
    for (char** e = environ; *e != nullptr; ++e) {
        std::string entry(*e);
        const auto name = entry.substr(0, entry.find('='));
        bool replaced = false;
        for (const auto& [k, v] : overrides) replaced = replaced || k == name;
        if (!replaced) out.push_back(std::move(entry));
    }
    for (const auto& [k, v] : overrides) out.push_back(k + "=" + v);
    return out;
}

std::vector<char*> pointers_to(std::vector<std::string>& strings) {
    std::vector<char*> out;
    for (auto& s : strings) out.push_back(s.data());
    out.push_back(nullptr);
    return out;
}

// In the forked child: makes `fd` the descriptor `target`, open across exec.
void install(int fd, int target) {
    if (fd == target) ::fcntl(fd, F_SETFD, 0);
    else ::dup2(fd, target);
}

void close_fd(int& fd) {
    if (fd >= 0) ::close(fd);
    fd = -1;
}

}  // namespace

child_process::child_process(const std::vector<std::string>& argv, child_options options) {
    if (argv.empty()) throw std::runtime_error("child_process: no program");
    // Everything the child needs is built before the fork: after it, in a
    // threaded program, only async-signal-safe calls are allowed.
    auto args = argv;
    auto arg_ptrs = pointers_to(args);
    std::vector<std::string> env_strings;
    std::vector<char*> env_ptrs;
    if (!options.env.empty()) {
        env_strings = environment_with(options.env);
        env_ptrs = pointers_to(env_strings);
    }
    // O_CLOEXEC: a sibling child started later does not inherit these ends
    // (which would keep a pipe open after this child exits).
    int in[2] = {-1, -1}, out[2] = {-1, -1};
    auto fail = [&](const char* what) {
        const std::string err = std::strerror(errno);
        for (int fd : {in[0], in[1], out[0], out[1]})
            if (fd >= 0) ::close(fd);
        throw std::runtime_error(std::string("child_process: ") + what + " failed: " + err);
    };
    if (::pipe2(out, O_CLOEXEC) != 0 || (options.stdin_pipe && ::pipe2(in, O_CLOEXEC) != 0)) fail("pipe");
    pid_ = ::fork();
    if (pid_ < 0) fail("fork");
    if (pid_ == 0) {
        if (in[0] >= 0) install(in[0], 0);
        install(out[1], 1);
        if (env_ptrs.empty()) ::execvp(arg_ptrs[0], arg_ptrs.data());
        else ::execvpe(arg_ptrs[0], arg_ptrs.data(), env_ptrs.data());
        ::_exit(127);
    }
    ::close(out[1]);
    out_ = out[0];
    if (in[0] >= 0) {
        ::close(in[0]);
        in_ = in[1];
    }
}

child_process::~child_process() {
    kill_hard();
    close_fd(in_);
    close_fd(out_);
}

bool child_process::say(const std::string& line) {
    if (in_ < 0) return false;
    const auto text = line + "\n";
    // A child that has closed its stdin must not kill us with SIGPIPE: block it
    // for this thread, and take a SIGPIPE our write raised before unblocking.
    sigset_t pipe_set, old;
    sigemptyset(&pipe_set);
    sigaddset(&pipe_set, SIGPIPE);
    ::pthread_sigmask(SIG_BLOCK, &pipe_set, &old);
    bool ok = true;
    for (std::size_t done = 0; done < text.size();) {
        auto n = ::write(in_, text.data() + done, text.size() - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            ok = false;
            if (errno == EPIPE && !sigismember(&old, SIGPIPE)) {
                const timespec none{0, 0};
                while (::sigtimedwait(&pipe_set, nullptr, &none) < 0 && errno == EINTR) {}
            }
            break;
        }
        done += static_cast<std::size_t>(n);
    }
    ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
    return ok;
}

void child_process::close_input() { close_fd(in_); }

std::string child_process::read_line(std::chrono::milliseconds limit) {
    const auto until = std::chrono::steady_clock::now() + limit;
    for (;;) {
        if (auto nl = buf_.find('\n'); nl != std::string::npos) {
            auto line = buf_.substr(0, nl);
            buf_.erase(0, nl + 1);
            return line;
        }
        if (eof_ || out_ < 0) return std::exchange(buf_, {});
        const auto left =
            std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
        if (left.count() <= 0) return {};
        pollfd p{out_, POLLIN, 0};
        if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;  // timeout or EINTR: look at the clock
        char chunk[512];
        const auto n = ::read(out_, chunk, sizeof chunk);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            eof_ = true;
            continue;
        }
        buf_.append(chunk, static_cast<std::size_t>(n));
    }
}

bool child_process::signal(int sig) { return pid_ > 0 && ::kill(pid_, sig) == 0; }

// `status` from waitpid, or -1 when waitpid failed (the status is unknown).
int child_process::reaped(int status) {
    pid_ = -1;
    status_ = status < 0 ? -1 : WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return status_;
}

// Blocks until it exits; its waitpid status, or -1.
int child_process::wait_blocking() {
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0)
        if (errno != EINTR) return -1;
    return status;
}

int child_process::wait_exit() {
    if (pid_ <= 0) return status_;
    return reaped(wait_blocking());
}

std::optional<int> child_process::wait_exit_for(std::chrono::milliseconds limit) {
    if (pid_ <= 0) return status_;
    const auto until = std::chrono::steady_clock::now() + limit;
    for (;;) {
        int status = 0;
        const auto r = ::waitpid(pid_, &status, WNOHANG);
        if (r == pid_) return reaped(status);
        if (r < 0 && errno != EINTR) return reaped(-1);
        if (std::chrono::steady_clock::now() >= until) return std::nullopt;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
}

void child_process::kill_hard() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    ::kill(pid_, SIGCONT);  // should it be stopped
    reaped(wait_blocking());
}

std::string beside_test(const std::string& program) { return exe_dir() + "/" + program; }

}  // namespace distlock::test
