// The multi-lock: the mutexes of several names taken all or none, one after
// another in ascending order, blocking or asynchronously (each part's
// acquisition started from the handler of the one before).
#include <algorithm>
#include <functional>
#include <mutex>
#include <utility>
#include <vector>

#include "boundary.hpp"
#include "distlock/multi_lock.hpp"
#include "distlock/provider.hpp"
#include "mutex_impl.hpp"

namespace distlock::detail {

class multi_lock_impl {
public:
    multi_lock_impl(const std::shared_ptr<provider_state>& provider, std::vector<std::string> names,
                    lock_options options)
        : names_(std::move(names)), loss_(std::make_shared<loss_state>()), life_(std::make_shared<life>()) {
        life_->self = this;
        const std::string who(provider->backend().name());
        if (names_.empty()) throw_error(errc::invalid_argument, who, "a multi-lock needs at least one name");
        std::sort(names_.begin(), names_.end());
        names_.erase(std::unique(names_.begin(), names_.end()), names_.end());
        loss_->on_lost = std::move(options.on_lost);
        // One loss of a part is the loss of the whole, reported once per grant.
        options.on_lost = [loss = loss_](const lock_event& e) {
            std::function<void(const lock_event&)> report;
            {
                std::lock_guard lk(loss->mutex);
                if (!loss->active || loss->lost) return;
                loss->lost = true;
                report = loss->on_lost;
            }
            if (report) report(lock_event{e.name, e.token, "part '" + e.name + "' of a multi-lock: " + e.reason});
        };
        for (const auto& n : names_)
            parts_.push_back(make_mutex_impl(provider, n, options, spi::lock_kind::exclusive, 0));
    }

    bool lock_until(spi::deadline until) {
        parts_.front()->provider().check_process();  // before any mutex (process.hpp)
        {
            std::lock_guard lk(loss_->mutex);
            loss_->active = true;
            loss_->lost = false;
        }
        std::size_t taken = 0;
        try {
            for (; taken < parts_.size(); ++taken)
                if (!parts_[taken]->lock_until(until)) break;
        } catch (...) {
            give_back(taken);
            throw;
        }
        if (taken == parts_.size()) return true;
        give_back(taken);
        return false;
    }
    // lock_until() without a thread: each part's asynchronous acquisition
    // starts from the handler of the one before; a part that is not granted
    // gives back those taken (on that worker) and ends the whole with its
    // outcome. One acquisition at a time per object.
    void async_lock(spi::deadline until, acquire_handler handler, std::stop_token stop) {
        provider().check_process();
        {
            std::lock_guard lk(life_->mutex);
            if (life_->busy)
                throw_error(errc::would_deadlock, std::string(backend_name()),
                            "this multi-lock is being acquired already");
            life_->busy = true;
        }
        {
            std::lock_guard lk(loss_->mutex);
            loss_->active = true;
            loss_->lost = false;
        }
        auto chain = std::make_shared<acquisition>(acquisition{until, std::move(handler), std::move(stop)});
        try {
            take_part(chain, 0);
        } catch (...) {
            std::lock_guard lk(life_->mutex);
            life_->busy = false;
            throw;
        }
    }
    // unlock() on a worker: each part's asynchronous release, last taken
    // first, then `handler`.
    void async_unlock(release_handler handler) {
        provider().check_process();
        release_part(life_, parts_.size(), std::move(handler));
    }
    void unlock() noexcept { give_back(parts_.size()); }
    bool held() const noexcept {
        if (parts_.front()->provider().forked()) return false;  // as give_back()
        {
            std::lock_guard lk(loss_->mutex);
            if (!loss_->active || loss_->lost) return false;
        }
        return std::all_of(parts_.begin(), parts_.end(), [](const auto& p) { return p->held(); });
    }
    const std::vector<std::string>& names() const noexcept { return names_; }
    std::string_view backend_name() const noexcept { return parts_.front()->provider().backend().name(); }
    provider_state& provider() const noexcept { return parts_.front()->provider(); }
    std::vector<std::uint64_t> tokens() const {
        std::vector<std::uint64_t> out;
        for (const auto& p : parts_) out.push_back(p->token());
        return out;
    }

