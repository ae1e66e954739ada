// file:// (file_backend.cpp): the provider's one inotify watch of its lock
// directory, shared by every asynchronous waiter (dir_watcher.hpp).
#include "dir_watcher.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/inotify.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>

namespace distlock::backends::file {

class dir_watcher::subscription final : public spi::wake_subscription {
public:
    subscription(dir_watcher& w, std::vector<std::string> files, std::uint64_t id)
        : watcher_(w), files_(std::move(files)), id_(id) {}
    ~subscription() override { watcher_.unwatch(files_, id_); }

private:
    dir_watcher& watcher_;
    std::vector<std::string> files_;
    std::uint64_t id_;
};

dir_watcher::~dir_watcher() {
    if (!thread_.joinable()) return;
    char b = 1;
    (void)!::write(stop_write_.get(), &b, 1);
    thread_.join();
}

bool dir_watcher::start_locked(const lock_dir& dir) {
    if (thread_.joinable()) return true;
    if (failed_) return false;
    int pipe[2];
    inotify_.reset(::inotify_init1(IN_CLOEXEC | IN_NONBLOCK));
    if (inotify_.get() < 0 || ::pipe2(pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
        failed_ = true;
        return false;
    }
    stop_read_.reset(pipe[0]);
    stop_write_.reset(pipe[1]);
    // The directory we hold open (a path swapped since connect moves nothing).
    if (::inotify_add_watch(inotify_.get(), fd_path(dir.fd()).c_str(), IN_CLOSE_WRITE | IN_MOVED_TO) < 0) {
        failed_ = true;
        return false;
    }
    thread_ = std::thread([this] { run(); });
    return true;
}

std::unique_ptr<spi::wake_subscription> dir_watcher::watch(const lock_dir& dir, const std::vector<std::string>& files,
                                                           spi::wake_sink wake) {
    std::lock_guard lk(mutex_);
    if (!start_locked(dir)) return nullptr;
    const auto id = ++next_id_;
    for (const auto& f : files) waiters_[f].emplace(id, wake);
    return std::make_unique<subscription>(*this, files, id);
}

void dir_watcher::unwatch(const std::vector<std::string>& files, std::uint64_t id) {
    std::lock_guard lk(mutex_);
    for (const auto& f : files) {
        auto it = waiters_.find(f);
        if (it == waiters_.end()) continue;
        it->second.erase(id);
        if (it->second.empty()) waiters_.erase(it);
    }
}

std::size_t dir_watcher::watchers() {
    std::lock_guard lk(mutex_);
    std::size_t n = 0;
    for (const auto& [f, sinks] : waiters_) n += sinks.size();
    return n;
}

void dir_watcher::run() {
    alignas(inotify_event) char buf[64 * (sizeof(inotify_event) + NAME_MAX + 1)];
    for (;;) {
        pollfd fds[2] = {{inotify_.get(), POLLIN, 0}, {stop_read_.get(), POLLIN, 0}};
        if (::poll(fds, 2, -1) < 0 && errno != EINTR) return;
        if (fds[1].revents != 0) return;
        for (;;) {
            const auto n = ::read(inotify_.get(), buf, sizeof buf);
            if (n <= 0) break;
            std::lock_guard lk(mutex_);
            for (long off = 0; off < n;) {
                const auto* e = reinterpret_cast<const inotify_event*>(buf + off);
                off += static_cast<long>(sizeof(inotify_event) + e->len);
                if (e->mask & IN_Q_OVERFLOW) {  // events were lost: any waiter may have missed its release
                    for (const auto& [f, sinks] : waiters_)
                        for (const auto& [id, wake] : sinks) wake();
                    continue;
                }
                if (e->len == 0) continue;
                auto it = waiters_.find(std::string_view(e->name));  // NUL-padded
                if (it == waiters_.end()) continue;
                for (const auto& [id, wake] : it->second) wake();
            }
        }
    }
}

}  // namespace distlock::backends::file
