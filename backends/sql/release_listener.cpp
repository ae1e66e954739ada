// The SQL layer's shared LISTEN session (release_listener.hpp): one connection
// and one thread per provider, whatever the number of asynchronous waiters.
#include "release_listener.hpp"

#include <algorithm>
#include <utility>

#include "context.hpp"

namespace distlock::backends::sql {

using namespace std::chrono_literals;

class release_listener::subscription final : public spi::wake_subscription {
public:
    subscription(release_listener& l, std::string payload, std::uint64_t id)
        : listener_(l), payload_(std::move(payload)), id_(id) {}
    ~subscription() override { listener_.unwatch(payload_, id_); }

private:
    release_listener& listener_;
    std::string payload_;
    std::uint64_t id_;
};

release_listener::release_listener(context& ctx) : ctx_(ctx) {}

release_listener::~release_listener() {
    {
        std::lock_guard lk(mutex_);
        stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
}

std::unique_ptr<spi::wake_subscription> release_listener::watch(std::string payload, spi::wake_sink wake) {
    std::unique_lock lk(mutex_);
    const auto id = ++next_id_;
    waiters_[payload].emplace(id, std::move(wake));
    ++count_;
    auto sub = std::make_unique<subscription>(*this, std::move(payload), id);
    if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
    cv_.notify_all();
    // LISTEN before the first attempt, so that a release after it is not missed.
    // Not in time: the LISTEN, when it comes, wakes every waiter.
    if (!cv_.wait_for(lk, ctx_.settings().conn.timeout, [&] { return listening_ || stop_; })) missed_ = true;
    return sub;
}

void release_listener::unwatch(const std::string& payload, std::uint64_t id) {
    std::lock_guard lk(mutex_);
    auto it = waiters_.find(payload);
    if (it == waiters_.end() || it->second.erase(id) == 0) return;
    --count_;
    if (it->second.empty()) waiters_.erase(it);
}

std::size_t release_listener::watchers() {
    std::lock_guard lk(mutex_);
    return count_;
}

bool release_listener::listening() {
    std::lock_guard lk(mutex_);
    return listening_;
}

std::uint64_t release_listener::wakes() {
    std::lock_guard lk(mutex_);
    return wakes_;
}

std::unique_ptr<connection> release_listener::open() noexcept {
    try {
        auto c = ctx_.pool().take().detach();
        c->exec(ctx_.texts().listen);
        return c;
    } catch (...) {
        return nullptr;
    }
}

void release_listener::dispatch(const std::vector<std::string>& payloads) {
    for (const auto& p : payloads) {
        auto it = waiters_.find(p);
        if (it == waiters_.end()) continue;
        for (const auto& [id, wake] : it->second) wake();
        wakes_ += it->second.size();
    }
}

void release_listener::wake_all() {
    for (const auto& [payload, sinks] : waiters_) {
        for (const auto& [id, wake] : sinks) wake();
        wakes_ += sinks.size();
    }
}

void release_listener::run() {
    std::unique_ptr<connection> session;
    auto retry = 10ms;
    bool broke = false;  // the last session broke: notifications may have been missed
    std::unique_lock lk(mutex_);
    while (!stop_) {
        if (count_ == 0) {
            // Idle: keep the session a while (a waiter is likely to come back),
            // then close it (closing a session ends its LISTEN).
            if (session && !cv_.wait_for(lk, linger, [&] { return stop_ || count_ > 0; })) {
                session.reset();
                listening_ = false;
            }
            cv_.wait(lk, [&] { return stop_ || count_ > 0; });
            continue;
        }
        if (!session) {
            lk.unlock();
            session = open();
            lk.lock();
            if (!session) {  // the waiters' own timers retry meanwhile
                cv_.wait_for(lk, retry, [&] { return stop_; });
                retry = std::min(retry * 2, std::chrono::milliseconds{1000});
                continue;
            }
            retry = 10ms;
            listening_ = true;
            if (std::exchange(broke, false) | std::exchange(missed_, false)) wake_all();
            cv_.notify_all();
        }
        lk.unlock();
        std::vector<std::string> payloads;
        bool lost = false;
        try {
            // A slice at a time, to see new waiters leave and the provider stop.
            payloads = session->wait_notifications(spi::clock::now() + 250ms);
        } catch (...) {
            lost = true;
        }
        lk.lock();
        dispatch(payloads);
        if (lost || session->broken()) {
            session.reset();
            listening_ = false;
            broke = true;
        }
    }
}

}  // namespace distlock::backends::sql
