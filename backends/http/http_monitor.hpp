// The monitor: one transfer after another on a loop for as long as a lock is
// held (what both backends' handles watch their held key with).
#pragma once

#include <chrono>
#include <mutex>

#include "distlock/spi/backend.hpp"
#include "http_multi.hpp"
#include "http_transfer.hpp"

namespace distlock::backends::http {

// Watches a held lock on a loop: one transfer at a time, each started again from
// the previous one's on_done (etcd: a watch of the key; Consul: a blocking query
// on it) until the lock is released or the monitor sees it lost, which it
// reports through the grant's loss sink (that only records the loss and queues
// the user's on_lost for the core's callback thread). Thread-safe. Its mutex
// also guards the state the owner keeps between transfers (the revision or
// session to compare with): lock() it to read or change that state, and to
// start().
class monitor {
public:
    using guard = std::unique_lock<std::mutex>;

    // `on_line` (empty = whole responses) and `on_done` serve every transfer and
    // run on the loop thread; on_done calls restart() or end().
    monitor(loop& l, loop::line_fn on_line, loop::done_fn on_done);
    ~monitor() { stop(); }  // declare it after the fields its callbacks use
    monitor(const monitor&) = delete;
    monitor& operator=(const monitor&) = delete;

    [[nodiscard]] guard lock() { return guard(mutex_); }

    // Starts monitoring the grant that `lost` reports for, with the transfer
    // `r`; `held` is lock(), under which the owner has set its state for it.
    void start(const guard& held, request r, spi::loss_sink lost);

    // Between start() and end() or stop().
    bool running(const guard& held) const noexcept;

    // From on_done: the next transfer, unless the monitor has been stopped or
    // ended meanwhile.
    void restart(request r, std::chrono::milliseconds delay);

    // From on_done: the delay before the next transfer, for restart(). None
    // after a transfer that made progress (`progress`: it told something new)
    // or that ran for at least `full` (a blocking query or watch that waited its
    // course); after one that ended sooner with nothing new (a server that
    // answers a blocking query at once with the same index, or ends a watch
    // stream at once), a delay that doubles with each such transfer in a row,
    // from 50 ms up to 1 s: no reply can make the loop thread spin for as long
    // as the lock is held.
    std::chrono::milliseconds pace(bool progress, std::chrono::milliseconds full);

    // From on_done, when its transfer showed the lock lost: ends the monitoring
    // and reports the loss (once; nothing when stopped or ended already).
    void lost(const guard& held, std::string why) noexcept;

    // Ends the monitoring (the lock is released or its handle destroyed) and
    // cancels the transfer: when it returns, no callback runs or will run,
    // except when called from that callback itself on the loop thread (see
    // loop::cancel). Never call it holding lock().
    void stop() noexcept;

private:
    loop& loop_;
    loop::line_fn on_line_;
    loop::done_fn on_done_;
    std::mutex mutex_;  // guards the fields below (and the owner's state)
    bool running_ = false;
    loop::id current_ = 0;  // the transfer under way (after lost(), the one that found it), 0 = none
    spi::loss_sink lost_;
    std::chrono::steady_clock::time_point began_;  // when the transfer under way started
    int idle_ = 0;                                 // transfers in a row that ended soon with nothing new
};

}  // namespace distlock::backends::http
