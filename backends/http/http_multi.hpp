// The loop (curl multi): transfers that run while the caller does something
// else (Consul's monitor blocking queries, etcd watches of held keys), and
// concurrent batches.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string_view>
#include <thread>
#include <vector>

#include "http_transfer.hpp"

namespace distlock::backends::http {

class client;

// Asynchronous transfers on one background thread. Callbacks run on that
// thread: keep them short and never call cancel() of another transfer from
// them while holding a lock that cancel()'s caller may hold.
class loop {
public:
    using id = std::uint64_t;
    using line_fn = std::function<bool(std::string_view)>;  // streamed: each body line; false = stop
    using done_fn = std::function<void(transfer_result)>;

    explicit loop(client& c);
    ~loop();
    loop(const loop&) = delete;
    loop& operator=(const loop&) = delete;

    // Starts `r` on the current endpoint, not before `delay` has passed. With
    // `on_line`, the body is delivered line by line and not kept; `on_done` gets
    // the end (completed, stopped, timed_out or failed).
    id start(request r, line_fn on_line, done_fn on_done,
             std::chrono::milliseconds delay = std::chrono::milliseconds{0});

    // Stops a transfer. When it returns, no callback of `which` runs or will run
    // (it waits for one under way, except when called from the loop thread).
    // Unknown or finished ids are ignored.
    void cancel(id which);

    // Runs the requests concurrently and returns their results in order.
    std::vector<transfer_result> run_all(const std::vector<request>& requests);

private:
    struct transfer;
    void run();
    void finish(transfer& t, transfer_result res);

    client& client_;
    void* multi_ = nullptr;  // CURLM*
    std::thread thread_;
    std::thread::id thread_id_;
    std::mutex mutex_;
    std::condition_variable cv_;
    bool stop_ = false;
    id next_id_ = 1;
    std::map<id, std::unique_ptr<transfer>> pending_;  // waiting to be added (delay)
    std::map<id, std::unique_ptr<transfer>> active_;   // added to the multi handle
    std::vector<id> cancels_;                          // requested, not yet processed
    id running_callback_ = 0;                          // id whose callback runs now
};

}  // namespace distlock::backends::http
