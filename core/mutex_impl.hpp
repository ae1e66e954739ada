// The state machine behind distlock::mutex: local queueing, reentrancy, the
// backend's lock handle, renewal registration and loss reporting (a loss is
// recorded where it is found, by a backend's loss_sink, the renewal thread or
// unlock(); the user's on_lost / on_error run on the provider's callback thread).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include "distlock/async.hpp"
#include "distlock/options.hpp"
#include "distlock/spi/backend.hpp"
#include "provider_state.hpp"

namespace distlock::detail {

class mutex_impl;

// Checks the name and options, resolves the request (lease, renewal period,
// holder label: `holder`, else the provider's) and makes the backend's handle
// for one grant of `kind` (unsupported_error with the backend's reason when its
// caps() do not support that primitive; `leader` is asked as leader_kind()).
std::unique_ptr<mutex_impl> make_mutex_impl(const std::shared_ptr<provider_state>& provider, std::string_view name,
                                            lock_options options, spi::lock_kind kind, std::uint32_t permits,
                                            std::string holder = {});
// Throws invalid_argument_error for an empty or oversized lock name.
void check_name(std::string_view name, const std::string& backend);

// A holder label or election id: 1..255 bytes, no control characters (it is
// stored in keys' values, node data, rows and session names). Returns it;
// throws invalid_argument_error naming `what` otherwise.
std::string checked_label(std::string_view label, std::string_view backend, std::string_view what);
// "<hostname>:<pid>".
std::string default_holder();
// The kind an election's grants are asked as: leader where the backend claims
// feature::election, else exclusive (the backend's mutex of the same name).
spi::lock_kind leader_kind(const provider_state& provider);
// The kind the observer is told of a grant asked as `kind` (an explicit map:
// the two enums need not keep one order).
constexpr grant_kind grant_kind_of(spi::lock_kind kind) noexcept {
    switch (kind) {
        case spi::lock_kind::exclusive: return grant_kind::exclusive;
        case spi::lock_kind::read: return grant_kind::read;
        case spi::lock_kind::write: return grant_kind::write;
        case spi::lock_kind::permit: return grant_kind::permit;
        case spi::lock_kind::leader: return grant_kind::leader;
    }
    return grant_kind::exclusive;
}
// provider::inspect and election::leader: the name checked, the backend's
// answer with the name filled in.
lock_info inspect(provider_state& provider, std::string_view name, spi::lock_kind kind);
// provider::inspect_read_write / inspect_semaphore: the same, for the other
// primitives (unsupported_error where the backend has none).
read_write_info inspect_read_write(provider_state& provider, std::string_view name);
semaphore_info inspect_semaphore(provider_state& provider, std::string_view name);

class mutex_impl {
public:
    // `observed`: the kind the observer is told (an election on a backend
    // without feature::election is asked as an exclusive lock, told as a leader).
    mutex_impl(std::shared_ptr<provider_state> provider, spi::lock_request request, lock_options options,
               std::unique_ptr<spi::lock_handle> handle, grant_kind observed);
    ~mutex_impl();
    mutex_impl(const mutex_impl&) = delete;
    mutex_impl& operator=(const mutex_impl&) = delete;

