// consul:// the release events of asynchronous waits on a mutex (and an
// election: the same key) (spi::lock_handle::watch_releases): ONE blocking
// listing of the provider's prefix at a time (GET /v1/kv/<prefix>/?recurse
// &index=N), on the agent's loop thread (http::loop), shared by the waiters of
// every name. No thread or connection per waiter: a subscription is an entry
// in a table.
//
// A failed one-attempt acquisition of a mutex writes nothing (it reads the
// key, finds another session on it, destroys its own session), so only the
// holders' acquires and releases move the prefix's index. The attempt hands
// the session it found on the key and its read's X-Consul-Index to the feed
// (blocked_by()); a listing that shows the key without that session wakes
// the waiter. The last listing is kept: an attempt older than it is judged on
// it at once, and a release after it moves the index the blocking query
// waits on, so none is missed.
//
// The semaphore and the read-write lock are not woken here (their handles
// keep the default: the core polls with backoff): their failed attempts write
// under the prefix (a contender key, a mark in the document), so a listing
// alone cannot tell their releases from other waiters' attempts without
// reading each recipe's document. See docs/backends/consul.md.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "consul_agent.hpp"
#include "http/http_monitor.hpp"

namespace distlock::backends::consul {

class release_feed {
public:
    struct watcher;  // one subscription's state (consul_release_feed.cpp)

    explicit release_feed(agent& a);  // not copyable (its mutex)
    ~release_feed();

    // A subscription to releases of `key`, calling `wake` until it is
    // destroyed; starts the listings.
    std::unique_ptr<spi::wake_subscription> subscribe(const std::string& key, spi::wake_sink wake,
                                                      std::shared_ptr<watcher>& out);

    // After a failed one-attempt acquisition: its read (X-Consul-Index
    // `index`) found the key held by `session`.
    void blocked_by(const std::shared_ptr<watcher>& w, std::string session, std::uint64_t index);

private:
    void unsubscribe(const std::shared_ptr<watcher>& w);  // when a subscription is destroyed
    void on_done(const http::transfer_result& r);
    // Under mu_: whether the last listing shows w's key without its holder.
    bool freed(const watcher& w) const;

    agent& agent_;
    std::string prefix_;  // <prefix>/
    std::mutex mu_;
    std::unordered_multimap<std::string, std::shared_ptr<watcher>> by_key_;
    std::unordered_map<std::string, std::string> sessions_;  // the last listing: key -> its session ("" = none)
    std::uint64_t index_ = 0;                                // that listing's X-Consul-Index (0 = none yet)
    http::monitor monitor_;                                  // last: stopped before the fields its callbacks use go
};

}  // namespace distlock::backends::consul
