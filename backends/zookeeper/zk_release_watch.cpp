// zk:// the release events of asynchronous waits (zk_release_watch.hpp): one
// child watch per directory, listed again on each event on the completion
// thread, and the rules that tell a release from a waiter's own attempt.
//
// Wake rules, for each listing after the first (each follows an event),
// compared with the one before it:
//  - queue: the nodes that hold (holders_of: the first queue node, or the
//    readers before the first writer; the first latch node) are not those
//    that held, or nothing holds now (a holder that came and went between two
//    listings; or one that did while an asynchronous waiter's kept node,
//    zk_queue_lock.cpp, came to lead). A failed try's node never holds, nor
//    does a waiter's node behind a holder, so their create and delete wake
//    nobody.
//  - leases: fewer than `permits` leases (a failed attempt's lease comes and
//    goes while they are `permits` at least).
//  - internal: as a queue, for the semaphore's internal mutex, while its
//    leases have room (an attempt that found the mutex taken failed on it).
#include "zk_release_watch.hpp"

#include <algorithm>
#include <mutex>
#include <unordered_map>
#include <utility>

#include "zk_names.hpp"
#include "zk_session.hpp"

namespace distlock::backends::zookeeper {

namespace {

// One subscription's sink: called under its own (recursive) mutex while
// active, so that its destructor returns only once no call is under way, and
// a sink whose call ends the wait may destroy the subscription itself.
struct subscriber {
    std::recursive_mutex m;
    bool active = true;
    spi::wake_sink sink;
    std::uint32_t permits = 0;
    std::string leases;

    void wake() {
        std::lock_guard lk(m);
        if (active) sink();
    }
};

// The nodes of a listing that hold: the queue's holders, and an election's leader.
std::vector<std::string> holding(std::vector<std::string> children) {
    sort_children(children);
    auto held = holders_of(children);
    sort_latch_children(children);
    if (!children.empty() && is_latch_node(children.front())) held.push_back(children.front());
    return held;
}

// Whether the lock of a queue may have become free from `before` to `now`:
// its holders changed (a waiting node that leads now, whatever came and went
// in between, is worth an attempt of its owner), or none holds.
bool holders_changed(const std::vector<std::string>& before, const std::vector<std::string>& now) {
    const auto held = holding(now);
    return held.empty() || held != holding(before);
}

// Whether the semaphore's internal mutex may have become free from `before` to
// `now` (its taking by a waiter must not wake the others).
bool released(const std::vector<std::string>& before, const std::vector<std::string>& now) {
    const auto held = holding(before);
    return holding(now).empty() || std::any_of(held.begin(), held.end(), [&](const std::string& h) {
               return std::find(now.begin(), now.end(), h) == now.end();
           });
}

}  // namespace

struct release_watches::core : std::enable_shared_from_this<core> {
    struct entry {
        role what = role::queue;
        std::vector<std::shared_ptr<subscriber>> subs;
        std::uint64_t gen = 0;  // the session its watch is set on (0: none: set it at the next connection)
        bool listed = false;
        std::vector<std::string> last;
    };
    // What a request in flight needs when its completion runs.
    struct request {
        std::shared_ptr<core> self;
        std::string dir;
        std::uint64_t gen;
        zhandle_t* zh;
    };

    session_manager& zk;
    mutable std::mutex mu;
    std::unordered_map<std::string, entry> entries;

    explicit core(session_manager& m) : zk(m) {}

    // getChildren with a watch (else, once the directory is missing, exists with one).
    void list(const std::string& dir, std::uint64_t gen, zhandle_t* zh) {
        auto* rq = new request{shared_from_this(), dir, gen, zh};
        if (zoo_aget_children(zh, dir.c_str(), 1, on_children, rq) != ZOK) failed(std::unique_ptr<request>(rq));
    }
    void await_creation(std::unique_ptr<request> rq) {
        auto* raw = rq.release();
        if (zoo_aexists(raw->zh, raw->dir.c_str(), 1, on_exists, raw) != ZOK) failed(std::unique_ptr<request>(raw));
    }

    static void on_children(int rc, const String_vector* v, const void* data) {
        std::unique_ptr<request> rq(static_cast<request*>(const_cast<void*>(data)));
        if (rc == ZNONODE) {
            rq->self->listed(*rq, {});
            rq->self->await_creation(std::move(rq));
            return;
        }
        if (rc != ZOK) {
            rq->self->failed(std::move(rq));
            return;
        }
        std::vector<std::string> children;
        for (std::int32_t i = 0; v && v->data && i < v->count; ++i) children.emplace_back(v->data[i]);
        rq->self->listed(*rq, std::move(children));
    }
    static void on_exists(int rc, const Stat*, const void* data) {
        std::unique_ptr<request> rq(static_cast<request*>(const_cast<void*>(data)));
        if (rc == ZOK) rq->self->list(rq->dir, rq->gen, rq->zh);  // made meanwhile
        else if (rc != ZNONODE) rq->self->failed(std::move(rq));
    }

