// distlock: what the locks of a provider are doing, for metrics and logs,
// without a dependency: an observer interface the core feeds, a ready observer
// that counts (distlock::metrics), its rendering in the Prometheus text
// exposition format, and a logging hook. Given to connect() in
// provider_options; a provider without them pays nothing (a null check).
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "distlock/error.hpp"
#include "distlock/export.hpp"

namespace distlock {

// ---- logs ------------------------------------------------------------------------

enum class log_level { debug, info, warning, error };
DISTLOCK_API std::string_view to_string(log_level level) noexcept;

struct DISTLOCK_API log_record {
    log_level level;
    std::string_view backend;  // the URL scheme ("redis", "zk", ...)
    std::string_view lock;     // the lock name; empty for the provider as a whole
    std::string_view message;  // never holds a password, token or owner id of the URL
};

// Where a provider's diagnostics go (spdlog, syslog, your logger). Called on the
// caller's thread (connect) and on the provider's callback thread (losses and
// failures, in order, just before on_lost / on_error): it must not block for
// long (it delays the provider's callbacks). Exceptions it throws are swallowed. distlock itself never
// writes to stdout or stderr.
using log_hook = std::function<void(const log_record&)>;

// ---- the observer ------------------------------------------------------------------

// What a lock operation was. The read-write lock's sides and a semaphore's
// permits are grants like a mutex's (a multi-lock is one grant per name; an
// election's term of leadership is a grant of kind leader).
enum class grant_kind { exclusive, read, write, permit, leader };
inline constexpr std::size_t grant_kinds = 5;
DISTLOCK_API std::string_view to_string(grant_kind kind) noexcept;

enum class acquire_outcome { granted, timed_out, failed };
DISTLOCK_API std::string_view to_string(acquire_outcome outcome) noexcept;

// Whether a grant had to wait for another holder: `unknown` where the backend
// does not say (see docs/observability.md) and no thread of this provider held
// the name before it.
enum class contention { none, waited, unknown };
DISTLOCK_API std::string_view to_string(contention c) noexcept;

struct DISTLOCK_API acquire_event {
    std::string_view backend, lock;
    grant_kind kind;
    acquire_outcome outcome;
    contention contended;             // for `granted`
    std::chrono::nanoseconds waited;  // from the call to its return
    errc error;                       // for `failed`: the error's code
};

struct DISTLOCK_API release_event {
    std::string_view backend, lock;
    grant_kind kind;
    std::chrono::nanoseconds held;  // from the grant to the release
    bool clean;                     // false: the release failed or found the grant gone
};

struct DISTLOCK_API renewal_event {
    std::string_view backend;
    std::size_t batch;  // grants renewed or checked in one call of the backend
    std::size_t ok, failed, lost;
    std::chrono::nanoseconds latency;  // of that call
    // How late the call went out for the grant of the batch that fell due
    // first: from when its renewal was due (its last renewal + its interval;
    // sooner after a renewal that could not tell) to the call (negative: early,
    // for a grant taken into a batch due a moment later). The lease left to the grant of the batch with the least, when
    // the call went out, by this client's clock (its lease - the time since
    // its last successful renewal): at or below zero, it may have expired.
    std::chrono::nanoseconds late{0};
    std::chrono::nanoseconds least_left{0};
};

struct DISTLOCK_API loss_event {
    std::string_view backend, lock;
    grant_kind kind;
};

struct DISTLOCK_API error_event {
    std::string_view backend, lock;
    errc code;  // unavailable, in_doubt, ...: an unlock() or renewal that failed without a loss
};

// Fed by the core: acquired() and released() on the caller's thread as the
// call returns, renewed() on the provider's renewal thread after each batch,
// lost() and failed() on the provider's callback thread (before on_lost /
// on_error). Never on a backend's own thread, never with distlock's locks held:
// keep each call short and non-blocking (it delays the caller, the renewals or
// the callbacks). Exceptions are swallowed.
class DISTLOCK_API observer {
public:
    virtual ~observer() = default;
    virtual void acquired(const acquire_event&) {}
    virtual void released(const release_event&) {}
    virtual void renewed(const renewal_event&) {}
    virtual void lost(const loss_event&) {}
    virtual void failed(const error_event&) {}
};

// What connect() may be given besides the URL.
struct DISTLOCK_API provider_options {
    std::shared_ptr<distlock::observer> observer;  // null = none
    log_hook log;                                  // empty = no logs
    log_level min_level = log_level::warning;      // records below it are not made at all
    // The label this provider's grants carry where the backend stores one
    // (provider::inspect, election::leader): at most 255 bytes, no control
    // characters. Empty = the URL's `holder=`, else "<hostname>:<pid>".
    std::string holder;
};

// ---- a ready observer: counters and histograms ----------------------------------

// Counts every event, lock-free on the hot path (relaxed atomics); one may serve
// several providers. Labels are the backend and the kind or outcome, never the
// lock name (names are unbounded).
class DISTLOCK_API metrics final : public observer {
public:
    // Upper bounds (seconds) of the histograms' buckets; +Inf is implied.
    static constexpr std::array<double, 16> bounds{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                                                   0.05,   0.1,     0.25,   0.5,   1,      2.5,   5,    10};

