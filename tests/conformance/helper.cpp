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
//   try-in-locale URL LOCALE NAME...  in LOCALE (setlocale, before connecting), try each
//                          NAME once: print "busy" or "free" (and give it back)
//   hold-in-locale URL LOCALE NAME    in LOCALE, take NAME, print "locked", hold it until
//                          stdin ends, then unlock
#include <chrono>
#include <clocale>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <locale.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

#include "distlock/distlock.hpp"
#include "distlock/spi/backend.hpp"
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

// A directory of this user's holding de_DE.ISO-8859-1 (made once per user with
// localedef, kept in the temporary directory for the next runs); "" when it
// cannot be made.
std::string latin1_locale_dir() {
    namespace fs = std::filesystem;
    const auto dir = fs::temp_directory_path() / ("distlock-test-locales-" + std::to_string(::geteuid()));
    auto ours = [](const fs::path& p) {
        struct stat st {};
        return ::lstat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == ::geteuid();
    };
    std::error_code ec;
    if (ours(dir) && fs::exists(dir / "de_DE.ISO-8859-1" / "LC_CTYPE", ec)) return dir.string();
    if (fs::exists(dir, ec) || !fs::exists("/usr/share/i18n/locales/de_DE", ec)) return {};
    const auto work = fs::temp_directory_path() / ("distlock-test-locales-" + distlock::spi::random_token());
    if (!fs::create_directory(work, ec)) return {};
    // localedef exits 1 for warnings about the charmap: what counts is the result.
    (void)distlock::test::run_command("localedef -i de_DE -f ISO-8859-1 '" + (work / "de_DE.ISO-8859-1").string() +
                                      "' >/dev/null 2>&1");
    if (!fs::exists(work / "de_DE.ISO-8859-1" / "LC_CTYPE", ec) || (fs::rename(work, dir, ec), ec)) {
        fs::remove_all(work, ec);
        return ours(dir) && fs::exists(dir / "de_DE.ISO-8859-1" / "LC_CTYPE", ec) ? dir.string() : std::string{};
    }
    return dir.string();
}

// The helper's setlocale, or exit 3 saying why.
void set_locale_or_exit(const char* name) {
    if (std::setlocale(LC_ALL, name) == nullptr) {
        std::cerr << "helper: setlocale(LC_ALL, \"" << name << "\") failed\n";
        std::exit(3);
    }
}

}  // namespace

namespace distlock::test {

provider connect_under_test() { return distlock::connect(backend_url()); }

std::string printable(const std::string& name) {
    static constexpr char hex[] = "0123456789abcdef";
    std::string out;
    for (unsigned char c : name) {
        if (c >= 0x20 && c < 0x7f && c != '\\') {
            out += static_cast<char>(c);
        } else {
            out += "\\x";
            out += hex[c >> 4];
            out += hex[c & 15];
        }
    }
    return out;
}

const std::vector<test_locale>& test_locales() {
    static const std::vector<test_locale> list = [] {
        std::vector<test_locale> out;
        if (auto dir = latin1_locale_dir(); !dir.empty()) out.push_back({"de_DE.ISO-8859-1", dir});
        if (locale_t l = ::newlocale(LC_ALL_MASK, "C.UTF-8", locale_t{})) {
            ::freelocale(l);
            out.push_back({"C.UTF-8", ""});
        }
        return out;
    }();
    return list;
}

std::unique_ptr<child_process> run_helper(std::vector<std::string> args) {
    args.insert(args.begin(), {"/proc/self/exe", conformance_helper_flag});
    return std::make_unique<child_process>(args);
}

void raise_max(std::atomic<int>& max, int now) {
    int seen = max.load();
    while (now > seen && !max.compare_exchange_weak(seen, now)) {}
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
    if ((mode == "try-in-locale" && argc >= 4) || (mode == "hold-in-locale" && argc == 4)) {
        set_locale_or_exit(argv[2]);  // before connecting: URL parsing and name mapping both count
        auto locks = distlock::connect(argv[1]);
        if (mode == "hold-in-locale") {
            auto m = locks.mutex(argv[3]);
            m.lock();
            std::printf("locked\n");
            std::fflush(stdout);
            for (std::string line; std::getline(std::cin, line);) {}
            m.unlock();
            return 0;
        }
        for (int i = 3; i < argc; ++i) {
            auto m = locks.mutex(argv[i]);
            const bool got = m.try_lock();
            if (got) m.unlock();
            std::printf("%s\n", got ? "free" : "busy");
            std::fflush(stdout);
        }
        return 0;
    }
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
    if (mode == "count-async" && argc == 5) {  // four chains of asynchronous waits in this process
        const std::string file = argv[3];
        distlock::test::async_rounds rounds(std::stol(argv[4]), [&] {
            const long v = read_number(file);
            std::this_thread::sleep_for(std::chrono::microseconds(200));  // widen the race window
            write_number(file, v + 1);
        });
        std::vector<distlock::mutex> chains;
        for (int i = 0; i < 4; ++i) chains.push_back(locks.mutex(argv[2]));
        for (auto& c : chains) rounds.start(c);
        const bool ended = rounds.wait(4, std::chrono::minutes(5));
        std::cerr << rounds.errors();
        return ended && rounds.errors().empty() ? 0 : 1;
    }
    std::cerr << "bad arguments\n";
    return 2;
} catch (const std::exception& e) {
    std::cerr << "helper: " << e.what() << "\n";
    return 1;
}
