// distlock: per-lock options and the capabilities a backend declares.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <string_view>

#include "distlock/export.hpp"

namespace distlock {

class error;

// Lock names are arbitrary bytes (NUL, '/', quotes, UTF-8 all allowed), from 1 to
// this many bytes. Every backend accepts every such name, mapping or hashing it
// internally where its server is stricter (documented per backend).
inline constexpr std::size_t max_name_length = 1024;

// What happened to a held lock, passed to lock_options::on_lost / on_error.
struct DISTLOCK_API lock_event {
    std::string name;     // the lock name
    std::uint64_t token;  // fencing token of the grant concerned (0 if the backend has none)
    std::string reason;   // human-readable cause (server message included where there is one)
};

struct DISTLOCK_API lock_options {
    // Server-side lease length. 0ms = the provider's default: the URL's `lease=`
    // parameter, else the backend's own default (30 s for lease backends). Ignored
    // by backends without leases (file, memory, row locks held by a connection).
    std::chrono::milliseconds lease{0};

    // Renew the lease every lease/3 while held (one scheduler thread per provider,
    // renewals batched per backend). false = the lease simply expires; the lock is
    // then reported lost when the expiry is noticed.
    bool auto_renew = true;

    // Bounds of the jittered exponential backoff used by backends that must poll
    // (none of the notification-based waits use it).
    std::chrono::milliseconds retry_min{5};
    std::chrono::milliseconds retry_max{250};

    // Called once when a held lock is found to be lost (lease not renewed in time,
    // key deleted, session expired, connection killed), whichever path finds it: a
    // renewal, a watch, or the release in unlock(). held() is false from the
    // moment the loss is found; the callback follows on the provider's callback
    // thread (one per provider, shared with on_error: callbacks run one at a time,
    // in the order they happened; never on the thread that found the loss or the
    // renewal thread). It may call unlock() and lock() on this mutex; keep it
    // short, as it delays the provider's other callbacks. unlock() returns after
    // the callbacks of its mutex queued so far have run (a loss its own release
    // found included), except when called from a callback.
    // Callbacks of a mutex still queued when it is destroyed have run when its
    // destructor returns, so what they use may go with the mutex; destroyed
    // from a callback of its provider (which cannot wait for the others), its
    // queued callbacks never run (the observer and the log hook are still told
    // of the loss). So an on_lost may destroy every mutex and the provider while
    // the other losses of one batch (a session expired) are queued. Empty = no
    // callback (held() still turns false). The reason shows no secret of the URL.
    std::function<void(const lock_event&)> on_lost;

    // Called when unlock() or a renewal fails in a way that is not a loss (the
    // server was unreachable, the outcome is in doubt), on the same thread as
    // on_lost. unlock() never throws; this is where its failure goes (a release
    // that finds the lock already gone goes to on_lost instead). The error is of
    // its most derived type (in_doubt_error, unavailable_error...). Empty =
    // ignored (the server-side lease is the safety net).
    std::function<void(const lock_event&, const error&)> on_error;
};

// Points of the lock contract that not every backend can honour. A backend lists
// the ones it does not support, each with its reason; the conformance suite
// reports those cases as not applicable.
enum class feature {
    cross_process,       // exclusion between separate processes (memory:// is in-process)
    crash_release,       // a holder killed with SIGKILL is released by the server side
    lease_expiry,        // grants expire unless renewed (so renewal and stale-owner-by-expiry apply)
    loss_detection,      // a holder learns that its server-side state was removed
    fencing,             // strictly increasing fencing tokens per name
    notified_wakeup,     // waiters are woken by a server notification, not by polling
    break_lock,          // testing::break_lock can remove the server-side state out of band
    read_write,          // provider::shared_mutex (a read-write lock)
    semaphore,           // provider::semaphore (permits, each a grant of its own)
    permit_limit,        // a semaphore's size is kept on the server: a client asking another size is refused
    election,            // provider::election has a layout of its own (Curator's LeaderLatch, ...); without
                         // it, an election is the backend's mutex of the same name
    inspect,             // provider::inspect reads the server (at least whether a lock is held); without it,
                         // every field of lock_info is unknown, "the backend does not implement inspect"
    inspect_primitives,  // provider::inspect_read_write and inspect_semaphore read the server (at least
                         // whether a writer holds it, the readers, the permits taken); without it, every
                         // field is unknown with the reason
};

DISTLOCK_API std::string_view to_string(feature f) noexcept;

struct DISTLOCK_API capabilities {
    // feature -> why it does not apply. Absent = supported (but see `implements`).
    std::map<feature, std::string> unsupported;

    // What a backend implements of the features that came after the mutex:
    // feature::read_write, feature::semaphore, feature::permit_limit,
    // feature::election, feature::inspect and feature::inspect_primitives. Such a
    // feature that a backend does not list here is not supported, whatever
    // `unsupported` says: a backend written before they existed lists none, and
    // provider::caps() then shows each of them unsupported with the reason
    // "the backend does not claim it (capabilities::implements)". (A backend
    // author sets this; a user reads supports() / why_not().)
    std::set<feature> implements;

    // Upper bound on how long after a holder's crash the lock is released, with
    // the lease in force (0 = at once, e.g. the kernel or a dropped connection).
    std::chrono::milliseconds crash_release_bound{0};

    // lock() by the thread that already holds the same mutex object nests (a local
    // count, as Curator and Redisson do) instead of throwing would_deadlock_error.
    bool reentrant = false;

    bool supports(feature f) const { return unsupported.find(f) == unsupported.end(); }
    std::string_view why_not(feature f) const {
        auto it = unsupported.find(f);
        return it == unsupported.end() ? std::string_view{} : std::string_view{it->second};
    }
};

}  // namespace distlock
