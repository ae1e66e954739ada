// distlock: hooks for users' own tests of how their code handles lock loss.
#pragma once

#include <string_view>

#include "distlock/provider.hpp"

namespace distlock::testing {

// Removes the server-side state of lock `name` out of band, as an operator or a
// failure would (Redis: DEL of the key; SQL: the holder's connection killed or
// its row deleted; ZooKeeper: the lock node deleted; file: the lock file
// unlinked; ...). Holders then learn of the loss through on_lost / held().
// Throws unsupported_error where the backend cannot (see caps()).
void break_lock(const provider& p, std::string_view name);

}  // namespace distlock::testing
