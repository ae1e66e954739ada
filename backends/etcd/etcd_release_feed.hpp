// etcd:// the release events of asynchronous waits
// (spi::lock_handle::watch_releases): ONE watch stream per provider, on the
// gateway's loop thread (http::loop), of every deletion under the prefix
// (filter NOPUT), shared by all the waiters of every name. No thread or
// connection per waiter: a subscription is an entry in a table.
//
// A waiter is woken by the deletion of a key that kept its last attempt out:
// after a failed one-attempt acquisition, the queue engine hands the keys
// first in line that its txn saw (blocked_by(), with that txn's revision),
// and only a deletion of one of them after that revision wakes it. A failed
// attempt's own key, created and deleted again, is never first in line for
// another waiter, so waiters never wake each other in a loop.
//
// Nothing is missed between an attempt and its blocked_by(): the feed keeps
// the last deletions it saw, and knows from which revision on it has seen
// every one (the stream's start; it resumes from the last revision it saw
// when it breaks). A waiter whose revision it cannot vouch for (the stream
// not yet created, restarted after a compaction, or the window too short) is
// woken at once: one attempt more, never a missed release.
//
// The same stream tells held locks of their key's deletion (hold()).
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "distlock/spi/backend.hpp"
#include "http/http_monitor.hpp"

namespace distlock::backends::etcd {

class gateway;

class release_feed {
public:
    struct watcher;  // one subscription's state (etcd_release_feed.cpp)

    explicit release_feed(gateway& g);
    ~release_feed();
    release_feed(const release_feed&) = delete;
    release_feed& operator=(const release_feed&) = delete;

    // A subscription calling `wake` until it is destroyed; starts the stream.
    std::unique_ptr<spi::wake_subscription> subscribe(spi::wake_sink wake, std::shared_ptr<watcher>& out,
                                                      bool hold = false);

    // A watch of a held lock's own key, while the provider runs fewer than 8
    // (each is a connection): take() says whether it may run.
    class watch_slot {
    public:
        watch_slot() = default;
        watch_slot(const watch_slot&) = delete;
        watch_slot& operator=(const watch_slot&) = delete;
        ~watch_slot() { give_back(); }
        bool take(release_feed& f);
        void give_back() noexcept;

    private:
        release_feed* feed_ = nullptr;
    };

    // A held lock's key, created at `revision`: `deleted` is called once when
    // the stream shows it deleted (the lock lost), until the subscription is
    // destroyed. Every held lock of the provider shares the one stream (no
    // watch, so no connection, per held lock). A deletion the feed cannot
    // vouch it saw (its stream began after `revision`, a compaction, an
    // evicted window) is never reported as a loss: the keepalive's check of
    // every held key finds it (etcd_keepalive.cpp).
    std::unique_ptr<spi::wake_subscription> hold(const std::string& key, std::int64_t revision, spi::wake_sink deleted);

    // For each held key (a hold() of it, created at its revision): whether
    // the stream is live and will report every deletion of it, so that the
    // keepalive need not read the key (etcd_keepalive.cpp): it has watched
    // the prefix without a gap since a revision at which the key stood (the
    // key's own, when the stream's window reached back to it at hold(), or
    // one a keepalive's read saw it at: stood()). False while the stream has
    // failed, after a compaction broke its continuity, and once the deletion
    // was seen.
    using held_key = std::pair<const std::string*, std::int64_t>;
    std::vector<bool> vouches(std::span<const held_key> keys) const;
    // A keepalive's read found these held keys standing at revision `at`.
    void stood(std::span<const held_key> keys, std::int64_t at);

    // After a failed one-attempt acquisition: the keys first in line that kept
    // it out, as the store showed them at `revision`. Wakes at once when one
    // of them was deleted since (or when that cannot be told).
    void blocked_by(const std::shared_ptr<watcher>& w, std::vector<std::string> keys, std::int64_t revision);

    // Subscriptions now, watch streams started so far, and the wake-ups
    // given so far (each call of a subscriber's sink) (tests).
    std::size_t watchers() const;
    std::uint64_t streams_started() const;
    std::uint64_t wakes() const noexcept { return wakes_.load(); }
    // The deletions kept for missed() now, the bytes of their keys now and at
    // most so far, and the revision the stream resumes from (tests).
    struct kept_window {
        std::size_t entries = 0, bytes = 0, most_bytes = 0;
        std::int64_t resume_from = 0;
    };
    kept_window kept() const;

private:
    friend class feed_subscription;
    void unsubscribe(const std::shared_ptr<watcher>& w);
    void index(const std::shared_ptr<watcher>& w, bool add);  // under mu_
    http::request stream_request() const;                     // under mu_
    bool on_line(std::string_view line);
    void on_done(const http::transfer_result& r);
    // Under mu_: whether a deletion of w's keys after its revision may have
    // gone unseen or was seen.
    bool missed(const watcher& w) const;
    void wake(const std::vector<std::shared_ptr<watcher>>& ws);
    void forget_recent();                                       // under mu_
    std::shared_ptr<watcher> hold_of(const held_key& k) const;  // under mu_: the hold of a held key, if indexed
    // Under mu_: w goes to `woken`; a hold is woken once, so it leaves the index.
    void take(const std::shared_ptr<watcher>& w, std::vector<std::shared_ptr<watcher>>& woken);

    gateway& gateway_;
    std::string prefix_;  // <prefix>/
    mutable std::mutex mu_;
    std::unordered_set<std::shared_ptr<watcher>> watchers_;
    std::unordered_multimap<std::string, std::shared_ptr<watcher>> by_key_;
    std::int64_t from_ = 0;   // where the next stream starts (0: now)
    std::int64_t floor_ = 0;  // every deletion from this revision on is in recent_ or to come (0: unknown)
    std::int64_t since_ = 0;  // the stream has delivered every deletion from this revision on (0: no stream)
    bool live_ = false;       // the server created the stream's watch, and it has not failed since
    std::deque<std::pair<std::string, std::int64_t>> recent_;
    std::size_t recent_bytes_ = 0;  // of recent_'s keys
    std::size_t most_bytes_ = 0;    // recent_bytes_'s highest value after trimming (tests)
    std::uint64_t started_ = 0;
    std::atomic<int> own_watches_{0};  // watch_slot's
    std::atomic<std::uint64_t> wakes_{0};
    http::monitor monitor_;  // last: stopped before the fields its callbacks use go
};

}  // namespace distlock::backends::etcd
