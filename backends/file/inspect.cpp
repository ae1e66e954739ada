// file:// (file_backend.cpp): inspect(), what the mutex's lock file says of
// its holder.
#include <fcntl.h>
#include <sys/file.h>

#include <cerrno>

#include "file_backend.hpp"
#include "lock_files.hpp"

namespace distlock::backends::file {

lock_info backend::inspect(std::string_view name, spi::lock_kind) {
    lock_info info;
    info.unknown.emplace("waiters", "flock(2) does not tell how many processes wait");
    const auto file = paths_of(name).mutex;
    auto fd = settings_.dir.open_existing(file, O_RDWR);  // closing it wakes waiters (IN_CLOSE_WRITE)
    if (!fd) {
        info.held = false;  // never made: never held
        return info;
    }
    if (::flock(fd->get(), LOCK_SH | LOCK_NB) == 0) {
        info.held = false;
        return info;
    }
    if (errno != EWOULDBLOCK) {
        const int error_number = errno;
        throw_client_error(error_number, kBackend, "flock failed on " + settings_.dir.path_of(file));
    }
    info.held = true;
    info.token = read_counter(fd->get());
    if (auto label = read_label(fd->get()); !label.empty()) info.holder = std::move(label);
    else info.unknown.emplace("holder", "the holder wrote no label (a distlock from before holder labels)");
    info.unknown.emplace("remaining", "no lease: the kernel holds the lock until unlock or process exit");
    return info;
}

}  // namespace distlock::backends::file
