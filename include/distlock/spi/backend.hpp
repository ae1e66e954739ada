// distlock backend-author interface.
//
// A backend is one URL scheme. It supplies:
//   - a factory: (spi::url&) -> std::shared_ptr<spi::backend>, registered by
//     `void distlock::backends::<name>::register_backend(spi::registry&)` for a
//     backend in the tree (the build generates the one function that calls
//     them all), or with distlock::register_backend() from outside it;
//   - a spi::backend: capabilities, a lock_handle per mutex, the batched
//     keepalive (renewal and liveness check), a round-trip probe for benchmarks
//     and the break_lock test hook;
//   - a spi::lock_handle per distlock::mutex: acquire / release.
//
// The core (distlock::mutex) keeps every invariant around these hooks: the
// in-process queue per name (only one thread per provider and name is ever inside
// acquire()/holding), deadlines, reentrancy, the renewal schedule (when and how
// often keepalive_batch() is called), the lost-lock and error callbacks (always
// run on a core thread of their own, never on a backend's or the renewal
// thread) and never throwing from unlock(). A backend never includes its client
// library in a header under include/.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "distlock/error.hpp"
#include "distlock/export.hpp"
#include "distlock/inspect.hpp"
#include "distlock/options.hpp"
#include "distlock/spi/url.hpp"

namespace distlock::spi {

using clock = std::chrono::steady_clock;
using deadline = clock::time_point;

// Which primitive a lock handle serves. A backend is asked for `read`, `write`
// or `permit` handles only when its caps() support feature::read_write or
// feature::semaphore (the core throws unsupported_error with the declared
// reason otherwise). A name is one lock of each primitive: a backend may keep
// the mutex, the read-write lock and the semaphore of one name apart or in one
// place (as Redisson does), and a program that uses two primitives on one name
// gets what that backend's layout gives (documented per backend).
enum class lock_kind : std::uint8_t {
    exclusive,  // distlock::mutex
    read,       // the shared side of distlock::shared_mutex: readers hold together
    write,      // the exclusive side of distlock::shared_mutex: excludes readers and writers;
                // a waiting writer is not starved by a stream of readers (the backend's
                // policy, writer preference or FIFO, is stated in its documentation)
    permit,     // one permit of distlock::semaphore: at most `permits` grants of the name at once
    leader,     // a term of distlock::election: exclusive, in the backend's election layout (asked
                // only of a backend that claims feature::election; others get `exclusive`)
};

// What the core asks of a lock handle, resolved from lock_options and the URL.
struct DISTLOCK_API lock_request {
    std::string name;  // 1..max_name_length arbitrary bytes
    lock_kind kind = lock_kind::exclusive;
    // For lock_kind::permit: the semaphore's size, >= 1. A backend with
    // feature::permit_limit refuses (invalid_argument_error from acquire()) a
    // request whose size differs from the one the server holds for the name.
    std::uint32_t permits = 0;
    std::chrono::milliseconds lease;  // > 0, resolved (option, else URL lease=, else backend default)
    // Lease locks (feature::lease_expiry): whether the core renews the lease
    // through backend::keepalive_batch() every `renew_interval`; without it the
    // grant simply expires (and is reported lost) when its lease has passed.
    bool auto_renew = true;
    // lease/3, set by the core: the period of lease renewals; a lock without a
    // lease may use it for check_interval() (how often a session is checked).
    std::chrono::milliseconds renew_interval{0};
    std::chrono::milliseconds retry_min{5};
    std::chrono::milliseconds retry_max{250};
    // The label to store beside the grant where the backend can (the holder
    // shown by backend::inspect; an election's id): 1..255 bytes without
    // control characters, checked by the core.
    std::string holder;
};

struct DISTLOCK_API keepalive_result {
    enum class status {
        ok,      // still held (lease extended / state verified)
        lost,    // definitely gone (reply says not ours / key or session missing)
        failed,  // could not tell (server unreachable): the core retries sooner and
                 // reports the loss once the last good keepalive is a lease ago
    };
    status state = status::ok;
    std::string message;  // why, for lost/failed

