// The Redis client layer (redis_client.hpp): the idle connections of one
// endpoint.
#pragma once

#include <memory>
#include <mutex>
#include <vector>

#include "connection.hpp"

namespace distlock::backends::redis_client {

class pool {
public:
    pool(endpoint ep, std::size_t max_idle) : ep_(std::move(ep)), max_idle_(max_idle) {}

    // A connection borrowed from the pool; given back when destroyed unless broken.
    class borrowed {
    public:
        borrowed(pool& p, std::unique_ptr<connection> c) : pool_(&p), conn_(std::move(c)) {}
        borrowed(borrowed&&) noexcept = default;
        borrowed& operator=(borrowed&&) noexcept = delete;
        ~borrowed();
        connection* operator->() const noexcept { return conn_.get(); }
        connection& operator*() const noexcept { return *conn_; }

    private:
        pool* pool_;
        std::unique_ptr<connection> conn_;
    };

    borrowed get();  // an idle connection or a new one (may throw like connection::open)
    void clear_idle();
    const endpoint& where() const noexcept { return ep_; }

    // Runs f(connection&), retrying once on a fresh connection when a pooled one
    // turns out to be stale (the server restarted or closed it while idle).
    template <class F>
    auto run(F&& f) {
        for (int attempt = 0;; ++attempt) {
            auto c = get();
            const bool reused = c->reused();
            try {
                auto result = f(*c);
                c->mark_used();
                return result;
            } catch (const connection_failure& e) {
                if (reused && e.stale() && attempt == 0) {
                    clear_idle();
                    continue;
                }
                throw;
            }
        }
    }

private:
    void put(std::unique_ptr<connection> c);
    endpoint ep_;
    std::size_t max_idle_;
    std::mutex mutex_;
    std::vector<std::unique_ptr<connection>> idle_;
};

}  // namespace distlock::backends::redis_client
