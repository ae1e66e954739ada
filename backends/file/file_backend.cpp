// file:///dir — one lock file per name in a directory, locked with flock(2).
// Works across the processes of one host (and across hosts only on a file system
// whose flock is coherent); the kernel releases the lock when the holder dies.
// The fencing counter is kept in the lock file itself and incremented under the
// lock. Lock files are never deleted on release: deleting one while a waiter has
// it open would let two processes lock two different inodes of the same name.
//
// Read-write lock: `<name>.rw` flocked shared by readers, exclusive by a
// writer, entered through the turnstile `<name>.rw-turn` (flocked exclusive on
// the way in, and holding the counter), which a writer keeps while it waits for
// the readers inside: readers that come after a waiting writer wait behind it.
// Semaphore of N: slot files `<name>.sem-0` .. `<name>.sem-<N-1>`, one flocked
// per permit, taken under the meta file `<name>.sem` ("<size> <counter>"), where
// the size is checked against the holders'.
//
// The directory may be shared with hostile local users (see "What file://
// refuses" in docs/backends/embedded.md): it is opened once at connect, checked,
// and every file is reached relative to that descriptor, so that a directory
// renamed or replaced by a link later never moves the locks. Every file is
// vetted before it is opened for reading or writing: a link, FIFO, device,
// second name of another file, or another user's file is refused, never written.
#include <fcntl.h>
#include <poll.h>
#include <sys/file.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "distlock/spi/backend.hpp"

