// The state machine behind distlock::mutex: local queueing, reentrancy, the
// backend's lock handle, renewal registration and loss reporting.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "distlock/options.hpp"
#include "distlock/spi/backend.hpp"
#include "provider_state.hpp"

namespace distlock::detail {

class mutex_impl {
public:
    mutex_impl(std::shared_ptr<provider_state> provider, spi::lock_request request, lock_options options,
               std::unique_ptr<spi::lock_handle> handle);
    ~mutex_impl();
    mutex_impl(const mutex_impl&) = delete;
    mutex_impl& operator=(const mutex_impl&) = delete;

    bool lock_until(spi::deadline until);
    void unlock() noexcept;
    // Held, not reported lost, and (for a renewed or leased grant) within the
    // lease as last confirmed: false while a renewal is stuck past the lease,
    // true again if it then succeeds.
    bool held() const noexcept {
        if (!held_.load()) return false;
        const auto until = valid_until_.load();
        return until == 0 || std::chrono::steady_clock::now().time_since_epoch().count() < until;
    }
    std::uint64_t token() const noexcept { return held_.load() ? token_.load() : 0; }
    std::optional<std::chrono::steady_clock::time_point> valid_until() const noexcept {
        const auto until = valid_until_.load();
        if (!held_.load() || until == 0) return std::nullopt;
        return std::chrono::steady_clock::time_point(std::chrono::steady_clock::duration(until));
    }
    const std::string& name() const noexcept { return request_.name; }

    // Marks grant `generation` lost; returns the user's callback to run outside
    // every lock (empty when stale or already lost).
    std::function<void()> mark_lost(std::uint64_t generation, std::string reason);

private:
    void report_lost(std::uint64_t token, std::string reason) noexcept;
    void report_error(std::uint64_t token, const error& e) noexcept;

    std::shared_ptr<provider_state> provider_;
    spi::lock_request request_;
    lock_options options_;
    std::unique_ptr<spi::lock_handle> handle_;
    std::shared_ptr<gate> gate_;

    std::mutex state_mutex_;  // guards the fields below
    std::uint64_t generation_ = 0;
    int depth_ = 0;  // reentrancy count of the owner thread; 0 = not held
    std::thread::id owner_;
    scheduler::entry_id entry_ = 0;
    std::atomic<bool> held_{false};
    std::atomic<std::uint64_t> token_{0};
    std::atomic<std::chrono::steady_clock::rep> valid_until_{0};  // 0: no lease to watch
};

std::function<void()> mark_lost(mutex_impl& m, std::uint64_t generation, std::string reason);

}  // namespace distlock::detail
