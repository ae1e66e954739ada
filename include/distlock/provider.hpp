// distlock: connecting to a backend.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "distlock/election.hpp"
#include "distlock/export.hpp"
#include "distlock/inspect.hpp"
#include "distlock/multi_lock.hpp"
#include "distlock/mutex.hpp"
#include "distlock/observe.hpp"
#include "distlock/options.hpp"
#include "distlock/semaphore.hpp"
#include "distlock/shared_mutex.hpp"

namespace distlock {

namespace detail {
class provider_state;
struct provider_access;  // the library's (and its tests') way to a provider's state
}  // namespace detail
namespace spi {
class backend;
class url;
}  // namespace spi
class provider;
DISTLOCK_API provider connect(std::string_view url, provider_options options);

// A connection (or pool of connections) to one backend, made by connect().
// Cheap to copy: copies share the connection, the renewal thread and the
// in-process wait queues. Mutexes keep their provider alive, and so do the
// callbacks still queued: an on_lost may destroy every mutex and the last copy
// of the provider (the provider then goes once the queue has run).
//
// fork(): the locks stay the parent's. In a child forked while this provider
// existed, unlock() and the destructors of its mutexes (and of the other
// primitives) and of the provider do nothing to the server and never wait for
// the parent's threads; held() is false; any other use (a new mutex, lock(),
// inspect(), testing::break_lock()) throws invalid_argument_error, since it
// would go through the parent's connections: connect() again in the child.
// The child keeps copies of the parent's descriptors until it exits or execs
// (the backends' sockets are close-on-exec). docs/architecture.md, "fork()".
//
// Every call throws distlock::error subclasses (or std::bad_alloc) and nothing
// else, whatever a backend or its client library throws; no message shows the
// URL's password or secret parameters.
class DISTLOCK_API provider {
public:
    // A mutex for `name`. Names are arbitrary bytes, 1..max_name_length() long.
    // Throws invalid_argument_error for an empty or oversized name.
    [[nodiscard]] distlock::mutex mutex(std::string_view name, lock_options options = {}) const;

    // A read-write lock for `name` (names as for mutex()). Throws
    // unsupported_error, with the backend's reason, where caps() do not support
    // feature::read_write.
    [[nodiscard]] distlock::shared_mutex shared_mutex(std::string_view name, lock_options options = {}) const;

    // A semaphore of `permits` (>= 1) permits for `name` (names as for mutex()).
    // Throws unsupported_error, with the backend's reason, where caps() do not
    // support feature::semaphore; invalid_argument_error for 0 permits.
    [[nodiscard]] distlock::semaphore semaphore(std::string_view name, std::uint32_t permits,
                                                lock_options options = {}) const;

    // The mutexes of `names` taken all or none (see multi_lock). Names as for
    // mutex(); a name listed twice is taken once. Throws invalid_argument_error
    // for an empty list.
    [[nodiscard]] distlock::multi_lock multi_lock(const std::vector<std::string>& names,
                                                  lock_options options = {}) const;

    // A candidate for the leadership of `name` (names as for mutex()).
    // Throws invalid_argument_error for a bad name or id.
    [[nodiscard]] distlock::election election(std::string_view name, election_options options = {}) const;

    // The mutex of `name` as the server shows it now: held or not, the holder's
    // label, fencing token, lease left and waiters, each where the backend can
    // know it (lock_info::unknown says why where not). One read; it takes
    // nothing. Throws invalid_argument_error for a bad name, unavailable_error
    // when the server cannot be reached.
    [[nodiscard]] lock_info inspect(std::string_view name) const;
    // The read-write lock of `name` (provider::shared_mutex): whether a writer
    // holds it and who, the read grants and who holds each, the writers
    // waiting. The semaphore of `name` (provider::semaphore): its size, the
    // permits taken and by whom, the permits free. Each field the backend
    // cannot know has its reason in `unknown` (all of them, with the reason,
    // where caps() lacks feature::inspect_primitives). Throws
    // unsupported_error where the backend has no such primitive, otherwise
    // as inspect().
    [[nodiscard]] read_write_info inspect_read_write(std::string_view name) const;
    [[nodiscard]] semaphore_info inspect_semaphore(std::string_view name) const;

    // The label this provider's grants carry (provider_options::holder, the
    // URL's holder=, else "<hostname>:<pid>").
    [[nodiscard]] const std::string& holder() const noexcept;

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

