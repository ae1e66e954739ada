// consul:// the one blocking listing of the prefix that wakes asynchronous
// mutex waiters (consul_release_feed.hpp): its rounds on the agent's loop,
// the keys the waiters wait on and the holders the last listing showed.
#include "consul_release_feed.hpp"

#include <algorithm>
#include <functional>
#include <utility>
#include <vector>

namespace distlock::backends::consul {

struct release_feed::watcher {
    std::recursive_mutex m;  // held while its sink runs: the subscription's destructor waits for it
    bool active = true;
    spi::wake_sink sink;
    std::string key;
    // Under the feed's mu_: the session that kept the last attempt out ("" =
    // no failed attempt yet, nothing to wait for) and its read's index.
    std::string holder;
    std::uint64_t index = 0;

    void wake() {
        std::lock_guard lk(m);
        if (active) sink();
    }
};

namespace {
// Ends a subscription: its destructor runs `end`.
struct subscription final : spi::wake_subscription {
    explicit subscription(std::function<void()> f) : end(std::move(f)) {}
    ~subscription() override { end(); }
    std::function<void()> end;
};
}  // namespace

release_feed::release_feed(agent& a)
    : agent_(a),
      prefix_(a.config().prefix + "/"),
      monitor_(a.events(), {}, [this](http::transfer_result r) { on_done(r); }) {}

release_feed::~release_feed() { monitor_.stop(); }

std::unique_ptr<spi::wake_subscription> release_feed::subscribe(const std::string& key, spi::wake_sink wake,
                                                                std::shared_ptr<watcher>& out) {
    auto w = std::make_shared<watcher>();
    w->sink = std::move(wake);
    w->key = key;
    out = w;
    std::lock_guard lk(mu_);
    by_key_.emplace(key, w);
    auto held = monitor_.lock();
    if (!monitor_.running(held)) monitor_.start(held, agent_.list_request(prefix_, 0, 0ms), spi::loss_sink{});
    return std::make_unique<subscription>([this, w = std::move(w)] { unsubscribe(w); });
}

void release_feed::unsubscribe(const std::shared_ptr<watcher>& w) {
    {
        std::lock_guard lk(w->m);  // waits for a wake under way
        w->active = false;
    }
    std::lock_guard lk(mu_);
    auto [b, e] = by_key_.equal_range(w->key);
    for (auto it = b; it != e; ++it)
        if (it->second == w) {
            by_key_.erase(it);
            break;
        }
    // The listings end with the current one when nobody is left (on_done).
}

void release_feed::blocked_by(const std::shared_ptr<watcher>& w, std::string session, std::uint64_t index) {
    bool now;
    {
        std::lock_guard lk(mu_);
        w->holder = std::move(session);
        w->index = index;
        now = freed(*w);
        if (now) w->holder.clear();
    }
    if (now) w->wake();
}

bool release_feed::freed(const watcher& w) const {
    if (w.holder.empty() || index_ < w.index) return false;  // a later listing decides
    auto it = sessions_.find(w.key);
    return it != sessions_.end() && it->second != w.holder;
}

// On the loop thread: a listing came (or the query failed). Wakes the waiters
// whose holder it no longer shows, then asks for the next one, which blocks
// until the prefix's index passes this one's.
void release_feed::on_done(const http::transfer_result& r) {
    std::vector<std::shared_ptr<watcher>> woken;
    bool failed = r.how != http::outcome::completed, progress = false;
    std::uint64_t next = 0;
    {
        std::lock_guard lk(mu_);
        {
            auto held = monitor_.lock();
            if (!monitor_.running(held)) return;
            if (by_key_.empty()) {  // nobody left: the next subscription starts afresh
                monitor_.lost(held, {});
                sessions_.clear();
                index_ = 0;
                return;
            }
        }
        if (!failed) {
            try {
                auto l = agent::parse_list(r.resp, "listing of " + prefix_);
                progress = l.index != index_;
                // Consul's rule: an index that went backwards (or none) restarts at 0.
                index_ = l.index >= index_ ? l.index : 0;
                sessions_.clear();
                for (const auto& [key, w] : by_key_) sessions_[key];
                for (const auto& e : l.entries)
                    if (auto it = sessions_.find(e.key); it != sessions_.end()) it->second = e.session;
                for (const auto& [key, w] : by_key_)
                    if (freed(*w)) {
                        w->holder.clear();
                        woken.push_back(w);
                    }
            } catch (...) {
                failed = true;
            }
        }
        if (failed && r.how == http::outcome::failed) agent_.client().rotate_endpoint(r.resp.endpoint);
        next = failed ? 0 : index_;
    }
    for (const auto& w : woken) w->wake();
    const auto delay = failed ? 500ms : monitor_.pace(progress, kMaxBlockingWait / 2);
    monitor_.restart(agent_.list_request(prefix_, next, kMaxBlockingWait), delay);
}

}  // namespace distlock::backends::consul
