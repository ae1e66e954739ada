// file:///dir — one lock file per name in a directory, locked with flock(2).
// Works across the processes of one host (and across hosts only on a file system
// whose flock is coherent); the kernel releases the lock when the holder dies.
// The fencing counter is kept in the lock file itself and incremented under the
// lock. Lock files are never deleted on release: deleting one while a waiter has
// it open would let two processes lock two different inodes of the same name.
//
// Read-write lock: `<name>.rw` flocked shared by readers, exclusive by a
// writer, entered through the turnstile `<name>.rw-turn` (flocked exclusive on
// the way in, and holding the counter), which a writer keeps while it waits for
// the readers inside: readers that come after a waiting writer wait behind it.
// Semaphore of N: slot files `<name>.sem-0` .. `<name>.sem-<N-1>`, one flocked
// per permit, taken under the meta file `<name>.sem` ("<size> <counter>"), where
// the size is checked against the holders'.
//
// The directory may be shared with hostile local users (see "What file://
// refuses" in docs/backends/embedded.md): it is opened once at connect, checked,
// and every file is reached relative to that descriptor, so that a directory
// renamed or replaced by a link later never moves the locks. Every file is
// vetted before it is opened for reading or writing: a link, FIFO, device,
// second name of another file, or another user's file is refused, never written.
//
// This file: the backend (its capabilities and handles) and the file:// URL.
// The others, one job each: lock_dir (the directory and the vetting of its
// files), lock_files (the files of a name and what they hold), file_waiter
// (waiting for a holder), handle (mutex and read-write lock), semaphore,
// inspect, break_lock.
#include "file_backend.hpp"

#include "handle.hpp"

namespace distlock::backends::file {

using namespace std::chrono_literals;

backend::backend(settings s) : settings_(std::move(s)) {
    caps_.unsupported = {
        {feature::lease_expiry, "no leases: the kernel holds the lock until unlock or process exit"},
        {feature::notified_wakeup, "waiters wake on inotify close events, with slow polling as a safety net"},
    };
    caps_.implements = {feature::read_write, feature::semaphore, feature::permit_limit, feature::inspect,
                        feature::inspect_primitives};
    caps_.crash_release_bound = 0ms;
}

std::unique_ptr<spi::lock_handle> backend::make_lock(const spi::lock_request& r) {
    return std::make_unique<handle>(settings_, r);
}

void backend::keepalive_batch(std::span<spi::lock_handle* const> handles, std::span<spi::keepalive_result> results) {
    for (std::size_t i = 0; i < handles.size(); ++i) results[i] = static_cast<const handle*>(handles[i])->check();
}

namespace {

// mode=0600 (the default: the effective user's alone) or 0660 (shared with the
// lock directory's group). No other: a file others could open, they could
// flock for ever (read access is enough), and one they could write, rewrite.
mode_t take_mode(spi::url& u) {
    const auto text = u.take("mode");
    if (!text || *text == "0600" || *text == "600") return 0600;
    if (*text == "0660" || *text == "660") return 0660;
    throw_error(errc::invalid_argument, kBackend,
                "mode must be 0600 (the default: this user's files only) or 0660 (shared with the lock directory's "
                "group): a lock file that others can open, they can block");
}

}  // namespace

void register_backend(spi::registry& r) {
    r.add("file", [](spi::url& u) -> std::shared_ptr<spi::backend> {
        if (!u.hosts().empty() && u.hosts()[0].host != "localhost")
            throw_error(errc::invalid_argument, kBackend, "file:// URLs name a local directory: file:///path/to/dir");
        if (u.path().empty() || u.path() == "/")
            throw_error(errc::invalid_argument, kBackend, "file:// needs a directory: file:///path/to/dir");
        // %00 decodes to a NUL, where every system call would cut the path short.
        if (u.path().find('\0') != std::string::npos)
            throw_error(errc::invalid_argument, kBackend, "a file:// path cannot hold a NUL byte (%00)");
        // The kernel would resolve them, through whatever links the path holds.
        if (spi::has_dot_segment(u.path()))
            throw_error(errc::invalid_argument, kBackend,
                        "a file:// path cannot have '.' or '..' segments: name the directory");
        const bool sync = u.take_bool("sync").value_or(false);
        const auto check = u.take_duration("check").value_or(200ms);
        if (check.count() <= 0) throw_error(errc::invalid_argument, kBackend, "check must be positive");
        const auto mode = take_mode(u);
        settings s{lock_dir(u.path(), mode), sync, check};
        return std::make_shared<backend>(std::move(s));
    });
}

}  // namespace distlock::backends::file
