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
#include <optional>
#include <string>
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

// "<value>\n", or "<value> <label>\n" with the holder's label (a mutex's lock
// file: provider::inspect reads it back).
void write_counter(int fd, std::uint64_t value, bool sync, std::string_view label = {}) {
    std::string text = std::to_string(value);
    if (!label.empty()) text.append(" ").append(label);
    text += '\n';
    if (::pwrite(fd, text.data(), text.size(), 0) != static_cast<ssize_t>(text.size()) ||
        (!label.empty() && ::ftruncate(fd, static_cast<off_t>(text.size())) != 0))
        throw_client_error("cannot write the lock file's counter", errno);
    if (sync && ::fdatasync(fd) != 0) throw_client_error("fdatasync of the lock file failed", errno);
}

// The label after the counter in a lock file ("" when none: an older distlock's).
std::string read_label(int fd) {
    char buf[320] = {};
    ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
    if (n < 0) throw_client_error("cannot read the lock file", errno);
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

// The files of one name: the mutex's lock file; the read-write lock's data
// file (readers hold it shared, a writer exclusive) and its turnstile (held
// exclusive for a moment by every reader and writer on its way in, and holding
// the read-write lock's counter); the semaphore's slot files and its meta file
// (its size and counter).
struct paths {
    std::string mutex, rw_data, rw_turn, sem_meta;
    std::string slot(std::uint32_t i) const { return sem_meta + "-" + std::to_string(i); }
};

paths paths_of(const std::filesystem::path& dir, std::string_view name) {
    const auto base = (dir / file_name(name)).string();  // ends in ".lock"
    const auto stem = base.substr(0, base.size() - 5);
    return {base, stem + ".rw", stem + ".rw-turn", stem + ".sem"};
}

// Waits for the holders of a file to close it (release or death), or for it to
// be replaced: inotify on the file, slow polling as a safety net.
class file_waiter {
public:
    // Opens `path` (made if missing) and flocks it with `op` (LOCK_EX or LOCK_SH)
    // before `until`: the open file, or nullopt when the deadline passed. A file
    // replaced while waiting (break_lock) is waited on afresh.
    std::optional<fd_guard> lock(const std::string& path, int op, spi::deadline until, spi::backoff& wait) {
        for (;;) {
            fd_guard fd(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
            if (fd.get() < 0) throw_client_error("cannot open lock file " + path, errno);
            int watch = -1;
            bool locked = false;
            for (;;) {
                if (::flock(fd.get(), op | LOCK_NB) == 0) {
                    locked = true;
                    break;
                }
                if (errno != EWOULDBLOCK && errno != EINTR) throw_client_error("flock failed on " + path, errno);
                waited_ = true;
                if (spi::clock::now() >= until) {
                    unwatch(watch);
                    return std::nullopt;
                }
                if (watch < 0 && inotify_fd() >= 0) {
                    watch = ::inotify_add_watch(inotify_.get(), path.c_str(),
                                                IN_CLOSE_WRITE | IN_ATTRIB | IN_DELETE_SELF | IN_MOVE_SELF);
                    if (watch >= 0) continue;  // a release before the watch existed would be missed: retry now
                }
                sleep(watch, wait.next(until));
                if (!same_file(fd.get(), path)) break;  // replaced (break_lock) or unlinked: wait on the new file
            }
            unwatch(watch);
            if (locked && same_file(fd.get(), path)) return fd;
        }
    }

    // Whether a lock() since the last call found the file held by another.
    bool take_waited() noexcept { return std::exchange(waited_, false); }

    // Until something in `dir` is closed after writing, or `delay` passed.
    void wait_in(const std::string& dir, std::chrono::nanoseconds delay) {
        waited_ = true;
        int watch = inotify_fd() >= 0 ? ::inotify_add_watch(inotify_.get(), dir.c_str(), IN_CLOSE_WRITE) : -1;
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
        while (::read(inotify_.get(), events, sizeof events) > 0) {
        }
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
    if (n < 0) throw_client_error("cannot read the semaphore's file", errno);
    sem_meta m;
    const char* end = buf + n;
    auto r = std::from_chars(buf, end, m.size);
    if (r.ec == std::errc{} && r.ptr < end && *r.ptr == ' ') std::from_chars(r.ptr + 1, end, m.counter);
    return m;
}

void write_meta(int fd, const sem_meta& m, bool sync) {
    const auto text = std::to_string(m.size) + " " + std::to_string(m.counter) + "\n";
    if (::pwrite(fd, text.data(), text.size(), 0) != static_cast<ssize_t>(text.size()) || ::ftruncate(fd, text.size()) != 0)
        throw_client_error("cannot write the semaphore's file", errno);
    if (sync && ::fdatasync(fd) != 0) throw_client_error("fdatasync of the semaphore's file failed", errno);
}

// Whether someone holds slot `path` (a flock that conflicts with ours).
bool slot_held(const std::string& path) {
    fd_guard fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (fd.get() < 0) return false;  // never made: nobody holds it
    if (::flock(fd.get(), LOCK_SH | LOCK_NB) == 0) return false;
    if (errno != EWOULDBLOCK) throw_client_error("flock failed on " + path, errno);
    return true;
}

class handle final : public spi::lock_handle {
public:
    handle(const settings& s, const spi::lock_request& r)
        : settings_(s),
          name_(r.name),
          paths_(paths_of(s.dir, r.name)),
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
                auto fd = waiter_.lock(paths_.mutex, LOCK_EX, until, wait);
                if (!fd) return std::nullopt;
                std::uint64_t token = next_token(read_counter(fd->get()));
                write_counter(fd->get(), token, settings_.sync, holder_);
                return hold(std::move(*fd), paths_.mutex, token);
            }
            case spi::lock_kind::read:
            case spi::lock_kind::write: {
                // Through the turnstile: a writer keeps it while it waits for the
                // readers inside to leave, so readers that come after it wait.
                auto turn = waiter_.lock(paths_.rw_turn, LOCK_EX, until, wait);
                if (!turn) return std::nullopt;
                auto fd = waiter_.lock(paths_.rw_data, kind_ == spi::lock_kind::read ? LOCK_SH : LOCK_EX, until, wait);
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
        if (fd.get() < 0) throw_error(errc::not_owner, "file", "lock '" + name_ + "' is not held by this handle");
        bool ours = same_file(fd.get(), held_path_);
        ::flock(fd.get(), LOCK_UN);
        fd.reset();  // the close wakes waiters (IN_CLOSE_WRITE)
        if (!ours)
            throw_error(errc::not_owner, "file", "lock file " + held_path_ + " was replaced while held: the lock was lost");
    }

    std::chrono::milliseconds check_interval() const override { return settings_.check; }

    // Still ours: the path still names the file we hold the lock on.
    spi::keepalive_result check() const {
        if (!same_file(fd_.get(), held_path_))
            return spi::keepalive_result::lost("lock file " + held_path_ + " was removed or replaced");
        return spi::keepalive_result::ok();
    }

private:
    spi::grant hold(fd_guard fd, const std::string& path, std::uint64_t token) {
        fd_ = std::move(fd);
        held_path_ = path;
        return spi::grant{token, spi::clock::now(), waiter_.take_waited()};  // no lease: the kernel holds it
    }

    // Under the meta file's lock: check the size, then take the first free slot
    // of 0..permits-1 and count the grant; else wait for a close in the directory.
    std::optional<spi::grant> take_permit(spi::deadline until, spi::backoff& wait) {
        for (;;) {
            auto meta_fd = waiter_.lock(paths_.sem_meta, LOCK_EX, until, wait);
            if (!meta_fd) return std::nullopt;
            auto meta = read_meta(meta_fd->get());
            if (meta.size != permits_) {
                for (std::uint32_t i = 0; i < meta.size; ++i)
                    if (slot_held(paths_.slot(i)))
                        throw_error(errc::invalid_argument, "file",
                                    "semaphore '" + name_ + "' is held with " + std::to_string(meta.size) +
                                        " permits; this one asks for " + std::to_string(permits_));
                meta.size = permits_;  // nobody holds it: the size is the new one's
            }
            for (std::uint32_t i = 0; i < permits_; ++i) {
                const auto path = paths_.slot(i);
                fd_guard slot(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
                if (slot.get() < 0) throw_client_error("cannot open lock file " + path, errno);
                if (::flock(slot.get(), LOCK_EX | LOCK_NB) != 0) {
                    if (errno != EWOULDBLOCK) throw_client_error("flock failed on " + path, errno);
                    continue;
                }
                meta.counter = next_token(meta.counter);
                write_meta(meta_fd->get(), meta, settings_.sync);
                return hold(std::move(slot), path, meta.counter);
            }
            meta_fd.reset();
            if (spi::clock::now() >= until) return std::nullopt;
            waiter_.wait_in(settings_.dir.string(), wait.next(until));
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
    std::string held_path_;
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
    std::string_view name() const noexcept override { return "file"; }
    const capabilities& caps() const noexcept override { return caps_; }
    std::unique_ptr<spi::lock_handle> make_lock(const spi::lock_request& r) override {
        return std::make_unique<handle>(settings_, r);
    }
    void keepalive_batch(std::span<spi::lock_handle* const> handles, std::span<spi::keepalive_result> results) override {
        for (std::size_t i = 0; i < handles.size(); ++i) results[i] = static_cast<const handle*>(handles[i])->check();
    }
    // The mutex's lock file: held when a shared flock of it conflicts; the
    // holder's label and token are what it wrote there.
    lock_info inspect(std::string_view name, spi::lock_kind) override {
        lock_info info;
        info.unknown.emplace("waiters", "flock(2) does not tell how many processes wait");
        const auto path = paths_of(settings_.dir, name).mutex;
        fd_guard fd(::open(path.c_str(), O_RDWR | O_CLOEXEC));  // closing it wakes waiters (IN_CLOSE_WRITE)
        if (fd.get() < 0) {
            if (errno != ENOENT) throw_client_error("cannot open lock file " + path, errno);
            info.held = false;  // never made: never held
            return info;
        }
        if (::flock(fd.get(), LOCK_SH | LOCK_NB) == 0) {
            info.held = false;
            return info;
        }
        if (errno != EWOULDBLOCK) throw_client_error("flock failed on " + path, errno);
        info.held = true;
        info.token = read_counter(fd.get());
        if (auto label = read_label(fd.get()); !label.empty()) info.holder = std::move(label);
        else info.unknown.emplace("holder", "the holder wrote no label (a distlock from before holder labels)");
        info.unknown.emplace("remaining", "no lease: the kernel holds the lock until unlock or process exit");
        return info;
    }

    // Replaces the lock files of every primitive of `name` by fresh ones that keep
    // their counters, so that holders (still locking the old inodes) learn of
    // the loss and tokens keep increasing.
    void break_lock(std::string_view name) override {
        const auto p = paths_of(settings_.dir, name);
        replace(p.mutex, true);
        replace(p.rw_data, false);
        fd_guard meta(::open(p.sem_meta.c_str(), O_RDONLY | O_CLOEXEC));
        const auto size = meta.get() >= 0 ? read_meta(meta.get()).size : 0;
        for (std::uint32_t i = 0; i < size; ++i) replace(p.slot(i), false);
    }

private:
    // A fresh file at `path` (when one is there), with the old one's counter.
    void replace(const std::string& path, bool counter_inside) {
        std::uint64_t counter = 0;
        fd_guard old(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
        if (old.get() < 0 && !counter_inside) return;  // never made: nothing to break
        if (old.get() >= 0 && counter_inside) counter = read_counter(old.get());
        auto tmp = path + ".break-" + spi::random_token();
        fd_guard fresh(::open(tmp.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
        if (fresh.get() < 0) throw_client_error("cannot create " + tmp, errno);
        if (counter_inside) write_counter(fresh.get(), counter, settings_.sync);
        if (::rename(tmp.c_str(), path.c_str()) != 0) throw_client_error("cannot replace " + path, errno);
    }

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
