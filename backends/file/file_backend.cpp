// file:///dir — one lock file per name in a directory, locked with flock(2).
// Works across the processes of one host (and across hosts only on a file system
// whose flock is coherent); the kernel releases the lock when the holder dies.
// The fencing counter is kept in the lock file itself and incremented under the
// lock. Lock files are never deleted on release: deleting one while a waiter has
// it open would let two processes lock two different inodes of the same name.
#include <fcntl.h>
#include <poll.h>
#include <sys/file.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <thread>
#include <utility>

#include "distlock/spi/backend.hpp"

namespace distlock::backends::file {
namespace {

using namespace std::chrono_literals;

[[noreturn]] void throw_client_error(const std::string& what, int err) {
    // Denied; a path that names something other than a directory (a file where
    // the URL wants a directory: fix the URL); else the file system failed.
    errc code = (err == EACCES || err == EPERM || err == EROFS) ? errc::access_denied
                : (err == ENOTDIR || err == EEXIST)              ? errc::invalid_argument
                                                                  : errc::unavailable;
    throw_error(code, "file", what, err, std::strerror(err));
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

// Lock name -> file name: [A-Za-z0-9._-] kept, other bytes as %XX; names whose
// encoding would be long are replaced by "sha256-<hex of SHA-256(name)>".
std::string file_name(std::string_view name) {
    static constexpr char digits[] = "0123456789ABCDEF";
    std::string out;
    for (unsigned char c : name) {
        if (std::isalnum(c) || c == '_' || c == '-' || (c == '.' && !out.empty())) out += static_cast<char>(c);
        else {
            out += '%';
            out += digits[c >> 4];
            out += digits[c & 15];
        }
    }
    if (out.size() > 180) out = "sha256-" + spi::sha256_hex(name);
    return out + ".lock";
}

std::uint64_t read_counter(int fd) {
    char buf[32] = {};
    ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
    if (n < 0) throw_client_error("cannot read the lock file's counter", errno);
    std::uint64_t value = 0;
    std::from_chars(buf, buf + n, value);  // empty or garbage = 0
    return value;
}

void write_counter(int fd, std::uint64_t value, bool sync) {
    char buf[32];
    auto [end, ec] = std::to_chars(buf, buf + sizeof buf - 1, value);
    *end++ = '\n';
    auto len = static_cast<std::size_t>(end - buf);
    if (::pwrite(fd, buf, len, 0) != static_cast<ssize_t>(len)) throw_client_error("cannot write the lock file's counter", errno);
    if (sync && ::fdatasync(fd) != 0) throw_client_error("fdatasync of the lock file failed", errno);
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

bool same_file(int fd, const std::string& path) {
    struct stat a {}, b {};
    if (::fstat(fd, &a) != 0 || ::stat(path.c_str(), &b) != 0) return false;
    return a.st_dev == b.st_dev && a.st_ino == b.st_ino && a.st_nlink > 0;
}

struct settings {
    std::filesystem::path dir;
    bool sync = false;
    std::chrono::milliseconds check{200};
};

class handle final : public spi::lock_handle {
public:
    handle(const settings& s, const spi::lock_request& r)
        : settings_(s), name_(r.name), path_((s.dir / file_name(r.name)).string()), retry_max_(r.retry_max) {}

    std::optional<spi::grant> acquire(spi::deadline until, const spi::loss_sink&) override {
        spi::backoff wait(1ms, retry_max_);
        for (;;) {
            fd_guard fd(::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
            if (fd.get() < 0) throw_client_error("cannot open lock file " + path_, errno);
            int watch = -1;
            bool locked = false;
            for (;;) {
                if (::flock(fd.get(), LOCK_EX | LOCK_NB) == 0) {
                    locked = true;
                    break;
                }
                if (errno != EWOULDBLOCK && errno != EINTR) throw_client_error("flock failed on " + path_, errno);
                if (spi::clock::now() >= until) {
                    unwatch(watch);
                    return std::nullopt;
                }
                // Wait for the holder to close the file (release or death), or for
                // the file to be replaced; poll slowly as a safety net.
                if (watch < 0 && inotify_fd() >= 0) {
                    watch = ::inotify_add_watch(inotify_.get(), path_.c_str(),
                                                IN_CLOSE_WRITE | IN_ATTRIB | IN_DELETE_SELF | IN_MOVE_SELF);
                    if (watch >= 0) continue;  // a release before the watch existed would be missed: retry now
                }
                auto delay = std::chrono::duration_cast<std::chrono::milliseconds>(wait.next(until));
                if (watch >= 0) {
                    pollfd p{inotify_.get(), POLLIN, 0};
                    if (::poll(&p, 1, static_cast<int>(delay.count()) + 1) > 0) drain();
                } else {
                    std::this_thread::sleep_for(delay);
                }
                if (!same_file(fd.get(), path_)) break;  // replaced (break_lock) or unlinked: wait on the new file
            }
            unwatch(watch);
            if (!locked || !same_file(fd.get(), path_)) continue;  // the path now names another file: start over
            std::uint64_t token = next_token(read_counter(fd.get()));
            write_counter(fd.get(), token, settings_.sync);
            fd_ = std::move(fd);
            return spi::grant{token, spi::clock::now()};  // no lease: the kernel holds it
        }
    }

    void release() override {
        fd_guard fd = std::move(fd_);
        if (fd.get() < 0) throw_error(errc::not_owner, "file", "lock '" + name_ + "' is not held by this handle");
        bool ours = same_file(fd.get(), path_);
        ::flock(fd.get(), LOCK_UN);
        fd.reset();  // the close wakes waiters (IN_CLOSE_WRITE)
        if (!ours)
            throw_error(errc::not_owner, "file", "lock file " + path_ + " was replaced while held: the lock was lost");
    }

    std::chrono::milliseconds check_interval() const override { return settings_.check; }

    // Still ours: the path still names the file we hold the lock on.
    spi::keepalive_result check() const {
        if (!same_file(fd_.get(), path_))
            return spi::keepalive_result::lost("lock file " + path_ + " was removed or replaced");
        return spi::keepalive_result::ok();
    }

private:
    // One inotify instance per handle, kept for its lifetime: closing an inotify
    // descriptor waits for an RCU grace period (~10-20 ms), far too slow to do
    // on every acquisition.
    int inotify_fd() {
        if (inotify_.get() < 0) inotify_.reset(::inotify_init1(IN_CLOEXEC | IN_NONBLOCK));
        return inotify_.get();
    }
    void drain() {
        char events[4096];
        while (::read(inotify_.get(), events, sizeof events) > 0) {
        }
    }
    void unwatch(int watch) {
        if (watch < 0) return;
        ::inotify_rm_watch(inotify_.get(), watch);
        drain();
    }

    const settings& settings_;
    std::string name_, path_;
    std::chrono::milliseconds retry_max_;
    fd_guard fd_;
    fd_guard inotify_;
};

class backend final : public spi::backend {
public:
    explicit backend(settings s) : settings_(std::move(s)) {
        caps_.unsupported = {
            {feature::lease_expiry, "no leases: the kernel holds the lock until unlock or process exit"},
            {feature::notified_wakeup, "waiters wake on inotify close events, with slow polling as a safety net"},
        };
        // Read-write locks and semaphores: not built for this backend yet (issue 13).
        caps_.unsupported.emplace(feature::read_write, "not implemented for this backend yet");
        caps_.unsupported.emplace(feature::semaphore, "not implemented for this backend yet");
        caps_.unsupported.emplace(feature::permit_limit, "no semaphores on this backend yet");
        caps_.crash_release_bound = 0ms;
    }
    std::string_view name() const noexcept override { return "file"; }
    const capabilities& caps() const noexcept override { return caps_; }
    std::unique_ptr<spi::lock_handle> make_lock(const spi::lock_request& r) override {
        return std::make_unique<handle>(settings_, r);
    }
    void keepalive_batch(std::span<spi::lock_handle* const> handles, std::span<spi::keepalive_result> results) override {
        for (std::size_t i = 0; i < handles.size(); ++i) results[i] = static_cast<const handle*>(handles[i])->check();
    }
    // Replaces the lock file by a fresh one that keeps the counter, so the holder
    // (still locking the old inode) learns of the loss and tokens keep increasing.
    void break_lock(std::string_view name) override {
        auto path = (settings_.dir / file_name(name)).string();
        std::uint64_t counter = 0;
        if (fd_guard old(::open(path.c_str(), O_RDONLY | O_CLOEXEC)); old.get() >= 0) counter = read_counter(old.get());
        auto tmp = path + ".break-" + spi::random_token();
        fd_guard fresh(::open(tmp.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
        if (fresh.get() < 0) throw_client_error("cannot create " + tmp, errno);
        write_counter(fresh.get(), counter, settings_.sync);
        if (::rename(tmp.c_str(), path.c_str()) != 0) throw_client_error("cannot replace " + path, errno);
    }

private:
    settings settings_;
    capabilities caps_;
};

}  // namespace

void register_backend(spi::registry& r) {
    r.add("file", [](spi::url& u) -> std::shared_ptr<spi::backend> {
        if (!u.hosts().empty() && u.hosts()[0].host != "localhost")
            throw_error(errc::invalid_argument, "file", "file:// URLs name a local directory: file:///path/to/dir");
        if (u.path().empty() || u.path() == "/")
            throw_error(errc::invalid_argument, "file", "file:// needs a directory: file:///path/to/dir");
        settings s;
        s.dir = u.path();
        s.sync = u.take_bool("sync").value_or(false);
        s.check = u.take_duration("check").value_or(200ms);
        if (s.check.count() <= 0) throw_error(errc::invalid_argument, "file", "check must be positive");
        std::error_code ec;
        std::filesystem::create_directories(s.dir, ec);
        if (ec) throw_client_error("cannot use directory " + s.dir.string(), ec.value());  // EACCES, EPERM, EROFS: denied
        if (!std::filesystem::is_directory(s.dir))
            throw_error(errc::invalid_argument, "file", s.dir.string() + " exists and is not a directory");
        if (::access(s.dir.c_str(), R_OK | W_OK | X_OK) != 0) throw_client_error("cannot write in " + s.dir.string(), errno);
        return std::make_shared<backend>(std::move(s));
    });
}

}  // namespace distlock::backends::file
