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

namespace {
// The engine whose worker the calling thread is, if any (async_engine::on_worker).
thread_local const void* current_engine = nullptr;
}  // namespace

// Idle workers wait in one of two ways: one of them (the watcher) until the
// first timer is due, the others until a step is queued. A queued step wakes
// an idle worker, and only the watcher when none is idle; a worker taking a
// step wakes another only when more are ready, or when it was the watcher and
// timers are pending. So a step costs one wake-up at most, however many
// timers wait (every pending acquisition with a deadline has one).
struct async_engine::state {
    std::mutex mutex;
    std::condition_variable idle_cv, watch_cv;
    unsigned idle = 0;      // workers waiting on idle_cv
    bool watching = false;  // a worker waits on watch_cv for the first timer
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

    // A step is ready (under `mutex`): an idle worker takes it, else the watcher.
    void wake_for_step() {
        if (idle > 0) idle_cv.notify_one();
        else if (watching) watch_cv.notify_one();
    }

    // The first timer changed (under `mutex`): the watcher waits for it anew;
    // with none, an idle worker becomes the watcher.
    void wake_for_timer() {
        if (watching) watch_cv.notify_one();
        else if (idle > 0) idle_cv.notify_one();
    }

    static void run(const std::shared_ptr<state>& self) {
        current_engine = self.get();
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
                if (!self->timers.empty() && !self->watching) {
                    // A copy: the first timer may be cancelled (its node freed) while this waits.
                    const auto next = self->timers.begin()->first;
                    self->watching = true;
                    self->watch_cv.wait_until(lk, next);
                    self->watching = false;
                } else {
                    ++self->idle;
                    self->idle_cv.wait(lk);
                    --self->idle;
                }
                continue;
            }
            auto step = std::move(self->ready.front());
            self->ready.pop_front();
            if (!self->ready.empty()) self->wake_for_step();
            else if (!self->timers.empty() && !self->watching && self->idle > 0) self->idle_cv.notify_one();
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
    state_->idle_cv.notify_all();
    state_->watch_cv.notify_all();
    for (auto& t : threads) {
        if (t.get_id() == std::this_thread::get_id()) retire(std::move(t));
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
    state_->wake_for_step();
}

async_engine::timer_id async_engine::at(clock::time_point when, task t) {
    std::lock_guard lk(state_->mutex);
    state_->start(state_);
    const auto id = state_->next_timer++;
    auto it = state_->timers.emplace(when, std::pair{id, std::move(t)});
    state_->timer_index.emplace(id, it);
    if (it == state_->timers.begin()) state_->wake_for_timer();  // an earlier wake-up than the watcher waits for
    return id;
}

bool async_engine::on_worker() const noexcept { return current_engine == state_.get(); }

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
