// distlock flash-sale --async: one app server's buyers as C++20 coroutines on
// one event-loop thread, each waiting for its stock segment's lock with
// lock_async() instead of holding a thread of its own.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "distlock/distlock.hpp"

namespace distlock::tool {

// What one app server sells and how (flash_sale.cpp fills it in).
struct sale_plan {
    int share = 0;                                       // requests this app server serves
    int buyers = 1;                                      // requests of them in flight at once (coroutines)
    int segments = 1;                                    // stock segments, each with its lock
    std::chrono::duration<double, std::milli> pause{1};  // business work between reading and writing the stock
    std::chrono::milliseconds wait{30000};               // how long a buyer waits for the lock before giving up
    std::function<int(int request)> first_segment;       // the segment request r tries first
    std::function<std::string(int seg)> lock_name;
    std::function<long long(int seg)> get;  // the stock store
    std::function<void(int seg, long long left)> set;
};

struct sale_result {
    unsigned long long sold = 0, failed = 0;  // failed: lock timeouts
    std::vector<double> latencies_ms;         // one per request
    std::vector<double> purchase_ms;          // one per request that sold an item
};

// Serves plan.share requests as the synchronous buyers do (a segment found
// empty is flagged and not tried again) and returns what they came to; throws
// the first error a buyer met.
sale_result serve_buyers_async(const provider& locks, const sale_plan& plan);

}  // namespace distlock::tool
