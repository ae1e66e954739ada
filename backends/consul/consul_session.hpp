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
#include "http/http_monitor.hpp"

namespace distlock::backends::consul {

// The pace of a wait loop on blocking queries, by Consul's rules for their
// index (its documentation, "Blocking Queries"): the next query waits on the
// index of the last reply, restarted at 0 (a query that does not block) when
// that index went backwards or is missing (no X-Consul-Index, or not a number).
// A round whose replies did not move the index forward made no progress (a
// reply without the header, an agent that answers a blocking query at once
// with the same index, a write of ours that did not show): the next round
// first waits a backoff, retry_min doubling up to retry_max (the same page asks
// clients to rate-limit), so that no reply can make the loop spin. A reply
// that moves the index forward resets the backoff.
class query_pace {
public:
    query_pace(ms min, ms max) : min_(min), max_(max), idle_(min, max) {}
    // After a reply with X-Consul-Index `got`: the index for the next query.
    // `waited_out`: the reply came when its blocking query's wait ran out (then
    // an unchanged index is no sign of a spin).
    std::uint64_t saw(std::uint64_t got, bool waited_out = false);
    // Whether a blocking query of `wait`, asked at `asked`, has waited its course.
    static bool waited_out(spi::deadline asked, ms wait) { return wait > 0ms && spi::clock::now() - asked >= wait / 2; }
    // The round made no progress, whatever the index says (a refused acquire,
    // a replaced session): the next rest() waits.
    void stall() noexcept { progress_ = false; }
    // Before the next round: waits when the last one made no progress, never
    // past `until`.
    void rest(spi::deadline until);

private:
    ms min_, max_;
    spi::backoff idle_;
    std::uint64_t last_ = 0;  // the index of the last reply that had one
    bool progress_ = true;
};

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
    // Starts the monitor of the grant of session_ with its first query `rq`,
    // which waits on `index` (0 = it does not block).
    void start_monitor(http::request rq, std::uint64_t index, const spi::loss_sink& lost);

    agent& agent_;
    spi::lock_request request_;
    session_kind kind_;
    std::string session_;
    std::string monitored_session_;      // under monitor_'s lock: the session whose grant is watched
    std::uint64_t monitored_index_ = 0;  // under monitor_'s lock: the index the monitor's query waits on
    http::monitor monitor_;              // last of these; stopped by the derived class's destructor

private:
    void on_monitor(http::transfer_result r);
    void destroy_session() noexcept;
};

}  // namespace distlock::backends::consul
