// distlock: leader election.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "distlock/async.hpp"
#include "distlock/detail/deadline.hpp"
#include "distlock/export.hpp"
#include "distlock/inspect.hpp"
#include "distlock/options.hpp"

namespace distlock {

namespace detail {
class mutex_impl;
}

struct DISTLOCK_API election_options {
    // What this candidate publishes while it leads: the label leader() shows
    // (on ZooKeeper, the data of Curator's LeaderLatch node, its participant
    // id; on etcd, the value of Go's concurrency.Election key, its proposal).
    // At most 255 bytes, no control characters. Empty = the provider's holder
    // label (provider_options::holder).
    std::string id;
    // The term's lease, renewed while leading, as lock_options::lease (0 = the
    // provider's default). A crashed leader is replaced within the backend's
    // crash-release bound with this lease.
    std::chrono::milliseconds lease{0};
    // Called once when leadership is lost without resign() (lease not renewed,
    // session expired, key removed), on the provider's callback thread, as
    // lock_options::on_lost; is_leader() is false from when the loss is found.
    std::function<void(const lock_event&)> on_lost;
    // A failed renewal or resignation that is not a loss, as lock_options::on_error.
    std::function<void(const lock_event&, const error&)> on_error;
};

// One candidate for the leadership of a name. At most one candidate of every
// process using the backend leads a name at a time (each backend's guarantees
// under failure are those of its mutex: docs/reliability.md). Made by
// provider::election(). Movable, not copyable; destroying it resigns.
//
// Built on each backend's lock (a term is a grant, renewed like a lease and
// with its fencing token): on ZooKeeper the nodes of Curator's LeaderLatch, on
// etcd the keys of Go's concurrency.Election, elsewhere the backend's mutex of
// the same name (so an election and a mutex of one name exclude each other
// there; docs/observability.md).
class DISTLOCK_API election {
public:
    election(std::unique_ptr<detail::mutex_impl> impl, std::string id) noexcept;
    election(election&&) noexcept;
    election& operator=(election&&) noexcept;
    election(const election&) = delete;
    election& operator=(const election&) = delete;
    ~election();

    // Waits until this candidate leads. Throws distlock::error subclasses as
    // mutex::lock does; a candidate that already leads returns at once.
    void campaign();
    // The same, giving up after `timeout`: false when it did not become leader.
    [[nodiscard]] bool campaign(std::chrono::milliseconds timeout);
    // Gives up leadership (or nothing, when not leading). Never throws.
    void resign() noexcept;

    // Asynchronous forms (include/distlock/async.hpp): campaign without
    // holding a thread; `granted` = leads. A candidate that already leads
    // completes at once with granted.
    template <class Timeout>
    void async_campaign(const Timeout& timeout, acquire_handler handler, std::stop_token stop = {}) {
        async_campaign_steady(detail::steady_deadline(timeout), std::move(handler), std::move(stop));
    }
    void async_resign(release_handler handler = {});
    template <class Timeout>
    [[nodiscard]] detail::acquire_awaitable campaign_async(const Timeout& timeout, std::stop_token stop = {},
                                                           executor resume_on = {}) {
        return {[this, until = detail::steady_deadline(timeout), stop = std::move(stop)](acquire_handler h) {
                    async_campaign_steady(until, std::move(h), stop);
                },
                std::move(resume_on)};
    }
    [[nodiscard]] detail::release_awaitable resign_async(executor resume_on = {}) {
        return {[this](release_handler h) { async_resign(std::move(h)); }, std::move(resume_on)};
    }

    // Leads now (as mutex::held: false as soon as a loss is found or the last
    // confirmed renewal is a lease old).
    [[nodiscard]] bool is_leader() const noexcept;
    // The fencing token of this term (0 when not leading or on a backend without one).
    [[nodiscard]] std::uint64_t term() const noexcept;
    // Who leads now, as the server shows it (any process's candidate, Curator's
    // and etcdctl's included): lock_info::holder is the leader's id.
    [[nodiscard]] lock_info leader() const;

    [[nodiscard]] const std::string& name() const noexcept;
    [[nodiscard]] const std::string& id() const noexcept { return id_; }

private:
    void async_campaign_steady(std::chrono::steady_clock::time_point deadline, acquire_handler handler,
                               std::stop_token stop);
    std::unique_ptr<detail::mutex_impl> impl_;
    std::string id_;
};

}  // namespace distlock
