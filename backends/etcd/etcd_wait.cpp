// The etcd queue engine's wait (etcd_queue.hpp): until the keys created before
// ours in the deciding range are few enough (the driver says how few and what
// to wait for), one range then one wait for the key just ahead of ours (no
// herd) a round: its deletion as the provider's release feed sees it, or a
// watch of it; renewing the session while waiting and riding out a leader
// election.
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "distlock/error.hpp"
#include "etcd_queue.hpp"
#include "http/http_codec.hpp"
#include "http/http_json.hpp"

namespace distlock::backends::etcd {

using namespace std::chrono_literals;
using http::base64_encode;

namespace {

// What one watch of the keys ahead of ours saw, message by message.
struct watch_seen {
    bool wake_on_put;                    // a put of the watched key wakes us too
    std::int64_t at;                     // the revision of the range the watch follows
    const std::function<bool()>& moved;  // whether the keys ahead changed since (a range again)
    std::string error{};
    std::exception_ptr failed{};  // moved() threw (not through the transfer's C callbacks)
    bool woke = false;

    // One message of the stream: false to end the watch.
    bool on_line(std::string_view line) {
        const json msg = http::parse_reply(line);
        if (msg.is_discarded() || !msg.is_object()) {
            error = "unexpected reply (a line of the stream that is not a watch message)";
            return false;
        }
        if (msg.contains("error")) {
            error = error_text(field(msg, "error"));
            return false;
        }
        const json& result = message_result(msg);
        if (flag(result, "canceled")) return false;  // compacted etc.: range again
        for (const auto& ev : list(result, "events")) {
            if (wake_on_put || text(ev, "type") == "DELETE") {
                woke = true;
                return false;
            }
        }
        // Writes came between the range and the watch: what they did before the
        // watch began is not in it, so the keys are read again.
        if (flag(result, "created") && as_i64(field(result, "header"), "revision") > at) {
            try {
                woke = moved();
            } catch (...) {
                failed = std::current_exception();
            }
            return !woke && !failed;
        }
        return true;
    }
};

}  // namespace

// The wait's state from one round to the next.
struct queue::waiting {
    std::chrono::milliseconds renew_every;
    spi::clock::time_point last_renew;
    // Rounds whose watch ended before its wait with nothing new (a canceled
    // watch, a member that ends streams at once) back off: else this loop
    // would range and watch again at round-trip speed until `until`.
    spi::backoff idle;
    // A wait for deletions: the provider's release feed, subscribed at the
    // first such round, rings the bell (see queue::wait_for_release()).
    struct {
        std::mutex m;
        std::condition_variable cv;
        bool rang = false;
    } bell{};
    std::shared_ptr<release_feed::watcher> watcher{};
    std::unique_ptr<spi::wake_subscription> feed{};  // after bell: gone before it
};

// Waits until every key created before ours is gone. Renews the session while
// waiting. Transient errors are retried for a while (a leader election).
queue::turn queue::wait_for_turn(spi::deadline until) {
    waiting w{spi::renewal_period(session_->ttl, 100ms), spi::clock::now(),
              spi::backoff(request_.retry_min, request_.retry_max)};
    auto failing_since = spi::clock::time_point{};
    const auto tolerate =
        std::max<std::chrono::milliseconds>(3s, std::chrono::duration_cast<std::chrono::milliseconds>(session_->ttl));
    for (;;) {
        auto now = spi::clock::now();
        if (now >= until) return turn::timed_out;
        try {
            if (auto t = wait_round(w, until, now)) return *t;
            failing_since = {};
        } catch (const unavailable_error&) {
            now = spi::clock::now();
            if (failing_since == spi::clock::time_point{}) failing_since = now;
            if (now - failing_since > tolerate) throw;
            std::this_thread::sleep_for(std::min<std::chrono::nanoseconds>(100ms, until - now));
        }
    }
}

// One round, begun at `now`: the renewal when due, the keys ahead of ours,
// then our turn or one watch of what is ahead. No turn yet: nullopt.
std::optional<queue::turn> queue::wait_round(waiting& w, spi::deadline until, spi::clock::time_point now) {
    if (now - w.last_renew >= w.renew_every) {
        auto r = gateway_.renew(*session_);
        if (r.state == spi::keepalive_result::status::lost) return turn::key_lost;
        if (r.state == spi::keepalive_result::status::failed) throw_error(errc::unavailable, kBackend, r.message);
        w.last_renew = spi::clock::now();
    }
    // The keys ahead of ours in the deciding range, as the driver reads them.
    json ahead = prefix_range(where_.blockers);
    ahead["sort_target"] = "CREATE";
    ahead["max_create_revision"] = std::to_string(revision_ - 1);
    ahead["keys_only"] = true;
    narrow_ahead(ahead);
    auto reply = gateway_.call("/v3/kv/range", ahead);
    const json& kvs = list(reply, "kvs");
    const place p = place_of(kvs);
    if (p.mine) {
        if (where_.marked) return turn::mine;  // mark_granted() checks our key and sets the token
        return confirm_turn();
    }
    now = spi::clock::now();
    auto budget = std::min(std::chrono::duration_cast<std::chrono::milliseconds>(until - now),
                           w.renew_every - std::chrono::duration_cast<std::chrono::milliseconds>(now - w.last_renew));
    budget = std::max<std::chrono::milliseconds>(budget, 1ms);
    const auto at = as_i64(field(reply, "header"), "revision");
    auto moved = [&] { return list(gateway_.call("/v3/kv/range", ahead), "kvs") != kvs; };
    if (p.wake_on_put ? watch_ahead(p, at, moved, budget) : wait_for_release(w, p, kvs, at, budget))
        w.idle = spi::backoff(request_.retry_min, request_.retry_max);
    else w.idle.sleep(until);
    return std::nullopt;
}

// Our turn: make sure our own key survived the wait.
queue::turn queue::confirm_turn() {
    auto mine = gateway_.call("/v3/kv/range", json{{"key", base64_encode(key_)}, {"keys_only", true}});
    const auto& own = list(mine, "kvs");
    if (own.empty() || as_i64(own[0], "create_revision") != revision_) return turn::key_lost;
    token_ = as_i64(field(mine, "header"), "revision");
    return turn::mine;
}

// A wait of at most `budget` for the deletion of what the driver placed us
// behind (place_of(): the key just ahead, or every key ahead) after the
// range's revision `at`, as the provider's release feed sees it: its one
// stream of the deletions under the prefix, long running and so "synced" (a
// watch made for the wait is not always: see watch_ahead()). A deletion
// between the range and this call, or one the feed cannot vouch it saw, rings
// at once (release_feed::blocked_by). Always true: it rang or ran its course.
bool queue::wait_for_release(waiting& w, const place& p, const json& kvs, std::int64_t at,
                             std::chrono::milliseconds budget) {
    auto& feed = gateway_.releases();
    if (!w.feed) {
        w.feed = feed.subscribe(spi::wake_sink([&bell = w.bell] {
                                    {
                                        std::lock_guard lk(bell.m);
                                        bell.rang = true;
                                    }
                                    bell.cv.notify_one();
                                }),
                                w.watcher);
    }
    std::vector<std::string> keys;
    if (p.whole_range)
        for (const auto& kv : kvs) keys.push_back(b64d(kv, "key"));
    else keys.push_back(p.watch);
    {
        std::lock_guard lk(w.bell.m);
        w.bell.rang = false;  // a ring of an earlier round: this round's range has seen it
    }
    feed.blocked_by(w.watcher, std::move(keys), at);
    std::unique_lock lk(w.bell.m);
    w.bell.cv.wait_for(lk, budget, [&] { return w.bell.rang; });
    return true;
}

// One watch of what the driver placed us behind (place_of()), for at most
// `budget`. It starts at the store's current revision (no start_revision), so
// that etcd counts the watcher "synced" and delivers its events at once: a
// watch from a revision in the past is "unsynced", its events come from etcd's
// catch-up loop up to 100 ms late, and any write (to any key) between the
// range at revision `at` and the watch's creation puts `at + 1` in the past.
// Its creation reply's header.revision says whether such writes came; then
// the keys ahead are read again (`moved`, on another connection, the watch
// open): a change is a wake-up, none means that the watch, which saw every
// write after its creation, misses nothing. Not quite "at once": etcd (3.4,
// serverWatchStream) reads the revision of a watch without start_revision
// before it registers the watch, so a write in between still leaves it
// unsynced, its events up to 100 ms late (2026-11-28: 7 of 200 fresh watches
// under `bench --mode contended --processes 4`). Only the semaphore's wait for
// the put of the waiter ahead of it watches so; deletions come from the
// release feed (wait_for_release()). Whether it saw anything new (or
// ran its course): false when it ended sooner with nothing.
bool queue::watch_ahead(const place& p, std::int64_t at, const std::function<bool()>& moved,
                        std::chrono::milliseconds budget) {
    const auto rq = p.whole_range ? gateway::watch(where_.blockers, 0, budget, prefix_end(where_.blockers), true)
                                  : gateway::watch(p.watch, 0, budget);
    watch_seen seen{p.wake_on_put, at, moved};
    auto res = gateway_.client().stream_lines(rq, [&](std::string_view line) { return seen.on_line(line); });
    if (seen.failed) std::rethrow_exception(seen.failed);
    if (!seen.error.empty()) throw_error(errc::unavailable, kBackend, "watch: " + seen.error);
    if (res.how == http::outcome::failed) {
        gateway_.client().rotate_endpoint(res.resp.endpoint);
        throw_error(errc::unavailable, kBackend, "watch stream broke: " + res.error);
    }
    return seen.woke || res.how == http::outcome::timed_out;
}

}  // namespace distlock::backends::etcd
