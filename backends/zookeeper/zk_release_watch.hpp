// zk:// internals: the release events that wake asynchronous waiters
// (spi::lock_handle::watch_releases), on the provider's one session. Never
// included outside backends/zookeeper/.
//
// One child watch per watched directory (a lock path, a semaphore's leases or
// its internal mutex's locks), shared by every subscription of it and
// reference-counted: the first subscription lists the directory with a watch
// (an exists watch while it does not exist), each event lists it again with a
// new watch, on the C client's completion thread (asynchronous requests only:
// no thread, no session, no connection of its own). A listing is compared with
// the one before it, and the subscriptions are woken only when the lock may
// have become free (see wake rules in zk_release_watch.cpp): a failed try
// creates and deletes a node of its own, and an asynchronous wait keeps one
// from its first attempt to its end (zk_queue_lock.cpp); neither holds, so
// neither wakes the other waiters (they would wake each other at round-trip
// speed). A wake-up costs each parked waiter one getChildren.
// Watches are not removed from the server (3.4 servers cannot; 3.5's
// removeWatches would also remove the child watch a blocking semaphore waiter
// of the session set on the same path): when the last subscription of a
// directory goes, its entry goes, and the watch still set fires once into
// nothing. The server keeps one watch per path and session however
// often it is set, so stale watches never exceed the directories watched.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "distlock/spi/backend.hpp"

namespace distlock::backends::zookeeper {

struct session;
class session_manager;

class release_watches {
public:
    // What a subscription watches in one directory.
    enum class role {
        queue,     // a lock path: mutex, read-write lock, election
        leases,    // a semaphore's leases: free when fewer than `permits`
        internal,  // a semaphore's internal mutex (<path>/locks), worth a try while `leases` has room
    };
    struct spec {
        std::string dir;
        role what = role::queue;
        std::uint32_t permits = 0;  // leases, internal
        std::string leases;         // internal: the leases directory it goes with
    };

    explicit release_watches(session_manager& zk);
    ~release_watches();
    release_watches(const release_watches&) = delete;
    release_watches& operator=(const release_watches&) = delete;

    // Calls `wake` whenever a watched directory shows a release, until the
    // returned subscription is destroyed (after its destructor returned, never).
    std::unique_ptr<spi::wake_subscription> subscribe(const std::vector<spec>& specs, spi::wake_sink wake);

    // From the session watcher, on the completion thread (never blocks): an
    // event of a watched directory lists it again; the (re)connection of a new
    // session sets every watch again on it.
    void on_event(session& s, int type, int state, const char* path);

    // Directories watched now (tests).
    std::size_t watched() const;

    struct core;  // zk_release_watch.cpp

private:
    std::shared_ptr<core> core_;
};

}  // namespace distlock::backends::zookeeper
