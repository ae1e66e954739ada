// consul:// internals: the lock recipe (consul_lock.cpp) as the backend uses it.
#pragma once

#include <memory>
#include <span>

#include "consul_agent.hpp"

namespace distlock::backends::consul {

// A lock handle of `a` (which outlives it).
std::unique_ptr<spi::lock_handle> make_lock(agent& a, const spi::lock_request& r);
// spi::backend::keepalive_batch for handles made by make_lock: the session
// renewals, concurrently on the agent's loop.
void keepalive_batch(agent& a, std::span<spi::lock_handle* const> handles, std::span<spi::keepalive_result> results);

}  // namespace distlock::backends::consul
