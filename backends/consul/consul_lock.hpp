// consul:// internals: the recipes (consul_lock.cpp, consul_semaphore.cpp, consul_rwlock.cpp) as the backend uses them.
#pragma once

#include <memory>
#include <span>

#include "consul_agent.hpp"

namespace distlock::backends::consul {

// The mutex of `name` as the server shows it (spi::backend::inspect): one GET
// of its key (held = its Session, holder = its value, token = its ModifyIndex).
lock_info inspect(agent& a, std::string_view name);
class release_feed;
// A lock handle of `a` (which outlives it), woken in asynchronous waits by `f`
// (consul_release_feed.hpp, which outlives it too).
std::unique_ptr<spi::lock_handle> make_lock(agent& a, release_feed& f, const spi::lock_request& r);
// A permit handle of a semaphore of `a` (consul_semaphore.cpp).
std::unique_ptr<spi::lock_handle> make_permit(agent& a, const spi::lock_request& r);
// A read or write handle of a read-write lock of `a` (consul_rwlock.cpp).
std::unique_ptr<spi::lock_handle> make_rwlock(agent& a, const spi::lock_request& r);
// The read-write lock and the semaphore of `name` as the server shows them
// (spi::backend::inspect_read_write, inspect_semaphore): one listing of the prefix each.
read_write_info inspect_read_write(agent& a, std::string_view name);
semaphore_info inspect_semaphore(agent& a, std::string_view name);
// spi::backend::keepalive_batch for handles made by make_lock, make_permit and make_rwlock
// (session_handles): the session renewals, concurrently on the agent's loop.
void keepalive_batch(agent& a, std::span<spi::lock_handle* const> handles, std::span<spi::keepalive_result> results);

}  // namespace distlock::backends::consul