    static keepalive_result ok() { return {}; }
    static keepalive_result lost(std::string why) { return {status::lost, std::move(why)}; }
    static keepalive_result failed(std::string why) { return {status::failed, std::move(why)}; }
};

// What acquire() returns when it took the lock.
struct DISTLOCK_API grant {
    // Fencing token of the grant (0 when the backend has none).
    std::uint64_t token;
    // When the request that took the lock was sent (or earlier): a lease granted
    // by the server runs from some moment after it, so the grant is valid until
    // `sent + lease` at most, however late its reply arrives. Backends with a
    // clock-drift allowance (Redlock) move it earlier by that allowance; backends
    // whose grants live on a shared lease (etcd) or session (ZooKeeper) give when
    // it was last confirmed. Ignored for locks that do not expire with time (no
    // lease_expiry and validity() 0).
    deadline sent;
    // Whether the grant came after waiting for another holder (true) or at the
    // first try (false), for the observer's contention figures
    // (include/distlock/observe.hpp); unset = the backend does not say.
    std::optional<bool> waited = std::nullopt;
};

// Where a backend reports that a grant is lost (session expired, connection
// dropped, a watch saw the lock key deleted). The core hands one to each
// acquire(); a backend that learns of losses by itself (a watch, an event
// thread) keeps it with the grant. Calling it only records the loss and queues
// the user's on_lost for the core's callback thread, so it may be called from
// any thread, under the backend's own locks, even from a thread that release()
// waits for. Thread-safe, never blocks on user code, never throws; a no-op once
// the grant it came with was released or already reported lost, or when the
// mutex is gone.
class DISTLOCK_API loss_sink {
public:
    loss_sink() noexcept = default;  // reports nowhere
    explicit loss_sink(std::function<void(std::string reason)> report) noexcept : report_(std::move(report)) {}
    void operator()(std::string reason) const noexcept {
        if (!report_) return;
        try {
            report_(std::move(reason));
        } catch (...) {}
    }

private:
    std::function<void(std::string)> report_;
};

// Where a backend tells a waiting asynchronous acquisition that the lock may
// have become free (a release or expiry the server announced: a pub/sub
// message, a watch event, a NOTIFY, an inotify event). Calling it only marks
// the waiter ready and queues one attempt on the core's workers: cheap, from
// any thread, under the backend's own locks, never blocks, never throws; a
// wake-up that finds nothing free costs one attempt, a missed one only delay
// (the core still retries on its own timer).
class DISTLOCK_API wake_sink {
public:
    wake_sink() noexcept = default;  // wakes nobody
    explicit wake_sink(std::function<void()> wake) noexcept : wake_(std::move(wake)) {}
    void operator()() const noexcept {
        if (!wake_) return;
        try {
            wake_();
        } catch (...) {}
    }

private:
    std::function<void()> wake_;
};

// What lock_handle::watch_releases() returns: the backend calls its wake_sink
// until this is destroyed (its destructor unsubscribes, and a wake-up under way
// may still arrive while it runs, never after it returned).
class DISTLOCK_API wake_subscription {
public:
    virtual ~wake_subscription() = default;
};

// One per grant at a time: a distlock::mutex has one; a shared_mutex one for
// its writer and one per thread reading at once; a semaphore one per permit
// held at once. Threading contract (kept by the core):
//  - acquire() and release() are called by one thread at a time;
//  - the backend's keepalive_batch() receives a handle only between a
//    successful acquire() and the next release(), never concurrently with them.
class DISTLOCK_API lock_handle {
public:
    virtual ~lock_handle() = default;

    // Takes the lock, waiting until `until` at most (`until <= now` = one attempt,
    // no waiting; deadline::max() = no bound). Returns the new grant or nullopt
    // when the deadline passed. Throws distlock::error subclasses (unavailable,
    // access_denied, ...). Must leave nothing behind on the server when it returns
    // nullopt or throws. A lease grant whose reply came after `sent + lease` is not
    // a grant: the core releases it (release() may then throw not_owner) and
    // calls acquire() again while the deadline allows. `lost` reports the loss of
    // the grant this call returns (see loss_sink); a loss reported before
    // acquire() returns counts as soon as the grant is given.
    virtual std::optional<grant> acquire(deadline until, const loss_sink& lost) = 0;

