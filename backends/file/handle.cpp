// file:// (file_backend.cpp): a lock handle: the mutex's lock file, the
// read-write lock through its turnstile, release, and the check that the file
// held is still the one the name names. The semaphore is in semaphore.cpp.
#include "handle.hpp"

#include <sys/file.h>

#include "lock_files.hpp"

namespace distlock::backends::file {

using namespace std::chrono_literals;

class handle::async_wait final : public spi::wake_subscription {
public:
    async_wait(handle& h, std::unique_ptr<spi::wake_subscription> sub) : handle_(h), sub_(std::move(sub)) {
        handle_.async_ = true;
    }
    ~async_wait() override {
        handle_.async_ = false;
        handle_.leave_turnstile();
    }

private:
    handle& handle_;
    std::unique_ptr<spi::wake_subscription> sub_;
};

std::unique_ptr<spi::wake_subscription> handle::watch_releases(spi::wake_sink wake) {
    std::vector<std::string> files;
    switch (kind_) {
        case spi::lock_kind::exclusive:
        case spi::lock_kind::leader: files = {paths_.mutex}; break;
        case spi::lock_kind::read:
        case spi::lock_kind::write: files = {paths_.rw_data, paths_.rw_turn}; break;
        case spi::lock_kind::permit: return nullptr;
    }
    auto sub = settings_.watcher->watch(settings_.dir, files, std::move(wake));
    if (!sub) return nullptr;
    return std::make_unique<async_wait>(*this, std::move(sub));
}

std::optional<spi::grant> handle::acquire_quietly() {
    const auto& dir = settings_.dir;
    if (kind_ == spi::lock_kind::read || kind_ == spi::lock_kind::write) {
        // A writer keeps the turnstile from attempt to attempt, as a blocked
        // one keeps it while it waits: readers that come after it wait.
        auto turn = turn_ ? std::move(turn_) : waiter_.try_quietly(dir, paths_.rw_turn, LOCK_EX);
        if (!turn) return std::nullopt;
        auto fd = waiter_.try_quietly(dir, paths_.rw_data, kind_ == spi::lock_kind::read ? LOCK_SH : LOCK_EX);
        if (!fd) {
            if (kind_ == spi::lock_kind::write) turn_ = std::move(turn);
            return std::nullopt;
        }
        fd_guard data = file_waiter::writable(dir, paths_.rw_data, fd->get());
        if (data.get() < 0) return std::nullopt;
        // Its close is one event: the lock's other waiters make one attempt each.
        fd_guard counter = file_waiter::writable(dir, paths_.rw_turn, turn->get());
        if (counter.get() < 0) return std::nullopt;
        std::uint64_t token = next_token(read_counter(turn->get()));
        write_counter(counter.get(), token, settings_.sync);
        write_fd_ = std::move(data);
        return hold(std::move(*fd), paths_.rw_data, token);
    }
    auto fd = waiter_.try_quietly(dir, paths_.mutex, LOCK_EX);
    if (!fd) return std::nullopt;
    fd_guard w = file_waiter::writable(dir, paths_.mutex, fd->get());
    if (w.get() < 0) return std::nullopt;
    std::uint64_t token = next_token(read_counter(fd->get()));
    write_counter(w.get(), token, settings_.sync, holder_);
    write_fd_ = std::move(w);
    return hold(std::move(*fd), paths_.mutex, token);
}

void handle::leave_turnstile() noexcept {
    if (!turn_) return;
    // Opened for writing and closed: the event that wakes the readers it held
    // back (without it, they find out at their next poll).
    try {
        fd_guard wake = file_waiter::writable(settings_.dir, paths_.rw_turn, turn_->get());
    } catch (...) {}
    turn_.reset();
}

std::optional<spi::grant> handle::acquire(spi::deadline until, const spi::loss_sink&) {
    if (async_ && kind_ != spi::lock_kind::permit && until <= spi::clock::now()) return acquire_quietly();
    spi::backoff wait(1ms, retry_max_);
    (void)waiter_.take_waited();
    switch (kind_) {
        case spi::lock_kind::exclusive:
        case spi::lock_kind::leader: {  // leader: not asked (no feature::election)
            auto fd = waiter_.lock(settings_.dir, paths_.mutex, LOCK_EX, until, wait);
            if (!fd) return std::nullopt;
            std::uint64_t token = next_token(read_counter(fd->get()));
            write_counter(fd->get(), token, settings_.sync, holder_);
            return hold(std::move(*fd), paths_.mutex, token);
        }
        case spi::lock_kind::read:
        case spi::lock_kind::write: {
            // Through the turnstile: a writer keeps it while it waits for the
            // readers inside to leave, so readers that come after it wait.
            auto turn = waiter_.lock(settings_.dir, paths_.rw_turn, LOCK_EX, until, wait);
            if (!turn) return std::nullopt;
            auto fd = waiter_.lock(settings_.dir, paths_.rw_data, kind_ == spi::lock_kind::read ? LOCK_SH : LOCK_EX,
                                   until, wait);
            if (!fd) return std::nullopt;
            std::uint64_t token = next_token(read_counter(turn->get()));
            write_counter(turn->get(), token, settings_.sync);
            return hold(std::move(*fd), paths_.rw_data, token);
        }
        case spi::lock_kind::permit: return take_permit(until, wait);
    }
    return std::nullopt;
}

void handle::release() {
    fd_guard fd = std::move(fd_);
    if (fd.get() < 0) throw_error(errc::not_owner, kBackend, "lock '" + name_ + "' is not held by this handle");
    bool ours = settings_.dir.names(fd.get(), held_file_);
    ::flock(fd.get(), LOCK_UN);
    fd.reset();         // the close wakes waiters (IN_CLOSE_WRITE) ...
    write_fd_.reset();  // ... or this one's, of a grant taken quietly (fd was read-only)
    if (!ours)
        throw_error(errc::not_owner, kBackend,
                    "lock file " + settings_.dir.path_of(held_file_) + " was replaced while held: the lock was lost");
}

spi::keepalive_result handle::check() const {
    if (!settings_.dir.names(fd_.get(), held_file_))
        return spi::keepalive_result::lost("lock file " + settings_.dir.path_of(held_file_) +
                                           " was removed or replaced");
    return spi::keepalive_result::ok();
}

spi::grant handle::hold(fd_guard fd, const std::string& file, std::uint64_t token) {
    fd_ = std::move(fd);
    held_file_ = file;
    return spi::grant{token, spi::clock::now(), waiter_.take_waited()};  // no lease: the kernel holds it
}

}  // namespace distlock::backends::file
