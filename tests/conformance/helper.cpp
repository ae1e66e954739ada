// The child process of the conformance suite's multi-process cases: the suite's
// own program run again as `PROGRAM --conformance-helper ARGS...` (so that it
// knows the schemes the program registered), with ARGS:
//   hold URL NAME          take the lock, print "locked <token>", then sleep until killed
//   count URL NAME FILE N  N times: lock, read the integer in FILE, pause, write it + 1, unlock
//   hold-read URL NAME     take the read side of a read-write lock, print "read <token>", sleep until killed
//   hold-write URL NAME    take its write side, print "write <token>", sleep until killed
//   hold-permit URL NAME P take a permit of a semaphore of P, print "permit <token>", sleep until killed
//   rw-mix URL NAME SHM N  N rounds: read (even rounds, and odd ones of odd pids) or write,
//                          counting holders in the mapped counters SHM (suite.hpp)
//   permits URL NAME SHM N P  N rounds of a permit of a semaphore of P, counted in SHM
//   multi URL FILE N NAME...  N times: the multi-lock of the NAMEs (listed in this order),
//                          read the integer in FILE, pause, write it + 1
//   elect URL NAME SHM N   N terms as leader of election NAME (id "proc-<pid>"), counted as
//                          holders in SHM; a leader() naming another id counts a violation
//   lead URL NAME ID       campaign as ID, print "leader <term>", then sleep until killed
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <shared_mutex>
#include <fstream>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "distlock/distlock.hpp"
#include "suite.hpp"
#include "support.hpp"

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

[[noreturn]] void hold_forever(const char* what, std::uint64_t token) {
    std::printf("%s %llu\n", what, static_cast<unsigned long long>(token));
    std::fflush(stdout);
    for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
}

void pause_inside() { std::this_thread::sleep_for(std::chrono::milliseconds(2)); }

}  // namespace

namespace distlock::test {

provider connect_under_test() { return distlock::connect(backend_url()); }

std::unique_ptr<child_process> run_helper(std::vector<std::string> args) {
    args.insert(args.begin(), {"/proc/self/exe", conformance_helper_flag});
    return std::make_unique<child_process>(args);
}

void raise_max(std::atomic<int>& max, int now) {
    int seen = max.load();
    while (now > seen && !max.compare_exchange_weak(seen, now)) {
    }
}

void critical_section::pass(std::chrono::microseconds pause) {
    raise_max(max_inside, ++inside);
    long v = counter;
    std::this_thread::sleep_for(pause);
    counter = v + 1;
    --inside;
}

holder_counters& map_counters(const std::string& path, bool create) {
    int fd = ::open(path.c_str(), create ? O_RDWR | O_CREAT | O_TRUNC : O_RDWR, 0600);
    if (fd < 0 || (create && ::ftruncate(fd, sizeof(holder_counters)) != 0)) std::abort();
    void* p = ::mmap(nullptr, sizeof(holder_counters), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ::close(fd);
    if (p == MAP_FAILED) std::abort();
    return *static_cast<holder_counters*>(p);  // a zero-filled file is zeroed counters
}

void enter_read(holder_counters& c) {
    raise_max(c.max_readers, ++c.readers);
    if (c.writers.load() != 0) ++c.violations;
}
void leave_read(holder_counters& c) {
    if (c.writers.load() != 0) ++c.violations;
    --c.readers;
    ++c.rounds;
}
void enter_write(holder_counters& c) {
    const int w = ++c.writers;
    raise_max(c.max_writers, w);
    if (w != 1 || c.readers.load() != 0) ++c.violations;
}
void leave_write(holder_counters& c) {
    if (c.writers.load() != 1 || c.readers.load() != 0) ++c.violations;
    --c.writers;
    ++c.rounds;
}
void enter_holder(holder_counters& c) { raise_max(c.max_holders, ++c.holders); }
void leave_holder(holder_counters& c) {
    --c.holders;
    ++c.rounds;
}

}  // namespace distlock::test

int distlock::test::conformance_helper(int argc, char** argv) try {
    if (argc < 3) {
        std::cerr << "usage: " << conformance_helper_flag << " hold URL NAME | " << conformance_helper_flag
                  << " count URL NAME FILE N\n";
        return 2;
    }
    std::string mode = argv[0];
    auto locks = distlock::connect(argv[1]);
    if (mode == "hold-read" || mode == "hold-write") {
        auto rw = locks.shared_mutex(argv[2]);
        if (mode == "hold-read") {
            rw.lock_shared();
            hold_forever("read", rw.shared_token());
        }
        rw.lock();
        hold_forever("write", rw.token());
    }
    if (mode == "hold-permit" && argc == 4) {
        auto s = locks.semaphore(argv[2], static_cast<std::uint32_t>(std::stoul(argv[3])));
        s.acquire();
        hold_forever("permit", s.token());
    }
    if (mode == "rw-mix" && argc == 5) {
        auto& c = map_counters(argv[3], false);
        auto rw = locks.shared_mutex(argv[2]);
        const long n = std::stol(argv[4]);
        for (long i = 0; i < n; ++i) {
            if (i % 2 == 0 || getpid() % 2 == 1) {
                std::shared_lock lk(rw);
                enter_read(c);
                pause_inside();
                leave_read(c);
            } else {
                std::unique_lock lk(rw);
                enter_write(c);
                pause_inside();
                leave_write(c);
            }
        }
        return 0;
    }
    if (mode == "permits" && argc == 6) {
        auto& c = map_counters(argv[3], false);
        auto s = locks.semaphore(argv[2], static_cast<std::uint32_t>(std::stoul(argv[5])));
        const long n = std::stol(argv[4]);
        for (long i = 0; i < n; ++i) {
            distlock::permit_guard g(s);
            enter_holder(c);
            pause_inside();
            leave_holder(c);
        }
        return 0;
    }
    if (mode == "multi" && argc >= 5) {
        const std::string file = argv[1 + 1];
        const long n = std::stol(argv[3]);
        auto all = locks.multi_lock(std::vector<std::string>(argv + 4, argv + argc));
        for (long i = 0; i < n; ++i) {
            std::lock_guard guard(all);
            long v = read_number(file);
            std::this_thread::sleep_for(std::chrono::microseconds(200));
            write_number(file, v + 1);
        }
        return 0;
    }
    if (mode == "elect" && argc == 5) {
        auto& c = map_counters(argv[3], false);
        distlock::election_options o;
        o.id = "proc-" + std::to_string(::getpid());
        auto e = locks.election(argv[2], o);
        const long n = std::stol(argv[4]);
        for (long i = 0; i < n; ++i) {
            if (!e.campaign(std::chrono::seconds(60))) return 3;
            enter_holder(c);
            const auto info = e.leader();
            // While leading, leader() may not say "free", nor hold back the
            // holder without a reason, nor name another id (a backend that
            // cannot tell whether it is held says nothing).
            const bool consistent = !info.held || (*info.held && (info.holder || info.unknown.count("holder")));
            if (!consistent || (info.holder && *info.holder != o.id)) ++c.violations;
            pause_inside();
            leave_holder(c);
            e.resign();
        }
        return 0;
    }
    if (mode == "lead" && argc == 4) {
        distlock::election_options o;
        o.id = argv[3];
        auto e = locks.election(argv[2], o);
        e.campaign();
        hold_forever("leader", e.term());
    }
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
