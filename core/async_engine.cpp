// A provider's asynchronous workers: a queue of ready steps and a timer map,
// served by async_engine::workers threads started on first use.
#include "async_engine.hpp"

#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "process.hpp"

namespace distlock::detail {

struct async_engine::state {
    std::mutex mutex;
    std::condition_variable wake;
    std::deque<task> ready;
    std::multimap<clock::time_point, std::pair<timer_id, task>> timers;
    std::unordered_map<timer_id, decltype(timers)::iterator> timer_index;
    timer_id next_timer = 1;
    bool stop = false;
    std::vector<std::thread> threads;
    const unsigned generation = fork_generation();  // of the process that made it

    // Starts the workers on first use (under `mutex`).
    void start(const std::shared_ptr<state>& self) {
        if (!threads.empty() || stop) return;
        threads.reserve(workers);
        for (unsigned i = 0; i < workers; ++i) threads.emplace_back([self] { run(self); });
    }

    static void run(const std::shared_ptr<state>& self) {
        std::unique_lock lk(self->mutex);
        for (;;) {
            // Timers that are due join the ready queue, in their order.
            const auto now = clock::now();
            while (!self->timers.empty() && self->timers.begin()->first <= now) {
                auto node = self->timers.extract(self->timers.begin());
                self->timer_index.erase(node.mapped().first);
                self->ready.push_back(std::move(node.mapped().second));
            }
            if (self->stop) return;
            if (self->ready.empty()) {
                if (self->timers.empty()) {
                    self->wake.wait(lk);
                } else {
                    // A copy: the first timer may be cancelled (its node freed) while this waits.
                    const auto next = self->timers.begin()->first;
                    self->wake.wait_until(lk, next);
                }
                continue;
            }
            auto step = std::move(self->ready.front());
            self->ready.pop_front();
            if (!self->ready.empty() || !self->timers.empty()) self->wake.notify_one();
            lk.unlock();
            try {
                step();
            } catch (...) {}
            step = nullptr;  // what the step captured goes outside the lock too
            lk.lock();
        }
    }
};

async_engine::async_engine() : state_(std::make_shared<state>()) {}

async_engine::~async_engine() {
    if (state_->generation != fork_generation()) {
        abandon(std::move(state_));
        return;
    }
    std::vector<std::thread> threads;
    std::deque<task> ready;
    decltype(state::timers) timers;
    {
        std::lock_guard lk(state_->mutex);
        state_->stop = true;
        threads = std::move(state_->threads);
        ready = std::move(state_->ready);
        timers = std::move(state_->timers);
        state_->timer_index.clear();
    }
    state_->wake.notify_all();
    for (auto& t : threads) {
        if (t.get_id() == std::this_thread::get_id()) t.detach();
        else t.join();
    }
    // `ready` and `timers` go here, outside the lock: what their steps hold
    // (nothing that needs this engine) is released on this thread.
}

// post() and at() notify under the lock: once it is released, a worker may
// run the step, which may drop the last reference to the provider and so
// destroy *this (and its state): nothing of them is touched after.
void async_engine::post(task t) {
    std::lock_guard lk(state_->mutex);
    state_->start(state_);
    state_->ready.push_back(std::move(t));
    state_->wake.notify_one();
}

async_engine::timer_id async_engine::at(clock::time_point when, task t) {
    std::lock_guard lk(state_->mutex);
    state_->start(state_);
    const auto id = state_->next_timer++;
    auto it = state_->timers.emplace(when, std::pair{id, std::move(t)});
    state_->timer_index.emplace(id, it);
    if (it == state_->timers.begin()) state_->wake.notify_one();  // an earlier wake-up than the workers wait for
    return id;
}

bool async_engine::cancel(timer_id id) {
    task dropped;
    {
        std::lock_guard lk(state_->mutex);
        const auto found = state_->timer_index.find(id);
        if (found == state_->timer_index.end()) return false;
        dropped = std::move(found->second->second.second);
        state_->timers.erase(found->second);
        state_->timer_index.erase(found);
    }
    return true;
}

}  // namespace distlock::detail