    // Releases the current grant. Throws not_owner_error when the lock is not ours
    // any more (the server says so, or the session that held it is gone: a loss
    // the core reports through on_lost), in_doubt_error when unsure.
    // The core catches everything (unlock() never throws).
    virtual void release() = 0;

    // For a lock without a lease (no feature::lease_expiry): how often the core
    // should check through keepalive_batch() that the lock is still held (a
    // database session, a ZooKeeper node, a lock file); 0 (the default) = never.
    // Lease locks are renewed every lock_request::renew_interval when
    // auto_renew, whatever this returns.
    virtual std::chrono::milliseconds check_interval() const { return std::chrono::milliseconds{0}; }

    // For a lock without a per-lock lease that lives on a session the server can
    // expire while this process cannot tell (a ZooKeeper session: a paused
    // process stops its heartbeats): how long a grant, and each successful
    // keepalive, keeps the lock valid from when its request was sent. held()
    // turns false when that much time has passed without a confirmation, and a
    // grant whose reply came later is given back, as for a lease. 0 (the
    // default) = held until a check or the backend says otherwise (a database
    // session, the kernel); ignored for backends with feature::lease_expiry,
    // whose grants are valid for lock_request::lease.
    virtual std::chrono::milliseconds validity() const { return std::chrono::milliseconds{0}; }

    // Asynchronous waits (mutex::async_lock, semaphore::async_acquire, ...)
    // hold no thread: the core takes the lock by one-attempt calls,
    // acquire(now, lost), on its bounded pool of workers, and between attempts
    // the waiter is only an entry in a queue and a timer. A backend that hears
    // of releases from its server returns a subscription here, for the whole
    // wait: it calls `wake` each time the lock of this handle's name and kind
    // may have become free, and the core makes an attempt at once. The core
    // subscribes before the first attempt, so a release between an attempt and
    // the wait is not missed. Called by one thread at a time, like acquire().
    // Default: nullptr, and the core polls with jittered backoff between the
    // request's retry_min and retry_max. Subscriptions must be multiplexed: many
    // waiting handles share the backend's connections and threads.
    virtual std::unique_ptr<wake_subscription> watch_releases(wake_sink wake) {
        (void)wake;
        return nullptr;
    }
};

class DISTLOCK_API backend {
public:
    virtual ~backend() = default;

    // Short name used in errors and reports ("redis", "mysql", ...).
    virtual std::string_view name() const noexcept = 0;
    virtual const capabilities& caps() const noexcept = 0;

    virtual std::unique_ptr<lock_handle> make_lock(const lock_request& request) = 0;

    // Lease used when neither lock_options nor the URL give one.
    virtual std::chrono::milliseconds default_lease() const { return std::chrono::seconds{30}; }

    // One round trip of the cheapest request; nullopt for embedded backends.
    virtual std::optional<std::chrono::nanoseconds> round_trip() { return std::nullopt; }

    // One uncontended take+release of the server's own lock primitive, as a
    // client of the same connection library takes it without distlock (SQL:
    // GET_LOCK + RELEASE_LOCK, pg_advisory_lock + pg_advisory_unlock): the floor
    // `distlock bench` reports strategies against. nullopt where there is none.
    virtual std::optional<std::chrono::nanoseconds> native_cycle() { return std::nullopt; }

    // The one renewal hook, called by the core's renewal thread: renews the
    // leases of (or, for locks without a lease, checks) several held handles of
    // this backend that are due together, in as few round trips as the backend
    // can. `handles` are this backend's own (made by make_lock); results[i]
    // answers handles[i]. Should not throw (a throw counts as `failed` for
    // all). The core calls it only for handles that need it: lease locks with
    // auto_renew, and locks whose check_interval() is not 0. The default
    // reports every handle lost: a backend with such locks must override it.
    virtual void keepalive_batch(std::span<lock_handle* const> handles, std::span<keepalive_result> results);

