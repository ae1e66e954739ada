// file:// (file_backend.cpp): inspect(), what the mutex's lock file says of
// its holder; inspect_read_write() and inspect_semaphore(), the flocks that
// /proc/locks lists on the read-write lock's data file and the semaphore's
// slot files.
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <tuple>

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

namespace {

using file_id = std::tuple<unsigned, unsigned, unsigned long long>;  // major, minor, inode

// The identity /proc/locks names a file by; nullopt when it was never made.
std::optional<file_id> id_of(const lock_dir& dir, const std::string& file) {
    auto fd = dir.open_existing(file, O_RDONLY);
    if (!fd) return std::nullopt;
    struct stat st {};
    if (::fstat(fd->get(), &st) != 0) {
        const int error_number = errno;
        throw_client_error(error_number, kBackend, "fstat failed on " + dir.path_of(file));
    }
    return file_id{::major(st.st_dev), ::minor(st.st_dev), static_cast<unsigned long long>(st.st_ino)};
}

// The flock(2) locks held on each file (readers and writers); a lock waited
// for ("->") is not held and not counted.
struct flocks {
    std::uint32_t shared = 0, exclusive = 0;
};

// /proc/locks, once: the flocks held on `ids`. Lines of other lock kinds or
// files, and lines that do not parse, are skipped.
std::map<file_id, flocks> flocks_on(const std::vector<file_id>& ids) {
    std::map<file_id, flocks> out;
    for (const auto& id : ids) out.emplace(id, flocks{});
    std::ifstream in("/proc/locks");
    if (!in)
        throw_error(errc::unavailable, kBackend,
                    "cannot read /proc/locks, where the kernel lists the flocks held (is /proc mounted?)");
    for (std::string line; std::getline(in, line);) {
        std::istringstream words(line);
        std::string number, kind, advisory, mode, pid, where;
        words >> number >> kind;
        if (kind == "->") continue;  // waited for, not held
        words >> advisory >> mode >> pid >> where;
        if (kind != "FLOCK") continue;
        unsigned major = 0, minor = 0;
        unsigned long long inode = 0;
        if (std::sscanf(where.c_str(), "%x:%x:%llu", &major, &minor, &inode) != 3) continue;
        const auto it = out.find(file_id{major, minor, inode});
        if (it == out.end()) continue;
        if (mode == "READ") ++it->second.shared;
        else if (mode == "WRITE") ++it->second.exclusive;
    }
    return out;
}

// `n` grants, each with the reasons for what file:// does not keep per grant.
std::vector<grant_info> grants(std::uint32_t n, std::map<std::string, std::string>& unknown, const std::string& prefix,
                               const char* no_label) {
    std::vector<grant_info> out(n);
    if (n == 0) return out;
    unknown.emplace(prefix + ".holder", no_label);
    unknown.emplace(prefix + ".token", "the lock files keep the last token drawn only, not one per grant");
    unknown.emplace(prefix + ".remaining", "no lease: the kernel holds the lock until unlock or process exit");
    return out;
}

// A semaphore's slots past this are not looked at (the meta file's size is
// data anyone with write access to the directory could have written).
constexpr std::uint32_t max_slots_inspected = 100000;

}  // namespace

read_write_info backend::inspect_read_write(std::string_view name) {
    read_write_info info;
    info.unknown.emplace("writers_waiting",
                         "flock(2) keeps no queue: a waiting writer holds the turnstile, which does not say how many "
                         "wait behind it");
    const auto p = paths_of(name);
    const auto data = id_of(settings_.dir, p.rw_data);
    if (!data) {  // never made: never held
        info.write_held = false;
        info.readers.emplace();
        return info;
    }
    const auto held = flocks_on({*data}).at(*data);
    info.write_held = held.exclusive > 0;
    info.readers = grants(held.shared, info.unknown, "readers", "file:// read grants write no label");
    if (held.exclusive > 0) {
        grant_info writer;
        // The last token drawn is the writer's: no reader draws one while it holds.
        if (auto turn = settings_.dir.open_existing(p.rw_turn, O_RDONLY)) writer.token = read_counter(turn->get());
        else info.unknown.emplace("writer.token", "the turnstile file, which holds the counter, is gone");
        info.unknown.emplace("writer.holder", "a file:// write grant writes no label");
        info.unknown.emplace("writer.remaining", "no lease: the kernel holds the lock until unlock or process exit");
        info.writer = writer;
    }
    return info;
}

semaphore_info backend::inspect_semaphore(std::string_view name) {
    semaphore_info info;
    const auto p = paths_of(name);
    auto meta_fd = settings_.dir.open_existing(p.sem_meta, O_RDONLY);
    if (!meta_fd) {
        info.permits.emplace();
        const char* why = "no semaphore of this name in the directory yet: its size is set by its first acquirer";
        info.unknown.emplace("size", why);
        info.unknown.emplace("free", why);
        return info;
    }
    const auto meta = read_meta(meta_fd->get());
    // Slots are made in order as permits are taken: the first never made ends them.
    std::vector<file_id> slots;
    for (std::uint32_t i = 0; i < std::min(meta.size, max_slots_inspected); ++i) {
        auto id = id_of(settings_.dir, p.slot(i));
        if (!id) break;
        slots.push_back(*id);
    }
    const auto held = flocks_on(slots);
    std::uint32_t taken = 0;
    for (const auto& id : slots) taken += held.at(id).exclusive > 0 ? 1 : 0;
    info.permits = grants(taken, info.unknown, "permits", "file:// permits write no label");
    if (meta.size > 0 && meta.size <= max_slots_inspected) {
        info.size = meta.size;
        info.free = meta.size - std::min(taken, meta.size);
    } else {
        const auto why = "the meta file says " + std::to_string(meta.size) + " permits, which no distlock writes";
        info.unknown.emplace("size", why);
        info.unknown.emplace("free", why);
    }
    return info;
}

}  // namespace distlock::backends::file
