// distlock: what can be known of a lock from outside (provider::inspect,
// election::leader).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

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

// One grant among several of a name (a read grant, a permit), as the server
// shows it. A field that is empty has its reason in the enclosing info's
// `unknown`, under "readers.<field>" or "permits.<field>".
struct DISTLOCK_API grant_info {
    std::optional<std::string> holder;                   // the holder's label
    std::optional<std::uint64_t> token;                  // its fencing token
    std::optional<std::chrono::milliseconds> remaining;  // lease left on the server
};

// A read-write lock as the server shows it at one moment
// (provider::inspect_read_write), with the rule of lock_info: what a backend
// cannot know is declared in `unknown`, by field name ("write_held",
// "writer", "readers", "writers_waiting", and "writer.<field>",
// "readers.<field>" for the fields of the grants), never guessed.
struct DISTLOCK_API read_write_info {
    std::string name;
    // Whether a writer holds it now. Empty = the backend cannot tell.
    std::optional<bool> write_held;
    // The writer's grant, when write_held.
    std::optional<grant_info> writer;
    // The read grants held now (an empty list: none).
    std::optional<std::vector<grant_info>> readers;
    // Writers waiting for the readers to go (they hold back later readers).
    std::optional<std::uint32_t> writers_waiting;
    std::map<std::string, std::string> unknown;
};

// A semaphore as the server shows it at one moment (provider::inspect_semaphore),
// with the same rule ("size", "permits", "free", "permits.<field>").
struct DISTLOCK_API semaphore_info {
    std::string name;
    // Its number of permits, as its holders set it (none known while nobody
    // holds one, on a backend that keeps it only with them).
    std::optional<std::uint32_t> size;
    // The permits taken now, one grant each (an empty list: none).
    std::optional<std::vector<grant_info>> permits;
    // Permits free now (size - taken).
    std::optional<std::uint32_t> free;
    std::map<std::string, std::string> unknown;
};

}  // namespace distlock
