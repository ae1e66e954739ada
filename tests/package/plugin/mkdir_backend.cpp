// mkdir:///base/dir[?check=1s] — a lock is the directory <base>/<SHA-256 of the
// name>, taken with mkdir(2), which creates it or fails with EEXIST atomically
// for all the processes of one host; the holder writes its owner token into a
// file in it and removes both on release. What it is not, declared in caps():
//  - no lease and no crash release: a holder that dies leaves its directory,
//    which stays until removed by hand;
//  - no fencing tokens (token() is 0);
//  - waiters poll mkdir(2) with the core's backoff (no notification);
//  - not reentrant.
// A lock removed out of band (rm -r, distlock::testing::break_lock) is noticed
// at the next check (every `check=`, 1 s by default) or by the release. Between
// the release's owner check and its removal there is a window in which a lock
// removed out of band and taken again would be removed too: out-of-band removal
// is the only way a handle here can become stale, and this example accepts it.
#include "mkdir_backend.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <distlock/distlock.hpp>
#include <distlock/spi/backend.hpp>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>

namespace mkdir_lock {
namespace {

using namespace std::chrono_literals;
namespace spi = distlock::spi;
using distlock::errc;

constexpr const char* kBackend = "mkdir";

// The system's error (errno) as a distlock error: what to do next.
[[noreturn]] void throw_client_error(int err, std::string_view backend, const std::string& what) {
    const bool denied = err == EACCES || err == EPERM || err == EROFS;
    distlock::throw_error(denied ? errc::access_denied : errc::unavailable, std::string(backend), what, err,
                          std::strerror(err));
}

// The owner token in `dir`, or nullopt when the directory or its file is gone
// (or the token is not fully written yet).
std::optional<std::string> read_owner(const std::string& dir) {
    const int fd = ::open((dir + "/owner").c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT || errno == ENOTDIR) return std::nullopt;
        const int error_number = errno;
        throw_client_error(error_number, kBackend, "cannot open " + dir + "/owner");
    }
    char buf[64];
    const ssize_t n = ::read(fd, buf, sizeof buf);
    const int err = errno;
    ::close(fd);
    if (n < 0) throw_client_error(err, kBackend, "cannot read " + dir + "/owner");
    return std::string(buf, static_cast<std::size_t>(n));
}

void write_owner(const std::string& dir, const std::string& token) {
    const int fd = ::open((dir + "/owner").c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) {
        const int error_number = errno;
        throw_client_error(error_number, kBackend, "cannot create " + dir + "/owner");
    }
    const ssize_t n = ::write(fd, token.data(), token.size());
    const int err = errno;
    ::close(fd);
    if (n != static_cast<ssize_t>(token.size()))
        throw_client_error(n < 0 ? err : EIO, kBackend, "cannot write " + dir + "/owner");
}

// The lock directory and what is in it, gone; false when it was not there.
bool remove_lock(const std::string& dir) {
    if (::unlink((dir + "/owner").c_str()) != 0 && errno != ENOENT) {
        const int error_number = errno;
        throw_client_error(error_number, kBackend, "cannot remove " + dir + "/owner");
    }
    if (::rmdir(dir.c_str()) == 0) return true;
    if (errno == ENOENT) return false;
    const int error_number = errno;
    throw_client_error(error_number, kBackend, "cannot remove " + dir);
}

class handle final : public spi::lock_handle {
public:
    handle(std::string dir, const spi::lock_request& r, std::chrono::milliseconds check)
        : dir_(std::move(dir)), retry_min_(r.retry_min), retry_max_(r.retry_max), check_(check) {}

    // `lost` is for losses the backend learns of by itself (a watch, an event
    // thread); this one only finds them by its checks, so it does not keep it.
    std::optional<spi::grant> acquire(spi::deadline until, const spi::loss_sink& /*lost*/) override {
        spi::backoff wait(retry_min_, retry_max_);
        while (::mkdir(dir_.c_str(), 0700) != 0) {
            if (errno != EEXIST) {
                const int error_number = errno;
                throw_client_error(error_number, kBackend, "cannot create " + dir_);
            }
            if (!wait.sleep(until)) return std::nullopt;
        }
        auto token = spi::random_token();
        try {
            write_owner(dir_, token);
        } catch (...) {
            std::error_code ignored;
            std::filesystem::remove_all(dir_, ignored);  // leave nothing behind
            throw;
        }
        owner_ = std::move(token);
        return spi::grant{0, spi::clock::now()};  // no fencing token, no lease
    }

    void release() override {
        const auto mine = std::exchange(owner_, std::string{});
        if (read_owner(dir_) != mine)
            distlock::throw_error(errc::not_owner, kBackend,
                                  dir_ + " is no longer this handle's (removed out of band)");
        remove_lock(dir_);
    }

    // No lease: the core checks the lock every `check` through keepalive_batch.
    std::chrono::milliseconds check_interval() const override { return check_; }

    spi::keepalive_result check() const {
        try {
            if (read_owner(dir_) == owner_) return spi::keepalive_result::ok();
            return spi::keepalive_result::lost(dir_ + " was removed or taken by another holder");
        } catch (const distlock::error& e) {
            return spi::keepalive_result::failed(e.what());
        }
    }

private:
    std::string dir_;
    std::chrono::milliseconds retry_min_, retry_max_, check_;
    std::string owner_;  // this grant's token, "" when not held
};

class backend final : public spi::backend {
public:
    backend(std::string base, std::chrono::milliseconds check) : base_(std::move(base)), check_(check) {
        caps_.unsupported = {
            {distlock::feature::crash_release, "a directory outlives its holder: remove it by hand"},
            {distlock::feature::lease_expiry, "no leases: a grant lasts until unlock()"},
            {distlock::feature::fencing, "no fencing tokens"},
            {distlock::feature::notified_wakeup, "waiters poll mkdir(2) with the core's backoff"},
        };
    }
    std::string_view name() const noexcept override { return kBackend; }
    const distlock::capabilities& caps() const noexcept override { return caps_; }
    std::unique_ptr<spi::lock_handle> make_lock(const spi::lock_request& r) override {
        return std::make_unique<handle>(dir_of(r.name), r, check_);
    }
    // The one renewal hook: here, one liveness check per held lock.
    void keepalive_batch(std::span<spi::lock_handle* const> handles,
                         std::span<spi::keepalive_result> results) override {
        for (std::size_t i = 0; i < handles.size(); ++i) results[i] = static_cast<const handle*>(handles[i])->check();
    }
    void break_lock(std::string_view name) override { remove_lock(dir_of(name)); }

private:
    std::string dir_of(std::string_view name) const { return base_ + "/" + spi::sha256_hex(name); }

    std::string base_;
    std::chrono::milliseconds check_;
    distlock::capabilities caps_;
};

std::shared_ptr<spi::backend> open_backend(spi::url& u) {
    if (!u.hosts().empty() || u.path().empty())
        distlock::throw_error(errc::invalid_argument, kBackend,
                              "mkdir:// takes a base directory: mkdir:///var/lock/app");
    const auto check = u.take_duration("check").value_or(1s);
    if (check <= 0ms) distlock::throw_error(errc::invalid_argument, kBackend, "check must be positive");
    std::error_code ec;
    std::filesystem::create_directories(u.path(), ec);
    if (ec) throw_client_error(ec.value(), kBackend, "cannot create " + u.path());
    return std::make_shared<backend>(u.path(), check);
}
}  // namespace

void register_scheme() { distlock::register_backend("mkdir", open_backend); }

void register_into(spi::registry& r, const std::string& scheme) { r.add(scheme, open_backend); }

}  // namespace mkdir_lock
