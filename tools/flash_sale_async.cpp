// distlock flash-sale --async: the coroutine buyers of flash_sale_async.hpp
// and the single-threaded event loop they resume on.
#include "flash_sale_async.hpp"

#include <condition_variable>
#include <coroutine>
#include <deque>
#include <exception>
#include <mutex>
#include <queue>
#include <stdexcept>

#include "common.hpp"

namespace distlock::tool {
namespace {

using steady = std::chrono::steady_clock;

// Runs what is posted to it (from any thread) and coroutines whose timer is
// due, on the one thread that calls run_until().
class event_loop {
public:
    void post(std::function<void()> task) {
        {
            std::lock_guard lk(mu_);
            ready_.push_back(std::move(task));
        }
        cv_.notify_one();
    }
    // On the loop's thread: resume `h` at `when`.
    void resume_at(steady::time_point when, std::coroutine_handle<> h) { timers_.push({when, h}); }
    void run_until(const std::function<bool()>& done) {
        while (!done()) {
            std::deque<std::function<void()>> now;
            {
                std::unique_lock lk(mu_);
                const auto wake = timers_.empty() ? steady::now() + std::chrono::seconds(1) : timers_.top().when;
                cv_.wait_until(lk, wake, [&] { return !ready_.empty(); });
                now.swap(ready_);
            }
            for (auto& task : now) task();
            while (!timers_.empty() && timers_.top().when <= steady::now()) {
                auto h = timers_.top().h;
                timers_.pop();
                h.resume();
            }
        }
    }

private:
    struct timer {
        steady::time_point when;
        std::coroutine_handle<> h;
        bool operator>(const timer& o) const { return when > o.when; }
    };
    std::mutex mu_;
    std::condition_variable cv_;
    std::deque<std::function<void()>> ready_;
    std::priority_queue<timer, std::vector<timer>, std::greater<>> timers_;  // the loop's thread only
};

// co_await pause_for{loop, d}: resumes on the loop after `d`.
struct pause_for {
    event_loop& loop;
    std::chrono::duration<double, std::milli> d;
    bool await_ready() const noexcept { return d.count() <= 0; }
    void await_suspend(std::coroutine_handle<> h) {
        loop.resume_at(steady::now() + std::chrono::duration_cast<steady::duration>(d), h);
    }
    void await_resume() const noexcept {}
};

// A coroutine that starts at once and frees itself when it ends; it catches
// what it throws itself.
struct detached {
    struct promise_type {
        detached get_return_object() noexcept { return {}; }
        std::suspend_never initial_suspend() noexcept { return {}; }
        std::suspend_never final_suspend() noexcept { return {}; }
        void return_void() noexcept {}
        void unhandled_exception() noexcept { std::terminate(); }
    };
};

// What the buyers of one app server share; touched on the loop's thread only.
struct shop {
    const sale_plan& plan;
    event_loop loop;
    executor resume;  // posts a continuation to the loop
    std::vector<char> sold_out;
    int next = 0, finished = 0;
    sale_result result;
    std::string failure;
};

// One buyer: takes requests until none are left. `locks` holds its own mutex
// of each segment (an object has one grant at a time: buyers cannot share one).
detached buyer(shop& s, std::vector<distlock::mutex>& locks) {
    const auto& plan = s.plan;
    try {
        for (int r; (r = s.next++) < plan.share;) {
            const auto t0 = steady::now();
            const int first = plan.first_segment(r);
            for (int k = 0; k < plan.segments; ++k) {
                const int seg = (first + k) % plan.segments;
                if (s.sold_out[static_cast<std::size_t>(seg)]) continue;
                auto& m = locks[static_cast<std::size_t>(seg)];
                if (!co_await m.lock_async(plan.wait, {}, s.resume)) {
                    ++s.result.failed;
                    break;
                }
                const long long left = plan.get(seg);
                if (left > 0) {
                    co_await pause_for{s.loop, plan.pause};  // the business work between read and write
                    plan.set(seg, left - 1);
                }
                co_await m.unlock_async(s.resume);
                if (left <= 0) {
                    s.sold_out[static_cast<std::size_t>(seg)] = 1;
                    continue;
                }
                ++s.result.sold;
                s.result.purchase_ms.push_back(ms_since(t0));
                break;
            }
            s.result.latencies_ms.push_back(ms_since(t0));
        }
    } catch (const std::exception& e) {
        if (s.failure.empty()) s.failure = e.what();
    }
    ++s.finished;
}

}  // namespace

sale_result serve_buyers_async(const provider& locks, const sale_plan& plan) {
    shop s{plan, {}, {}, std::vector<char>(static_cast<std::size_t>(plan.segments), 0), 0, 0, {}, {}};
    s.resume = [&s](std::function<void()> continuation) { s.loop.post(std::move(continuation)); };
    std::vector<std::vector<distlock::mutex>> mutexes(static_cast<std::size_t>(plan.buyers));
    for (auto& mine : mutexes)
        for (int seg = 0; seg < plan.segments; ++seg) mine.push_back(locks.mutex(plan.lock_name(seg)));
    for (auto& mine : mutexes) buyer(s, mine);
    s.loop.run_until([&] { return s.finished == plan.buyers; });
    if (!s.failure.empty()) throw std::runtime_error(s.failure);
    return std::move(s.result);
}

}  // namespace distlock::tool
