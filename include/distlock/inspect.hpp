// distlock: what can be known of a lock from outside (provider::inspect,
// election::leader).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "distlock/export.hpp"

namespace distlock {

// A lock as the backend's server shows it at one moment. Each field that is
// empty while it applies has its reason in `unknown`: what a backend cannot
// know is declared, never guessed. `holder`, `token` and `remaining` apply
// only to a held lock (empty and not listed when held is false).
struct DISTLOCK_API lock_info {
    std::string name;
    // Whether anyone holds it now. Empty = the backend cannot tell.
    std::optional<bool> held;
    // The holder's label (provider_options::holder or the URL's holder=,
    // default "<hostname>:<pid>"; an election's id). A holder that is not
    // distlock shows what its library stores (Redisson and Curator: see
    // docs/observability.md).
    std::optional<std::string> holder;
    // The holder's fencing token.
    std::optional<std::uint64_t> token;
    // Lease left on the server before the grant expires unless renewed.
    std::optional<std::chrono::milliseconds> remaining;
    // Clients queued or polling for it, where the server keeps count.
    std::optional<std::uint32_t> waiters;
    // Field name ("held", "holder", "token", "remaining", "waiters") -> why it
    // is empty.
    std::map<std::string, std::string> unknown;
};

}  // namespace distlock
