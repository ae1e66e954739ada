#include "gate.hpp"

#include <algorithm>

#include "distlock/error.hpp"

namespace distlock::detail {

bool gate::enter(spi::deadline until, const void* who, std::string_view backend, const std::string& name,
                 bool& queued) {
    std::unique_lock lk(mutex_);
    if (busy_ && owner_ == std::this_thread::get_id() && holder_ != who)
        throw_error(errc::would_deadlock, std::string(backend),
                    "this thread already holds lock '" + name + "' through another mutex object");
    queued = busy_ || !queue_.empty();
    if (queued) {
        waiter me;
        queue_.push_back(&me);
        auto my_turn = [&] { return !busy_ && queue_.front() == &me; };
        bool ok = true;
        if (until == spi::deadline::max()) me.cv.wait(lk, my_turn);
        else ok = me.cv.wait_until(lk, until, my_turn);
        if (!ok) {
            const bool was_head = queue_.front() == &me;
            queue_.erase(std::find(queue_.begin(), queue_.end(), &me));
            if (was_head && !busy_ && !queue_.empty()) queue_.front()->cv.notify_one();
            return false;
        }
        queue_.pop_front();
    }
    busy_ = true;
    owner_ = std::this_thread::get_id();
    holder_ = who;
    return true;
}

void gate::leave() noexcept {
    std::lock_guard lk(mutex_);
    busy_ = false;
    owner_ = {};
    holder_ = nullptr;
    if (!queue_.empty()) queue_.front()->cv.notify_one();
}

}  // namespace distlock::detail
