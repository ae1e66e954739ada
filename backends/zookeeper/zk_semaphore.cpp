// zk:// the semaphore (Curator's InterProcessSemaphoreV2) over the queue engine
// (zk_queue.hpp): an attempt takes the mutex recipe on <path>/locks, creates
// "<path>/leases/_c_<uuid>-lease-<seq>", lists the leases with a child watch
// until they are no more than the permits, then gives the internal mutex back.
// distlock keeps the semaphore's size in the data of <path>/leases (which
// Curator leaves empty and never reads). The fencing token is the lease node's
// czxid.
#include <algorithm>
#include <utility>

#include "zk_names.hpp"
#include "zk_queue.hpp"

namespace distlock::backends::zookeeper {
namespace {

class semaphore final : public recipe_handle {
public:
    semaphore(session_manager& zk, const spi::lock_request& r) : recipe_handle(zk, r), permits_(r.permits) {}

private:
    std::optional<spi::grant> take(spi::deadline until, const spi::loss_sink& lost) override;
    // A lease going while fewer than `permits` remain; the internal mutex
    // going while they are (an attempt may have failed on it).
    std::vector<release_watches::spec> watched() const override {
        const std::string leases = engine_.dir() + "/" + std::string(kSemaphoreLeases);
        return {
            {leases, release_watches::role::leases, permits_, {}},
            {engine_.dir() + "/" + std::string(kSemaphoreLocks), release_watches::role::internal, permits_, leases}};
    }

    // The semaphore's lease, taken while holding its internal mutex: on
    // step::held, lease.c is the held node.
    step take_lease(attempt& lease, const spi::loss_sink& lost);
    // permit_limit: the size kept in the data of <path>/leases against ours.
    void check_permits(session& s, const std::string& leases, std::size_t others);
    // Gives the semaphore's internal mutex back (a guaranteed delete).
    void release_internal(const attempt& lk);