    // Marks the object gone for the steps still queued (the parts'
    // destructors then cancel their acquisitions and release their grants).
    ~multi_lock_impl() {
        std::lock_guard lk(life_->mutex);
        life_->self = nullptr;
    }

private:
    // What the queued steps of asynchronous work reach the object through:
    // null once it is gone. A step holds `mutex` while it uses the object.
    struct life {
        std::mutex mutex;
        multi_lock_impl* self = nullptr;
        bool busy = false;  // an acquisition is under way
    };
    struct acquisition {
        spi::deadline until;
        acquire_handler handler;
        std::stop_token stop;
    };
    void take_part(const std::shared_ptr<acquisition>& chain, std::size_t i) {
        parts_[i]->async_lock_until(
            chain->until,
            [life = life_, chain, i](std::exception_ptr error, bool granted) {
                acquire_handler done;
                {
                    std::lock_guard lk(life->mutex);
                    auto* self = life->self;
                    std::size_t taken = granted ? i + 1 : i;  // parts held now
                    if (!self) {                              // gone: its parts were cancelled and released
                        error = std::make_exception_ptr(
                            cancelled_error(errc::cancelled, "", "the multi-lock was destroyed while acquiring"));
                        granted = false;
                    } else if (granted && taken < self->parts_.size()) {
                        try {
                            self->take_part(chain, taken);
                            return;
                        } catch (...) {
                            error = std::current_exception();
                            granted = false;
                        }
                    }
                    if (self && !granted) self->give_back(taken);
                    life->busy = false;
                    done = std::move(chain->handler);
                }
                if (done) done(std::move(error), granted);
            },
            chain->stop);
    }
    static void release_part(const std::shared_ptr<life>& life, std::size_t n, release_handler handler) {
        std::lock_guard lk(life->mutex);
        auto* self = life->self;
        if (!self || n == 0 || self->parts_.front()->provider().forked()) {
            if (self) {
                std::lock_guard loss(self->loss_->mutex);
                self->loss_->active = false;
            }
            if (handler) handler();  // on the worker of the last part's release (or the caller's, for none)
            return;
        }
        self->parts_[n - 1]->async_unlock(
            [life, n, handler = std::move(handler)]() mutable { release_part(life, n - 1, std::move(handler)); });
    }

    struct loss_state {
        std::mutex mutex;
        bool active = false, lost = false;
        std::function<void(const lock_event&)> on_lost;
    };
    // Releases the first `n` parts, last taken first. A part's unlock() returns
    // once the loss callbacks it queued have run, so none of this grant comes
    // later. In a forked child, nothing (the grant is the parent's; the loss
    // state's mutex may have been held by a thread of the parent at fork time).
    void give_back(std::size_t n) noexcept {
        if (parts_.front()->provider().forked()) return;
        while (n > 0) parts_[--n]->unlock();
        std::lock_guard lk(loss_->mutex);
        loss_->active = false;
    }

    std::vector<std::string> names_;
    std::shared_ptr<loss_state> loss_;
    std::shared_ptr<life> life_;
    std::vector<std::unique_ptr<mutex_impl>> parts_;
};

}  // namespace distlock::detail

namespace distlock {
using detail::moved_from;

distlock::multi_lock provider::multi_lock(const std::vector<std::string>& names, lock_options options) const {
    return detail::guarded(state_->backend().name(), state_->secrets(), "multi_lock()", [&] {
        return distlock::multi_lock(std::make_unique<detail::multi_lock_impl>(state_, names, std::move(options)));
    });
}

multi_lock::multi_lock(std::unique_ptr<detail::multi_lock_impl> impl) noexcept : impl_(std::move(impl)) {}
multi_lock::multi_lock(multi_lock&&) noexcept = default;
multi_lock& multi_lock::operator=(multi_lock&&) noexcept = default;
multi_lock::~multi_lock() = default;
void multi_lock::lock() { (void)lock_until_steady(std::chrono::steady_clock::time_point::max()); }
bool multi_lock::try_lock() { return lock_until_steady(std::chrono::steady_clock::now()); }
bool multi_lock::lock_until_steady(std::chrono::steady_clock::time_point deadline) {
    if (!impl_) moved_from("multi_lock");
    return detail::guarded(impl_->backend_name(), impl_->provider().secrets(), "lock",
                           [&] { return impl_->lock_until(deadline); });
}
void multi_lock::async_lock_steady(std::chrono::steady_clock::time_point deadline, acquire_handler handler,
                                   std::stop_token stop) {
    if (!impl_) moved_from("multi_lock");
    detail::guarded(impl_->backend_name(), impl_->provider().secrets(), "async_lock",
                    [&] { impl_->async_lock(deadline, std::move(handler), std::move(stop)); });
}
void multi_lock::async_unlock(release_handler handler) {
    if (!impl_) moved_from("multi_lock");
    detail::guarded(impl_->backend_name(), impl_->provider().secrets(), "async_unlock",
                    [&] { impl_->async_unlock(std::move(handler)); });
}
void multi_lock::unlock() noexcept {
    if (impl_) impl_->unlock();
}
bool multi_lock::held() const noexcept { return impl_ && impl_->held(); }
const std::vector<std::string>& multi_lock::names() const noexcept {
    static const std::vector<std::string> none;
    return impl_ ? impl_->names() : none;
}
std::vector<std::uint64_t> multi_lock::tokens() const { return impl_ ? impl_->tokens() : std::vector<std::uint64_t>{}; }

}  // namespace distlock
