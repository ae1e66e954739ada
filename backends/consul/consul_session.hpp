// consul:// internals: what every lock handle that lives on a Consul session of
// its own per acquisition shares (the mutex's grants, consul_lock.cpp; the
// contenders of the semaphore and the read-write lock, consul_contender.cpp):
// the session made for an acquisition and destroyed when it fails, its renewals
// and the bounds of each blocking query while waiting, the monitor of the grant
// (its round: reply, verdict, next query) and the release's frame (the monitor
// stopped, the session destroyed, the errors of a release that failed).
//
// A recipe supplies its wait, its monitor's query and verdict, and its own
// release of the grant (hooks below).
#pragma once

#include <optional>
#include <string>

#include "consul_agent.hpp"
#include "http_monitor.hpp"

namespace distlock::backends::consul {

// What a recipe's sessions are, and what its messages call it.
struct session_kind {
    std::string noun;          // "lock", "semaphore", ...
    std::string behavior;      // the sessions' Behavior; "" = the URL's (settings::behavior)
    std::string session_name;  // the start of the sessions' names
};

class session_handle : public spi::lock_handle {
public:
    session_handle(agent& a, const spi::lock_request& r, session_kind kind);
    // A derived class stops the monitor in its own destructor: its verdict reads its fields.
    ~session_handle() override = default;

    // A session for the acquisition, wait_and_acquire on it, the session destroyed unless granted.
    std::optional<spi::grant> acquire(spi::deadline until, const spi::loss_sink& lost) final;
    // The monitor stopped, give_back(), the session destroyed; throws not_owner when
    // the grant was lost before, in_doubt when the outcome is unknown.
    void release() final;
    // The session of the current grant (read only between acquire() and release()):
    // what the batched renewal needs (keepalive_batch).
    const std::string& session() const { return session_; }

protected:
    // The wait for a grant on session_ (asked for at `created`); nullopt once `until` passed.
    virtual std::optional<spi::grant> wait_and_acquire(spi::deadline until, spi::deadline created,
                                                       const spi::loss_sink& lost) = 0;
    // The monitor's query: answered once the index passes `index`.
    virtual http::request monitor_request(std::uint64_t index) const = 0;
    // On the loop thread, the monitor's reply `resp` (200 or 404): nullopt when the
    // monitor was stopped meanwhile (checked under its lock); else why the grant is
    // lost ("" = it is not), and in `next_index` the index for the next query.
    // Throws when the reply cannot be read (the query is made again later).
    virtual std::optional<std::string> examine(const http::response& resp, std::uint64_t& next_index) = 0;
    // Gives the grant of session_ back on the server: whether it was still held.
    virtual bool give_back() = 0;
    // What the message of a failed release names: "<noun> '<name>'".
    virtual std::string release_subject() const;

    // A new session of this kind.
    std::string new_session();
    // While waiting: renews session_ once renew_every has passed since `renewed`
    // (then `renewed` and `now` move on); a session that expired meanwhile is
    // replaced (then true). Throws unavailable when the renewal failed.
    bool renew_if_due(spi::deadline& now, spi::deadline& renewed, ms renew_every);
    // How long the next query waits: 0 ms (not a blocking query) at index 0; else
    // up to `until` and the next renewal, nullopt when that leaves no time (time to
    // renew, or to give up once `until` passed).
    static std::optional<ms> query_wait(std::uint64_t index, spi::deadline until, spi::deadline now,
                                        spi::deadline renewed, ms renew_every);
    // Starts the monitor of the grant of session_ with its first query `rq`.
    void start_monitor(http::request rq, const spi::loss_sink& lost);

    agent& agent_;
    spi::lock_request request_;
    session_kind kind_;
    std::string session_;
    std::string monitored_session_;  // under monitor_'s lock: the session whose grant is watched
    http::monitor monitor_;          // last of these; stopped by the derived class's destructor

private:
    void on_monitor(http::transfer_result r);
    void destroy_session() noexcept;
};

}  // namespace distlock::backends::consul
