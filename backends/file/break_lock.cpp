// file:// (file_backend.cpp): break_lock(), fresh lock files in place of a
// name's, keeping their counters.
#include <fcntl.h>

#include <cerrno>

#include "file_backend.hpp"
#include "lock_files.hpp"

namespace distlock::backends::file {

void backend::break_lock(std::string_view name) {
    const auto p = paths_of(name);
    replace(p.mutex, true);
    replace(p.rw_data, false);
    auto meta = settings_.dir.open_existing(p.sem_meta, O_RDONLY);
    const auto size = meta ? read_meta(meta->get()).size : 0;
    // The first slot never made ends them, as in take_permit.
    for (std::uint32_t i = 0; i < size && replace(p.slot(i), false); ++i) {}
}

// A fresh file in place of `file` (when one is there, or always for a file
// holding a counter), with the old one's counter; whether one was made.
bool backend::replace(const std::string& file, bool counter_inside) {
    const auto& dir = settings_.dir;
    std::uint64_t counter = 0;
    auto old = dir.open_existing(file, O_RDONLY);
    if (!old && !counter_inside) return false;  // never made: nothing to break
    if (old && counter_inside) counter = read_counter(old->get());
    const auto tmp = file + ".break-" + spi::random_token();
    fd_guard fresh = dir.make(tmp, O_RDWR);
    if (fresh.get() < 0) {
        const int error_number = errno;
        throw_client_error(error_number, kBackend, "cannot create " + dir.path_of(tmp));
    }
    try {
        if (counter_inside) write_counter(fresh.get(), counter, settings_.sync);
    } catch (...) {
        dir.remove(tmp);
        throw;
    }
    dir.rename(tmp, file);
    return true;
}

}  // namespace distlock::backends::file
