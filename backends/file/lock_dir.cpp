// file:// (file_backend.cpp): the lock directory, held open from connect on,
// and the vetting of every file in it before it is opened (see lock_dir.hpp).
#include "lock_dir.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

namespace distlock::backends::file {

[[noreturn]] void throw_client_error(int err, std::string_view backend, const std::string& what) {
    // Denied; a path that names something other than a directory (a file where
    // the URL wants a directory: fix the URL); else the file system failed.
    errc code = (err == EACCES || err == EPERM || err == EROFS)            ? errc::access_denied
                : (err == ENOTDIR || err == EEXIST || err == ENAMETOOLONG) ? errc::invalid_argument
                                                                           : errc::unavailable;
    throw_error(code, std::string(backend), what, err, std::strerror(err));
}

[[noreturn]] void refuse(const std::string& why) { throw_error(errc::access_denied, kBackend, why); }

std::string fd_path(int fd) { return "/proc/self/fd/" + std::to_string(fd); }

namespace {

std::string octal(mode_t mode) {
    char text[8];
    std::snprintf(text, sizeof text, "%04o", static_cast<unsigned>(mode & 07777));
    return text;
}

// What a file that is not a regular one is, for messages.
const char* kind_of(mode_t mode) {
    switch (mode & S_IFMT) {
        case S_IFLNK: return "a symbolic link";
        case S_IFIFO: return "a FIFO";
        case S_IFDIR: return "a directory";
        case S_IFSOCK: return "a socket";
        case S_IFCHR:
        case S_IFBLK: return "a device";
        default: return "not a regular file";
    }
}

// Whether the effective user is in group `gid` (primary or supplementary).
bool in_group(gid_t gid) {
    if (gid == ::getegid()) return true;
    const int n = ::getgroups(0, nullptr);
    std::vector<gid_t> groups(static_cast<std::size_t>(std::max(n, 0)));
    const int got = ::getgroups(n, groups.data());
    return got > 0 && std::find(groups.begin(), groups.begin() + got, gid) != groups.begin() + got;
}

// Makes the directory `path` and its missing parents, each exactly `mode`
// whatever the umask (mkdir applies it, and never sets the setgid bit itself).
void make_directories(const std::string& path, mode_t mode) {
    const auto make = [&] {
        if (::mkdir(path.c_str(), mode & 0777) != 0) return false;
        fd_guard made(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
        struct stat st {};
        // Not ours any more (replaced since the mkdir): lock_dir refuses it.
        if (made.get() < 0 || ::fstat(made.get(), &st) != 0 || st.st_uid != ::geteuid()) return true;
        if ((st.st_mode & 07777) != mode && ::fchmod(made.get(), mode) != 0) {
            const int error_number = errno;
            throw_client_error(error_number, kBackend, "cannot set the mode of directory " + path);
        }
        return true;
    };
    if (make() || errno == EEXIST) return;
    const auto slash = path.rfind('/');
    if (errno != ENOENT || slash == 0 || slash == std::string::npos) {
        const int error_number = errno;
        throw_client_error(error_number, kBackend, "cannot make directory " + path);
    }
    make_directories(path.substr(0, slash), mode);
    if (!make() && errno != EEXIST) {
        const int error_number = errno;
        throw_client_error(error_number, kBackend, "cannot make directory " + path);
    }
}

}  // namespace

lock_dir::lock_dir(std::string path, mode_t file_mode) : path_(std::move(path)), file_mode_(file_mode) {
    while (path_.size() > 1 && path_.back() == '/') path_.pop_back();
    make_directories(path_, shared() ? 02770 : 0700);
    fd_.reset(::open(path_.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (fd_.get() < 0) {
        const int err = errno;  // ENOTDIR for a link too, with O_DIRECTORY
        struct stat link {};
        if (err == ELOOP || (err == ENOTDIR && ::lstat(path_.c_str(), &link) == 0 && S_ISLNK(link.st_mode)))
            refuse("lock directory " + path_ +
                   " is a symbolic link: give the directory itself, whose owner is checked");
        if (err == ENOTDIR) throw_error(errc::invalid_argument, kBackend, path_ + " exists and is not a directory");
        throw_client_error(err, kBackend, "cannot open directory " + path_);
    }
    struct stat st {};
    if (::fstat(fd_.get(), &st) != 0) {
        const int error_number = errno;
        throw_client_error(error_number, kBackend, "cannot stat directory " + path_);
    }
    vet_directory(st);
    gid_ = st.st_gid;
    if (::access(path_.c_str(), R_OK | W_OK | X_OK) != 0) {
        const int error_number = errno;
        throw_client_error(error_number, kBackend, "cannot write in " + path_);
    }
}

fd_guard lock_dir::make(const std::string& file, int flags) const {
    fd_guard fd(::openat(fd_.get(), file.c_str(), flags | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, file_mode_));
    if (fd.get() >= 0) settle(fd.get(), file, nullptr);
    return fd;
}

bool lock_dir::names(int fd, const std::string& file) const {
    struct stat a {
    }, b{};
    if (::fstat(fd, &a) != 0 || ::fstatat(fd_.get(), file.c_str(), &b, AT_SYMLINK_NOFOLLOW) != 0) return false;
    return a.st_dev == b.st_dev && a.st_ino == b.st_ino && a.st_nlink > 0;
}

void lock_dir::rename(const std::string& from, const std::string& to) const {
    if (::renameat(fd_.get(), from.c_str(), fd_.get(), to.c_str()) == 0) return;
    const int err = errno;
    ::unlinkat(fd_.get(), from.c_str(), 0);
    throw_client_error(err, kBackend, "cannot replace " + path_of(to));
}

void lock_dir::vet_directory(const struct stat& st) const {
    const auto mode = octal(st.st_mode);
    const auto euid = ::geteuid();
    if (!shared()) {
        if (st.st_uid != euid)
            refuse("lock directory " + path_ + " is owned by uid " + std::to_string(st.st_uid) +
                   ", not by this user (uid " + std::to_string(euid) +
                   "): its owner could delete or replace every lock file in it");
        if ((st.st_mode & 022) != 0)
            refuse("lock directory " + path_ + " is writable by its group or others (mode " + mode +
                   "): any of them could delete or replace lock files; chmod go-w it, or share it with its group "
                   "with mode=0660");
        return;
    }
    if ((st.st_mode & 002) != 0)
        refuse("lock directory " + path_ + " is writable by others (mode " + mode +
               "): any of them could delete or replace lock files");
    if ((st.st_mode & S_ISGID) == 0)
        refuse("lock directory " + path_ + " is not setgid (mode " + mode +
               "): mode=0660 needs chmod g+s on it, so that every lock file gets its group");
    if (!in_group(st.st_gid))
        refuse("lock directory " + path_ + " belongs to group " + std::to_string(st.st_gid) +
               ", which this user (uid " + std::to_string(euid) + ") is not in");
}

// Refuses (access_denied_error naming the path and why) a file that is not
// a regular file of ours (or, shared, of our group and closed to others)
// with one name: writing through a planted link, device or second name would
// write another file, opening a FIFO could block, and another user's file is
// theirs to change under us.
void lock_dir::vet(const struct stat& st, const std::string& file) const {
    const auto path = path_of(file);
    if (!S_ISREG(st.st_mode)) refuse(path + " is " + kind_of(st.st_mode) + ", not a lock file");
    if (st.st_nlink > 1)
        refuse(path + " has " + std::to_string(st.st_nlink) + " hard links: it may be another file's second name");
    const auto euid = ::geteuid();
    if (st.st_uid == euid) return;
    if (shared() && st.st_gid == gid_ && (st.st_mode & 0007) == 0) return;  // a member's, closed to others
    refuse(path + " is owned by uid " + std::to_string(st.st_uid) + ", not by this user (uid " + std::to_string(euid) +
           ")" + (shared() ? ", and is not a file of the directory's group closed to others" : ""));
}

// Looks `file` up without following a link and without opening it (O_PATH:
// no FIFO blocks, no device acts), vets it, then opens that very inode
// through /proc (or, without /proc, the name again, compared). A file
// replaced or removed meanwhile (break_lock) is looked up afresh.
std::optional<fd_guard> lock_dir::open(const std::string& file, int flags, bool create) const {
    for (int attempt = 0;; ++attempt) {
        const bool last = attempt == 8;  // a race lost this often is no race: say what failed
        fd_guard probe(::openat(fd_.get(), file.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC));
        if (probe.get() < 0) {
            if (errno != ENOENT) {
                const int error_number = errno;
                throw_client_error(error_number, kBackend, "cannot open lock file " + path_of(file));
            }
            if (!create) return std::nullopt;
            if (auto made = make(file, flags); made.get() >= 0) return made;
            if (errno == EEXIST && !last) continue;  // made by another meanwhile: vet that one
            const int error_number = errno;
            throw_client_error(error_number, kBackend, "cannot create lock file " + path_of(file));
        }
        struct stat st {};
        if (::fstat(probe.get(), &st) != 0) {
            const int error_number = errno;
            throw_client_error(error_number, kBackend, "cannot stat " + path_of(file));
        }
        if (st.st_nlink == 0 && !last) continue;  // replaced since the lookup
        vet(st, file);
        constexpr int how = O_NONBLOCK | O_NOCTTY | O_CLOEXEC;
        fd_guard fd(::open(fd_path(probe.get()).c_str(), flags | how));
        if (fd.get() < 0 && errno == ENOENT) fd.reset(::openat(fd_.get(), file.c_str(), flags | how | O_NOFOLLOW));
        if (fd.get() < 0) {
            if (errno == ENOENT && !last) continue;
            const int error_number = errno;
            throw_client_error(error_number, kBackend, "cannot open lock file " + path_of(file));
        }
        if (settle(fd.get(), file, &st)) return fd;
        if (last) refuse(path_of(file) + " kept being replaced while it was opened");
    }
}

// Whether `fd` is the file vetted as `vetted` (when given); a file of ours
// gets the mode (and, shared, the group) it should have: one made under a
// umask, or 0644 by an older distlock, is closed to others here.
bool lock_dir::settle(int fd, const std::string& file, const struct stat* vetted) const {
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
        const int error_number = errno;
        throw_client_error(error_number, kBackend, "cannot stat " + path_of(file));
    }
    if (vetted != nullptr && (st.st_dev != vetted->st_dev || st.st_ino != vetted->st_ino)) return false;
    if (st.st_uid != ::geteuid()) return true;  // a member's file, vetted: theirs to set
    if ((st.st_mode & 07777) != file_mode_ && ::fchmod(fd, file_mode_) != 0) {
        const int error_number = errno;
        throw_client_error(error_number, kBackend, "cannot set the mode of " + path_of(file));
    }
    if (shared() && st.st_gid != gid_ && ::fchown(fd, static_cast<uid_t>(-1), gid_) != 0) {
        const int error_number = errno;
        throw_client_error(error_number, kBackend, "cannot give " + path_of(file) + " the directory's group");
    }
    return true;
}

}  // namespace distlock::backends::file
