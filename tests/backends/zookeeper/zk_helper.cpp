// Child process of the ZooKeeper tests.
//   distlock-zk-helper hold URL NAME
//     takes the lock, prints "locked <token>", then watches held(): prints
//     "lost <reason>" from on_lost and, once held() is false and on_lost has run
//     (or 30 s have passed without it), "released-by-loss"; then unlocks and
//     exits 0. Gives up (exit 3) after 120 s. Meant to be frozen with SIGSTOP.
//   distlock-zk-helper hold-release URL NAME
//     takes the lock, prints "locked <token>", waits for a line on stdin and
//     unlocks at once, without looking at held(); prints what the release said
//     ("lost <reason>" from on_lost, "error <errc> <reason>" from on_error),
//     then "unlocked", and exits 0. Meant to be frozen with SIGSTOP with the
//     line already written, so that it releases the moment it resumes.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <string>
#include <thread>

#include "distlock/distlock.hpp"

int main(int argc, char** argv) try {
    const std::string mode = argc == 4 ? argv[1] : "";
    if (mode != "hold" && mode != "hold-release") {
        std::cerr << "usage: distlock-zk-helper hold|hold-release URL NAME\n";
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
    opts.on_error = [](const distlock::lock_event& e, const distlock::error& err) {
        std::printf("error %d %s\n", err.code().value(), e.reason.c_str());
        std::fflush(stdout);
    };
    auto m = locks.mutex(argv[3], opts);
    m.lock();
    std::printf("locked %llu\n", static_cast<unsigned long long>(m.token()));
    std::fflush(stdout);
    if (mode == "hold-release") {
        std::string line;
        std::getline(std::cin, line);
        m.unlock();  // on_lost / on_error have run when it returns
        std::printf("unlocked\n");
        std::fflush(stdout);
        return 0;
    }
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