    // provider::inspect and election::leader: the lock of `name` and `kind`
    // (exclusive, or leader for a backend that claims feature::election) as
    // the server shows it now, in one read that changes nothing. Fill what the
    // backend can know; give the reason in lock_info::unknown for every other
    // field that applies (the core fills in `name`). Throws distlock::error
    // (unavailable_error...) when it cannot read. Claim feature::inspect in
    // capabilities::implements when overriding it. Default: everything
    // unknown, "the backend does not implement inspect".
    virtual lock_info inspect(std::string_view name, lock_kind kind);
    // provider::inspect_read_write and inspect_semaphore: the read-write lock
    // and the semaphore of `name`, in one read that changes nothing, with the
    // same rule (every field that applies is filled or has its reason; the
    // core fills in `name`). Claim feature::inspect_primitives when overriding
    // them (a backend that claims read_write or semaphore). Defaults:
    // everything unknown, "the backend does not implement inspect for ...".
    virtual read_write_info inspect_read_write(std::string_view name);
    virtual semaphore_info inspect_semaphore(std::string_view name);

    // Test hook behind distlock::testing::break_lock: remove the server-side state
    // of `name` out of band (as a failure or an operator would). Default: throws
    // unsupported_error; declare feature::break_lock unsupported then.
    virtual void break_lock(std::string_view name);
};

using factory = std::function<std::shared_ptr<backend>(url& u)>;

class DISTLOCK_API registry {
public:
    virtual ~registry() = default;
    // Registers a scheme. Throws invalid_argument_error if already registered.
    virtual void add(std::string scheme, factory f) = 0;
};

// Jittered exponential backoff ("full jitter") between min and max, for
// backends that have to poll. Not thread-safe; one per wait.
class DISTLOCK_API backoff {
public:
    backoff(std::chrono::milliseconds min, std::chrono::milliseconds max) noexcept;
    // The next delay, never past `until`.
    std::chrono::nanoseconds next(deadline until);
    // Sleeps the next delay; false when the deadline has passed (nothing slept).
    bool sleep(deadline until);

private:
    std::chrono::milliseconds min_, max_, ceiling_;
};

// 16 random bytes as 32 lowercase hex characters (a per-acquisition owner token),
// from the kernel's CSPRNG (pooled per thread; never the same after a fork).
DISTLOCK_API std::string random_token();
// A uniformly random duration in [lo, hi] (jitter; not for secrets).
DISTLOCK_API std::chrono::milliseconds random_between(std::chrono::milliseconds lo, std::chrono::milliseconds hi);
// A random RFC 4122 version-4 UUID, 36 characters with dashes.
DISTLOCK_API std::string random_uuid();
// SHA-256 of `data`, as raw bytes and as lowercase hex.
DISTLOCK_API std::string sha256(std::string_view data);
DISTLOCK_API std::string sha256_hex(std::string_view data);
// Lowercase hex of raw bytes.
DISTLOCK_API std::string to_hex(std::string_view bytes);

// The renewal rule of every lease and session TTL: renewed every third of its
// length (Redisson's watchdog renews its 30 s lease every 10 s), so that two
// renewals in a row may fail before it runs out; never more often than `floor`.
template <class Rep, class Period>
constexpr std::chrono::milliseconds renewal_period(std::chrono::duration<Rep, Period> lease,
                                                   std::chrono::milliseconds floor = std::chrono::milliseconds{1}) {
    return std::max(floor, std::chrono::duration_cast<std::chrono::milliseconds>(lease) / 3);
}

// ASCII character classes that never depend on the process locale (std::isalnum
// and friends do: a name must map to the same key in every process). Bytes of
// 0x80 and above are never letters or digits here.
constexpr bool ascii_digit(char c) noexcept { return c >= '0' && c <= '9'; }
constexpr bool ascii_alpha(char c) noexcept { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
constexpr bool ascii_alnum(char c) noexcept { return ascii_digit(c) || ascii_alpha(c); }
constexpr char ascii_lower(char c) noexcept { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

}  // namespace distlock::spi