namespace distlock::backends::file {
namespace {

using namespace std::chrono_literals;

constexpr const char* kBackend = "file";

[[noreturn]] void throw_client_error(int err, std::string_view backend, const std::string& what) {
    // Denied; a path that names something other than a directory (a file where
    // the URL wants a directory: fix the URL); else the file system failed.
    errc code = (err == EACCES || err == EPERM || err == EROFS)            ? errc::access_denied
                : (err == ENOTDIR || err == EEXIST || err == ENAMETOOLONG) ? errc::invalid_argument
                                                                           : errc::unavailable;
    throw_error(code, std::string(backend), what, err, std::strerror(err));
}

class fd_guard {
public:
    explicit fd_guard(int fd = -1) noexcept : fd_(fd) {}
    fd_guard(fd_guard&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
    fd_guard& operator=(fd_guard&& o) noexcept {
        reset(std::exchange(o.fd_, -1));
        return *this;
    }
    ~fd_guard() { reset(); }
    void reset(int fd = -1) noexcept {
        if (fd_ >= 0) ::close(fd_);
        fd_ = fd;
    }
    int get() const noexcept { return fd_; }

private:
    int fd_;
};

// Lock name -> file name, byte for byte whatever the process locale:
// [A-Za-z0-9_-] kept, '.' kept unless first (no name is "." or ".."), other
// bytes as %XX; a name whose encoding would be long is replaced by
// "sha256-<hex of SHA-256(name)>". The one literal name of that very form
// ("sha256-" and 64 lowercase hex digits) would then share a hashed name's file:
// its 's' is written %73 instead, which the encoding never makes (it escapes no
// letter), so the two images are disjoint and every other name keeps its file.
std::string file_name(std::string_view name) {
    static constexpr char digits[] = "0123456789ABCDEF";
    std::string out;
    for (unsigned char c : name) {
        if (spi::ascii_alnum(static_cast<char>(c)) || c == '_' || c == '-' || (c == '.' && !out.empty()))
            out += static_cast<char>(c);
        else {
            out += '%';
            out += digits[c >> 4];
            out += digits[c & 15];
        }
    }
    constexpr std::string_view hashed = "sha256-";
    const auto is_hex = [](char c) { return spi::ascii_digit(c) || (c >= 'a' && c <= 'f'); };
    if (out.size() > 180) out = std::string(hashed) + spi::sha256_hex(name);
    else if (out.size() == hashed.size() + 64 && out.starts_with(hashed) &&
             std::all_of(out.begin() + hashed.size(), out.end(), is_hex))
        out.replace(0, 1, "%73");
    return out + ".lock";
}

std::uint64_t read_counter(int fd) {
    char buf[32] = {};
    ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
    if (n < 0) {
        const int error_number = errno;
        throw_client_error(error_number, kBackend, "cannot read the lock file's counter");
    }
    std::uint64_t value = 0;
    std::from_chars(buf, buf + n, value);  // empty or garbage = 0
    return value;
}

// "<value>\n", or "<value> <label>\n" with the holder's label (a mutex's lock
// file: provider::inspect reads it back).
void write_counter(int fd, std::uint64_t value, bool sync, std::string_view label = {}) {
    std::string text = std::to_string(value);
    if (!label.empty()) text.append(" ").append(label);
    text += '\n';
    if (::pwrite(fd, text.data(), text.size(), 0) != static_cast<ssize_t>(text.size()) ||
        (!label.empty() && ::ftruncate(fd, static_cast<off_t>(text.size())) != 0)) {
        const int error_number = errno;
        throw_client_error(error_number, kBackend, "cannot write the lock file's counter");
    }
    if (sync && ::fdatasync(fd) != 0) {
        const int error_number = errno;
        throw_client_error(error_number, kBackend, "fdatasync of the lock file failed");
    }
}

// The label after the counter in a lock file ("" when none: an older distlock's).
std::string read_label(int fd) {
    char buf[320] = {};
    ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
    if (n < 0) {
        const int error_number = errno;
        throw_client_error(error_number, kBackend, "cannot read the lock file");
    }
    std::string_view text(buf, static_cast<std::size_t>(n));
    const auto space = text.find(' ');
    if (space == std::string_view::npos) return {};
    text.remove_prefix(space + 1);
    return std::string(text.substr(0, text.find('\n')));
}

// The token after `stored`. A lock file without a counter (new, or deleted and
// made again) starts from the wall clock in microseconds, past every token
// handed out before as long as fewer than a million grants a second were made
// and the clock was not set back: deleting a lock file (or the directory) never
// makes a token repeat.
std::uint64_t next_token(std::uint64_t stored) {
    if (stored != 0) return stored + 1;
    const auto now = std::chrono::system_clock::now().time_since_epoch();
    return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(now).count()) + 1;
}

[[noreturn]] void refuse(const std::string& why) { throw_error(errc::access_denied, kBackend, why); }

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

// A descriptor's own path: reopening it, or watching it with inotify, reaches
// the very inode it holds open, whatever has been renamed since.
std::string fd_path(int fd) { return "/proc/self/fd/" + std::to_string(fd); }

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

// The lock directory, held open from connect on: every file is reached relative
// to it (openat, fstatat, renameat), and vetted before it is opened.
//
// Who may share it: with mode=0600 (the default) the effective user alone, who
// owns the directory, which nobody else can write, and every file in it; with
// mode=0660, the members of the directory's group: it must be setgid (every file
// gets its group), in one of the effective user's groups, writable by nobody
// outside the group, and a file of another member is accepted when it has the
// directory's group and nothing for others. Only a member (or root) can have
// given the directory that group, so its owner is one too. Root is held to the
// same rules: a file another user planted is refused for root as for anyone.
class lock_dir {
public:
    lock_dir(std::string path, mode_t file_mode) : path_(std::move(path)), file_mode_(file_mode) {
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

    const std::string& path() const noexcept { return path_; }
    std::string path_of(const std::string& file) const { return path_ + "/" + file; }
    int fd() const noexcept { return fd_.get(); }

    // `file` opened with `flags` (O_RDONLY or O_RDWR), vetted; made when missing.
    fd_guard open_or_make(const std::string& file, int flags) const { return *open(file, flags, true); }
    // The same, nullopt when missing.
    std::optional<fd_guard> open_existing(const std::string& file, int flags) const { return open(file, flags, false); }

    // A new file, never one already there: -1 (errno set) when it cannot be made.
    fd_guard make(const std::string& file, int flags) const {
        fd_guard fd(::openat(fd_.get(), file.c_str(), flags | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, file_mode_));
        if (fd.get() >= 0) settle(fd.get(), file, nullptr);
        return fd;
    }

    // Whether `file` still names the file open as `fd`.
    bool names(int fd, const std::string& file) const {
        struct stat a {
        }, b{};
        if (::fstat(fd, &a) != 0 || ::fstatat(fd_.get(), file.c_str(), &b, AT_SYMLINK_NOFOLLOW) != 0) return false;
        return a.st_dev == b.st_dev && a.st_ino == b.st_ino && a.st_nlink > 0;
    }

    // Renames `from` over `to` (removing `from` when that fails).
    void rename(const std::string& from, const std::string& to) const {
        if (::renameat(fd_.get(), from.c_str(), fd_.get(), to.c_str()) == 0) return;
        const int err = errno;
        ::unlinkat(fd_.get(), from.c_str(), 0);
        throw_client_error(err, kBackend, "cannot replace " + path_of(to));
    }
    void remove(const std::string& file) const noexcept { ::unlinkat(fd_.get(), file.c_str(), 0); }

private:
    bool shared() const noexcept { return file_mode_ == 0660; }

    void vet_directory(const struct stat& st) const {
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
    void vet(const struct stat& st, const std::string& file) const {
        const auto path = path_of(file);
        if (!S_ISREG(st.st_mode)) refuse(path + " is " + kind_of(st.st_mode) + ", not a lock file");
        if (st.st_nlink > 1)
            refuse(path + " has " + std::to_string(st.st_nlink) + " hard links: it may be another file's second name");
        const auto euid = ::geteuid();
        if (st.st_uid == euid) return;
        if (shared() && st.st_gid == gid_ && (st.st_mode & 0007) == 0) return;  // a member's, closed to others
        refuse(path + " is owned by uid " + std::to_string(st.st_uid) + ", not by this user (uid " +
               std::to_string(euid) + ")" +
               (shared() ? ", and is not a file of the directory's group closed to others" : ""));
    }

    // Looks `file` up without following a link and without opening it (O_PATH:
    // no FIFO blocks, no device acts), vets it, then opens that very inode
    // through /proc (or, without /proc, the name again, compared). A file
    // replaced or removed meanwhile (break_lock) is looked up afresh.
    std::optional<fd_guard> open(const std::string& file, int flags, bool create) const {
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
    bool settle(int fd, const std::string& file, const struct stat* vetted) const {
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

    std::string path_;
    mode_t file_mode_;
    gid_t gid_ = 0;  // the directory's group
    fd_guard fd_;
};

struct settings {
    lock_dir dir;
    bool sync = false;
    std::chrono::milliseconds check{200};
};

// The files of one name: the mutex's lock file; the read-write lock's data
// file (readers hold it shared, a writer exclusive) and its turnstile (held
// exclusive for a moment by every reader and writer on its way in, and holding
// the read-write lock's counter); the semaphore's slot files and its meta file
// (its size and counter). Names of files in the lock directory.
struct paths {
    std::string mutex, rw_data, rw_turn, sem_meta;
    std::string slot(std::uint32_t i) const { return sem_meta + "-" + std::to_string(i); }
};

paths paths_of(std::string_view name) {
    const auto base = file_name(name);  // ends in ".lock"
    const auto stem = base.substr(0, base.size() - 5);
    return {base, stem + ".rw", stem + ".rw-turn", stem + ".sem"};
}

// Waits for the holders of a file to close it (release or death), or for it to
// be replaced: inotify on the file, slow polling as a safety net.
class file_waiter {
public:
    // Opens `file` of `dir` (made if missing) and flocks it with `op` (LOCK_EX or
    // LOCK_SH) before `until`: the open file, or nullopt when the deadline passed.
    // A file replaced while waiting (break_lock) is waited on afresh.
    std::optional<fd_guard> lock(const lock_dir& dir, const std::string& file, int op, spi::deadline until,
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

    // Whether a lock() since the last call found the file held by another.
    bool take_waited() noexcept { return std::exchange(waited_, false); }

    // Until something in `dir` is closed after writing, or `delay` passed.
    void wait_in(const lock_dir& dir, std::chrono::nanoseconds delay) {
        waited_ = true;
        int watch =
            inotify_fd() >= 0 ? ::inotify_add_watch(inotify_.get(), fd_path(dir.fd()).c_str(), IN_CLOSE_WRITE) : -1;
        sleep(watch, delay);
        unwatch(watch);
    }

private:
    void sleep(int watch, std::chrono::nanoseconds d) {
        auto delay = std::chrono::duration_cast<std::chrono::milliseconds>(d);
        if (watch >= 0) {
            pollfd p{inotify_.get(), POLLIN, 0};
            if (::poll(&p, 1, static_cast<int>(delay.count()) + 1) > 0) drain();
        } else {
            std::this_thread::sleep_for(delay);
        }
    }
    // One inotify instance per handle, kept for its lifetime: closing an inotify
    // descriptor waits for an RCU grace period (~10-20 ms), far too slow to do
    // on every acquisition.
    int inotify_fd() {
        if (inotify_.get() < 0) inotify_.reset(::inotify_init1(IN_CLOEXEC | IN_NONBLOCK));
        return inotify_.get();
    }
    void drain() {
        char events[4096];
        while (::read(inotify_.get(), events, sizeof events) > 0) {}
    }
    void unwatch(int watch) {
        if (watch < 0) return;
        ::inotify_rm_watch(inotify_.get(), watch);
        drain();
    }
    fd_guard inotify_;
    bool waited_ = false;
};

// The semaphore's meta file: "<size> <counter>\n".
struct sem_meta {
    std::uint32_t size = 0;
    std::uint64_t counter = 0;
};

sem_meta read_meta(int fd) {
    char buf[64] = {};
    ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
    if (n < 0) {
        const int error_number = errno;
        throw_client_error(error_number, kBackend, "cannot read the semaphore's file");
    }
    sem_meta m;
    const char* end = buf + n;
    auto r = std::from_chars(buf, end, m.size);
    if (r.ec == std::errc{} && r.ptr < end && *r.ptr == ' ') std::from_chars(r.ptr + 1, end, m.counter);
    return m;
}

void write_meta(int fd, const sem_meta& m, bool sync) {
    const auto text = std::to_string(m.size) + " " + std::to_string(m.counter) + "\n";
    if (::pwrite(fd, text.data(), text.size(), 0) != static_cast<ssize_t>(text.size()) ||
        ::ftruncate(fd, text.size()) != 0) {
        const int error_number = errno;
        throw_client_error(error_number, kBackend, "cannot write the semaphore's file");
    }
    if (sync && ::fdatasync(fd) != 0) {
        const int error_number = errno;
        throw_client_error(error_number, kBackend, "fdatasync of the semaphore's file failed");
    }
}

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

    std::optional<spi::grant> acquire(spi::deadline until, const spi::loss_sink&) override {
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

    void release() override {
        fd_guard fd = std::move(fd_);
        if (fd.get() < 0) throw_error(errc::not_owner, kBackend, "lock '" + name_ + "' is not held by this handle");
        bool ours = settings_.dir.names(fd.get(), held_file_);
        ::flock(fd.get(), LOCK_UN);
        fd.reset();  // the close wakes waiters (IN_CLOSE_WRITE)
        if (!ours)
            throw_error(
                errc::not_owner, kBackend,
                "lock file " + settings_.dir.path_of(held_file_) + " was replaced while held: the lock was lost");
    }

    std::chrono::milliseconds check_interval() const override { return settings_.check; }

    // Still ours: the path still names the file we hold the lock on.
    spi::keepalive_result check() const {
        if (!settings_.dir.names(fd_.get(), held_file_))
            return spi::keepalive_result::lost("lock file " + settings_.dir.path_of(held_file_) +
                                               " was removed or replaced");
        return spi::keepalive_result::ok();
    }

private:
    spi::grant hold(fd_guard fd, const std::string& file, std::uint64_t token) {
        fd_ = std::move(fd);
        held_file_ = file;
        return spi::grant{token, spi::clock::now(), waiter_.take_waited()};  // no lease: the kernel holds it
    }

    // Under the meta file's lock: check the size, then take the first free slot
    // of 0..permits-1 and count the grant; else wait for a close in the directory.
    std::optional<spi::grant> take_permit(spi::deadline until, spi::backoff& wait) {
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
};

class backend final : public spi::backend {
public:
    explicit backend(settings s) : settings_(std::move(s)) {
        caps_.unsupported = {
            {feature::lease_expiry, "no leases: the kernel holds the lock until unlock or process exit"},
            {feature::notified_wakeup, "waiters wake on inotify close events, with slow polling as a safety net"},
        };
        caps_.implements = {feature::read_write, feature::semaphore, feature::permit_limit, feature::inspect};
        caps_.crash_release_bound = 0ms;
    }
    std::string_view name() const noexcept override { return kBackend; }
    const capabilities& caps() const noexcept override { return caps_; }
    std::unique_ptr<spi::lock_handle> make_lock(const spi::lock_request& r) override {
        return std::make_unique<handle>(settings_, r);
    }
    void keepalive_batch(std::span<spi::lock_handle* const> handles,
                         std::span<spi::keepalive_result> results) override {
        for (std::size_t i = 0; i < handles.size(); ++i) results[i] = static_cast<const handle*>(handles[i])->check();
    }
    // The mutex's lock file: held when a shared flock of it conflicts; the
    // holder's label and token are what it wrote there.
    lock_info inspect(std::string_view name, spi::lock_kind) override {
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

    // Replaces the lock files of every primitive of `name` by fresh ones that keep
    // their counters, so that holders (still locking the old inodes) learn of
    // the loss and tokens keep increasing. Only files of the directory, vetted:
    // a planted one is refused, not replaced.
    void break_lock(std::string_view name) override {
        const auto p = paths_of(name);
        replace(p.mutex, true);
        replace(p.rw_data, false);
        auto meta = settings_.dir.open_existing(p.sem_meta, O_RDONLY);
        const auto size = meta ? read_meta(meta->get()).size : 0;
        // The first slot never made ends them, as in take_permit.
        for (std::uint32_t i = 0; i < size && replace(p.slot(i), false); ++i) {}
    }

private:
    // A fresh file in place of `file` (when one is there, or always for a file
    // holding a counter), with the old one's counter; whether one was made.
    bool replace(const std::string& file, bool counter_inside) {
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

    settings settings_;
    capabilities caps_;
};

// mode=0600 (the default: the effective user's alone) or 0660 (shared with the
// lock directory's group). No other: a file others could open, they could
// flock for ever (read access is enough), and one they could write, rewrite.
mode_t take_mode(spi::url& u) {
    const auto text = u.take("mode");
    if (!text || *text == "0600" || *text == "600") return 0600;
    if (*text == "0660" || *text == "660") return 0660;
    throw_error(errc::invalid_argument, kBackend,
                "mode must be 0600 (the default: this user's files only) or 0660 (shared with the lock directory's "
                "group): a lock file that others can open, they can block");
}

}  // namespace

void register_backend(spi::registry& r) {
    r.add("file", [](spi::url& u) -> std::shared_ptr<spi::backend> {
        if (!u.hosts().empty() && u.hosts()[0].host != "localhost")
            throw_error(errc::invalid_argument, kBackend, "file:// URLs name a local directory: file:///path/to/dir");
        if (u.path().empty() || u.path() == "/")
            throw_error(errc::invalid_argument, kBackend, "file:// needs a directory: file:///path/to/dir");
        // %00 decodes to a NUL, where every system call would cut the path short.
        if (u.path().find('\0') != std::string::npos)
            throw_error(errc::invalid_argument, kBackend, "a file:// path cannot hold a NUL byte (%00)");
        // The kernel would resolve them, through whatever links the path holds.
        if (spi::has_dot_segment(u.path()))
            throw_error(errc::invalid_argument, kBackend,
                        "a file:// path cannot have '.' or '..' segments: name the directory");
        const bool sync = u.take_bool("sync").value_or(false);
        const auto check = u.take_duration("check").value_or(200ms);
        if (check.count() <= 0) throw_error(errc::invalid_argument, kBackend, "check must be positive");
        const auto mode = take_mode(u);
        settings s{lock_dir(u.path(), mode), sync, check};
        return std::make_shared<backend>(std::move(s));
    });
}

}  // namespace distlock::backends::file
