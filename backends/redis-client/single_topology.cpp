// The Redis client layer (topology.hpp): one server (redis://).
#include "topology.hpp"

namespace distlock::backends::redis_client {

namespace {

class single_topology final : public topology {
public:
    single_topology(endpoint ep, std::size_t pool_size)
        : topology(std::move(ep), pool_size, std::chrono::milliseconds{0}), pool_(&pool_at(base_.host, base_.port)) {}
    pool& pool_for(std::string_view) override { return *pool_; }
    std::vector<pool*> masters() override { return {pool_}; }
    endpoint endpoint_for(std::string_view, bool) override { return base_; }

protected:
    bool follows() const noexcept override { return false; }
    void learn(const redirect&, pool&) noexcept override {}
    void failed(pool&) noexcept override {}

private:
    pool* pool_;
};

}  // namespace

std::unique_ptr<topology> make_single_topology(endpoint ep, std::size_t pool_size) {
    return std::make_unique<single_topology>(std::move(ep), pool_size);
}

}  // namespace distlock::backends::redis_client
