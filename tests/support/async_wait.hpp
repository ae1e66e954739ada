// What the tests of the asynchronous API share: the outcome of one
// asynchronous acquisition or release, waited for by the test's thread.
#pragma once

#include <chrono>
#include <exception>
#include <future>
#include <memory>
#include <thread>

#include "distlock/async.hpp"
#include "distlock/error.hpp"

namespace distlock::test {

struct async_outcome {
    std::exception_ptr error;
    bool granted = false;
    std::thread::id thread;  // where the handler ran
};

// One acquisition's handler and its outcome.
class async_wait {
public:
    // The promise is the handler's too: a handler that runs after the test
    // gave up waiting writes to nothing freed.
    acquire_handler handler() {
        return [p = promise_](std::exception_ptr e, bool g) {
            p->set_value({std::move(e), g, std::this_thread::get_id()});
        };
    }
    bool ready() { return future_.wait_for(std::chrono::seconds(0)) == std::future_status::ready; }
    // The outcome; a default one (not granted, no error) when none came within `limit` (check ready() first
    // where that matters: get() of a wait that never ended fails the calling test through `arrived`).
    async_outcome get(bool& arrived, std::chrono::milliseconds limit = std::chrono::seconds(60)) {
        arrived = future_.wait_for(limit) == std::future_status::ready;
        return arrived ? future_.get() : async_outcome{};
    }

private:
    std::shared_ptr<std::promise<async_outcome>> promise_ = std::make_shared<std::promise<async_outcome>>();
    std::future<async_outcome> future_ = promise_->get_future();
};

// The errc of a distlock::error in `e`; 0 for none or another exception.
inline int errc_of(const std::exception_ptr& e) {
    if (!e) return 0;
    try {
        std::rethrow_exception(e);
    } catch (const error& err) {
        return static_cast<int>(err.code_value());
    } catch (...) {}
    return 0;
}

// Starts an asynchronous release through `start(handler)` and waits for it:
// false when it did not end within `limit`.
template <class Start>
bool released(Start&& start, std::chrono::milliseconds limit = std::chrono::seconds(60)) {
    auto done = std::make_shared<std::promise<void>>();
    auto f = done->get_future();
    start([done] { done->set_value(); });
    return f.wait_for(limit) == std::future_status::ready;
}

}  // namespace distlock::test
