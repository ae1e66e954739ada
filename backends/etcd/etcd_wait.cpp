// The etcd queue engine's wait (etcd_queue.hpp): until the keys created before
// ours in the deciding range are few enough (the driver says how few and what
// to watch), one range then one watch of the key just ahead of ours (no herd)
// a round, renewing the session while waiting and riding out a leader election.
#include <algorithm>
#include <chrono>
#include <string>
#include <thread>

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
    bool wake_on_put;        // a put of the watched key wakes us too
    bool may_drop_unsynced;  // an unsynced watch is dropped (see queue::watch_ahead())
    std::int64_t at;         // the revision of the range the watch follows
    std::string error{};
    bool unsynced = false, woke = false;

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
        if (flag(result, "created") && may_drop_unsynced && as_i64(field(result, "header"), "revision") > at) {
            unsynced = true;
            return false;
        }
        return true;
    }
};

}  // namespace

// The wait's state from one round to the next.
struct queue::waiting {
    std::chrono::milliseconds renew_every;
    spi::clock::time_point last_renew;
    // Watches given up in a row because they were created unsynced (see
    // watch_ahead()). Bounded so that steady writes cannot keep us ranging:
    // after that many, the watch is kept and its events come from etcd's
    // catch-up loop.
    static constexpr int max_unsynced_retries = 4;
    int unsynced_retries = 0;
    // Rounds whose watch ended before its wait with nothing new (a canceled
    // watch, a member that ends streams at once) back off: else this loop
    // would range and watch again at round-trip speed until `until`.
    spi::backoff idle;
};

// Waits until every key created before ours is gone. Renews the session while
// waiting. Transient errors are retried for a while (a leader election).
queue::turn queue::wait_for_turn(spi::deadline until) {
    waiting w{spi::renewal_period(session_->ttl, 100ms), spi::clock::now(), 0,
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
    const place p = place_of(list(reply, "kvs"));
    if (p.mine) {
        if (where_.marked) return turn::mine;  // mark_granted() checks our key and sets the token
        return confirm_turn();
    }
    now = spi::clock::now();
    auto budget = std::min(std::chrono::duration_cast<std::chrono::milliseconds>(until - now),
                           w.renew_every - std::chrono::duration_cast<std::chrono::milliseconds>(now - w.last_renew));
    budget = std::max<std::chrono::milliseconds>(budget, 1ms);
    if (watch_ahead(w, p, as_i64(field(reply, "header"), "revision"), budget))
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

// One watch of what the driver placed us behind (place_of()), for at most
// `budget`, from just after the range's revision `at`: a deletion after the
// range is in the watch history, so none can be missed. Starting at the
// current revision + 1 keeps the watcher "synced": etcd delivers its events at
// once. If any write (to any key) came between the range and the watch's
// creation, the start is in the past and the watcher is "unsynced": its events
// then come from etcd's catch-up loop, up to 100 ms late. The creation reply's
// header.revision shows it; such a watch is dropped and we range again (the
// range, not the watch, decides). Whether it saw anything new (or ran its
// course): false when it ended sooner with nothing.
bool queue::watch_ahead(waiting& w, const place& p, std::int64_t at, std::chrono::milliseconds budget) {
    const auto rq = p.whole_range
                        ? gateway::watch(where_.blockers, after(at), budget, prefix_end(where_.blockers), true)
                        : gateway::watch(p.watch, after(at), budget);
    watch_seen seen{p.wake_on_put, w.unsynced_retries < waiting::max_unsynced_retries, at};
    auto res = gateway_.client().stream_lines(rq, [&](std::string_view line) { return seen.on_line(line); });
    w.unsynced_retries = seen.unsynced ? w.unsynced_retries + 1 : 0;
    if (!seen.error.empty()) throw_error(errc::unavailable, kBackend, "watch: " + seen.error);
    if (res.how == http::outcome::failed) {
        gateway_.client().rotate_endpoint(res.resp.endpoint);
        throw_error(errc::unavailable, kBackend, "watch stream broke: " + res.error);
    }
    return seen.woke || seen.unsynced || res.how == http::outcome::timed_out;
}

}  // namespace distlock::backends::etcd
