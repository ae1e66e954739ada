// The child process of the conformance suite's multi-process cases: the suite's
// own program run again as `PROGRAM --conformance-helper ARGS...` (so that it
// knows the schemes the program registered), with ARGS:
//   hold URL NAME          take the lock, print "locked <token>", then sleep until killed
//   count URL NAME FILE N  N times: lock, read the integer in FILE, pause, write it + 1, unlock
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>
#include <thread>

#include "distlock/distlock.hpp"
#include "suite.hpp"

namespace {

long read_number(const std::string& path) {
    std::ifstream in(path);
    long v = 0;
    in >> v;
    return v;
}

void write_number(const std::string& path, long v) {
    std::ofstream out(path, std::ios::trunc);
    out << v << '\n';
}

}  // namespace

int distlock::test::conformance_helper(int argc, char** argv) try {
    if (argc < 3) {
        std::cerr << "usage: " << conformance_helper_flag << " hold URL NAME | " << conformance_helper_flag
                  << " count URL NAME FILE N\n";
        return 2;
    }
    std::string mode = argv[0];
    auto locks = distlock::connect(argv[1]);
    auto m = locks.mutex(argv[2]);
    if (mode == "hold") {
        m.lock();
        std::printf("locked %llu\n", static_cast<unsigned long long>(m.token()));
        std::fflush(stdout);
        for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
    }
    if (mode == "count" && argc == 5) {
        std::string file = argv[3];
        long n = std::stol(argv[4]);
        for (long i = 0; i < n; ++i) {
            std::lock_guard guard(m);
            long v = read_number(file);
            std::this_thread::sleep_for(std::chrono::microseconds(200));  // widen the race window
            write_number(file, v + 1);
        }
        return 0;
    }
    std::cerr << "bad arguments\n";
    return 2;
} catch (const std::exception& e) {
    std::cerr << "helper: " << e.what() << "\n";
    return 1;
}