    // One take+release of the server's own lock primitive without distlock's
    // strategy around it (SQL: GET_LOCK + RELEASE_LOCK, pg_advisory_lock +
    // pg_advisory_unlock), for benchmark floors. nullopt where there is none.
    [[nodiscard]] std::optional<std::chrono::nanoseconds> native_cycle() const;

private:
    friend provider connect(std::string_view url, provider_options options);
    friend struct detail::provider_access;
    explicit provider(std::shared_ptr<detail::provider_state> state) noexcept;

    std::shared_ptr<detail::provider_state> state_;
};

// Parses the URL, finds its scheme's backend and connects.
//
// Parameters every backend accepts:
//   lease=<duration>   default lease for this provider's locks ("2s", "500ms", "1m")
//   holder=<label>     the label its grants carry (provider_options::holder wins)
// Other parameters are the backend's own (see README). Unknown schemes and unknown
// parameters throw invalid_argument_error; an unreachable server throws
// unavailable_error, bad credentials access_denied_error.
[[nodiscard]] DISTLOCK_API provider connect(std::string_view url);
// The same, with an observer and a log hook (include/distlock/observe.hpp).
[[nodiscard]] DISTLOCK_API provider connect(std::string_view url, provider_options options);

// The schemes compiled into this build, those of its backend modules that are
// installed, and those added by register_backend() or by a module loaded, sorted.
[[nodiscard]] DISTLOCK_API std::vector<std::string> schemes();

// A backend module: in a build with DISTLOCK_BACKEND_MODULES=ON (as Debian's
// packages are), each server backend is a shared library of its own, opened
// on the first connect() to one of its schemes (docs/packaging.md).
struct backend_module {
    std::string name;                  // "redis"
    std::string file;                  // "libdistlock-redis.so"
    std::string package;               // the Debian package that installs it; empty for another project's module
    std::vector<std::string> schemes;  // the schemes it provides
    std::string path;                  // where it is (in module_path()), or empty: not installed
    bool loaded = false;               // opened by this process
    std::string version;               // once loaded: the distlock version it was built with
};

// This build's backend modules, installed or not, and the other modules this
// process loaded. Empty in an all-in-one build that loaded none.
[[nodiscard]] DISTLOCK_API std::vector<backend_module> backend_modules();

// Where backend modules are looked for, in order: the directories of the
// environment variable DISTLOCK_MODULE_PATH (absolute, separated by ':'), or
// else <the directory of libdistlock>/distlock/modules. A set-user-ID program
// ignores the variable. Throws invalid_argument_error when it holds a relative
// directory.
[[nodiscard]] DISTLOCK_API std::vector<std::string> module_path();

// Makes `scheme` known to connect(): a backend that lives outside the library's
// tree (see include/distlock/spi/backend.hpp and docs/backend-authoring.md).
// `factory` has the type of spi::factory: connect("scheme://...") calls it with
// the parsed URL, on the calling thread, with no lock of distlock held, after the
// core has taken `lease=`; it takes its own parameters from the URL (whatever it
// leaves is rejected as unknown), connects, and returns the backend, or throws a
// distlock::error (invalid_argument_error for a bad URL, unavailable_error for
// an unreachable server, ...); one that returns no backend makes connect() throw
// invalid_argument_error.
//
// Call it once per scheme, before the first connect() to it, from your own code
// (main, or your backend's own `register_...()` function): explicitly, not from a
// static initializer, which the linker drops from static libraries. It is
// thread-safe; a registration lasts as long as the process (there is no
// unregistering). Throws invalid_argument_error when `scheme` is already known
// (the built-in ones included), when it is malformed (schemes are compared in
// lower case: a lowercase letter, then lowercase letters, digits, '+', '-' or '.';
// at most 32 characters), or when `factory` is empty.
DISTLOCK_API void register_backend(std::string scheme, std::function<std::shared_ptr<spi::backend>(spi::url&)> factory);

// The version of the distlock library this program runs with ("0.1.0"), which
// may differ from DISTLOCK_VERSION_STRING of the headers it was compiled with.
[[nodiscard]] DISTLOCK_API std::string_view version() noexcept;

// Parses "250ms", "2s", "1.5s", "3m", "1h", compounds from the largest unit
// down ("1m30s", "1h2m", "2s500ms"; units h, m or min, s, ms, us), or a bare
// number of seconds ("1.5"). Throws invalid_argument_error on anything else or
// on a negative value.
[[nodiscard]] DISTLOCK_API std::chrono::milliseconds parse_duration(std::string_view text);

}  // namespace distlock
