// What the files of the conformance suite share (not installed).
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "child_process.hpp"
#include "distlock/provider.hpp"

namespace distlock::test {

// argv[1] of the suite's program when its multi-process cases run it again as
// their helper (distlock::testing::run_conformance dispatches on it).
inline constexpr const char* conformance_helper_flag = "--conformance-helper";

// The helper (helper.cpp): argv is what follows the flag. Its exit status.
int conformance_helper(int argc, char** argv);

// A new connection to the URL under test.
provider connect_under_test();

// `name` for a message: bytes outside printable ASCII (and '\\') as \xNN.
std::string printable(const std::string& name);

// Locales other than "C" that treat bytes >= 0x80 as characters, for the
// helper to run in: Latin-1 (de_DE.ISO-8859-1, made with localedef into a
// directory of this user's; `locpath` is the LOCPATH that finds it) and
// C.UTF-8. Empty when this machine has neither: the cases tagged
// [needs:locale] are then not applicable (plan.cpp).
struct test_locale {
    std::string name, locpath;
};
const std::vector<test_locale>& test_locales();

// This program again, as the helper with `args`, its stdout on a pipe: a
// program outside the tree that registered its own scheme before
// run_conformance() knows that scheme in the helper too.
std::unique_ptr<child_process> run_helper(std::vector<std::string> args);

// Rounds of take / work / release by mutex objects that wait asynchronously
// (async.cpp): each chain (one per object start()ed) takes its lock, does
// `work` on a provider's worker if a round is left, releases, and starts
// again from the release's handler until the rounds run out. So `work` runs
// exactly `rounds` times over all chains, and only the lock keeps it
// exclusive. The objects must outlive wait().
class async_rounds {
public:
    async_rounds(long rounds, std::function<void()> work);
    void start(mutex& m);
    // Every chain ended (or failed): false when `limit` passed first.
    bool wait(int chains, std::chrono::milliseconds limit);
    // One line per chain that failed ("" = none).
    std::string errors() const;

private:
    void fail(const std::string& why);
    std::atomic<long> left_;
    std::function<void()> work_;
    std::atomic<int> ended_{0};
    mutable std::mutex mutex_;
    std::string errors_;
};

}  // namespace distlock::test

#include <atomic>
#include <chrono>
#include <string>
#include <vector>

#include "distlock/provider.hpp"

namespace distlock::test {

// Counters that the suite's processes share through a file mapped by each of
// them (lock-free atomics, so they count across processes), to check how many
// hold a read-write lock, a semaphore or a multi-lock at once.
struct holder_counters {
    std::atomic<int> readers, writers, holders;              // inside now
    std::atomic<int> max_readers, max_writers, max_holders;  // most seen at once
    std::atomic<int> violations;                             // a writer beside anyone, a reader beside a writer
    std::atomic<long> rounds;                                // critical sections completed
};

// Raises `max` to `now` if it is lower (the most holders seen at once).
void raise_max(std::atomic<int>& max, int now);

// The critical section of the exclusion cases: counts who is inside, and adds
// one to a counter that is not atomic (read, pause, write), which only mutual
// exclusion keeps exact. For the threads of one test.
struct critical_section {
    std::atomic<int> inside{0}, max_inside{0};
    long counter = 0;
    void pass(std::chrono::microseconds pause);
};

// Maps `path` (made and zeroed by create = true) for the counters; aborts the
// process when it cannot (test helpers only).
holder_counters& map_counters(const std::string& path, bool create);

// A path in the temporary directory, unique per call ("distlock-conf-<what>-<random>").
std::string temp_path(const std::string& what);

// `procs` helpers run with `args`, whose fourth word (left empty) becomes the
// file of the counters they share; the constructor waits for them all and
// checks (Catch2 CHECK) that each exited 0.
class counted_processes {
public:
    counted_processes(const std::string& what, int procs, std::vector<std::string> args);
    ~counted_processes();
    const holder_counters& counters() const { return counters_; }

private:
    std::string path_;
    holder_counters& counters_;
};

// The token a helper printed after its word ("read 17" -> 17).
std::uint64_t token_in(const std::string& line);

// How long after a holder's crash its grant may still stand.
std::chrono::milliseconds crash_bound(const provider& p);

// Enter / leave as a reader, a writer or a permit holder, updating the maxima
// and counting violations.
void enter_read(holder_counters& c);
void leave_read(holder_counters& c);
void enter_write(holder_counters& c);
void leave_write(holder_counters& c);
void enter_holder(holder_counters& c);
void leave_holder(holder_counters& c);

}  // namespace distlock::test
