// The etcd lock recipe of each lock kind (etcd_lock.hpp): the driver over the
// queue engine that keeps that kind's order.
#include "etcd_lock.hpp"

namespace distlock::backends::etcd {

std::unique_ptr<spi::lock_handle> make_lock(gateway& g, const spi::lock_request& r) {
    switch (r.kind) {
        case spi::lock_kind::read: return make_read_lock(g, r);
        case spi::lock_kind::permit: return make_semaphore(g, r);
        case spi::lock_kind::write:  // the mutex's order over the read-write lock's keys
        case spi::lock_kind::exclusive:
        case spi::lock_kind::leader: break;  // an election is the mutex: its layout is Go's Election's
    }
    return make_exclusive(g, r);
}

}  // namespace distlock::backends::etcd
