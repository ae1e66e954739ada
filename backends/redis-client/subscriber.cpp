#include "subscriber.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

namespace distlock::backends::redis_client {

subscriber::subscriber(endpoint ep) : subscriber([ep](bool) { return ep; }, ep.sharded, ep.backend_name) {}

subscriber::subscriber(std::function<endpoint(bool after_failure)> locate, bool sharded, std::string backend_name)
    : locate_(std::move(locate)),
      subscribe_(sharded ? "SSUBSCRIBE" : "SUBSCRIBE"),
      unsubscribe_(sharded ? "SUNSUBSCRIBE" : "UNSUBSCRIBE"),
      backend_name_(std::move(backend_name)) {
    if (::pipe2(wake_pipe_, O_CLOEXEC | O_NONBLOCK) != 0)
        throw_error(errc::unavailable, backend_name_, "pipe2 failed", errno, std::strerror(errno));
    thread_ = std::thread([this] { run(); });
}

subscriber::~subscriber() {
    {
        std::lock_guard lk(mutex_);
        stop_ = true;
    }
    cv_.notify_all();
    char b = 1;
    (void)!::write(wake_pipe_[1], &b, 1);
    if (thread_.joinable()) thread_.join();
    conn_.reset();
    ::close(wake_pipe_[0]);
    ::close(wake_pipe_[1]);
}

void subscriber::send_locked(const std::vector<std::string_view>& args) {
    if (fd_ < 0) return;
    if (conn_->send_now(format_command(args), clock::now() + send_timeout_) != 0)
        ::shutdown(fd_, SHUT_RDWR);  // the reader thread sees the failure and reconnects
}

std::unique_ptr<subscriber::subscription> subscriber::subscribe(const std::string& channel, deadline confirm_until) {
    std::unique_lock lk(mutex_);
    auto sub = std::make_unique<subscription>(*this, channel);
    subscribe_locked(lk, channel, confirm_until);
    return sub;
}

std::unique_ptr<subscriber::listener> subscriber::listen(const std::string& channel, on_message f,
                                                         deadline confirm_until) {
    std::unique_lock lk(mutex_);
    const auto id = ++next_listener_;
    channels_[channel].listeners.emplace(id, std::move(f));  // before SUBSCRIBE: no message is missed
    auto l = std::make_unique<listener>(*this, channel, id);
    auto& st = subscribe_locked(lk, channel, confirm_until);
    // Not confirmed in time: the confirmation, when it comes, wakes the
    // listeners (a message before it was not heard).
    if (!st.confirmed) st.broke = true;
    return l;
}

void subscriber::unlisten(const std::string& channel, std::uint64_t id) {
    {
        std::lock_guard lk(mutex_);
        auto it = channels_.find(channel);
        if (it != channels_.end()) it->second.listeners.erase(id);
    }
    release(channel);
}

std::size_t subscriber::channel_count() {
    std::lock_guard lk(mutex_);
    return channels_.size();
}

std::size_t subscriber::listener_count() {
    std::lock_guard lk(mutex_);
    std::size_t n = 0;
    for (const auto& [name, st] : channels_) n += st.listeners.size();
    return n;
}

subscriber::channel_state& subscriber::subscribe_locked(std::unique_lock<std::mutex>& lk, const std::string& channel,
                                                        deadline confirm_until) {
    auto& st = channels_[channel];
    ++st.refs;
    if (up_ && !st.wanted) {
        send_locked({subscribe_, channel});
        ++st.pending;
        st.wanted = true;
        st.confirmed = false;
    } else if (!up_) {
        cv_.notify_all();  // the reader thread connects (it subscribes every wanted channel)
    }
    auto ready = [&] { return stop_ || st.confirmed; };
    if (confirm_until == deadline::max()) cv_.wait(lk, ready);
    else cv_.wait_until(lk, confirm_until, ready);
    return st;
}

std::unique_ptr<subscriber::subscription> subscriber::reuse(const std::string& channel) {
    std::lock_guard lk(mutex_);
    auto it = channels_.find(channel);
    if (it == channels_.end() || !it->second.confirmed || !up_) return nullptr;
    ++it->second.refs;
    return std::make_unique<subscription>(*this, channel);
}

void subscriber::release(const std::string& channel) {
    std::lock_guard lk(mutex_);
    auto it = channels_.find(channel);
    if (it == channels_.end()) return;
    auto& st = it->second;
    if (--st.refs > 0) return;
    if (up_ && st.wanted && st.confirmed) {
        // Keep it for a while: a client that waited once is likely to wait again.
        st.idle_since = clock::now();
        std::size_t lingering = 0;
        for (const auto& [name, other] : channels_) lingering += other.refs == 0 && other.wanted ? 1 : 0;
        if (lingering > max_lingering) sweep_locked(false);
        char b = 1;
        (void)!::write(wake_pipe_[1], &b, 1);  // the reader thread schedules the sweep
        return;
    }
    if (up_ && st.wanted) send_locked({unsubscribe_, channel});
    st.wanted = false;
    st.confirmed = false;
    if (st.pending == 0) channels_.erase(it);
}

void subscriber::sweep_locked(bool expired_only) {
    const auto now = clock::now();
    for (auto it = channels_.begin(); it != channels_.end();) {
        auto& st = it->second;
        if (st.refs == 0 && st.wanted && (!expired_only || now - st.idle_since >= linger)) {
            if (up_) send_locked({unsubscribe_, it->first});
            st.wanted = false;
            st.confirmed = false;
        }
        it = (st.refs == 0 && !st.wanted && st.pending == 0) ? channels_.erase(it) : std::next(it);
    }
}

std::uint64_t subscriber::messages(const std::string& channel) {
    std::lock_guard lk(mutex_);
    auto it = channels_.find(channel);
    return it == channels_.end() ? 0 : it->second.messages;
}

std::vector<std::string> subscriber::payloads_since(const std::string& channel, std::uint64_t& seen, bool& complete) {
    std::lock_guard lk(mutex_);
    std::vector<std::string> out;
    complete = true;
    auto it = channels_.find(channel);
    if (it == channels_.end()) return out;
    const auto& st = it->second;
    const std::uint64_t fresh = st.messages - seen;
    if (fresh > st.recent.size()) complete = false;
    const std::size_t take = static_cast<std::size_t>(std::min<std::uint64_t>(fresh, st.recent.size()));
    out.assign(st.recent.end() - static_cast<long>(take), st.recent.end());
    seen = st.messages;
    return out;
}

bool subscriber::confirmed(const std::string& channel) {
    std::lock_guard lk(mutex_);
    auto it = channels_.find(channel);
    return it != channels_.end() && it->second.confirmed;
}

subscriber::wake subscriber::wait(const std::string& channel, std::uint64_t seen, deadline until) {
    std::unique_lock lk(mutex_);
    auto it = channels_.find(channel);
    if (it == channels_.end() || !it->second.confirmed) return wake::broken;
    auto& st = it->second;
    const auto breaks = breaks_;
    auto done = [&] { return stop_ || st.messages != seen || breaks_ != breaks || !st.confirmed; };
    bool woke = until == deadline::max() ? (cv_.wait(lk, done), true) : cv_.wait_until(lk, until, done);
    if (!woke) return wake::timeout;
    if (st.messages != seen) return wake::message;
    return wake::broken;
}

void subscriber::on_reply(redisReply* r) {
    if (r == nullptr || r->type != REDIS_REPLY_ARRAY || r->elements < 3) return;
    const redisReply* kind = r->element[0];
    const redisReply* chan = r->element[1];
    if (kind->type != REDIS_REPLY_STRING || chan->type != REDIS_REPLY_STRING) return;
    std::string_view k(kind->str, kind->len);
    auto it = channels_.find(std::string_view(chan->str, chan->len));
    if (it == channels_.end()) return;
    auto& st = it->second;
    if (k == "message" || k == "smessage") {
        ++st.messages;
        const redisReply* payload = r->element[2];
        st.recent.emplace_back(payload->type == REDIS_REPLY_STRING ? std::string(payload->str, payload->len)
                                                                   : std::string{});
        if (st.recent.size() > 32) st.recent.pop_front();
        for (const auto& [id, f] : st.listeners) f(std::string_view(st.recent.back()));
    } else if (k == "sunsubscribe" && st.wanted && st.pending == 0) {
        // Not ours: the server dropped the sharded channel (its slot moved to
        // another node). Waiters fall back to polling until they subscribe again.
        st.wanted = false;
        st.confirmed = false;
        if (st.refs == 0) channels_.erase(it);
    } else if (k == "subscribe" || k == "ssubscribe") {
        if (st.pending > 0) --st.pending;
        if (st.pending == 0 && st.wanted) st.confirmed = true;
        if (st.confirmed && std::exchange(st.broke, false))
            for (const auto& [id, f] : st.listeners) f(std::nullopt);  // messages may have been missed
        if (st.pending == 0 && st.refs == 0) channels_.erase(it);
    }
    cv_.notify_all();
}

void subscriber::drop_connection_locked(const std::string&) {
    conn_.reset();
    fd_ = -1;
    up_ = false;
    ++breaks_;
    for (auto it = channels_.begin(); it != channels_.end();) {
        it->second.pending = 0;
        it->second.wanted = false;
        it->second.confirmed = false;
        it->second.broke = true;
        it = it->second.refs == 0 ? channels_.erase(it) : std::next(it);
    }
    cv_.notify_all();
}

void subscriber::run() {
    std::unique_lock lk(mutex_);
    auto delay = 10ms;
    auto wanted = [&] {
        for (const auto& [name, st] : channels_)
            if (st.refs > 0) return true;
        return false;
    };
    while (!stop_) {
        if (!up_) {
            cv_.wait(lk, [&] { return stop_ || wanted(); });
            if (stop_) break;
            const bool after_failure = breaks_ > 0;
            lk.unlock();
            std::unique_ptr<connection> c;
            try {
                c = connection::open(locate_(after_failure));
            } catch (const std::exception&) {}
            lk.lock();
            if (!c) {
                ++breaks_;
                cv_.notify_all();  // waiters fall back to backoff meanwhile
                cv_.wait_for(lk, delay, [&] { return stop_; });
                delay = std::min(delay * 2, std::chrono::milliseconds{1000});
                continue;
            }
            delay = 10ms;
            // From now on only this thread reads the connection, and writers
            // send preformatted commands on it (send_now), all under mutex_.
            conn_ = std::move(c);
            fd_ = conn_->fd();
            send_timeout_ = conn_->where().command_timeout;
            up_ = true;
            for (auto& [name, st] : channels_) {
                if (st.refs == 0) continue;
                send_locked({subscribe_, name});
                ++st.pending;
                st.wanted = true;
                st.confirmed = false;
            }
            continue;
        }
        pollfd fds[2] = {{fd_, POLLIN, 0}, {wake_pipe_[0], POLLIN, 0}};
        bool lingering = false;
        for (const auto& [name, st] : channels_) lingering = lingering || (st.refs == 0 && st.wanted);
        lk.unlock();
        int rc = ::poll(fds, 2, lingering ? 200 : -1);
        lk.lock();
        if (up_) sweep_locked(true);
        if (fds[1].revents != 0) {
            char buf[64];
            while (::read(wake_pipe_[0], buf, sizeof buf) > 0) {}
        }
        if (stop_) break;
        if (rc < 0 || fds[0].revents == 0 || !up_) continue;
        try {
            conn_->receive();
            while (auto r = conn_->take_reply()) on_reply(r.get());
        } catch (const connection_failure& e) {  // closed, reset, not Redis, a reply past the caps
            drop_connection_locked(e.what());
        }
    }
}

}  // namespace distlock::backends::redis_client
