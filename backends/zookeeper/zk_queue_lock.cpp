// zk:// the mutex, read-write lock and election (Curator's InterProcessMutex,
// InterProcessReadWriteLock and LeaderLatch): one node in the queue of the lock
// path, ordered by the recipe's driver (zk_queue_drivers.cpp), held when its
// turn comes, deleted on any failure (as Curator does).
//
// An asynchronous wait (watch_releases, then one-attempt acquire(now) calls)
// keeps its node between attempts, for the whole wait: each attempt after the
// first only lists the directory again to see whether its turn came, so the
// wait keeps its place in the queue (first come, first served with the
// blocking waiters; a waiting writer holds back the readers behind it). The
// end of the wait without a grant (its subscription destroyed) deletes it.
#include <mutex>
#include <utility>

#include "zk_queue.hpp"

namespace distlock::backends::zookeeper {
namespace {

class queue_lock final : public recipe_handle {
public:
    queue_lock(session_manager& zk, const spi::lock_request& r, const queue_driver& d)
        : recipe_handle(zk, r), driver_(d) {}
    ~queue_lock() override {
        std::lock_guard lk(place_mu_);
        leave_place();
    }

    std::unique_ptr<spi::wake_subscription> watch_releases(spi::wake_sink wake) override;

private:
    class kept_wait;
    // The node of an asynchronous wait, kept between its attempts.
    struct place {
        bool on = false;  // a subscription of watch_releases() is alive
        std::shared_ptr<session> s;
        created c;  // c.node empty: none yet
    };

    std::optional<spi::grant> take(spi::deadline until, const spi::loss_sink& lost) override;
    // Takes a place in the queue and waits for its turn; `in_place`: one
    // attempt of an asynchronous wait, from its kept place (under place_mu_).
    std::optional<spi::grant> take_from(spi::deadline until, const spi::loss_sink& lost, bool in_place);
    // Deletes the kept node, if any (under place_mu_): now, or once reconnected
    // (a node of a session that is gone went with it).
    void leave_place() noexcept;
    std::vector<release_watches::spec> watched() const override {
        return {{engine_.dir(), release_watches::role::queue, 0, {}}};
    }

    const queue_driver& driver_;
    std::mutex place_mu_;
    place place_;
};

// The subscription of an asynchronous wait: the directory's shared watch, and
// the wait's place in the queue, left when it ends without a grant.
class queue_lock::kept_wait final : public spi::wake_subscription {
public:
    kept_wait(queue_lock& h, std::unique_ptr<spi::wake_subscription> sub) : handle_(h), sub_(std::move(sub)) {}
    ~kept_wait() override {
        sub_.reset();
        std::lock_guard lk(handle_.place_mu_);
        handle_.leave_place();
        handle_.place_.on = false;
    }

private:
    queue_lock& handle_;
    std::unique_ptr<spi::wake_subscription> sub_;
};

std::unique_ptr<spi::wake_subscription> queue_lock::watch_releases(spi::wake_sink wake) {
    auto sub = recipe_handle::watch_releases(std::move(wake));
    std::lock_guard lk(place_mu_);
    leave_place();
    place_.on = true;
    return std::make_unique<kept_wait>(*this, std::move(sub));
}

void queue_lock::leave_place() noexcept {
    auto kept = std::exchange(place_, place{place_.on, {}, {}});
    if (kept.c.node.empty() || !kept.s) return;
    auto& zk = engine_.zk();
    try {
        if (!zk.session_alive(*kept.s)) return;
        zk.delete_node(*kept.s, kept.c.node);
        // A create whose reply was lost may have left a late twin.
        if (!kept.c.orphan_pid.empty()) zk.delete_protected_later(*kept.s, engine_.dir(), kept.c.orphan_pid);
    } catch (...) {}  // the session's end deletes it
}

std::optional<spi::grant> queue_lock::take(spi::deadline until, const spi::loss_sink& lost) {
    if (until <= clock::now()) {
        std::lock_guard lk(place_mu_);
        if (place_.on) return take_from(until, lost, true);
    }
    return take_from(until, lost, false);
}

std::optional<spi::grant> queue_lock::take_from(spi::deadline until, const spi::loss_sink& lost, bool in_place) {
    auto& zk = engine_.zk();
    const bool once = until <= clock::now();
    // An asynchronous wait's node stays ours until the wait ends (kept_wait).
    auto keep = [&](attempt& a) {
        a.c.listing.reset();
        place_.s = a.s;
        place_.c = std::move(a.c);
    };
    for (int round = 0;; ++round) {
        if (round > 0 && !once && clock::now() >= until) return std::nullopt;
        if (round > 20)
            throw_error(errc::unavailable, kBackend, "lock node of '" + engine_.name() + "' kept vanishing");
        attempt a{nullptr, engine_.dir(), until, once, {}};
        if (in_place && !place_.c.node.empty()) {
            // Our node from an earlier attempt, trusted only on the session
            // that made it while that session lives (else it is gone with it).
            if (zk.current() != place_.s || !zk.session_alive(*place_.s)) {
                leave_place();
                continue;
            }
            a.s = place_.s;
            a.c = place_.c;            // no listing: wait_turn lists afresh
            engine_.set_waited(true);  // an earlier attempt found another ahead
        } else {
            // 1. Create our node.
            a.s = zk.session_for(until);
            a.c = engine_.create_node(a, driver_.node_name);
            if (a.c.session_lost) continue;
        }

        // 2. Wait for our turn; on any failure our node goes (Curator deletes
        // it), but an asynchronous wait's at its end (an unavailable server is
        // retried meanwhile).
        step result;
        try {
            result = engine_.wait_turn(a, driver_, &lost);
        } catch (...) {
            engine_.unhold();
            if (in_place) keep(a);
            else zk.delete_node(*a.s, a.c.node);
            throw;
        }
        // Held for the session's life; the server confirmed the session (and our
        // node's turn) in reply to the listing sent at `listed`.
        if (result == step::held) {
            if (in_place) place_ = place{true, {}, {}};  // the held node now: release() deletes it
            return spi::grant{a.c.czxid, a.c.listed};
        }
        if (result == step::timeout) {
            if (in_place) keep(a);  // not our turn yet: keep our place
            else zk.delete_node(*a.s, a.c.node);
            return std::nullopt;
        }
        // step::again: our node vanished (session expired, or deleted): start over.
        if (in_place) {
            keep(a);
            leave_place();
        } else if (zk.session_alive(*a.s)) {
            zk.delete_node(*a.s, a.c.node);
        }
    }
}

}  // namespace

std::unique_ptr<spi::lock_handle> make_queue_lock(session_manager& zk, const spi::lock_request& r,
                                                  const queue_driver& d) {
    return std::make_unique<queue_lock>(zk, r, d);
}

}  // namespace distlock::backends::zookeeper
