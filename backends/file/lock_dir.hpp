// file:// (file_backend.cpp), inside: the lock directory, the descriptors of
// its files, and a file system's errno as a distlock error.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "distlock/spi/backend.hpp"

namespace distlock::backends::file {

inline constexpr const char* kBackend = "file";

// errno `err` as a distlock error: access_denied, invalid_argument for a path
// that names something other than a directory, else unavailable.
[[noreturn]] void throw_client_error(int err, std::string_view backend, const std::string& what);
// access_denied_error for `why`: a file or directory that is not safe to use.
[[noreturn]] void refuse(const std::string& why);

// A descriptor's own path: reopening it, or watching it with inotify, reaches
// the very inode it holds open, whatever has been renamed since.
std::string fd_path(int fd);

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
    lock_dir(std::string path, mode_t file_mode);

    const std::string& path() const noexcept { return path_; }
    std::string path_of(const std::string& file) const { return path_ + "/" + file; }
    int fd() const noexcept { return fd_.get(); }

    // `file` opened with `flags` (O_RDONLY or O_RDWR), vetted; made when missing.
    fd_guard open_or_make(const std::string& file, int flags) const { return *open(file, flags, true); }
    // The same, nullopt when missing.
    std::optional<fd_guard> open_existing(const std::string& file, int flags) const { return open(file, flags, false); }

    // A new file, never one already there: -1 (errno set) when it cannot be made.
    fd_guard make(const std::string& file, int flags) const;

    // Whether `file` still names the file open as `fd`.
    bool names(int fd, const std::string& file) const;

    // Renames `from` over `to` (removing `from` when that fails).
    void rename(const std::string& from, const std::string& to) const;
    void remove(const std::string& file) const noexcept { ::unlinkat(fd_.get(), file.c_str(), 0); }

private:
    bool shared() const noexcept { return file_mode_ == 0660; }

    void vet_directory(const struct stat& st) const;
    // Refuses a file that is not a regular file of ours (lock_dir.cpp says which).
    void vet(const struct stat& st, const std::string& file) const;
    // `file` looked up, vetted and opened (made when missing and `create`).
    std::optional<fd_guard> open(const std::string& file, int flags, bool create) const;
    // Whether `fd` is the file vetted as `vetted`; gives a file of ours its mode.
    bool settle(int fd, const std::string& file, const struct stat* vetted) const;

    std::string path_;
    mode_t file_mode_;
    gid_t gid_ = 0;  // the directory's group
    fd_guard fd_;
};

}  // namespace distlock::backends::file