    // No watch is set: the next connection of a session sets it again.
    void failed(std::unique_ptr<request> rq) {
        std::lock_guard lk(mu);
        auto it = entries.find(rq->dir);
        if (it != entries.end() && it->second.gen == rq->gen) it->second.gen = 0;
    }

    // A listing (with its watch set): wakes the subscriptions it concerns.
    void listed(const request& rq, std::vector<std::string> now) {
        std::vector<std::shared_ptr<subscriber>> woken;
        {
            std::lock_guard lk(mu);
            auto it = entries.find(rq.dir);
            if (it == entries.end()) return;
            auto& e = it->second;
            if (e.listed) {
                switch (e.what) {
                    case role::queue:
                        if (holders_changed(e.last, now)) woken = e.subs;
                        break;
                    case role::leases:
                        for (const auto& s : e.subs)
                            if (now.size() < s->permits) woken.push_back(s);
                        break;
                    case role::internal:
                        if (released(e.last, now))
                            for (const auto& s : e.subs) {
                                auto l = entries.find(s->leases);
                                if (l == entries.end() || !l->second.listed || l->second.last.size() < s->permits)
                                    woken.push_back(s);
                            }
                        break;
                }
            }
            e.listed = true;
            e.last = std::move(now);
        }
        for (const auto& s : woken) s->wake();
    }
};

namespace {

class subscription final : public spi::wake_subscription {
public:
    subscription(std::shared_ptr<release_watches::core> c,
                 std::vector<std::pair<std::string, std::shared_ptr<subscriber>>> subs)
        : core_(std::move(c)), subs_(std::move(subs)) {}
    ~subscription() override {
        for (auto& [dir, s] : subs_) {
            std::lock_guard lk(s->m);  // waits for a call under way
            s->active = false;
        }
        std::lock_guard lk(core_->mu);
        for (auto& [dir, s] : subs_) {
            auto it = core_->entries.find(dir);
            if (it == core_->entries.end()) continue;
            auto& v = it->second.subs;
            v.erase(std::remove(v.begin(), v.end(), s), v.end());
            if (v.empty()) core_->entries.erase(it);  // its watch fires once more, into nothing
        }
    }

private:
    std::shared_ptr<release_watches::core> core_;
    std::vector<std::pair<std::string, std::shared_ptr<subscriber>>> subs_;
};

}  // namespace

release_watches::release_watches(session_manager& zk) : core_(std::make_shared<core>(zk)) {}
release_watches::~release_watches() = default;

std::unique_ptr<spi::wake_subscription> release_watches::subscribe(const std::vector<spec>& specs,
                                                                   spi::wake_sink wake) {
    auto s = core_->zk.current();
    if (s && !core_->zk.session_alive(*s)) s.reset();  // the next session's connection lists
    std::vector<std::pair<std::string, std::shared_ptr<subscriber>>> subs;
    std::vector<std::string> to_list;
    {
        std::lock_guard lk(core_->mu);
        for (const auto& sp : specs) {
            auto sub = std::make_shared<subscriber>();
            sub->sink = wake;
            sub->permits = sp.permits;
            sub->leases = sp.leases;
            auto& e = core_->entries[sp.dir];
            if (e.subs.empty()) e.what = sp.what;
            e.subs.push_back(sub);
            subs.emplace_back(sp.dir, std::move(sub));
            if (e.gen == 0 && s) {
                e.gen = s->gen;
                to_list.push_back(sp.dir);
            }
        }
    }
    for (const auto& dir : to_list) core_->list(dir, s->gen, s->zh);
    return std::make_unique<subscription>(core_, std::move(subs));
}

void release_watches::on_event(session& s, int type, int state, const char* path) {
    std::vector<std::string> to_list;
    {
        std::lock_guard lk(core_->mu);
        if (type == ZOO_SESSION_EVENT) {
            if (state != ZOO_CONNECTED_STATE) return;
            // The C client sets a session's watches again when it reconnects;
            // a new session (or one whose watch failed) lists afresh.
            for (auto& [dir, e] : core_->entries)
                if (e.gen != s.gen) {
                    e.gen = s.gen;
                    to_list.push_back(dir);
                }
        } else if (path) {
            auto it = core_->entries.find(path);
            if (it == core_->entries.end() || it->second.gen != s.gen) return;
            to_list.emplace_back(path);
        }
    }
    for (const auto& dir : to_list) core_->list(dir, s.gen, s.zh);
}

std::size_t release_watches::watched() const {
    std::lock_guard lk(core_->mu);
    return core_->entries.size();
}

}  // namespace distlock::backends::zookeeper
