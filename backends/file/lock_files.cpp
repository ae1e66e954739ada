// file:// (file_backend.cpp): the lock files of a name, their names and what
// they hold (a counter and the holder's label; a semaphore's size and counter).
#include "lock_files.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>

#include "lock_dir.hpp"

namespace distlock::backends::file {

namespace {

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

}  // namespace

paths paths_of(std::string_view name) {
    const auto base = file_name(name);  // ends in ".lock"
    const auto stem = base.substr(0, base.size() - 5);
    return {base, stem + ".rw", stem + ".rw-turn", stem + ".sem"};
}

namespace {

// The first bytes of a lock file (at most N - 1: the rest is never read).
template <std::size_t N>
std::string_view read_head(int fd, char (&buf)[N], const char* what) {
    const ssize_t n = ::pread(fd, buf, N - 1, 0);
    if (n < 0) {
        const int error_number = errno;
        throw_client_error(error_number, kBackend, what);
    }
    return {buf, static_cast<std::size_t>(n)};
}

}  // namespace

std::uint64_t read_counter(int fd) {
    char buf[32] = {};
    const auto text = read_head(fd, buf, "cannot read the lock file's counter");
    std::uint64_t value = 0;
    std::from_chars(text.data(), text.data() + text.size(), value);  // empty or garbage = 0
    return value;
}

void write_counter(int fd, std::uint64_t value, bool sync, std::string_view label) {
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

std::string read_label(int fd) {
    char buf[320] = {};
    auto text = read_head(fd, buf, "cannot read the lock file");
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

}  // namespace distlock::backends::file
