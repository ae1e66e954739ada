// etcd:// the one watch stream of deletions that wakes asynchronous waiters
// (etcd_release_feed.hpp): its start, resumption and end, the keys each
// waiter waits on, and the window of recent deletions that closes the gap
// between an attempt and its blocked_by().
#include "etcd_release_feed.hpp"

#include <algorithm>
#include <chrono>

#include "etcd_gateway.hpp"
#include "http/http_json.hpp"

namespace distlock::backends::etcd {

using namespace std::chrono_literals;

namespace {
// The deletions kept for blocked_by() (a few round trips' worth on a busy prefix),
// and the bytes of their keys at most: whoever may write under the prefix
// chooses the keys' length (etcd allows 1.5 MiB each).
constexpr std::size_t kRecent = 4096;
constexpr std::size_t kRecentBytes = 1 << 20;
// A stream runs this long, then starts again from the last revision it saw.
constexpr auto kStreamFor = 60s;
// Held locks whose own key a watch of its own follows, per provider; the
// others' come on the release stream.
constexpr int kOwnWatches = 8;
}  // namespace

struct release_feed::watcher {
    std::recursive_mutex m;  // held while its sink runs: the subscription's destructor waits for it
    bool active = true;
    spi::wake_sink sink;
    // Under the feed's mu_:
    std::vector<std::string> keys;
    std::int64_t revision = 0;  // 0: no failed attempt yet, nothing to wait on
    bool hold = false;          // a held lock's key (hold()): woken once, by a deletion seen
    // A hold whose key the stream has watched without a gap since a revision
    // at which the key stood: its deletion will be reported (vouches()).
    bool vouched = false;
};

class feed_subscription final : public spi::wake_subscription {
public:
    feed_subscription(release_feed& f, std::shared_ptr<release_feed::watcher> w) : feed_(f), w_(std::move(w)) {}
    ~feed_subscription() override { feed_.unsubscribe(w_); }

private:
    release_feed& feed_;
    std::shared_ptr<release_feed::watcher> w_;
};

release_feed::release_feed(gateway& g)
    : gateway_(g),
      prefix_(g.config().prefix + "/"),
      monitor_(
          g.events(), [this](std::string_view line) { return on_line(line); },
          [this](http::transfer_result r) { on_done(r); }) {}

release_feed::~release_feed() { monitor_.stop(); }

std::unique_ptr<spi::wake_subscription> release_feed::subscribe(spi::wake_sink wake, std::shared_ptr<watcher>& out,
                                                                bool hold) {
    auto w = std::make_shared<watcher>();
    w->sink = std::move(wake);
    w->hold = hold;
    out = w;
    std::lock_guard lk(mu_);
    watchers_.insert(w);
    auto held = monitor_.lock();
    if (!monitor_.running(held)) {
        ++started_;
        monitor_.start(held, stream_request(), spi::loss_sink{});
    }
    return std::make_unique<feed_subscription>(*this, std::move(w));
}

std::unique_ptr<spi::wake_subscription> release_feed::hold(const std::string& key, std::int64_t revision,
                                                           spi::wake_sink deleted) {
    std::shared_ptr<watcher> w;
    auto sub = subscribe(std::move(deleted), w, true);
    std::vector<std::shared_ptr<watcher>> woken;
    {
        std::lock_guard lk(mu_);
        w->keys = {key};
        w->revision = revision;
        index(w, true);
        if (missed(*w)) take(w, woken);
        else w->vouched = floor_ != 0 && after(revision) >= floor_;  // every deletion since was checked or is to come
    }
    wake(woken);
    return sub;
}

bool release_feed::watch_slot::take(release_feed& f) {
    give_back();
    if (f.own_watches_.fetch_add(1) >= kOwnWatches) {
        f.own_watches_.fetch_sub(1);
        return false;
    }
    feed_ = &f;
    return true;
}

void release_feed::watch_slot::give_back() noexcept {
    if (feed_ != nullptr) feed_->own_watches_.fetch_sub(1);
    feed_ = nullptr;
}

void release_feed::take(const std::shared_ptr<watcher>& w, std::vector<std::shared_ptr<watcher>>& woken) {
    woken.push_back(w);
    if (!w->hold) return;
    index(w, false);  // once
    w->keys.clear();
}

void release_feed::unsubscribe(const std::shared_ptr<watcher>& w) {
    {
        std::lock_guard lk(w->m);  // waits for a wake under way
        w->active = false;
    }
    std::lock_guard lk(mu_);
    index(w, false);
    watchers_.erase(w);  // a set: 100,000 held locks given back one by one stay linear
    // The stream ends with its current transfer when nobody is left (on_done).
}

void release_feed::blocked_by(const std::shared_ptr<watcher>& w, std::vector<std::string> keys, std::int64_t revision) {
    bool now;
    {
        std::lock_guard lk(mu_);
        index(w, false);
        w->keys = std::move(keys);
        w->revision = revision;
        index(w, true);
        now = floor_ != 0 && missed(*w);  // unsynced: decided when the stream is created
    }
    if (now) wake({w});
}

std::shared_ptr<release_feed::watcher> release_feed::hold_of(const held_key& k) const {
    auto [b, e] = by_key_.equal_range(*k.first);
    for (auto it = b; it != e; ++it)
        if (it->second->hold && it->second->revision == k.second) return it->second;
    return nullptr;  // none, or its deletion was seen
}

std::vector<bool> release_feed::vouches(std::span<const held_key> keys) const {
    std::vector<bool> out(keys.size(), false);
    std::lock_guard lk(mu_);
    if (!live_) return out;
    for (std::size_t i = 0; i < keys.size(); ++i) {
        const auto w = hold_of(keys[i]);
        out[i] = w != nullptr && w->vouched;
    }
    return out;
}

void release_feed::stood(std::span<const held_key> keys, std::int64_t at) {
    std::lock_guard lk(mu_);
    // Every deletion after `at` is one the stream has delivered (to the hold,
    // indexed before) or will deliver.
    if (since_ == 0 || after(at) < since_) return;  // after(): a server's INT64_MAX does not overflow
    for (const auto& k : keys)
        if (auto w = hold_of(k)) w->vouched = true;
}

void release_feed::forget_recent() {
    recent_.clear();
    recent_bytes_ = 0;
}

bool release_feed::missed(const watcher& w) const {
    if (w.keys.empty() || w.revision == 0) return false;
    if (after(w.revision) < floor_ && !w.hold) return true;  // a hold is told of deletions seen, never of doubts
    return std::any_of(recent_.begin(), recent_.end(), [&](const auto& d) {
        return d.second > w.revision && std::find(w.keys.begin(), w.keys.end(), d.first) != w.keys.end();
    });
}

void release_feed::index(const std::shared_ptr<watcher>& w, bool add) {
    for (const auto& k : w->keys) {
        if (add) {
            by_key_.emplace(k, w);
            continue;
        }
        auto [b, e] = by_key_.equal_range(k);
        for (auto it = b; it != e; ++it)
            if (it->second == w) {
                by_key_.erase(it);
                break;
            }
    }
}

http::request release_feed::stream_request() const {
    return gateway::watch(prefix_, from_, kStreamFor, prefix_end(prefix_), true);
}

void release_feed::wake(const std::vector<std::shared_ptr<watcher>>& ws) {
    for (const auto& w : ws) {
        std::lock_guard lk(w->m);
        if (!w->active) continue;
        w->sink();
        ++wakes_;
    }
}

// On the loop thread: one message of the stream.
bool release_feed::on_line(std::string_view line) {
    const json msg = http::parse_reply(line);
    if (msg.is_discarded() || !msg.is_object() || msg.contains("error")) return false;
    const json& result = message_result(msg);
    std::vector<std::shared_ptr<watcher>> woken;
    bool go_on = true;
    {
        std::lock_guard lk(mu_);
        if (flag(result, "canceled")) {
            // Compacted past where we resume: deletions may be lost. Everyone
            // tries again; the next stream starts now.
            from_ = 0;
            floor_ = since_ = 0;
            live_ = false;
            forget_recent();
            for (const auto& w : watchers_)
                if (!w->hold) woken.push_back(w);
                else w->vouched = false;  // until a keepalive sees its key again
            go_on = false;
        } else {
            if (flag(result, "created")) live_ = true;
            if (flag(result, "created") && from_ == 0) {
                // Every deletion after this revision comes on this stream.
                const auto at = as_i64(field(result, "header"), "revision");
                from_ = floor_ = since_ = after(at);
                for (const auto& w : watchers_)
                    if (missed(*w)) take(w, woken);
            }
            // A fragment (the stream asks for them: one revision's deletions
            // may pass a line's limit) may end mid-revision: a stream broken
            // after it resumes at that revision (seen events come again, harmless).
            const auto& events = list(result, "events");
            const bool partial = flag(result, "fragment");
            for (std::size_t i = 0; i < events.size(); ++i) {
                const json& ev = events[i];
                const json& kv = field(ev, "kv");
                const auto rev = as_i64(kv, "mod_revision");
                from_ = std::max(from_, partial && i + 1 == events.size() ? rev : after(rev));
                if (text(ev, "type") != "DELETE") continue;
                auto key = b64d(kv, "key");
                auto [b, e] = by_key_.equal_range(key);
                for (auto it = b; it != e;) {
                    const auto w = it->second;
                    if (rev <= w->revision) {
                        ++it;
                        continue;
                    }
                    woken.push_back(w);
                    if (!w->hold) {
                        ++it;
                        continue;
                    }
                    w->keys.clear();  // once: its only key
                    it = by_key_.erase(it);
                }
                recent_bytes_ += key.size();
                recent_.emplace_back(std::move(key), rev);
                while (recent_.size() > kRecent || recent_bytes_ > kRecentBytes) {
                    floor_ = std::max(floor_, after(recent_.front().second));
                    recent_bytes_ -= recent_.front().first.size();
                    recent_.pop_front();
                }
                most_bytes_ = std::max(most_bytes_, recent_bytes_);
            }
        }
    }
    wake(woken);
    return go_on;
}

// On the loop thread: the stream ended (its time, a member gone, an error):
// resume from the last revision seen while anyone is subscribed.
void release_feed::on_done(const http::transfer_result& r) {
    std::lock_guard lk(mu_);
    const bool failed = r.how == http::outcome::failed || r.resp.status != 200;
    if (failed) live_ = false;  // a stream that ran its time resumes at once
    {
        auto held = monitor_.lock();
        if (!monitor_.running(held)) return;
        if (watchers_.empty()) {
            // Ends it; the next subscription starts a stream from then on
            // (not a replay of every deletion meanwhile).
            monitor_.lost(held, {});
            from_ = floor_ = since_ = 0;
            forget_recent();
            return;
        }
    }
    if (failed) gateway_.client().rotate_endpoint(r.resp.endpoint);
    ++started_;
    monitor_.restart(stream_request(), failed ? 500ms : monitor_.pace(r.how == http::outcome::timed_out, 30s));
}

std::size_t release_feed::watchers() const {
    std::lock_guard lk(mu_);
    return watchers_.size();
}
std::uint64_t release_feed::streams_started() const {
    std::lock_guard lk(mu_);
    return started_;
}
release_feed::kept_window release_feed::kept() const {
    std::lock_guard lk(mu_);
    return {recent_.size(), recent_bytes_, most_bytes_, from_};
}

}  // namespace distlock::backends::etcd
