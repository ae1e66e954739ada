// zk:// the mutex, read-write lock and election (Curator's InterProcessMutex,
// InterProcessReadWriteLock and LeaderLatch): one node in the queue of the lock
// path, ordered by the recipe's driver (zk_queue_drivers.cpp), held when its
// turn comes, deleted on any failure (as Curator does).
#include <utility>

#include "zk_queue.hpp"

namespace distlock::backends::zookeeper {
namespace {

class queue_lock final : public recipe_handle {
public:
    queue_lock(session_manager& zk, const spi::lock_request& r, const queue_driver& d)
        : recipe_handle(zk, r), driver_(d) {}

private:
    std::optional<spi::grant> take(spi::deadline until, const spi::loss_sink& lost) override;
    std::vector<release_watches::spec> watched() const override {
        return {{engine_.dir(), release_watches::role::queue, 0, {}}};
    }

    const queue_driver& driver_;
};

std::optional<spi::grant> queue_lock::take(spi::deadline until, const spi::loss_sink& lost) {
    auto& zk = engine_.zk();
    const bool once = until <= clock::now();
    for (int round = 0;; ++round) {
        if (round > 0 && !once && clock::now() >= until) return std::nullopt;
        if (round > 20)
            throw_error(errc::unavailable, kBackend, "lock node of '" + engine_.name() + "' kept vanishing");
        attempt a{zk.session_for(until), engine_.dir(), until, once, {}};
        // 1. Create our node.
        a.c = engine_.create_node(a, driver_.node_name);
        if (a.c.session_lost) continue;

        // 2. Wait for our turn; on any failure our node goes (Curator deletes it).
        step result;
        try {
            result = engine_.wait_turn(a, driver_, &lost);
        } catch (...) {
            engine_.unhold();
            zk.delete_node(*a.s, a.c.node);
            throw;
        }
        // Held for the session's life; the server confirmed the session (and our
        // node's turn) in reply to the listing sent at `listed`.
        if (result == step::held) return spi::grant{a.c.czxid, a.c.listed};
        if (result == step::timeout) {
            zk.delete_node(*a.s, a.c.node);
            return std::nullopt;
        }
        // step::again: our node vanished (session expired, or deleted): start over.
        if (zk.session_alive(*a.s)) zk.delete_node(*a.s, a.c.node);
    }
}

}  // namespace

std::unique_ptr<spi::lock_handle> make_queue_lock(session_manager& zk, const spi::lock_request& r,
                                                  const queue_driver& d) {
    return std::make_unique<queue_lock>(zk, r, d);
}

}  // namespace distlock::backends::zookeeper
