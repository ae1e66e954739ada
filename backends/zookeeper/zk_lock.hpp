// zk:// internals: the lock recipes as the backend (zk_backend.cpp) uses them:
// a handle per lock kind (zk_lock.cpp), their keepalive (zk_keepalive.cpp),
// inspect (zk_inspect.cpp) and break_lock (zk_break_lock.cpp). Never included
// outside backends/zookeeper/.
#pragma once

#include <memory>
#include <span>
#include <string_view>

#include "zk_session.hpp"

namespace distlock::backends::zookeeper {

// A lock handle of the recipe, on the sessions of `zk` (which outlives it).
std::unique_ptr<spi::lock_handle> make_lock_handle(session_manager& zk, const spi::lock_request& r);

// spi::backend::keepalive_batch for handles made by make_lock_handle(): one
// pipelined exists (with a watch) per held node.
void keepalive_locks(session_manager& zk, std::span<spi::lock_handle* const> handles,
                     std::span<spi::keepalive_result> results);

// spi::backend::inspect: the mutex (exclusive) or the LeaderLatch election
// (leader) of `name`, in one getChildren and, when held, one getData.
lock_info inspect(session_manager& zk, std::string_view name, spi::lock_kind kind);
// spi::backend::inspect_read_write / inspect_semaphore: Curator's read-write
// lock and semaphore of a name (zk_inspect.cpp).
read_write_info inspect_read_write(session_manager& zk, std::string_view name);
semaphore_info inspect_semaphore(session_manager& zk, std::string_view name);

// spi::backend::break_lock: a separate, short-lived session deletes the current
// holder's node, as an operator (or a failure) would.
void break_lock(session_manager& zk, std::string_view name);

}  // namespace distlock::backends::zookeeper
