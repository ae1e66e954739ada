// The shared state behind distlock::provider: the backend, the renewal
// scheduler, the thread that runs user callbacks, and the in-process wait queue
// ("gate") of each lock name.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "async_engine.hpp"
#include "callbacks.hpp"
#include "distlock/observe.hpp"
#include "distlock/provider.hpp"
#include "distlock/spi/backend.hpp"
#include "gate.hpp"
#include "process.hpp"
#include "scheduler.hpp"

namespace distlock::detail {

// `declared` with every feature that must be claimed (read_write, semaphore,
// permit_limit) and is not in `declared.implements` listed unsupported.
capabilities effective_caps(const capabilities& declared);

class provider_state {
public:
    // `secrets`: the URL's (spi::url::secrets), hidden in every message.
    provider_state(std::shared_ptr<spi::backend> backend, std::string scheme, std::string redacted_url,
                   std::chrono::milliseconds default_lease, provider_options options = {},
                   std::vector<std::string> secrets = {})
        : backend_(std::move(backend)),
          scheme_(std::move(scheme)),
          url_(std::move(redacted_url)),
          secrets_(std::move(secrets)),
          default_lease_(default_lease),
          caps_(effective_caps(backend_->caps())),
          options_(std::move(options)),
          scheduler_(backend_, options_.observer, scheme_) {}
    // In a forked child: abandons the backend instead of destroying it (its
    // destructor would close the parent's sessions: process.hpp).
    ~provider_state();
    provider_state(const provider_state&) = delete;
    provider_state& operator=(const provider_state&) = delete;

    // This provider was connected by another process: this one is a fork of it.
    bool forked() const noexcept { return generation_ != fork_generation(); }
    // Throws invalid_argument_error in a forked child, whose requests would go
    // through the parent's connections (and could release the parent's grants).
    void check_process() const;

    spi::backend& backend() noexcept { return *backend_; }
    detail::scheduler& scheduler() noexcept { return scheduler_; }
    callback_thread& callbacks() noexcept { return callbacks_; }
    // The workers of asynchronous acquisitions (started on first use).
    async_engine& engine() noexcept { return engine_; }
    const std::string& scheme() const noexcept { return scheme_; }
    const std::string& url() const noexcept { return url_; }
    const std::vector<std::string>& secrets() const noexcept { return secrets_; }
    std::chrono::milliseconds default_lease() const noexcept { return default_lease_; }
    // The label of this provider's grants (checked by connect()).
    const std::string& holder() const noexcept { return options_.holder; }
    // The backend's capabilities, with the features it does not claim to
    // implement (capabilities::implements) listed unsupported.
    const capabilities& caps() const noexcept { return caps_; }
    std::shared_ptr<gate> gate_for(const std::string& name);
    // Gate entries the sweeps of unused names have looked at so far (tests).
    std::uint64_t gates_swept() noexcept {
        std::lock_guard lk(gates_mutex_);
        return gates_swept_;
    }
    std::size_t gates_size() noexcept {
        std::lock_guard lk(gates_mutex_);
        return gates_.size();
    }

    // provider_options: what is told to the observer and the log hook. Each is
    // a null check when not given.
    template <class F>
    void observe(F&& tell) const noexcept {
        if (auto* o = options_.observer.get()) {
            try {
                tell(*o);
            } catch (...) {}
        }
    }
    bool logs(log_level level) const noexcept { return options_.log && level >= options_.min_level; }
    // An observer, or a log hook that takes records of `level`.
    bool observed(log_level level) const noexcept { return options_.observer != nullptr || logs(level); }
    void log(log_level level, std::string_view lock, std::string_view message) const noexcept {
        if (!logs(level)) return;
        try {
            options_.log(log_record{level, scheme_, lock, message});
        } catch (...) {}
    }

private:
    const unsigned generation_ = fork_generation();  // of the process that connected
    std::shared_ptr<spi::backend> backend_;
    std::string scheme_, url_;
    std::vector<std::string> secrets_;
    std::chrono::milliseconds default_lease_;
    capabilities caps_;
    provider_options options_;
    callback_thread callbacks_;    // after backend_, before scheduler_: runs what the scheduler queued
    async_engine engine_;          // no acquisition is pending once the state goes (each keeps it alive)
    detail::scheduler scheduler_;  // after both: stopped before they go
    std::mutex gates_mutex_;
    std::unordered_map<std::string, std::weak_ptr<gate>> gates_;
    // gates_ is swept of names nobody uses when it grows past this, which is
    // then set to twice what the sweep kept: each name costs O(1) sweeping.
    std::size_t gates_sweep_at_ = 1024;
    std::uint64_t gates_swept_ = 0;  // entries looked at by sweeps (tests)
};

// The one way from a provider to its state outside provider's own members
// (which reach state_ directly): testing::break_lock and the core's white-box
// tests. Not in a public header: a program cannot name it.
struct provider_access {
    static const std::shared_ptr<provider_state>& state(const provider& p) noexcept { return p.state_; }
};

}  // namespace distlock::detail
