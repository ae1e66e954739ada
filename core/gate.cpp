// The in-process wait queue of one lock name (gate.hpp).
#include "gate.hpp"

#include <algorithm>
#include <memory>

#include "distlock/error.hpp"

namespace distlock::detail {

void gate::take(std::thread::id owner, const void* who) noexcept {
    busy_ = true;
    owner_ = owner;
    holder_ = who;
}

gate::ticket* gate::hand_over() noexcept {
    if (busy_ || queue_.empty()) return nullptr;
    auto* head = queue_.front();
    if (head->async == nullptr) {
        head->cv.notify_one();  // it takes the gate itself
        return nullptr;
    }
    queue_.pop_front();
    take({}, head->who);
    auto* t = head->async;
    delete head;
    return t;
}

bool gate::enter(spi::deadline until, const void* who, std::string_view backend, const std::string& name,
                 bool& queued) {
    std::unique_lock lk(mutex_);
    if (busy_ && owner_ == std::this_thread::get_id() && holder_ != who)
        throw_error(errc::would_deadlock, std::string(backend),
                    "this thread already holds lock '" + name + "' through another mutex object");
    queued = busy_ || !queue_.empty();
    if (queued) {
        waiter me;
        me.who = who;
        queue_.push_back(&me);
        auto my_turn = [&] { return !busy_ && queue_.front() == &me; };
        bool ok = true;
        if (until == spi::deadline::max()) me.cv.wait(lk, my_turn);
        else ok = me.cv.wait_until(lk, until, my_turn);
        if (!ok) {
            queue_.erase(std::find(queue_.begin(), queue_.end(), &me));
            auto* next = hand_over();
            lk.unlock();
            if (next) next->on_turn();
            return false;
        }
        queue_.pop_front();
    }
    take(std::this_thread::get_id(), who);
    return true;
}

bool gate::enter_async(ticket& t, const void* who) {
    std::lock_guard lk(mutex_);
    if (!busy_ && queue_.empty()) {
        take({}, who);
        return true;
    }
    auto w = std::make_unique<waiter>();
    w->async = &t;
    w->who = who;
    queue_.push_back(w.get());
    (void)w.release();  // owned by the queue until handed over or withdrawn
    return false;
}

bool gate::withdraw(ticket& t) noexcept {
    ticket* next = nullptr;
    {
        std::lock_guard lk(mutex_);
        const auto it = std::find_if(queue_.begin(), queue_.end(), [&](waiter* w) { return w->async == &t; });
        if (it == queue_.end()) return false;
        delete *it;
        queue_.erase(it);
        next = hand_over();
    }
    if (next) next->on_turn();
    return true;
}

void gate::leave() noexcept {
    ticket* next;
    {
        std::lock_guard lk(mutex_);
        busy_ = false;
        owner_ = {};
        holder_ = nullptr;
        next = hand_over();
    }
    if (next) next->on_turn();
}

}  // namespace distlock::detail
