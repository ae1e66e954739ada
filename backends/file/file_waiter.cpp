// file:// (file_backend.cpp): waiting for the holders of a lock file to close
// it, or for it to be replaced: inotify on the file, slow polling as a safety net.
#include "file_waiter.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/file.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <thread>

namespace distlock::backends::file {

std::optional<fd_guard> file_waiter::lock(const lock_dir& dir, const std::string& file, int op, spi::deadline until,
                                          spi::backoff& wait) {
    for (;;) {
        fd_guard fd = dir.open_or_make(file, O_RDWR);
        int watch = -1;
        bool locked = false;
        for (;;) {
            if (::flock(fd.get(), op | LOCK_NB) == 0) {
                locked = true;
                break;
            }
            if (errno != EWOULDBLOCK && errno != EINTR) {
                const int error_number = errno;
                throw_client_error(error_number, kBackend, "flock failed on " + dir.path_of(file));
            }
            waited_ = true;
            if (spi::clock::now() >= until) {
                unwatch(watch);
                return std::nullopt;
            }
            if (watch < 0 && inotify_fd() >= 0) {  // the inode we hold, through its descriptor
                watch = ::inotify_add_watch(inotify_.get(), fd_path(fd.get()).c_str(),
                                            IN_CLOSE_WRITE | IN_ATTRIB | IN_DELETE_SELF | IN_MOVE_SELF);
                if (watch >= 0) continue;  // a release before the watch existed would be missed: retry now
            }
            sleep(watch, wait.next(until));
            if (!dir.names(fd.get(), file)) break;  // replaced (break_lock) or unlinked: wait on the new file
        }
        unwatch(watch);
        if (locked && dir.names(fd.get(), file)) return fd;
    }
}

std::optional<fd_guard> file_waiter::try_quietly(const lock_dir& dir, const std::string& file, int op) {
    for (int attempt = 0;; ++attempt) {
        fd_guard fd = dir.open_or_make(file, O_RDONLY);
        if (::flock(fd.get(), op | LOCK_NB) != 0) {
            if (errno != EWOULDBLOCK && errno != EINTR) {
                const int error_number = errno;
                throw_client_error(error_number, kBackend, "flock failed on " + dir.path_of(file));
            }
            waited_ = true;
            return std::nullopt;
        }
        if (dir.names(fd.get(), file)) return fd;
        if (attempt == 8) return std::nullopt;  // replaced again and again (break_lock): busy for now
    }
}

fd_guard file_waiter::writable(const lock_dir& dir, const std::string& file, int locked) {
    fd_guard fd = dir.open_or_make(file, O_RDWR);
    struct stat a {
    }, b{};
    if (::fstat(fd.get(), &a) != 0 || ::fstat(locked, &b) != 0 || a.st_dev != b.st_dev || a.st_ino != b.st_ino)
        return fd_guard{};
    return fd;
}

void file_waiter::wait_in(const lock_dir& dir, std::chrono::nanoseconds delay) {
    waited_ = true;
    int watch = inotify_fd() >= 0 ? ::inotify_add_watch(inotify_.get(), fd_path(dir.fd()).c_str(), IN_CLOSE_WRITE) : -1;
    sleep(watch, delay);
    unwatch(watch);
}

void file_waiter::sleep(int watch, std::chrono::nanoseconds d) {
    auto delay = std::chrono::duration_cast<std::chrono::milliseconds>(d);
    if (watch >= 0) {
        pollfd p{inotify_.get(), POLLIN, 0};
        if (::poll(&p, 1, static_cast<int>(delay.count()) + 1) > 0) drain();
    } else {
        std::this_thread::sleep_for(delay);
    }
}

int file_waiter::inotify_fd() {
    if (inotify_.get() < 0) inotify_.reset(::inotify_init1(IN_CLOEXEC | IN_NONBLOCK));
    return inotify_.get();
}

void file_waiter::drain() {
    char events[4096];
    while (::read(inotify_.get(), events, sizeof events) > 0) {}
}

void file_waiter::unwatch(int watch) {
    if (watch < 0) return;
    ::inotify_rm_watch(inotify_.get(), watch);
    drain();
}

}  // namespace distlock::backends::file
