// distlock: one lock interface over many coordination backends.
//
//   auto locks = distlock::connect("redis://127.0.0.1:6379");
//   auto m = locks.mutex("stock:product_01");
//   std::unique_lock lk(m, std::chrono::seconds(5));
//   if (lk) write(x, m.token());
#pragma once

#include "distlock/election.hpp"
#include "distlock/error.hpp"
#include "distlock/inspect.hpp"
#include "distlock/multi_lock.hpp"
#include "distlock/mutex.hpp"
#include "distlock/observe.hpp"
#include "distlock/options.hpp"
#include "distlock/provider.hpp"
#include "distlock/semaphore.hpp"
#include "distlock/shared_mutex.hpp"
#include "distlock/version.hpp"
