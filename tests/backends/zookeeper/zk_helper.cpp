// Child process of the ZooKeeper tests.
//   distlock-zk-helper hold URL NAME
//     takes the lock, prints "locked <token>", then watches held(): prints
//     "lost <reason>" from on_lost and, once held() is false and on_lost has run
//     (or 30 s have passed without it), "released-by-loss"; then unlocks and
//     exits 0. Gives up (exit 3) after 120 s. Meant to be frozen with SIGSTOP.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <string>
#include <thread>

#include "distlock/distlock.hpp"

int main(int argc, char** argv) try {
    if (argc != 4 || std::string(argv[1]) != "hold") {
        std::cerr << "usage: distlock-zk-helper hold URL NAME\n";
        return 2;
    }
    auto locks = distlock::connect(argv[2]);
    static std::atomic<bool> told{false};
    distlock::lock_options opts;
    opts.on_lost = [](const distlock::lock_event& e) {
        std::printf("lost %s\n", e.reason.c_str());
        std::fflush(stdout);
        told = true;
    };
    auto m = locks.mutex(argv[3], opts);
    m.lock();
    std::printf("locked %llu\n", static_cast<unsigned long long>(m.token()));
    std::fflush(stdout);
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (std::chrono::steady_clock::now() < until) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        if (!m.held()) {
            // held() turns false at the lease's end; on_lost follows once the
            // stuck renewal returns. unlock() would cancel it, so wait for it.
            const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
            while (!told && std::chrono::steady_clock::now() < give_up)
                std::this_thread::sleep_for(std::chrono::milliseconds(10));
            std::printf("released-by-loss\n");
            std::fflush(stdout);
            m.unlock();
            return 0;
        }
    }
    return 3;
} catch (const std::exception& e) {
    std::cerr << "distlock-zk-helper: " << e.what() << "\n";
    return 1;
}
