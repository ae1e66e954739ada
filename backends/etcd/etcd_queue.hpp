// The queue engine under every etcd lock recipe, as Curator's LockInternals is
// under InterProcessMutex: the session (the lease our key is attached to), the
// key of ours in the name's directory, the create-if-absent txn that puts it
// and reads the keys first in line, the wait for the keys ahead of ours
// (etcd_wait.cpp), the mark of a grant that waited, the watch of our key while
// held, and the release. A driver says what order its kind keeps: one holder
// at a time (etcd_mutex.cpp: the mutex, the election, a writer), a reader
// (etcd_rwlock.cpp), a permit (etcd_semaphore.cpp). See etcd_lock.hpp for the
// algorithm.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "distlock/spi/backend.hpp"
#include "etcd_gateway.hpp"
#include "etcd_layout.hpp"
#include "etcd_release_feed.hpp"
#include "http/http_monitor.hpp"

namespace distlock::backends::etcd {

class queue : public spi::lock_handle {
public:
    std::optional<spi::grant> acquire(spi::deadline until, const spi::loss_sink& lost) final;
    void release() final;
    // Asynchronous waits: the provider's one stream of deletions
    // (etcd_release_feed.hpp); a failed attempt tells it which keys kept it out.
    std::unique_ptr<spi::wake_subscription> watch_releases(spi::wake_sink wake) final;

    const std::shared_ptr<session>& current_session() const { return session_; }
    const std::string& key() const { return key_; }
    std::int64_t revision() const { return revision_; }
    // While held: whether the provider's release stream watches our key for
    // its deletion (hold()), rather than a watch of our own.
    bool on_release_feed() const { return held_ != nullptr; }

protected:
    queue(gateway& g, const spi::lock_request& r);

    // What the wait does once it has read the keys ahead of ours.
    struct place {
        bool mine = false;         // few enough keys ahead: our turn
        std::string watch;         // else the key whose change we wait for
        bool whole_range = false;  // ... or any deletion in the deciding range
        bool wake_on_put = false;  // a put of the watched key wakes us too
    };

    // The driver: the order of its kind.
    // Whether the first keys of the deciding range, as the acquire txn saw
    // them (names::blockers, oldest first, `first_in_line()` of them), give
    // us the lock without waiting.
    virtual bool granted_at_once(const json& first) const = 0;
    // How many keys the acquire txn reads at the head of the deciding range.
    virtual std::size_t first_in_line() const { return 1; }
    // The keys ahead of ours that the wait reads (`range`: those created
    // before ours in the deciding range), and what it makes of them. By
    // default the latest key ahead, watched for its deletion.
    virtual void narrow_ahead(json& range) const;
    virtual place place_of(const json& ahead) const;
    // Conditions the acquire txn adds to "our key is absent" (and the ranges
    // its failure branch reads, after our key's and the head's), and what to
    // do when one of them failed: true to try again (it throws once out of
    // rounds). By default none.
    virtual void guard(json& compare, json& failure) const;
    virtual bool guard_failed(const json& responses, int round);
    // Whether the release txn also counts the deciding range after ours went
    // (a range read in the server, about a twentieth of a mutex's cycle:
    // only a semaphore needs it). By default not.
    virtual bool counts_at_release() const { return false; }
    // After a release, with the release txn's responses (with
    // counts_at_release(), the deciding range's count after ours went). By
    // default nothing.
    virtual void released(const json& responses) noexcept;

    gateway& gate() const { return gateway_; }
    const spi::lock_request& request() const { return request_; }
    const names& where() const { return where_; }
    session& lease() const { return *session_; }

private:
    enum class turn { mine, timed_out, key_lost };
    struct waiting;  // etcd_wait.cpp

    // acquire()'s steps, one round each.
    void open_round();
    json enqueue_txn() const;
    std::optional<json> enqueue(int round);
    bool own_key(const json& reply, int round);
    bool found_key(const json& reply, int round);
    turn wait_in_line(spi::deadline until);
    bool mark_granted();
    void keep_own_lease();
    spi::grant granted(const spi::loss_sink& lost, bool waited);
    void cleanup() noexcept;
    // A failed attempt: the keys first in line (other than ours) to the release feed.
    void blocked(const json& reply) const;

    // etcd_wait.cpp: the wait for the keys ahead of ours.
    turn wait_for_turn(spi::deadline until);
    std::optional<turn> wait_round(waiting& w, spi::deadline until, spi::clock::time_point now);
    turn confirm_turn();
    bool watch_ahead(const place& p, std::int64_t at, const std::function<bool()>& moved,
                     std::chrono::milliseconds budget);
    bool wait_for_release(waiting& w, const place& p, const json& kvs, std::int64_t at,
                          std::chrono::milliseconds budget);

    // The watch of our key while held.
    http::request watch_request(std::int64_t from) const;
    bool on_monitor_line(std::string_view line);
    void stop_watching();  // whichever of the two watches our key
    std::string lost_reason() const;
    void on_monitor_done(const http::transfer_result& r);

    gateway& gateway_;
    spi::lock_request request_;
    names where_;  // where the keys of this kind go
    std::shared_ptr<session> session_;
    std::string key_, value_;
    std::int64_t revision_ = 0;                     // our key's create revision (0 = not held)
    std::int64_t token_ = 0;                        // the store revision when the grant was found ours
    std::weak_ptr<release_feed::watcher> watcher_;  // of the asynchronous wait under way, if any

    // While held, our key's deletion is reported as a loss at once, not at the
    // next keepalive: by a watch of our own key (on the provider's loop
    // thread) while the provider has few such watches (release_feed::watch_slot),
    // else by the provider's one release stream (held_): a connection per held
    // lock stays bounded.
    std::int64_t monitor_from_ = 0;                 // under monitor_'s lock: start revision of the next watch (0 = now)
    std::string monitor_lost_;                      // under monitor_'s lock: why, once the watch saw our key deleted
    release_feed::watch_slot slot_;                 // of the watch of our own key, while it runs
    http::monitor monitor_;                         // stopped before the fields its callbacks use go
    std::unique_ptr<spi::wake_subscription> held_;  // last: ended before the fields it uses go
};

}  // namespace distlock::backends::etcd
