// Helpers of the ZooKeeper tests: the test URL's parts, a child process with a
// line reader that times out, and the server's four-letter-word commands.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "support.hpp"

namespace zk_test {

// zk://h1:p1,h2:p2/base?params -> "h1:p1,h2:p2" and "/base".
inline std::string hosts_of(const std::string& url) {
    auto start = url.find("://") + 3;
    auto end = url.find_first_of("/?", start);
    return url.substr(start, end == std::string::npos ? std::string::npos : end - start);
}
inline std::string base_of(const std::string& url) {
    auto start = url.find('/', url.find("://") + 3);
    if (start == std::string::npos) return "/distlock";
    auto end = url.find('?', start);
    return url.substr(start, end == std::string::npos ? std::string::npos : end - start);
}

// Sends a four-letter-word command to host:port and returns the whole answer.
inline std::string four_letter(const std::string& host_port, const std::string& cmd) {
    auto colon = host_port.rfind(':');
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(std::stoi(host_port.substr(colon + 1))));
    ::inet_pton(AF_INET, host_port.substr(0, colon).c_str(), &addr.sin_addr);
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return {};
    std::string out;
    if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
        ::write(fd, cmd.data(), cmd.size()) == static_cast<ssize_t>(cmd.size())) {
        char buf[4096];
        for (;;) {
            pollfd p{fd, POLLIN, 0};
            if (::poll(&p, 1, 2000) <= 0) break;
            auto n = ::read(fd, buf, sizeof buf);
            if (n <= 0) break;
            out.append(buf, static_cast<std::size_t>(n));
        }
    }
    ::close(fd);
    return out;
}

// The number after "<key>" in a 4lw answer ("Total watches:12" -> 12), or -1.
inline long number_after(const std::string& text, const std::string& key) {
    auto at = text.find(key);
    if (at == std::string::npos) return -1;
    at += key.size();
    while (at < text.size() && (text[at] == ' ' || text[at] == '\t' || text[at] == ':')) ++at;
    try {
        return std::stol(text.substr(at));
    } catch (...) {
        return -1;
    }
}

// A child process (a program beside the test binary), stdout on a pipe.
class child {
public:
    child(const std::string& program, const std::vector<std::string>& args) {
        int fds[2];
        if (::pipe(fds) != 0) throw std::runtime_error("pipe failed");
        std::string exe = distlock::test::exe_dir() + "/" + program;
        pid_ = ::fork();
        if (pid_ < 0) throw std::runtime_error("fork failed");
        if (pid_ == 0) {
            ::dup2(fds[1], 1);
            ::close(fds[0]);
            ::close(fds[1]);
            std::vector<char*> argv{const_cast<char*>(exe.c_str())};
            for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
            argv.push_back(nullptr);
            ::execv(exe.c_str(), argv.data());
            ::_exit(127);
        }
        ::close(fds[1]);
        fd_ = fds[0];
    }
    ~child() {
        if (pid_ > 0) {
            ::kill(pid_, SIGKILL);
            ::kill(pid_, SIGCONT);
            ::waitpid(pid_, nullptr, 0);
        }
        if (fd_ >= 0) ::close(fd_);
    }
    child(const child&) = delete;
    child& operator=(const child&) = delete;

    pid_t pid() const { return pid_; }

    // The next line (without '\n'), or "" after `limit` or at end of output.
    std::string read_line(std::chrono::milliseconds limit) {
        auto until = std::chrono::steady_clock::now() + limit;
        for (;;) {
            if (auto nl = buf_.find('\n'); nl != std::string::npos) {
                auto line = buf_.substr(0, nl);
                buf_.erase(0, nl + 1);
                return line;
            }
            auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
            if (left.count() <= 0) return {};
            pollfd p{fd_, POLLIN, 0};
            if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
            char chunk[512];
            auto n = ::read(fd_, chunk, sizeof chunk);
            if (n <= 0) return {};
            buf_.append(chunk, static_cast<std::size_t>(n));
        }
    }

    int wait_exit() {
        int status = 0;
        ::waitpid(pid_, &status, 0);
        pid_ = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }

private:
    pid_t pid_ = -1;
    int fd_ = -1;
    std::string buf_;
};

}  // namespace zk_test
