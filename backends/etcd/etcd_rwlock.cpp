// The etcd read-write lock's reader driver over the queue engine
// (etcd_queue.hpp), in the layout and order of Go's experimental
// recipe.RWMutex: a reader waits for the latest older write key (its deciding
// range is the write keys only, names_of()); a writer waits for the latest
// older key of either kind, the mutex's order (etcd_mutex.cpp). One key is
// watched at a time (FIFO by create revision: a reader that comes after a
// waiting writer waits behind it).
#include "etcd_lock.hpp"
#include "etcd_queue.hpp"

namespace distlock::backends::etcd {
namespace {

class read_handle final : public queue {
public:
    read_handle(gateway& g, const spi::lock_request& r) : queue(g, r) {}

private:
    // No writer older than us.
    bool granted_at_once(const json& first) const override {
        return first.empty() || as_i64(first[0], "create_revision") >= revision();
    }
};

}  // namespace

std::unique_ptr<spi::lock_handle> make_read_lock(gateway& g, const spi::lock_request& r) {
    return std::make_unique<read_handle>(g, r);
}

}  // namespace distlock::backends::etcd
