#include "zk_session.hpp"

#include <cerrno>
#include <cstring>

#include "zk_names.hpp"

namespace distlock::backends::zookeeper {
namespace {

void session_watcher(zhandle_t* zh, int type, int state, const char* path, void* ctx) {
    if (type == ZOO_SESSION_EVENT && state == ZOO_CONNECTED_STATE) mark_connection_cloexec(zh);
    auto* s = static_cast<session*>(ctx);
    if (!s || !s->owner) return;
    s->owner->on_event(*s, type, state, path);
    s->owner->releases().on_event(*s, type, state, path);
}

}  // namespace

session_manager::session_manager(settings s) : settings_(std::move(s)) {
    std::unique_lock lk(mu_);
    current_ = open_session();
    auto deadline = clock::now() + settings_.connect_timeout;
    bool ok = wake_.wait_until(lk, deadline, [&] { return current_->connected || current_->expired; });
    if (!ok || !current_->connected) {
        auto s = std::move(current_);
        bool auth = s->auth_failed;
        lk.unlock();
        s.reset();
        throw_error(auth ? errc::access_denied : errc::unavailable, kBackend,
                    auth ? "authentication to ZooKeeper failed"
                         : "no ZooKeeper server of " + settings_.hosts + " answered within " +
                               std::to_string(settings_.connect_timeout.count()) + " ms");
    }
    timeout_ = current_->timeout;
    lk.unlock();
    upkeep_ = std::thread([this] { upkeep_loop(); });
}

session_manager::~session_manager() {
    {
        std::lock_guard lk(mu_);
        stop_ = true;
    }
    upkeep_cv_.notify_all();
    if (upkeep_.joinable()) upkeep_.join();
    std::shared_ptr<session> s;
    {
        std::lock_guard lk(mu_);
        s = std::move(current_);
    }
    s.reset();
}

std::shared_ptr<session> session_manager::open_session() {  // under mu_
    auto s = std::make_shared<session>();
    s->owner = this;
    s->gen = ++next_gen_;
    s->zh = zk_init(settings_.hosts, session_watcher, settings_.session_timeout, s.get(), settings_.log_level);
    if (!s->zh) {
        int err = errno;
        throw_error(errc::unavailable, kBackend, "zookeeper_init failed for " + settings_.hosts, err,
                    std::strerror(err));
    }
    stats().sessions_opened++;
    if (!settings_.digest.empty()) {
        // Sent with the handshake of every (re)connection of this session. A
        // digest is never refused as such: wrong credentials just do not match
        // an ACL, and the requests that need them fail with ZNOAUTH.
        zoo_add_auth(
            s->zh, "digest", settings_.digest.data(), static_cast<int>(settings_.digest.size()),
            [](int, const void*) {}, nullptr);
    }
    return s;
}

std::shared_ptr<session> session_manager::session_for(spi::deadline until) {
    auto limit = reconnect_limit(until);
    std::shared_ptr<session> retired;
    std::unique_lock lk(mu_);
    for (;;) {
        if (stop_) throw_error(errc::unavailable, kBackend, "the provider is shutting down");
        if (current_->expired) {
            auto fresh = open_session();  // may throw: current_ stays as it was
            retired = std::exchange(current_, std::move(fresh));
        }
        if (current_->connected) {
            auto s = current_;
            lk.unlock();
            return s;  // `retired` closes here, outside mu_
        }
        if (!wake_.wait_until(lk, limit, [&] { return current_->connected || current_->expired || stop_; })) {
            lk.unlock();
            throw_error(errc::unavailable, kBackend, "not connected to ZooKeeper (" + settings_.hosts + ")");
        }
    }
}

std::shared_ptr<session> session_manager::current() {
    std::lock_guard lk(mu_);
    return current_;
}

bool session_manager::wait_connected(session& s, spi::deadline until) {
    std::unique_lock lk(mu_);
    wake_.wait_until(lk, until, [&] { return s.connected || s.expired || stop_; });
    return s.connected && !s.expired;
}
std::int64_t session_manager::session_id(session& s) {
    std::lock_guard lk(mu_);
    return s.id;
}
bool session_manager::session_alive(session& s) {
    std::lock_guard lk(mu_);
    return !s.expired;
}
std::optional<std::string> session_manager::presumed_expired(session& s) {
    std::lock_guard lk(mu_);
    if (s.expired) return "the ZooKeeper session expired";
    if (clock::now() - s.last_contact >= loss_after(s.timeout)) return disconnected_reason(s);
    return std::nullopt;
}
void session_manager::touch(session& s) {
    std::lock_guard lk(mu_);
    if (s.connected) s.last_contact = clock::now();
}

void session_manager::make_parents(session& s, const std::string& dir) {
    std::size_t pos = 0;
    while (pos != std::string::npos) {
        pos = dir.find('/', pos + 1);
        std::string sub = dir.substr(0, pos);
        // The base path of an owned ACL (creator, read) is persistent: a
        // container would be removed once empty, and under an open parent any
        // identity could then make it first and deny every name under it.
        const bool owned_base = sub == settings_.base && settings_.acl != acl_mode::open;
        for (int attempt = 0;; ++attempt) {
            int flags = containers_.load() && !owned_base ? ZOO_CONTAINER : ZOO_PERSISTENT;
            auto o = zk_create(s.zh, sub, "", flags, settings_.acl);
            if (o->rc == ZOK || o->rc == ZNODEEXISTS) break;
            if (flags == ZOO_CONTAINER && (o->rc == ZUNIMPLEMENTED || o->rc == ZBADARGUMENTS)) {
                containers_ = false;  // a 3.4 server: persistent parents, as Curator does
                continue;
            }
            if (o->rc == ZNOAUTH && zk_exists(s.zh, sub, false)->rc == ZOK) break;
            if (o->rc == ZNONODE && attempt < 5) {  // a parent container vanished meanwhile
                pos = 0;
                break;
            }
            // A connection blip (a loaded machine's operation timeout): a
            // parent is made idempotently, so again once reconnected, as the
            // lock node itself is (within connect_timeout, a few times).
            if (is_connection_error(o->rc) && attempt < 5 && wait_connected(s, reconnect_limit(clock::now()))) continue;
            throw_client_error(o->rc, kBackend, "cannot create " + sub);
        }
    }
}

void session_manager::delete_node(session& s, const std::string& path) {
    auto o = zk_delete(s.zh, path);
    if (o->rc == ZOK || o->rc == ZNONODE || is_session_gone(o->rc)) return;
    std::lock_guard lk(mu_);
    cleanups_.push_back({s.gen, path, {}, {}});
    upkeep_cv_.notify_all();
}
void session_manager::delete_protected_later(session& s, const std::string& dir, const std::string& prefix) {
    std::lock_guard lk(mu_);
    cleanups_.push_back({s.gen, {}, dir, prefix});
    upkeep_cv_.notify_all();
}

void session_manager::add_waiter(waiter& w) {
    std::lock_guard lk(mu_);
    waiters_.emplace(w.path, &w);
}
void session_manager::remove_waiter(waiter& w) {
    std::lock_guard lk(mu_);
    auto [b, e] = waiters_.equal_range(w.path);
    for (auto it = b; it != e; ++it)
        if (it->second == &w) {
            waiters_.erase(it);
            break;
        }
}
void session_manager::wait_event(waiter& w, session& s, spi::deadline until) {
    std::unique_lock lk(mu_);
    auto seen = session_events_;
    auto ready = [&] { return w.fired || session_events_ != seen || s.expired || !s.connected || stop_; };
    if (until == spi::deadline::max()) wake_.wait(lk, ready);
    else wake_.wait_until(lk, until, ready);
}

grant_id session_manager::new_grant_id() {
    std::lock_guard lk(mu_);
    return held_.next_id();
}
void session_manager::register_held(grant_id id, held_grant g) {
    std::lock_guard lk(mu_);
    held_.add(id, std::move(g));
}
held_grant session_manager::unregister_held(grant_id id) {
    std::lock_guard lk(mu_);
    return held_.remove(id);
}

std::optional<spi::keepalive_result> session_manager::local_check(grant_id id, std::shared_ptr<session>& out,
                                                                  std::string& node, std::uint64_t& czxid) {
    std::lock_guard lk(mu_);
    const auto* h = held_.find(id);
    if (!h) return spi::keepalive_result::lost("not held");
    if (h->lost) return spi::keepalive_result::lost("the lock was lost");
    if (!current_ || current_->gen != h->gen || current_->expired)
        return spi::keepalive_result::lost("the ZooKeeper session that held the lock expired");
    auto& s = *current_;
    if (!s.connected) {
        if (clock::now() - s.last_contact >= loss_after(s.timeout))
            return spi::keepalive_result::lost(disconnected_reason(s));
        return spi::keepalive_result::failed("disconnected from ZooKeeper; the session may still be alive");
    }
    out = current_;
    node = h->node;
    czxid = h->czxid;
    return std::nullopt;
}
void session_manager::mark_lost(grant_id id) {
    std::lock_guard lk(mu_);
    if (auto* h = held_.find(id)) h->lost = true;
}

// Called on the completion thread by session_watcher: never blocks.
void session_manager::on_event(session& s, int type, int state, const char* path) {
    std::lock_guard lk(mu_);
    auto now = clock::now();
    if (type == ZOO_SESSION_EVENT) {
        if (state == ZOO_CONNECTED_STATE) {
            s.connected = true;
            s.ever_connected = true;
            s.last_contact = now;
            s.disconnect_loss_reported = false;
            if (const clientid_t* id = zoo_client_id(s.zh)) s.id = id->client_id;
            s.timeout = ms(zoo_recv_timeout(s.zh));
            if (current_.get() == &s) reconnected_gen_ = s.gen;
        } else if (state == ZOO_CONNECTING_STATE || state == ZOO_ASSOCIATING_STATE) {
            if (s.connected) {
                s.disconnected_at = now;
                stats().disconnections++;
            }
            s.connected = false;
        } else if (state == ZOO_EXPIRED_SESSION_STATE || state == ZOO_AUTH_FAILED_STATE) {
            s.connected = false;
            s.expired = true;
            s.auth_failed = state == ZOO_AUTH_FAILED_STATE;
            lose_all(s.gen, state == ZOO_AUTH_FAILED_STATE
                                ? "ZooKeeper authentication failed: the session is closed"
                                : "the ZooKeeper session expired: its lock nodes were deleted");
        }
        ++session_events_;
        wake_.notify_all();
        upkeep_cv_.notify_all();
        return;
    }
    if (!path) return;
    stats().node_events++;
    std::string p(path);
    auto [b, e] = waiters_.equal_range(p);
    bool woke = false;
    for (auto it = b; it != e; ++it) {
        it->second->fired = true;
        woke = true;
    }
    if (woke) stats().predecessor_wakeups++;
    if (type == ZOO_DELETED_EVENT) {
        auto* h = held_.find_node(p);
        if (h && h->gen == s.gen) lose(*h, "the lock node " + p + " was deleted on the server");
    }
    if (woke) wake_.notify_all();
}

// The server expires a session that has been silent for its timeout; a
// disconnected client declares its locks lost a little before that.
std::string session_manager::disconnected_reason(const session& s) {
    return "no contact with ZooKeeper for " +
           std::to_string(std::chrono::duration_cast<ms>(clock::now() - s.last_contact).count()) +
           " ms (session timeout " + std::to_string(s.timeout.count()) + " ms): the session is presumed expired";
}

// A grant is lost: the sink records it and queues the user's on_lost for the
// core's callback thread, so calling it here, under mu_ and on the completion
// thread, never waits for user code.
void session_manager::lose(held_grant& h, std::string why) {  // under mu_
    if (h.lost) return;
    h.lost = true;
    h.sink(std::move(why));
}

void session_manager::lose_all(std::uint64_t gen, const std::string& why) {  // under mu_
    held_.for_each([&](held_grant& h) {
        if (h.gen == gen) lose(h, why);
    });
}

// ---- the upkeep thread: the disconnection deadline and cleanups --------------

void session_manager::upkeep_loop() {
    std::unique_lock lk(mu_);
    while (!stop_) {
        auto s = current_;
        if (s && reconnected_gen_ == s->gen && s->connected) {
            reconnected_gen_ = 0;
            lk.unlock();
            try {
                run_cleanups(s);
            } catch (...) {}
            s.reset();
            lk.lock();
            continue;
        }
        // A disconnected session: declare its locks lost before the server can
        // have expired it (unless it reconnects first).
        auto next = clock::time_point::max();
        if (s && s->ever_connected && !s->connected && !s->expired && !s->disconnect_loss_reported) {
            auto due = s->last_contact + loss_after(s->timeout);
            if (clock::now() >= due) {
                s->disconnect_loss_reported = true;
                // The nodes of a session that survives are deleted on reconnection.
                lose_all(s->gen, disconnected_reason(*s));
                continue;
            }
            next = due;
        }
        s.reset();  // never the last reference: current_ holds one
        if (next == clock::time_point::max()) upkeep_cv_.wait(lk);
        else upkeep_cv_.wait_until(lk, next);
    }
}

// After a (re)connection: finish deletes whose outcome was unknown, and delete
// the nodes of grants that were declared lost while the session survived.
void session_manager::run_cleanups(const std::shared_ptr<session>& s) {
    std::vector<cleanup> todo;
    std::vector<std::string> lost_nodes;
    {
        std::lock_guard lk(mu_);
        for (auto& c : cleanups_)
            if (c.gen == s->gen) todo.push_back(std::move(c));
        cleanups_.clear();
        held_.for_each([&](const held_grant& h) {
            if (h.gen == s->gen && h.lost) lost_nodes.push_back(h.node);
        });
    }
    std::vector<cleanup> again;
    for (auto& c : todo) {
        if (!c.path.empty()) {
            auto o = zk_delete(s->zh, c.path);
            if (is_connection_error(o->rc)) again.push_back(std::move(c));
            continue;
        }
        auto kids = zk_children(s->zh, c.dir, settings_.max_children);
        if (is_connection_error(kids->rc)) {
            again.push_back(std::move(c));
            continue;
        }
        for (const auto& k : kids->children)
            if (k.rfind(c.prefix, 0) == 0) {
                auto o = zk_delete(s->zh, c.dir + "/" + k);
                if (is_connection_error(o->rc)) again.push_back({c.gen, c.dir + "/" + k, {}, {}});
            }
    }
    for (const auto& n : lost_nodes) {
        auto o = zk_delete(s->zh, n);
        if (is_connection_error(o->rc)) again.push_back({s->gen, n, {}, {}});
    }
    if (!again.empty()) {
        std::lock_guard lk(mu_);
        for (auto& c : again) cleanups_.push_back(std::move(c));
    }
}

void with_separate_session(const settings& s, ms session_timeout, const std::string& what,
                           const std::function<void(zhandle_t*)>& f) {
    struct probe {
        std::mutex m;
        std::condition_variable cv;
        int state = 0;
    } pr;
    auto watcher = [](zhandle_t* zh, int type, int state, const char*, void* ctx) {
        if (type != ZOO_SESSION_EVENT) return;
        if (state == ZOO_CONNECTED_STATE) mark_connection_cloexec(zh);
        auto* p = static_cast<probe*>(ctx);
        {
            std::lock_guard lk(p->m);
            p->state = state;
        }
        p->cv.notify_all();
    };
    zhandle_t* zh = zk_init(s.hosts, watcher, session_timeout, &pr, s.log_level);
    if (!zh) throw_error(errc::unavailable, kBackend, "zookeeper_init failed for " + what);
    if (!s.digest.empty())
        zoo_add_auth(
            zh, "digest", s.digest.data(), static_cast<int>(s.digest.size()), [](int, const void*) {}, nullptr);
    struct closer {
        zhandle_t* zh;
        ~closer() { zookeeper_close(zh); }
    } close_it{zh};
    {
        std::unique_lock lk(pr.m);
        if (!pr.cv.wait_for(lk, s.connect_timeout, [&] { return pr.state == ZOO_CONNECTED_STATE; }))
            throw_error(errc::unavailable, kBackend, what + " could not connect to ZooKeeper");
    }
    f(zh);
}

}  // namespace distlock::backends::zookeeper
