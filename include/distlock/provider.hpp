// distlock: connecting to a backend.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "distlock/mutex.hpp"
#include "distlock/options.hpp"

namespace distlock {

namespace detail {
class provider_state;
}

// A connection (or pool of connections) to one backend, made by connect().
// Cheap to copy: copies share the connection, the renewal thread and the
// in-process wait queues. Mutexes keep their provider alive.
class provider {
public:
    explicit provider(std::shared_ptr<detail::provider_state> state) noexcept;

    // A mutex for `name`. Names are arbitrary bytes, 1..max_name_length() long.
    // Throws invalid_argument_error for an empty or oversized name.
    [[nodiscard]] distlock::mutex mutex(std::string_view name, lock_options options = {}) const;

    // The URL scheme this provider speaks ("file", "redis", ...).
    [[nodiscard]] const std::string& scheme() const noexcept;
    // The URL it was made from, with any password replaced by "***".
    [[nodiscard]] const std::string& url() const noexcept;
    [[nodiscard]] const capabilities& caps() const noexcept;
    // The lease a mutex gets when lock_options::lease is 0: the URL's lease=, else
    // the backend's default. Session-based backends (ZooKeeper, etcd, Consul)
    // report their session TTL here.
    [[nodiscard]] std::chrono::milliseconds default_lease() const noexcept;

    // One round trip of the backend's cheapest request (PING, SELECT 1, ...), for
    // benchmark floors. nullopt for embedded backends, which have none.
    [[nodiscard]] std::optional<std::chrono::nanoseconds> round_trip() const;

    // For library internals and distlock::testing.
    const std::shared_ptr<detail::provider_state>& state() const noexcept { return state_; }

private:
    std::shared_ptr<detail::provider_state> state_;
};

// Parses the URL, finds its scheme's backend and connects.
//
// Parameters every backend accepts:
//   lease=<duration>   default lease for this provider's locks ("2s", "500ms", "1m")
// Other parameters are the backend's own (see README). Unknown schemes and unknown
// parameters throw invalid_argument_error; an unreachable server throws
// unavailable_error, bad credentials access_denied_error.
[[nodiscard]] provider connect(std::string_view url);

// The schemes compiled into this build, sorted.
[[nodiscard]] std::vector<std::string> schemes();

// The version of the distlock library this program runs with ("0.1.0"), which
// may differ from DISTLOCK_VERSION_STRING of the headers it was compiled with.
[[nodiscard]] std::string_view version() noexcept;

// Parses "250ms", "2s", "1.5s", "3m", "1h", compounds from the largest unit
// down ("1m30s", "1h2m", "2s500ms"; units h, m or min, s, ms, us), or a bare
// number of seconds ("1.5"). Throws invalid_argument_error on anything else or
// on a negative value.
[[nodiscard]] std::chrono::milliseconds parse_duration(std::string_view text);

}  // namespace distlock
