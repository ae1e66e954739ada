// file:// (file_backend.cpp): the semaphore of N: slot files, one flocked per
// permit, taken under the meta file that holds the size and the counter.
#include <fcntl.h>
#include <sys/file.h>

#include <cerrno>

#include "handle.hpp"
#include "lock_files.hpp"

namespace distlock::backends::file {

namespace {

// Whether someone holds slot `file` (a flock that conflicts with ours);
// nullopt when it was never made.
std::optional<bool> slot_held(const lock_dir& dir, const std::string& file) {
    auto fd = dir.open_existing(file, O_RDONLY);
    if (!fd) return std::nullopt;
    if (::flock(fd->get(), LOCK_SH | LOCK_NB) == 0) return false;
    if (errno != EWOULDBLOCK) {
        const int error_number = errno;
        throw_client_error(error_number, kBackend, "flock failed on " + dir.path_of(file));
    }
    return true;
}

}  // namespace

std::optional<spi::grant> handle::take_permit(spi::deadline until, spi::backoff& wait) {
    for (;;) {
        auto meta_fd = waiter_.lock(settings_.dir, paths_.sem_meta, LOCK_EX, until, wait);
        if (!meta_fd) return std::nullopt;
        auto meta = read_meta(meta_fd->get());
        if (meta.size != permits_) {
            // Slots are made in order as permits are taken: the first never
            // made ends them (the stored size, whatever it says, bounds no loop).
            for (std::uint32_t i = 0; i < meta.size; ++i) {
                const auto held = slot_held(settings_.dir, paths_.slot(i));
                if (!held) break;
                if (*held)
                    throw_error(errc::invalid_argument, kBackend,
                                "semaphore '" + name_ + "' is held with " + std::to_string(meta.size) +
                                    " permits; this one asks for " + std::to_string(permits_));
            }
            meta.size = permits_;  // nobody holds it: the size is the new one's
        }
        for (std::uint32_t i = 0; i < permits_; ++i) {
            const auto file = paths_.slot(i);
            fd_guard slot = settings_.dir.open_or_make(file, O_RDWR);
            if (::flock(slot.get(), LOCK_EX | LOCK_NB) != 0) {
                if (errno != EWOULDBLOCK) {
                    const int error_number = errno;
                    throw_client_error(error_number, kBackend, "flock failed on " + settings_.dir.path_of(file));
                }
                continue;
            }
            meta.counter = next_token(meta.counter);
            write_meta(meta_fd->get(), meta, settings_.sync);
            return hold(std::move(slot), file, meta.counter);
        }
        meta_fd.reset();
        if (spi::clock::now() >= until) return std::nullopt;
        waiter_.wait_in(settings_.dir, wait.next(until));
    }
}

}  // namespace distlock::backends::file
