// file:// (file_backend.cpp), inside: the backend's settings and its lock
// handle (handle.cpp; its semaphore in semaphore.cpp).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "dir_watcher.hpp"
#include "file_waiter.hpp"
#include "lock_dir.hpp"
#include "lock_files.hpp"

namespace distlock::backends::file {

struct settings {
    lock_dir dir;
    bool sync = false;
    std::chrono::milliseconds check{200};
    // The provider's inotify watch of `dir` for asynchronous waiters (started by the first).
    std::shared_ptr<dir_watcher> watcher = std::make_shared<dir_watcher>();
};

class handle final : public spi::lock_handle {
public:
    handle(const settings& s, const spi::lock_request& r)
        : settings_(s),
          name_(r.name),
          paths_(paths_of(r.name)),
          holder_(r.holder),
          kind_(r.kind),
          permits_(r.permits),
          retry_max_(r.retry_max) {}

    std::optional<spi::grant> acquire(spi::deadline until, const spi::loss_sink&) override;
    void release() override;

    std::chrono::milliseconds check_interval() const override { return settings_.check; }

    // Mutex and read-write lock: the provider's watch of the directory wakes
    // the wait when the name's files are closed after writing (a release) or
    // replaced (break_lock); its one-attempt acquire() calls then lock
    // quietly (file_waiter::try_quietly), so that they wake nobody. Semaphore:
    // nullptr (the core polls): its attempts write the meta file.
    std::unique_ptr<spi::wake_subscription> watch_releases(spi::wake_sink wake) override;

    // Still ours: the path still names the file we hold the lock on.
    spi::keepalive_result check() const;

private:
    class async_wait;
    spi::grant hold(fd_guard fd, const std::string& file, std::uint64_t token);
    // One attempt of an asynchronous wait (mutex, read-write lock), quiet.
    std::optional<spi::grant> acquire_quietly();
    // The end of an asynchronous writer's wait without a grant: the turnstile
    // it kept goes, and the readers it held back are woken.
    void leave_turnstile() noexcept;
    // Under the meta file's lock: check the size, then take the first free slot
    // of 0..permits-1 and count the grant; else wait for a close in the directory.
    std::optional<spi::grant> take_permit(spi::deadline until, spi::backoff& wait);

    const settings& settings_;
    std::string name_;
    paths paths_;
    std::string holder_;
    spi::lock_kind kind_;
    std::uint32_t permits_;
    std::chrono::milliseconds retry_max_;
    file_waiter waiter_;
    fd_guard fd_;
    std::string held_file_;
    fd_guard write_fd_;   // a grant taken quietly: the held file, open for writing until release
    bool async_ = false;  // an asynchronous wait is under way (watch_releases)
    // An asynchronous writer's place: the turnstile, locked, between its attempts.
    std::optional<fd_guard> turn_;
};

}  // namespace distlock::backends::file
