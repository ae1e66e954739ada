#include "callbacks.hpp"

#include <condition_variable>
#include <deque>
#include <mutex>

#include "process.hpp"

namespace distlock::detail {

struct callback_thread::state {
    std::mutex mutex;
    std::condition_variable wake;
    std::deque<std::function<void()>> queue;
    bool stop = false;
    std::thread thread;
    std::thread::id id;
    const unsigned generation = fork_generation();  // of the process that made it

    // Until stopped and the queue is empty: a loss queued before the provider
    // went away is still reported.
    static void run(const std::shared_ptr<state>& self) {
        std::unique_lock lk(self->mutex);
        for (;;) {
            self->wake.wait(lk, [&] { return self->stop || !self->queue.empty(); });
            if (self->queue.empty()) return;
            auto fn = std::move(self->queue.front());
            self->queue.pop_front();
            lk.unlock();
            try {
                fn();
            } catch (...) {}
            fn = nullptr;  // whatever the callback captured goes outside the lock too
            lk.lock();
        }
    }
};

callback_thread::callback_thread() : state_(std::make_shared<state>()) {}

callback_thread::~callback_thread() { stop_worker(std::move(state_)); }

void callback_thread::post(std::function<void()> fn) {
    {
        std::lock_guard lk(state_->mutex);
        state_->queue.push_back(std::move(fn));
        if (!state_->thread.joinable() && !state_->stop) {
            state_->thread = std::thread([s = state_] { state::run(s); });
            state_->id = state_->thread.get_id();
        }
    }
    state_->wake.notify_one();
}

bool callback_thread::on_this_thread() const noexcept {
    std::lock_guard lk(state_->mutex);
    return state_->id == std::this_thread::get_id();
}

}  // namespace distlock::detail
