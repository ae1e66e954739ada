// distlock bench: its settings, shared by the synchronous modes (bench.cpp)
// and the asynchronous one (bench_async.cpp).
#pragma once

#include <string>

#include "common.hpp"

namespace distlock::tool {

struct bench_settings {
    backend_choice source;  // --backend, --backend-file, the environment or the default directory
    std::string backend;    // the URL, from source
    std::string mode = "uncontended";
    std::string primitive = "mutex";  // mutex, rw (the read-write lock) or semaphore
    int threads = 1, processes = 1, floor_samples = 200;
    int writers = 0;            // rw: how many of each process's threads write (the others read)
    std::uint32_t permits = 1;  // semaphore: its size  // floor_samples: contended mode, before the run
    double seconds = 5;
    bool json = false, quiet = false;
    bool observe = false;  // a distlock::metrics observer on each provider (its overhead is what is measured)
    // --async: N pending asynchronous acquisitions (of one name, then of N
    // names), then hand-offs along a chain of them beside the synchronous
    // contended hand-off of `threads` threads (4 when --threads is not given).
    bool async = false;
    bool threads_given = false;
    int waiters = 1000;
    int handoffs = 200;  // at most this many hand-offs measured per chain (and at most `seconds` long)
    // --hold N: N locks held on one provider for `seconds`, and what renewing
    // them costs (bench_hold.cpp). 0: not this mode.
    int hold = 0;
};

constexpr int max_hold = 1000000;

// The --async bench (bench_async.cpp); prints its report, returns the exit status.
int run_async_bench(const bench_settings& s);
// The --hold bench (bench_hold.cpp); prints its report, returns the exit status
// (1 when a lock was lost).
int run_hold_bench(const bench_settings& s);

}  // namespace distlock::tool
