// The Redis client layer (redis_client.hpp): the idle connections of one
// endpoint.
#include "pool.hpp"

namespace distlock::backends::redis_client {

pool::borrowed::~borrowed() {
    if (conn_ && !conn_->broken()) pool_->put(std::move(conn_));
}

pool::borrowed pool::get() {
    {
        std::lock_guard lk(mutex_);
        if (!idle_.empty()) {
            auto c = std::move(idle_.back());
            idle_.pop_back();
            return borrowed(*this, std::move(c));
        }
    }
    return borrowed(*this, connection::open(ep_));
}

void pool::put(std::unique_ptr<connection> c) {
    std::lock_guard lk(mutex_);
    if (idle_.size() < max_idle_) idle_.push_back(std::move(c));
}

void pool::clear_idle() {
    std::vector<std::unique_ptr<connection>> drop;
    std::lock_guard lk(mutex_);
    drop.swap(idle_);
}

}  // namespace distlock::backends::redis_client
