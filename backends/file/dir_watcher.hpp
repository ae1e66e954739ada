// file:// (file_backend.cpp), inside: asynchronous waits' wake-ups. One
// inotify watch on the lock directory per provider, read by one thread, shared
// by every asynchronous waiter (lock_handle::watch_releases): a lock file of a
// watched name closed after writing (a holder's release: an asynchronous
// waiter's attempts never close a file they opened for writing, see
// file_waiter::try_quietly) or renamed into place (break_lock) wakes the
// waiters of that file. No descriptor or thread per waiter.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "lock_dir.hpp"

namespace distlock::backends::file {

class dir_watcher {
public:
    dir_watcher() = default;
    ~dir_watcher();
    dir_watcher(const dir_watcher&) = delete;
    dir_watcher& operator=(const dir_watcher&) = delete;

    // Calls `wake` on each event of one of `files` (names in `dir`, the
    // provider's directory, watched from the first call on), and for every
    // waiter when the kernel's event queue overflowed, until the subscription
    // is destroyed (its destructor returns after any call under way). nullptr
    // when the system gives no inotify instance or watch: the core polls.
    std::unique_ptr<spi::wake_subscription> watch(const lock_dir& dir, const std::vector<std::string>& files,
                                                  spi::wake_sink wake);

    // Files watched now (each counted once per waiter).
    std::size_t watchers();

private:
    class subscription;
    bool start_locked(const lock_dir& dir);  // mutex_ held: inotify, the watch, the thread
    void unwatch(const std::vector<std::string>& files, std::uint64_t id);
    void run();

    std::mutex mutex_;
    std::map<std::string, std::map<std::uint64_t, spi::wake_sink>, std::less<>> waiters_;
    std::uint64_t next_id_ = 0;
    fd_guard inotify_;
    fd_guard stop_read_, stop_write_;  // a pipe: the destructor wakes the thread
    bool failed_ = false;              // no inotify here: every watch() returns nullptr
    std::thread thread_;
};

}  // namespace distlock::backends::file