    struct histogram {
        std::array<std::uint64_t, bounds.size() + 1> buckets{};  // per bucket (not cumulative); last = +Inf
        std::uint64_t count = 0;
        double sum = 0;  // seconds
    };
    // A copy of the counters of one backend.
    struct backend_counts {
        std::string backend;
        // [kind][outcome]
        std::array<std::array<std::uint64_t, 3>, grant_kinds> acquisitions{};
        std::array<std::uint64_t, 3> contended{};  // granted acquisitions by contention (none, waited, unknown)
        histogram wait, hold, renewal_latency;
        std::uint64_t renewal_calls = 0, renewal_grants = 0, renewals_ok = 0, renewals_failed = 0, renewals_lost = 0;
        std::uint64_t releases = 0, releases_unclean = 0;
        std::array<std::uint64_t, grant_kinds> losses{};     // by kind
        std::vector<std::pair<errc, std::uint64_t>> errors;  // failed acquisitions and failed unlock/renewals, by code
    };
    std::vector<backend_counts> snapshot() const;

    void acquired(const acquire_event& e) override;
    void released(const release_event& e) override;
    void renewed(const renewal_event& e) override;
    void lost(const loss_event& e) override;
    void failed(const error_event& e) override;

private:
    struct atomic_histogram {
        std::array<std::atomic<std::uint64_t>, bounds.size() + 1> buckets{};
        std::atomic<std::uint64_t> count{0};
        std::atomic<std::uint64_t> sum_ns{0};
        void add(std::chrono::nanoseconds d) noexcept;
        histogram read() const noexcept;
    };
    struct per_backend {
        std::string backend;
        std::array<std::array<std::atomic<std::uint64_t>, 3>, grant_kinds> acquisitions{};
        std::array<std::atomic<std::uint64_t>, 3> contended{};
        atomic_histogram wait, hold, renewal_latency;
        std::atomic<std::uint64_t> renewal_calls{0}, renewal_grants{0}, renewals_ok{0}, renewals_failed{0},
            renewals_lost{0}, releases{0}, releases_unclean{0};
        std::array<std::atomic<std::uint64_t>, grant_kinds> losses{};
        std::array<std::atomic<std::uint64_t>, 16> errors{};  // by errc value
    };
    per_backend& of(std::string_view backend);

    mutable std::mutex mutex_;  // guards the list, not the counters
    std::vector<std::unique_ptr<per_backend>> backends_;
};

// The counters in the Prometheus text exposition format (version 0.0.4), every
// metric named `<prefix>_...`: acquisitions (by backend, kind, outcome),
// contention of grants, wait and hold time histograms (seconds), renewal calls,
// grants renewed by outcome, renewal latency histogram, losses by kind, errors
// by code. Serve it with Content-Type "text/plain; version=0.0.4".
DISTLOCK_API std::string render_prometheus(const metrics& m, std::string_view prefix = "distlock");

}  // namespace distlock
