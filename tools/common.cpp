#include "common.hpp"

#include "distlock/distlock.hpp"
#include "distlock/error.hpp"
#include "distlock/spi/url.hpp"

#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <stdexcept>

namespace distlock::tool {

std::vector<std::string> run_in_processes(int n, const std::function<std::string(int)>& work,
                                          const std::function<void()>& tick) {
    struct kid {
        pid_t pid;
        int fd;
        std::string data;
        bool open = true;
    };
    std::vector<kid> kids;
    for (int i = 0; i < n; ++i) {
        int fds[2];
        if (::pipe(fds) != 0) throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
        std::cout.flush();
        std::cerr.flush();
        pid_t pid = ::fork();
        if (pid < 0) throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
        if (pid == 0) {
            ::close(fds[0]);
            int status = 0;
            try {
                std::string out = work(i);
                for (std::size_t off = 0; off < out.size();) {
                    ssize_t w = ::write(fds[1], out.data() + off, out.size() - off);
                    if (w <= 0) {
                        status = 3;
                        break;
                    }
                    off += static_cast<std::size_t>(w);
                }
            } catch (const std::exception& e) {
                // One write: the lines of workers failing at once never mix.
                const std::string line = "distlock: worker " + std::to_string(i) + ": " + e.what() + "\n";
                (void)!::write(2, line.data(), line.size());
                status = exit_status(e);
            }
            ::close(fds[1]);
            std::cerr.flush();
            ::_exit(status);
        }
        ::close(fds[1]);
        kids.push_back({pid, fds[0], {}});
    }
    auto last_tick = std::chrono::steady_clock::now();
    for (;;) {
        std::vector<pollfd> pfds;
        for (auto& k : kids)
            if (k.open) pfds.push_back({k.fd, POLLIN, 0});
        if (pfds.empty()) break;
        ::poll(pfds.data(), pfds.size(), 250);
        for (auto& k : kids) {
            if (!k.open) continue;
            pollfd p{k.fd, POLLIN, 0};
            if (::poll(&p, 1, 0) <= 0) continue;
            char buf[65536];
            ssize_t r = ::read(k.fd, buf, sizeof buf);
            if (r > 0) k.data.append(buf, static_cast<std::size_t>(r));
            else if (r == 0 || errno != EINTR) {
                ::close(k.fd);
                k.open = false;
            }
        }
        if (std::chrono::steady_clock::now() - last_tick >= std::chrono::seconds(1)) {
            last_tick = std::chrono::steady_clock::now();
            if (tick) tick();
        }
    }
    std::string failures;
    int first_status = 0;
    std::vector<std::string> out;
    for (std::size_t i = 0; i < kids.size(); ++i) {
        int status = 0;
        ::waitpid(kids[i].pid, &status, 0);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
            failures += std::string(failures.empty() ? "" : ", ") + std::to_string(i) + " (status " +
                        std::to_string(code) + ")";
            if (first_status == 0) first_status = WIFEXITED(status) ? code : 1;
        }
        out.push_back(std::move(kids[i].data));
    }
    if (!failures.empty()) throw workers_failed(first_status, "worker process(es) failed: " + failures);
    return out;
}

int exit_status(const std::exception& e) noexcept {
    const auto* de = dynamic_cast<const distlock::error*>(&e);
    if (de == nullptr) return 1;
    switch (de->code_value()) {
        case errc::invalid_argument: return 64;  // EX_USAGE
        case errc::unavailable: return 69;       // EX_UNAVAILABLE
        case errc::access_denied: return 77;     // EX_NOPERM
        default: return 1;
    }
}

double percentile(std::vector<double> samples, double p) {
    if (samples.empty()) return 0;
    std::sort(samples.begin(), samples.end());
    double rank = p / 100.0 * static_cast<double>(samples.size() - 1);
    auto lo = static_cast<std::size_t>(std::floor(rank));
    auto hi = std::min(lo + 1, samples.size() - 1);
    return samples[lo] + (samples[hi] - samples[lo]) * (rank - static_cast<double>(lo));
}

void put_u64(std::string& out, unsigned long long v) { out.append(reinterpret_cast<const char*>(&v), sizeof v); }

unsigned long long get_u64(const std::string& in, std::size_t& pos) {
    unsigned long long v = 0;
    if (pos + sizeof v > in.size()) throw std::runtime_error("truncated worker report");
    std::memcpy(&v, in.data() + pos, sizeof v);
    pos += sizeof v;
    return v;
}

void put_doubles(std::string& out, const std::vector<double>& v) {
    put_u64(out, v.size());
    if (!v.empty()) out.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(double));
}

std::vector<double> get_doubles(const std::string& in, std::size_t& pos) {
    auto n = get_u64(in, pos);
    if (pos + n * sizeof(double) > in.size()) throw std::runtime_error("truncated worker report");
    std::vector<double> v(n);
    if (n != 0) std::memcpy(v.data(), in.data() + pos, n * sizeof(double));
    pos += n * sizeof(double);
    return v;
}

std::string redact(const std::string& url) { return spi::redact_url(url); }

void require_cross_process(const std::string& url, int processes, const char* command) {
    if (processes <= 1) return;
    auto why = run_in_processes(1, [&](int) {
        auto p = distlock::connect(url);
        return std::string(p.caps().why_not(feature::cross_process));
    }, [] {})[0];
    if (!why.empty())
        throw_error(errc::invalid_argument, command,
                    std::to_string(processes) + " processes cannot share " + redact(url) + ": " + why +
                        " (use --processes 1, or a backend that excludes processes)");
}

std::string default_file_backend(const std::string& leaf) {
    std::string base;
    if (const char* xdg = std::getenv("XDG_RUNTIME_DIR"); xdg != nullptr && *xdg == '/') base = xdg;
    else if (::geteuid() == 0) base = "/run/lock";
    else if (const char* home = std::getenv("HOME"); home != nullptr && *home == '/') base = std::string(home) + "/.local/state";
    else base = "/run/lock";
    return "file://" + base + "/distlock/" + leaf;
}

double ms_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace distlock::tool
