// The etcd mutex's driver over the queue engine (etcd_queue.hpp): the order of
// Go's clientv3/concurrency.Mutex, one holder at a time, the first key by
// create revision, and a waiter watches the key created just before its own.
// An election is this mutex (its layout is Go's concurrency.Election's), and a
// writer of the read-write lock keeps this order over that lock's keys
// (names_of(): every key of the lock decides).
#include "etcd_lock.hpp"
#include "etcd_queue.hpp"

namespace distlock::backends::etcd {
namespace {

class exclusive_handle final : public queue {
public:
    exclusive_handle(gateway& g, const spi::lock_request& r) : queue(g, r) {}

private:
    // Ours first of all.
    bool granted_at_once(const json& first) const override {
        return first.empty() || as_i64(first[0], "create_revision") == revision();
    }
};

}  // namespace

std::unique_ptr<spi::lock_handle> make_exclusive(gateway& g, const spi::lock_request& r) {
    return std::make_unique<exclusive_handle>(g, r);
}

}  // namespace distlock::backends::etcd
