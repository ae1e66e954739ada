// distlock bench --async: the holders of bench_holders.hpp and their pipes.
#include "bench_holders.hpp"

#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "common.hpp"

namespace distlock::tool {
namespace {

void send(int fd, char c) {
    while (::write(fd, &c, 1) < 0)
        if (errno != EINTR) throw std::runtime_error(std::string("bench: pipe write: ") + std::strerror(errno));
}

// The next byte from `fd`; throws when none comes within `bound` or the other end is gone.
char receive(int fd, std::chrono::seconds bound, const char* waiting_for) {
    pollfd p{fd, POLLIN, 0};
    const int ms = static_cast<int>(std::chrono::milliseconds(bound).count());
    int r;
    while ((r = ::poll(&p, 1, ms)) < 0 && errno == EINTR) {}
    char c = 0;
    if (r > 0 && ::read(fd, &c, 1) == 1) return c;
    throw std::runtime_error(std::string("bench: no word from the ") + waiting_for + " within " +
                             std::to_string(bound.count()) + " s");
}

}  // namespace

// (The holder process's threads are not measured: they only shorten the setup.)
void for_each_parallel(std::size_t n, const std::function<void(std::size_t)>& work) {
    const std::size_t threads = std::min<std::size_t>(32, n);
    std::mutex mu;
    std::exception_ptr failure;
    std::vector<std::thread> pool;
    for (std::size_t t = 0; t < threads; ++t)
        pool.emplace_back([&, t] {
            try {
                for (std::size_t i = t; i < n; i += threads) work(i);
            } catch (...) {
                std::lock_guard lk(mu);
                if (!failure) failure = std::current_exception();
            }
        });
    for (auto& th : pool) th.join();
    if (failure) std::rethrow_exception(failure);
}

holder_channel::holder_channel() {
    if (::pipe(held) != 0 || ::pipe(go) != 0) throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
}

holder_channel::~holder_channel() {
    for (int fd : {held[0], held[1], go[0], go[1]})
        if (fd >= 0) ::close(fd);
}

void hold_in_process(const std::string& url, const std::vector<std::string>& names, holder_channel& ch,
                     std::chrono::seconds bound) {
    std::vector<distlock::mutex> held;
    try {
        auto locks = connect(url);
        held.reserve(names.size());
        for (const auto& name : names) held.push_back(locks.mutex(name));
        for_each_parallel(held.size(), [&](std::size_t i) {
            if (!held[i].try_lock_for(bound))
                throw std::runtime_error("bench: the holder process could not take '" + names[i] + "'");
        });
        send(ch.held[1], 'h');
        receive(ch.go[0], std::chrono::seconds(3600), "measuring process");
        for_each_parallel(held.size(), [&](std::size_t i) { held[i].unlock(); });
    } catch (...) {
        send(ch.held[1], 'e');  // the reason is the worker's line on stderr
        throw;
    }
}

holders::holders(const provider& locks, const std::vector<std::string>& names, holder_channel* ch,
                 std::chrono::seconds bound)  // per name
    : ch_(ch) {
    if (ch_) {
        if (receive(ch_->held[0], std::chrono::seconds(600), "holder process") != 'h')
            throw std::runtime_error("bench: the holder process failed");
        return;
    }
    own_.reserve(names.size());
    for (const auto& name : names) {
        own_.push_back(locks.mutex(name));
        if (!own_.back().try_lock_for(bound)) throw std::runtime_error("bench: could not take '" + name + "'");
    }
}

void holders::release() {
    if (ch_) send(ch_->go[1], 'r');
    for (auto& m : own_) m.unlock();
}

bool excludes_processes(const std::string& url) {
    return run_in_processes(
               1, [&](int) { return std::string(connect(url).caps().why_not(feature::cross_process)); }, [] {})[0]
        .empty();
}

}  // namespace distlock::tool
