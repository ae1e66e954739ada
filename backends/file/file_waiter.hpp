// file:// (file_backend.cpp), inside: waiting for a lock file's holders.
#pragma once

#include <chrono>
#include <optional>
#include <string>

#include "lock_dir.hpp"

namespace distlock::backends::file {

// Waits for the holders of a file to close it (release or death), or for it to
// be replaced: inotify on the file, slow polling as a safety net.
class file_waiter {
public:
    // Opens `file` of `dir` (made if missing) and flocks it with `op` (LOCK_EX or
    // LOCK_SH) before `until`: the open file, or nullopt when the deadline passed.
    // A file replaced while waiting (break_lock) is waited on afresh.
    std::optional<fd_guard> lock(const lock_dir& dir, const std::string& file, int op, spi::deadline until,
                                 spi::backoff& wait);

    // Whether a lock() since the last call found the file held by another.
    bool take_waited() noexcept { return std::exchange(waited_, false); }

    // One attempt of an asynchronous wait, which must wake no other waiter when
    // it fails (dir_watcher.hpp): `file` is opened read-only and flocked with
    // `op` | LOCK_NB, so that failing closes nothing opened for writing. The
    // open file, or nullopt when another holds it.
    std::optional<fd_guard> try_quietly(const lock_dir& dir, const std::string& file, int op);
    // `file`, locked as `locked` by try_quietly, opened again for writing (the
    // holder writes the counter through it and keeps it until release, whose
    // close wakes the waiters); an empty guard when `file` names another
    // inode by now (replaced: the attempt failed).
    static fd_guard writable(const lock_dir& dir, const std::string& file, int locked);

    // Until something in `dir` is closed after writing, or `delay` passed.
    void wait_in(const lock_dir& dir, std::chrono::nanoseconds delay);

private:
    void sleep(int watch, std::chrono::nanoseconds d);
    // One inotify instance per handle, kept for its lifetime: closing an inotify
    // descriptor waits for an RCU grace period (~10-20 ms), far too slow to do
    // on every acquisition.
    int inotify_fd();
    void drain();
    void unwatch(int watch);
    fd_guard inotify_;
    bool waited_ = false;
};

}  // namespace distlock::backends::file