    bool lock_until(spi::deadline until);
    void unlock() noexcept;
    // The asynchronous forms (async_acquire.cpp): the acquisition waits
    // without a thread (in the gate's queue, then between one-attempt
    // requests on the provider's workers) and its grant belongs to no thread.
    // Any number may be pending on one object of a kind with a gate (they
    // queue there as threads do); one at a time on a reader's or permit's
    // (the grant pools give each its own). The handler runs on a worker,
    // never inline in the caller's thread: at the end of the step that ended
    // the acquisition, or queued there after a cancellation.
    // `settle(granted)`, when given, is called at the end before the handler
    // runs, once this object no longer counts the acquisition (a grant
    // pool files the object away there: it may be destroyed after that).
    void async_lock_until(spi::deadline until, acquire_handler handler, std::stop_token stop,
                          std::function<void(bool granted)> settle = {});
    // Cancels the pending acquisitions and waits until none is left and no
    // asynchronous release is queued (the destructor, a grant pool's).
    void cancel_async_work() noexcept;
    // unlock() on a worker, then `handler` (if any) there.
    void async_unlock(release_handler handler);
    // Queues `handler(error, granted)` on a worker: an outcome known at once.
    void complete(acquire_handler handler, std::exception_ptr error, bool granted);
    // This object holds a grant (lost or not) that was not released.
    bool leading() noexcept {
        std::lock_guard lk(state_mutex_);
        return depth_ > 0;
    }
    // Held, not reported lost, and (for a renewed or leased grant) within the
    // lease as last confirmed: false while a renewal is stuck past the lease,
    // true again if it then succeeds. Never in a forked child (the grant is
    // the parent's).
    bool held() const noexcept {
        if (!held_.load() || provider_->forked()) return false;
        const auto until = valid_until_.load();
        return until == 0 || std::chrono::steady_clock::now().time_since_epoch().count() < until;
    }
    std::uint64_t token() const noexcept { return held_.load() && !provider_->forked() ? token_.load() : 0; }
    std::optional<std::chrono::steady_clock::time_point> valid_until() const noexcept {
        const auto until = valid_until_.load();
        if (!held_.load() || until == 0 || provider_->forked()) return std::nullopt;
        return std::chrono::steady_clock::time_point(std::chrono::steady_clock::duration(until));
    }
    const std::string& name() const noexcept { return request_.name; }
    provider_state& provider() const noexcept { return *provider_; }
    // This thread holds the grant (or is the one taking it: not yet).
    bool owned_by_this_thread() noexcept {
        std::lock_guard lk(state_mutex_);
        return depth_ > 0 && owner_ == std::this_thread::get_id();
    }

private:
    // What the observer is told of one acquisition (acquire_report.hpp).
    class acquire_report;
    // One acquisition's steps, whichever API drives it (acquisition.hpp).
    class acquisition;
    // Held by this thread already: counts it (a reentrant backend) and returns
    // true, or throws would_deadlock_error; false when not held by this thread.
    bool reentered();
    std::chrono::milliseconds grant_validity() const;
    // Grants from the backend until one comes within its validity (a reply after
    // it ran out is given back) or `until` passes; `generation`: the grant's.
    std::optional<spi::grant> acquire_within(spi::deadline until, std::chrono::milliseconds validity,
                                             std::uint64_t& generation);
    // The acquisition is over without a grant.
    void end_acquire();
    // Records the grant as held and hands it to the renewal thread; held by
    // the calling thread (`thread_bound`, the blocking API) or by no thread.
    void hold(const spi::grant& granted, std::uint64_t generation, std::chrono::milliseconds validity,
              bool thread_bound = true);

    // An asynchronous acquisition (async_acquire.cpp), and what the destructor
    // waits for: the acquisitions pending on this object (it cancels them) and
    // the asynchronous releases queued.
    class async_op;
    struct async_work {
        std::vector<std::shared_ptr<async_op>> ops;
        int releases = 0;
        bool empty() const noexcept { return ops.empty() && releases == 0; }
    };
    void release_done() noexcept;  // an asynchronous release is over

    // What a loss_sink points to: cleared (under its mutex) when the mutex_impl
    // goes, so that a backend may keep a sink as long as it likes.
    struct sink_target {
        std::mutex mutex;
        mutex_impl* impl = nullptr;
    };
    spi::loss_sink sink_for(std::uint64_t generation);
    // Records that grant `generation` is lost and queues on_lost; a no-op when it
    // is stale or already reported. A loss reported while that grant is still
    // being acquired counts as soon as it is given.
    void mark_lost(std::uint64_t generation, std::string reason) noexcept;
    // Queue the user's callbacks on the provider's callback thread.
    void post_lost(std::uint64_t token, std::string reason) noexcept;
    void post_error(std::uint64_t token, const error& e) noexcept;
    // `callback(mutex_alive)`: false once the mutex was destroyed (from the
    // callback thread, which cannot wait for it): the user's callbacks are then
    // not called, only the observer and the log hook are told.
    void post(std::function<void(bool mutex_alive)> callback) noexcept;
    void wait_for_callbacks() noexcept;
    // Callbacks of this mutex queued and not yet run: the destructor waits for
    // them, so that what they use may be destroyed with the mutex; on the
    // callback thread it cannot, and marks them to skip the user's part.
    struct pending_callbacks {
        std::mutex mutex;
        std::condition_variable done;
        int count = 0;
        bool mutex_gone = false;
    };

    std::shared_ptr<provider_state> provider_;
    spi::lock_request request_;
    grant_kind observed_kind_;
    lock_options options_;
    std::unique_ptr<spi::lock_handle> handle_;
    std::shared_ptr<gate> gate_;

    std::shared_ptr<sink_target> sink_target_;
    std::shared_ptr<pending_callbacks> pending_;

    std::mutex state_mutex_;                 // guards the fields below
    std::uint64_t generation_ = 0;           // of the current grant, or of the one being acquired
    bool acquiring_ = false;                 // acquire() of grant generation_ is under way
    std::optional<std::string> early_loss_;  // reported while acquiring
    int depth_ = 0;                          // reentrancy count of the owner thread; 0 = not held
    std::thread::id owner_;
    scheduler::entry_id entry_ = 0;
    std::atomic<bool> held_{false};
    std::atomic<std::uint64_t> token_{0};
    spi::clock::time_point granted_at_{};  // under state_mutex_: when the current grant was given
    std::atomic<std::chrono::steady_clock::rep> valid_until_{0};  // 0: no lease to watch
    async_work async_;                                            // under state_mutex_
    std::condition_variable async_idle_;                          // async_ became empty
};

}  // namespace distlock::detail