    std::uint32_t permits_;
};

std::optional<spi::grant> semaphore::take(spi::deadline until, const spi::loss_sink& lost) {
    auto& zk = engine_.zk();
    const bool once = until <= clock::now();
    const std::string locks = engine_.dir() + "/" + std::string(kSemaphoreLocks);
    const std::string leases = engine_.dir() + "/" + std::string(kSemaphoreLeases);
    for (int round = 0;; ++round) {
        if (round > 0 && !once && clock::now() >= until) return std::nullopt;
        if (round > 20)
            throw_error(errc::unavailable, kBackend, "semaphore nodes of '" + engine_.name() + "' kept vanishing");
        // 1. Curator's internal mutex on <path>/locks: one client at a time
        //    counts the leases (and waits while they are too many).
        attempt lk{zk.session_for(until), locks, until, once, {}};
        lk.c = engine_.create_node(lk, kMutexName);
        if (lk.c.session_lost) continue;
        step r;
        try {
            r = engine_.wait_turn(lk, kMutexDriver, nullptr);
        } catch (...) {
            release_internal(lk);
            throw;
        }
        if (r != step::held) {
            release_internal(lk);
            if (r == step::timeout) return std::nullopt;
            continue;
        }
        // 2.-3. Our lease node, counted; 4. the internal mutex goes back whatever happened.
        attempt lease{lk.s, leases, until, once, {}};
        try {
            r = take_lease(lease, lost);
        } catch (...) {
            release_internal(lk);
            throw;
        }
        release_internal(lk);
        if (r == step::held) return spi::grant{lease.c.czxid, lease.c.listed};
        if (r == step::timeout) return std::nullopt;
    }
}

step semaphore::take_lease(attempt& lease, const spi::loss_sink& lost) {
    auto& zk = engine_.zk();
    const auto& s = lease.s;
    const auto& leases = lease.dir;
    lease.c = engine_.create_node(lease, kLeaseName);
    if (lease.c.session_lost) return step::again;
    const auto& c = lease.c;
    const std::string mine = last_segment(c.node);
    auto drop = [&] {
        if (zk.session_alive(*s)) zk.delete_node(*s, c.node);
    };
    struct unwait {
        session_manager& zk;
        session_manager::waiter& w;
        ~unwait() { zk.remove_waiter(w); }
    };
    bool checked = false;
    try {
        for (;;) {
            // The waiter is registered before the watch is set: no event is missed.
            session_manager::waiter w{leases};
            zk.add_waiter(w);
            unwait guard{zk, w};
            lease.c.listed = clock::now();
            auto kids = zk_children(s->zh, leases, zk.config().max_children, true);
            if (is_connection_error(kids->rc)) {
                if (!engine_.reconnected(lease)) {
                    if (!zk.session_alive(*s)) return step::again;
                    throw_error(
                        errc::unavailable, kBackend,
                        "lost the connection to ZooKeeper while waiting for a permit of '" + engine_.name() + "'");
                }
                continue;
            }
            if (kids->rc == ZNONODE || is_session_gone(kids->rc)) {
                drop();
                return step::again;
            }
            if (kids->rc != ZOK) throw_op_error(*kids, "getChildren " + leases + " failed");
            zk.touch(*s);
            const auto& children = kids->children;
            if (std::find(children.begin(), children.end(), mine) == children.end()) {
                drop();
                return step::again;
            }
            if (engine_.remove_duplicates(lease, children)) continue;  // see wait_turn
            if (!checked) {
                check_permits(*s, leases, children.size() - 1);
                checked = true;
            }
            // Curator counts every lease, ours included, in no order.
            if (children.size() <= permits_) {
                engine_.hold(lease, lost);
                return step::held;
            }
            engine_.set_waited(true);  // every permit is taken
            if (lease.once || clock::now() >= lease.until) {
                zk.delete_node(*s, c.node);
                return step::timeout;
            }
            zk.wait_event(w, *s, lease.until);
        }
    } catch (...) {
        engine_.unhold();
        drop();
        throw;
    }
}

void semaphore::check_permits(session& s, const std::string& leases, std::size_t others) {
    auto d = zk_get_data(s.zh, leases);
    if (d->rc != ZOK) throw_client_error(d->rc, kBackend, "getData " + leases + " failed");
    const auto stored = permits_in(d->value);
    // The size stands while the semaphore has holders; the first lease of an
    // empty semaphore (or one that only Curator clients hold) sets it.
    if (others > 0 && stored && *stored != permits_)
        throw_error(errc::invalid_argument, kBackend,
                    "semaphore '" + engine_.name() + "' is held with " + std::to_string(*stored) +
                        " permits; this one asks for " + std::to_string(permits_));
    if (stored == permits_) return;
    auto o = zk_set(s.zh, leases, permits_data(permits_));
    if (o->rc != ZOK) throw_client_error(o->rc, kBackend, "setData " + leases + " failed");
}

void semaphore::release_internal(const attempt& lk) {
    auto& zk = engine_.zk();
    auto& s = *lk.s;
    const auto& dir = lk.dir;
    const auto& orphan_pid = lk.c.orphan_pid;
    if (!zk.session_alive(s)) return;  // the server deleted it with the session
    zk.delete_node(s, lk.c.node);
    if (orphan_pid.empty()) return;
    auto kids = zk_children(s.zh, dir, zk.config().max_children);
    if (kids->rc != ZOK) {
        if (is_connection_error(kids->rc)) zk.delete_protected_later(s, dir, orphan_pid);
        return;
    }
    for (const auto& k : kids->children)
        if (k.rfind(orphan_pid, 0) == 0) zk.delete_node(s, dir + "/" + k);
}

}  // namespace

std::unique_ptr<spi::lock_handle> make_semaphore(session_manager& zk, const spi::lock_request& r) {
    return std::make_unique<semaphore>(zk, r);
}

}  // namespace distlock::backends::zookeeper
