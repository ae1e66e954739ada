// zk://h1:2181,h2:2181/base/path — Apache Curator's InterProcessMutex recipe
// over the ZooKeeper C client (multi-threaded flavour), so that a C++ process
// and a Java process using Curator share one lock.
//
// Layout: the lock "name" lives at <base>/<encoded name> (a CONTAINER node, as
// Curator makes it; persistent when the server has no containers). Each attempt
// creates an EPHEMERAL_SEQUENTIAL child "_c_<uuid>-lock-<10 digit sequence>".
// The children sorted by the text after the last "lock-" form the queue; the
// first holds the lock, every other one watches (getData) only the node just
// before its own, so a release wakes one waiter. The fencing token is the lock
// node's czxid (a global, strictly increasing transaction id).
//
// One zhandle (one session) per provider. Its watcher runs on the C client's
// completion thread and never blocks: it updates the session state, wakes the
// waiters of a path, and queues loss reports for a notifier thread of our own,
// which calls report_lost() (the user's on_lost may call unlock(), which waits
// for a completion: it must not run on the completion thread).
#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <zookeeper/zookeeper.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <span>
#include <thread>
#include <tuple>
#include <unordered_map>
#include <utility>

#include "distlock/spi/backend.hpp"
#include "zk_names.hpp"

namespace distlock::backends::zookeeper {
namespace {

using namespace std::chrono_literals;
using clock = std::chrono::steady_clock;
using ms = std::chrono::milliseconds;
constexpr const char* kBackend = "zookeeper";

// ---- process-wide counters (read by tests through read_counters()) ----------
struct atomic_counters {
    std::atomic<std::uint64_t> sessions_opened{0}, lock_nodes_created{0}, children_reads{0},
        predecessor_watches{0}, predecessor_wakeups{0}, node_events{0}, protected_recoveries{0}, disconnections{0};
};
atomic_counters& stats() {
    static atomic_counters c;
    return c;
}

// ---- logging: the C client logs to stderr at INFO by default; route it -------
std::atomic<int> g_log_level{0};  // 0 = off, else a ZooLogLevel
void log_sink(const char* message) {
    if (g_log_level.load() > 0) std::fprintf(stderr, "[zookeeper] %s\n", message);
}

bool is_connection_error(int rc) {
    return rc == ZCONNECTIONLOSS || rc == ZOPERATIONTIMEOUT || rc == ZCLOSING;
}
bool is_session_gone(int rc) { return rc == ZSESSIONEXPIRED || rc == ZINVALIDSTATE || rc == ZSESSIONMOVED; }

[[noreturn]] void fail(int rc, const std::string& what) {
    errc code = errc::unavailable;
    if (rc == ZNOAUTH || rc == ZAUTHFAILED) code = errc::access_denied;
    else if (rc == ZBADARGUMENTS || rc == ZINVALIDACL) code = errc::invalid_argument;
    throw_error(code, kBackend, what + ": " + zerror(rc), rc, zerror(rc));
}

// ---- one asynchronous request, waited for by the calling thread -------------
// The C client calls every completion exactly once (with ZCONNECTIONLOSS,
// ZCLOSING, ... when it cannot do better), so a caller may always wait; the
// result lives in a shared_ptr so that a completion never outlives its target.
struct op {
    std::mutex m;
    std::condition_variable cv;
    bool done = false;
    int rc = ZOK;
    std::string value;
    Stat stat{};
    std::vector<std::string> children;
};
using op_ptr = std::shared_ptr<op>;

void* hold(const op_ptr& o) { return new op_ptr(o); }
op_ptr take(const void* data) {
    auto* p = static_cast<op_ptr*>(const_cast<void*>(data));
    op_ptr o = std::move(*p);
    delete p;
    return o;
}
void finish(const op_ptr& o, int rc) {
    {
        std::lock_guard lk(o->m);
        o->rc = rc;
        o->done = true;
    }
    o->cv.notify_all();
}
void on_stat(int rc, const Stat* stat, const void* data) {
    auto o = take(data);
    if (rc == ZOK && stat) o->stat = *stat;
    finish(o, rc);
}
void on_string_stat(int rc, const char* value, const Stat* stat, const void* data) {
    auto o = take(data);
    if (rc == ZOK) {
        if (value) o->value = value;
        if (stat) o->stat = *stat;
    }
    finish(o, rc);
}

// Submits with `submit(ctx)` without waiting. A synchronous refusal (invalid
// state or arguments) never calls the completion: the context is freed here then
// (marshalling errors may have queued it: leaked on purpose).
template <class Submit>
op_ptr submit(Submit&& call) {
    auto o = std::make_shared<op>();
    void* ctx = hold(o);
    int rc = call(ctx);
    if (rc != ZOK) {
        if (rc != ZMARSHALLINGERROR) take(ctx);
        o->rc = rc;
        o->done = true;
    }
    return o;
}
const op_ptr& wait_op(const op_ptr& o) {
    std::unique_lock lk(o->m);
    o->cv.wait(lk, [&] { return o->done; });
    return o;
}

// Asynchronous form (the server answers a session's requests in order, so a
// request sent right behind it is pipelined: one round trip for both).
op_ptr zk_create_async(zhandle_t* zh, const std::string& path, const std::string& data, int flags) {
    return submit([&](void* ctx) {
        return zoo_acreate2(zh, path.c_str(), data.data(), static_cast<int>(data.size()), &ZOO_OPEN_ACL_UNSAFE, flags,
                            on_string_stat, ctx);
    });
}

// Waited forms: the C client's synchronous calls. In the multi-threaded client
// their answer wakes the caller straight from the I/O thread (an asynchronous
// completion goes through the completion thread first: one thread hop more,
// measurable on a busy machine). They always return: on a lost connection with
// ZCONNECTIONLOSS once the client gives up on it (2/3 of the session timeout
// without an answer at most).
op_ptr zk_create(zhandle_t* zh, const std::string& path, const std::string& data, int flags) {
    auto o = std::make_shared<op>();
    std::vector<char> made(path.size() + 32);
    o->rc = zoo_create2(zh, path.c_str(), data.empty() ? nullptr : data.data(),
                        data.empty() ? -1 : static_cast<int>(data.size()), &ZOO_OPEN_ACL_UNSAFE, flags, made.data(),
                        static_cast<int>(made.size()), &o->stat);
    if (o->rc == ZOK) o->value = made.data();
    o->done = true;
    return o;
}
op_ptr zk_delete(zhandle_t* zh, const std::string& path) {
    auto o = std::make_shared<op>();
    o->rc = zoo_delete(zh, path.c_str(), -1);
    o->done = true;
    return o;
}
op_ptr zk_exists(zhandle_t* zh, const std::string& path, bool watch) {
    auto o = std::make_shared<op>();
    o->rc = zoo_exists(zh, path.c_str(), watch ? 1 : 0, &o->stat);
    o->done = true;
    return o;
}
op_ptr zk_get(zhandle_t* zh, const std::string& path, bool watch) {  // the data is not needed
    auto o = std::make_shared<op>();
    char byte = 0;
    int len = 1;
    o->rc = zoo_get(zh, path.c_str(), watch ? 1 : 0, &byte, &len, &o->stat);
    o->done = true;
    return o;
}
op_ptr zk_children(zhandle_t* zh, const std::string& path) {
    stats().children_reads++;
    auto o = std::make_shared<op>();
    String_vector v{};
    o->rc = zoo_get_children(zh, path.c_str(), 0, &v);
    if (o->rc == ZOK) {
        for (int i = 0; i < v.count; ++i) o->children.emplace_back(v.data[i]);
        deallocate_String_vector(&v);
    }
    o->done = true;
    return o;
}

std::string last_segment(const std::string& path) { return path.substr(path.rfind('/') + 1); }

// ---- settings from the URL ----------------------------------------------------
struct settings {
    std::string hosts;  // "h1:p1,h2:p2" for zookeeper_init
    std::vector<spi::host_port> host_list;
    std::string base;  // "/distlock" by default
    ms session_timeout{10s};
    ms connect_timeout{10s};
    std::string node_data;  // written into every lock node (who holds it)
    std::string digest;     // "user:password" from the URL: digest auth of every session
};

// Fails fast when every host refuses TCP connections (the C client would retry
// silently forever). Any host that accepts or does not answer at once lets the
// real handshake decide, within connect_timeout.
bool all_hosts_refuse(const std::vector<spi::host_port>& hosts) {
    for (const auto& h : hosts) {
        addrinfo hints{};
        hints.ai_socktype = SOCK_STREAM;
        addrinfo* res = nullptr;
        if (::getaddrinfo(h.host.c_str(), std::to_string(h.port).c_str(), &hints, &res) != 0) continue;
        for (auto* ai = res; ai; ai = ai->ai_next) {
            int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
            if (fd < 0) continue;
            bool refused = false;
            if (::connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
                if (errno == EINPROGRESS) {
                    pollfd p{fd, POLLOUT, 0};
                    if (::poll(&p, 1, 1000) > 0) {
                        int err = 0;
                        socklen_t len = sizeof err;
                        ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
                        refused = err != 0;
                    }
                } else {
                    refused = true;
                }
            }
            ::close(fd);
            if (!refused) {
                ::freeaddrinfo(res);
                return false;
            }
        }
        ::freeaddrinfo(res);
    }
    return true;
}

class backend;
class handle;

// One zhandle = one ZooKeeper session (the C client reconnects it to any server
// of the ensemble until the server expires it; then a new one is made).
struct session {
    backend* owner = nullptr;
    std::uint64_t gen = 0;  // our own number: 1, 2, ... per provider
    zhandle_t* zh = nullptr;
    // Guarded by backend::mu_:
    bool connected = false, ever_connected = false, expired = false, auth_failed = false;
    std::int64_t id = 0;
    ms timeout{0};  // negotiated
    clock::time_point last_contact{}, disconnected_at{};
    bool disconnect_loss_reported = false;

    ~session() {
        if (zh) zookeeper_close(zh);  // joins the C client's threads: never call it on them
    }
};

void session_watcher(zhandle_t*, int type, int state, const char* path, void* ctx);

// Work for the notifier thread left behind by a request whose outcome was
// unknown (connection loss): delete `path`, or the children of `dir` whose
// names start with `prefix` (protected mode), once the session is back.
struct cleanup {
    std::uint64_t gen;
    std::string path, dir, prefix;
};

class handle final : public spi::lock_handle {
public:
    handle(backend& be, const spi::lock_request& r);
    ~handle() override;

    std::optional<spi::grant> acquire(spi::deadline until) override;
    void release() override;
    std::chrono::milliseconds keepalive_interval() const override;
    spi::keepalive_result keepalive() override;
    // The session is this lock's lease: a process paused past it has lost the
    // lock without hearing so yet. A grant or a keepalive confirms it for the
    // time after which a disconnected session is presumed expired.
    std::chrono::milliseconds validity() const override;

    void lost(std::string why) noexcept { report_lost(std::move(why)); }

    // Guarded by backend::mu_:
    std::string node_;  // full path of our lock node while held
    std::uint64_t gen_ = 0;
    std::uint64_t czxid_ = 0;
    bool lost_ = false;
    bool notifying_ = false;  // the notifier is inside report_lost for us

private:
    enum class step { held, again, timeout };
    // `listing` (sent at `listed`) is the first children listing; on step::held,
    // `listed` is when the listing that showed our node first was sent.
    step wait_turn(const std::shared_ptr<session>& s, const std::string& node, std::uint64_t czxid,
                   spi::deadline until, bool once, op_ptr listing, spi::deadline& listed);

    backend& be_;
    std::string name_, dir_;
    // "_c_<uuid>-" of the current grant when one of its creates lost its reply
    // (empty otherwise): nodes with this prefix other than ours are orphans.
    std::string orphan_pid_;
};

class backend final : public spi::backend {
public:
    explicit backend(settings s) : settings_(std::move(s)) {
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
        caps_.unsupported = {
            {feature::lease_expiry,
             "no per-lock lease: a lock node lives as long as its holder's session, which the client keeps alive "
             "with heartbeats; session expiry is proved by the ZooKeeper tests (SIGSTOP past the session timeout)"},
        };
        // The server expires a silent session after its timeout, rounded up to its tick.
        caps_.crash_release_bound = timeout_ + timeout_ / 2;
        caps_.reentrant = true;
        notifier_ = std::thread([this] { notifier_loop(); });
    }

    ~backend() override {
        {
            std::lock_guard lk(mu_);
            stop_ = true;
        }
        notify_cv_.notify_all();
        if (notifier_.joinable()) {
            // Destroyed from a user's on_lost callback on the notifier itself.
            if (std::this_thread::get_id() == notifier_.get_id()) notifier_.detach();
            else notifier_.join();
        }
        std::shared_ptr<session> s;
        {
            std::lock_guard lk(mu_);
            s = std::move(current_);
        }
        s.reset();
    }

    std::string_view name() const noexcept override { return kBackend; }
    const capabilities& caps() const noexcept override { return caps_; }
    std::unique_ptr<spi::lock_handle> make_lock(const spi::lock_request& r) override {
        return std::make_unique<handle>(*this, r);
    }
    ms default_lease() const override { return timeout_; }

    std::optional<std::chrono::nanoseconds> round_trip() override {
        auto s = session_for(clock::now() + settings_.session_timeout);
        auto t0 = clock::now();
        auto o = zk_exists(s->zh, "/", false);
        auto t1 = clock::now();
        if (o->rc != ZOK) fail(o->rc, "exists / failed");
        touch(*s);
        return t1 - t0;
    }

    void keepalive_batch(std::span<spi::lock_handle* const> handles, std::span<spi::keepalive_result> results) override;
    void break_lock(std::string_view name) override;

    // ---- used by handles ------------------------------------------------------
    const settings& config() const noexcept { return settings_; }
    ms timeout() const noexcept { return timeout_; }
    // A session without contact for this long is presumed expired (the server may
    // expire it at its timeout, rounded to its tick): a little before the timeout.
    static ms loss_after(ms timeout) { return timeout - timeout / 10; }
    std::string dir_of(std::string_view name) const { return settings_.base + "/" + encode_segment(name); }

    // How long to wait for a (re)connection: never past `until`, except that a
    // single attempt (`until` already passed) may wait for one; and never longer
    // than connect_timeout, so that lock() without a deadline does not hang while
    // no server answers (it throws unavailable_error, as Curator's retry loop does).
    spi::deadline reconnect_limit(spi::deadline until) const {
        auto now = clock::now();
        auto cap = now + settings_.connect_timeout;
        return until <= now ? cap : std::min(until, cap);
    }

    // The current session once connected (waiting as reconnect_limit says);
    // replaces an expired session. Throws unavailable_error.
    std::shared_ptr<session> session_for(spi::deadline until) {
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

    std::shared_ptr<session> current() {
        std::lock_guard lk(mu_);
        return current_;
    }

    // Waits until `s` is connected again (true), expired or `until` passed (false).
    bool wait_connected(session& s, spi::deadline until) {
        std::unique_lock lk(mu_);
        wake_.wait_until(lk, until, [&] { return s.connected || s.expired || stop_; });
        return s.connected && !s.expired;
    }
    std::int64_t session_id(session& s) {
        std::lock_guard lk(mu_);
        return s.id;
    }
    bool session_alive(session& s) {
        std::lock_guard lk(mu_);
        return !s.expired;
    }
    void touch(session& s) {
        std::lock_guard lk(mu_);
        if (s.connected) s.last_contact = clock::now();
    }

    // Makes every missing parent of `dir` (and `dir`) as a container node.
    void make_parents(session& s, const std::string& dir) {
        std::size_t pos = 0;
        while (pos != std::string::npos) {
            pos = dir.find('/', pos + 1);
            std::string sub = dir.substr(0, pos);
            for (int attempt = 0;; ++attempt) {
                int flags = containers_.load() ? ZOO_CONTAINER : ZOO_PERSISTENT;
                auto o = zk_create(s.zh, sub, "", flags);
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
                fail(o->rc, "cannot create " + sub);
            }
        }
    }

    // Guaranteed delete (Curator's guaranteed()): now, or once reconnected.
    void delete_node(session& s, const std::string& path) {
        auto o = zk_delete(s.zh, path);
        if (o->rc == ZOK || o->rc == ZNONODE || is_session_gone(o->rc)) return;
        std::lock_guard lk(mu_);
        cleanups_.push_back({s.gen, path, {}, {}});
        notify_cv_.notify_all();
    }
    void delete_protected_later(session& s, const std::string& dir, const std::string& prefix) {
        std::lock_guard lk(mu_);
        cleanups_.push_back({s.gen, {}, dir, prefix});
        notify_cv_.notify_all();
    }

    // A waiter registers the path it waits on before it sets the watch.
    struct waiter {
        std::string path;
        bool fired = false;
    };
    void add_waiter(waiter& w) {
        std::lock_guard lk(mu_);
        waiters_.emplace(w.path, &w);
    }
    void remove_waiter(waiter& w) {
        std::lock_guard lk(mu_);
        auto [b, e] = waiters_.equal_range(w.path);
        for (auto it = b; it != e; ++it)
            if (it->second == &w) {
                waiters_.erase(it);
                break;
            }
    }
    // Waits until the watch of `w` fired, the session changed state, or `until`.
    void wait_event(waiter& w, session& s, spi::deadline until) {
        std::unique_lock lk(mu_);
        auto seen = session_events_;
        auto ready = [&] { return w.fired || session_events_ != seen || s.expired || !s.connected || stop_; };
        if (until == spi::deadline::max()) wake_.wait(lk, ready);
        else wake_.wait_until(lk, until, ready);
    }

    void register_held(handle& h, const std::string& node, std::uint64_t gen, std::uint64_t czxid) {
        std::lock_guard lk(mu_);
        h.node_ = node;
        h.gen_ = gen;
        h.czxid_ = czxid;
        h.lost_ = false;
        held_[node] = &h;
    }
    // Forgets h's grant; returns {node, gen, lost}.
    std::tuple<std::string, std::uint64_t, bool> unregister_held(handle& h) {
        std::lock_guard lk(mu_);
        auto node = std::exchange(h.node_, {});
        if (!node.empty()) {
            auto it = held_.find(node);
            if (it != held_.end() && it->second == &h) held_.erase(it);
        }
        return {node, h.gen_, h.lost_};
    }
    void forget(handle& h) {
        std::unique_lock lk(mu_);
        for (auto it = held_.begin(); it != held_.end();)
            it = it->second == &h ? held_.erase(it) : std::next(it);
        notify_done_.wait(lk, [&] { return !h.notifying_ || std::this_thread::get_id() == notifier_id_; });
    }

    // Called on the completion thread by session_watcher: never blocks.
    void on_event(session& s, int type, int state, const char* path) {
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
                queue_loss_all(s.gen, state == ZOO_AUTH_FAILED_STATE
                                          ? "ZooKeeper authentication failed: the session is closed"
                                          : "the ZooKeeper session expired: its lock nodes were deleted");
            }
            ++session_events_;
            wake_.notify_all();
            notify_cv_.notify_all();
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
            auto it = held_.find(p);
            if (it != held_.end() && it->second->gen_ == s.gen) {
                tasks_.push_back([this, p, gen = s.gen] {
                    lose(p, gen, "the lock node " + p + " was deleted on the server");
                });
                notify_cv_.notify_all();
            }
        }
        if (woke) wake_.notify_all();
    }

    // Keepalive check of one held handle without a round trip: lost, failed or ok
    // (ok = ask the server).
    std::optional<spi::keepalive_result> local_check(handle& h, std::shared_ptr<session>& out, std::string& node,
                                                     std::uint64_t& czxid) {
        std::lock_guard lk(mu_);
        if (h.node_.empty()) return spi::keepalive_result::lost("not held");
        if (h.lost_) return spi::keepalive_result::lost("the lock was lost");
        if (!current_ || current_->gen != h.gen_ || current_->expired)
            return spi::keepalive_result::lost("the ZooKeeper session that held the lock expired");
        auto& s = *current_;
        if (!s.connected) {
            if (clock::now() - s.last_contact >= loss_after(s.timeout))
                return spi::keepalive_result::lost(disconnected_reason(s));
            return spi::keepalive_result::failed("disconnected from ZooKeeper; the session may still be alive");
        }
        out = current_;
        node = h.node_;
        czxid = h.czxid_;
        return std::nullopt;
    }
    void mark_lost(handle& h) {
        std::lock_guard lk(mu_);
        h.lost_ = true;
    }


private:
    std::shared_ptr<session> open_session() {  // under mu_
        auto s = std::make_shared<session>();
        s->owner = this;
        s->gen = ++next_gen_;
        s->zh = zookeeper_init2(settings_.hosts.c_str(), session_watcher,
                                static_cast<int>(settings_.session_timeout.count()), nullptr, s.get(), 0, log_sink);
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
            zoo_add_auth(s->zh, "digest", settings_.digest.data(), static_cast<int>(settings_.digest.size()),
                         [](int, const void*) {}, nullptr);
        }
        return s;
    }

    // The server expires a session that has been silent for its timeout; a
    // disconnected client declares its locks lost a little before that.
    static std::string disconnected_reason(const session& s) {
        return "no contact with ZooKeeper for " +
               std::to_string(std::chrono::duration_cast<ms>(clock::now() - s.last_contact).count()) +
               " ms (session timeout " + std::to_string(s.timeout.count()) + " ms): the session is presumed expired";
    }

    void queue_loss_all(std::uint64_t gen, std::string why) {  // under mu_
        for (const auto& [path, h] : held_)
            if (h->gen_ == gen && !h->lost_)
                tasks_.push_back([this, p = path, gen, why] { lose(p, gen, why); });
        notify_cv_.notify_all();
    }

    // On the notifier thread: report the loss of the grant at `path`.
    void lose(const std::string& path, std::uint64_t gen, std::string why) {
        handle* h = nullptr;
        {
            std::lock_guard lk(mu_);
            auto it = held_.find(path);
            if (it == held_.end() || it->second->gen_ != gen || it->second->lost_) return;
            h = it->second;
            h->lost_ = true;
            h->notifying_ = true;
        }
        h->lost(std::move(why));
        {
            std::lock_guard lk(mu_);
            h->notifying_ = false;
        }
        notify_done_.notify_all();
    }

    void notifier_loop();
    void run_cleanups(const std::shared_ptr<session>& s);

    settings settings_;
    capabilities caps_;
    ms timeout_{0};
    std::atomic<bool> containers_{true};

    std::mutex mu_;
    std::condition_variable wake_;         // session state changes, watch events
    std::condition_variable notify_cv_;    // work for the notifier
    std::condition_variable notify_done_;  // a report_lost finished
    std::shared_ptr<session> current_;
    std::uint64_t next_gen_ = 0;
    std::uint64_t session_events_ = 0;
    std::uint64_t reconnected_gen_ = 0;  // a (re)connection of this session wants cleanups run
    std::unordered_multimap<std::string, waiter*> waiters_;
    std::map<std::string, handle*> held_;  // lock node path -> holder
    std::deque<std::function<void()>> tasks_;
    std::vector<cleanup> cleanups_;
    bool stop_ = false;
    std::thread notifier_;
    std::thread::id notifier_id_;
};

void session_watcher(zhandle_t*, int type, int state, const char* path, void* ctx) {
    auto* s = static_cast<session*>(ctx);
    if (s && s->owner) s->owner->on_event(*s, type, state, path);
}

void backend::notifier_loop() {
    {
        std::lock_guard lk(mu_);
        notifier_id_ = std::this_thread::get_id();
    }
    std::unique_lock lk(mu_);
    while (!stop_) {
        if (!tasks_.empty()) {
            auto task = std::move(tasks_.front());
            tasks_.pop_front();
            lk.unlock();
            try {
                task();
            } catch (...) {
            }
            lk.lock();
            continue;
        }
        auto s = current_;
        if (s && reconnected_gen_ == s->gen && s->connected) {
            reconnected_gen_ = 0;
            lk.unlock();
            try {
                run_cleanups(s);
            } catch (...) {
            }
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
                queue_loss_all(s->gen, disconnected_reason(*s));
                continue;
            }
            next = due;
        }
        s.reset();  // never the last reference: current_ holds one
        if (next == clock::time_point::max()) notify_cv_.wait(lk);
        else notify_cv_.wait_until(lk, next);
    }
}

// After a (re)connection: finish deletes whose outcome was unknown, and delete
// the nodes of grants that were declared lost while the session survived.
void backend::run_cleanups(const std::shared_ptr<session>& s) {
    std::vector<cleanup> todo;
    std::vector<std::string> lost_nodes;
    {
        std::lock_guard lk(mu_);
        for (auto& c : cleanups_)
            if (c.gen == s->gen) todo.push_back(std::move(c));
        cleanups_.clear();
        for (const auto& [path, h] : held_)
            if (h->gen_ == s->gen && h->lost_) lost_nodes.push_back(path);
    }
    std::vector<cleanup> again;
    for (auto& c : todo) {
        if (!c.path.empty()) {
            auto o = zk_delete(s->zh, c.path);
            if (is_connection_error(o->rc)) again.push_back(std::move(c));
            continue;
        }
        auto kids = zk_children(s->zh, c.dir);
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

void backend::keepalive_batch(std::span<spi::lock_handle* const> handles, std::span<spi::keepalive_result> results) {
    // Ask the server about every held node at once (pipelined), then collect.
    struct pending {
        std::size_t index;
        op_ptr o;
        std::uint64_t czxid;
        std::shared_ptr<session> s;
    };
    std::vector<pending> asked;
    for (std::size_t i = 0; i < handles.size(); ++i) {
        auto& h = static_cast<handle&>(*handles[i]);
        std::shared_ptr<session> s;
        std::string node;
        std::uint64_t czxid = 0;
        if (auto r = local_check(h, s, node, czxid)) {
            if (r->state == spi::keepalive_result::status::lost) mark_lost(h);
            results[i] = *r;
            continue;
        }
        auto o = std::make_shared<op>();
        void* ctx = hold(o);
        // With a watch: from the first keepalive of a grant on, a delete of our
        // node by someone else is reported as soon as it happens.
        int rc = zoo_aexists(s->zh, node.c_str(), 1, on_stat, ctx);
        if (rc != ZOK) {
            take(ctx);
            o->rc = rc;
            o->done = true;
        }
        asked.push_back({i, std::move(o), czxid, std::move(s)});
    }
    for (auto& p : asked) {
        {
            std::unique_lock lk(p.o->m);
            p.o->cv.wait(lk, [&] { return p.o->done; });
        }
        auto& h = static_cast<handle&>(*handles[p.index]);
        int rc = p.o->rc;
        if (rc == ZOK && static_cast<std::uint64_t>(p.o->stat.czxid) == p.czxid) {
            touch(*p.s);
            results[p.index] = spi::keepalive_result::ok();
        } else if (rc == ZOK || rc == ZNONODE) {
            mark_lost(h);
            results[p.index] = spi::keepalive_result::lost("the lock node is gone from the server");
        } else if (is_session_gone(rc)) {
            mark_lost(h);
            results[p.index] = spi::keepalive_result::lost(std::string("the ZooKeeper session is gone: ") + zerror(rc));
        } else {
            results[p.index] = spi::keepalive_result::failed(std::string("exists failed: ") + zerror(rc));
        }
    }
}

// A separate, short-lived session deletes the current holder's node, as an
// operator (or a failure) would; the holder learns it through its own watch.
void backend::break_lock(std::string_view name) {
    struct probe {
        std::mutex m;
        std::condition_variable cv;
        int state = 0;
    } pr;
    auto watcher = [](zhandle_t*, int type, int state, const char*, void* ctx) {
        if (type != ZOO_SESSION_EVENT) return;
        auto* p = static_cast<probe*>(ctx);
        {
            std::lock_guard lk(p->m);
            p->state = state;
        }
        p->cv.notify_all();
    };
    zhandle_t* zh = zookeeper_init2(settings_.hosts.c_str(), watcher, static_cast<int>(timeout_.count()), nullptr, &pr,
                                    0, log_sink);
    if (!zh) throw_error(errc::unavailable, kBackend, "zookeeper_init failed for break_lock");
    if (!settings_.digest.empty())
        zoo_add_auth(zh, "digest", settings_.digest.data(), static_cast<int>(settings_.digest.size()),
                     [](int, const void*) {}, nullptr);
    struct closer {
        zhandle_t* zh;
        ~closer() { zookeeper_close(zh); }
    } close_it{zh};
    {
        std::unique_lock lk(pr.m);
        if (!pr.cv.wait_for(lk, settings_.connect_timeout, [&] { return pr.state == ZOO_CONNECTED_STATE; }))
            throw_error(errc::unavailable, kBackend, "break_lock could not connect to ZooKeeper");
    }
    const auto dir = dir_of(name);
    auto kids = zk_children(zh, dir);
    if (kids->rc == ZNONODE) return;
    if (kids->rc != ZOK) fail(kids->rc, "break_lock: getChildren " + dir + " failed");
    sort_children(kids->children);
    if (kids->children.empty()) return;
    auto o = zk_delete(zh, dir + "/" + kids->children.front());
    if (o->rc != ZOK && o->rc != ZNONODE) fail(o->rc, "break_lock: delete failed");
}

// ---- handle -------------------------------------------------------------------

handle::handle(backend& be, const spi::lock_request& r) : be_(be), name_(r.name), dir_(be.dir_of(r.name)) {}

handle::~handle() { be_.forget(*this); }

std::chrono::milliseconds handle::keepalive_interval() const { return std::max(ms(50), be_.timeout() / 3); }
std::chrono::milliseconds handle::validity() const { return backend::loss_after(be_.timeout()); }

spi::keepalive_result handle::keepalive() {
    spi::keepalive_result r;
    be_.keepalive_batch(std::span<spi::lock_handle* const>(std::array<spi::lock_handle*, 1>{this}.data(), 1),
                        std::span<spi::keepalive_result>(&r, 1));
    return r;
}

std::optional<spi::grant> handle::acquire(spi::deadline until) {
    const bool once = until <= clock::now();
    for (int round = 0;; ++round) {
        if (round > 0 && !once && clock::now() >= until) return std::nullopt;
        if (round > 20) throw_error(errc::unavailable, kBackend, "lock node of '" + name_ + "' kept vanishing");
        auto s = be_.session_for(until);
        orphan_pid_.clear();
        const auto uuid = spi::random_uuid();
        const auto prefix = node_prefix(uuid);
        const auto pid = protected_id(uuid);

        // 1. Create our node (Curator's protected mode: after a connection loss,
        //    look for a child carrying our uuid before creating again).
        std::string node;
        std::uint64_t czxid = 0;
        op_ptr first_listing;
        spi::deadline listed{};  // when the listing that decides was sent
        bool session_lost = false;
        for (int tries = 0; node.empty() && !session_lost; ++tries) {
            if (tries > 10) throw_error(errc::unavailable, kBackend, "cannot create the lock node for '" + name_ + "'");
            // The listing rides in the same round trip: the server answers a
            // session's requests in order, so it already shows our new node.
            listed = clock::now();
            auto o = zk_create_async(s->zh, dir_ + "/" + prefix, be_.config().node_data, ZOO_EPHEMERAL_SEQUENTIAL);
            auto listing = zk_children(s->zh, dir_);
            wait_op(o);
            if (o->rc == ZOK) {
                node = o->value;
                czxid = static_cast<std::uint64_t>(o->stat.czxid);
                stats().lock_nodes_created++;
                first_listing = std::move(listing);
                break;
            }
            if (o->rc == ZNONODE) {
                be_.make_parents(*s, dir_);
                continue;
            }
            if (is_session_gone(o->rc)) {
                session_lost = true;
                break;
            }
            if (!is_connection_error(o->rc)) fail(o->rc, "cannot create a lock node under " + dir_);
            // Outcome unknown: the node may exist. Find it once reconnected.
            orphan_pid_ = pid;
            if (!be_.wait_connected(*s, be_.reconnect_limit(once ? clock::now() : until))) {
                if (be_.session_alive(*s)) {
                    be_.delete_protected_later(*s, dir_, pid);
                    throw_error(errc::unavailable, kBackend,
                                "lost the connection to ZooKeeper while creating the lock node of '" + name_ + "'");
                }
                session_lost = true;
                break;
            }
            auto kids = zk_children(s->zh, dir_);
            if (kids->rc != ZOK && kids->rc != ZNONODE) continue;  // try again (bounded by `tries`)
            for (const auto& k : kids->children) {
                if (k.rfind(pid, 0) != 0) continue;
                auto st = zk_exists(s->zh, dir_ + "/" + k, false);
                if (st->rc == ZOK && st->stat.ephemeralOwner == be_.session_id(*s)) {
                    node = dir_ + "/" + k;
                    czxid = static_cast<std::uint64_t>(st->stat.czxid);
                    stats().protected_recoveries++;
                } else if (st->rc == ZOK) {
                    be_.delete_node(*s, dir_ + "/" + k);  // made by a session that is gone
                }
                break;
            }
        }
        if (session_lost) continue;

        // 2. Wait for our turn; on any failure our node goes (Curator deletes it).
        step result;
        try {
            result = wait_turn(s, node, czxid, until, once, std::move(first_listing), listed);
        } catch (...) {
            be_.unregister_held(*this);
            be_.delete_node(*s, node);
            throw;
        }
        // Held for the session's life; the server confirmed the session (and our
        // node first) in reply to the listing sent at `listed`.
        if (result == step::held) return spi::grant{czxid, listed};
        if (result == step::timeout) {
            be_.delete_node(*s, node);
            return std::nullopt;
        }
        // step::again: our node vanished (session expired, or deleted): start over.
        if (be_.session_alive(*s)) be_.delete_node(*s, node);
    }
}

handle::step handle::wait_turn(const std::shared_ptr<session>& s, const std::string& node, std::uint64_t czxid,
                               spi::deadline until, bool once, op_ptr listing, spi::deadline& listed) {
    const std::string mine = last_segment(node);  // "_c_<uuid>-lock-<10 digits>"
    for (;;) {
        if (!listing) listed = clock::now();
        auto kids = listing ? wait_op(std::exchange(listing, {})) : zk_children(s->zh, dir_);
        if (is_connection_error(kids->rc)) {
            if (!be_.wait_connected(*s, be_.reconnect_limit(once ? clock::now() : until))) {
                if (!be_.session_alive(*s)) return step::again;
                throw_error(errc::unavailable, kBackend,
                            "lost the connection to ZooKeeper while waiting for '" + name_ + "'");
            }
            continue;
        }
        if (kids->rc == ZNONODE || is_session_gone(kids->rc)) return step::again;
        if (kids->rc != ZOK) fail(kids->rc, "getChildren " + dir_ + " failed");
        be_.touch(*s);
        auto& children = kids->children;
        sort_children(children);
        auto it = std::find(children.begin(), children.end(), mine);
        if (it == children.end()) return step::again;  // our node is gone
        // After a create whose reply was lost, a second node carrying this
        // attempt's uuid may show up (the server ran the create after our
        // protected-mode lookup, or a follower's read was behind): it would queue
        // us behind ourselves. Delete it.
        if (!orphan_pid_.empty()) {
            bool removed = false;
            for (const auto& k : children)
                if (k != mine && k.rfind(orphan_pid_, 0) == 0) {
                    be_.delete_node(*s, dir_ + "/" + k);
                    removed = true;
                }
            if (removed) continue;
        }
        if (it == children.begin()) {
            // Ours is first: held. (The keepalive's exists, every session
            // timeout / 3, also sets a watch on our node, so that a delete by
            // someone else is reported at once from then on; a lock held only
            // briefly costs no request beyond create, listing and delete.)
            be_.register_held(*this, node, s->gen, czxid);
            return step::held;
        }
        if (once || clock::now() >= until) return step::timeout;
        backend::waiter w{dir_ + "/" + *std::prev(it)};
        be_.add_waiter(w);
        stats().predecessor_watches++;
        auto o = zk_get(s->zh, w.path, true);
        if (o->rc == ZOK) be_.wait_event(w, *s, until);
        be_.remove_waiter(w);
        if (o->rc == ZNONODE || o->rc == ZOK) {
            if (o->rc == ZOK && !w.fired && clock::now() >= until) return step::timeout;
            continue;
        }
        if (is_session_gone(o->rc)) return step::again;
        if (!is_connection_error(o->rc)) fail(o->rc, "getData " + w.path + " failed");
        // Connection loss: the loop waits for the reconnection.
    }
}

void handle::release() {
    auto [node, gen, was_lost] = be_.unregister_held(*this);
    if (node.empty()) throw_error(errc::not_owner, kBackend, "lock '" + name_ + "' is not held by this handle");
    auto s = be_.current();
    if (!s || s->gen != gen || !be_.session_alive(*s))
        throw_error(errc::not_owner, kBackend, "the ZooKeeper session that held '" + name_ + "' expired");
    auto o = zk_delete(s->zh, node);
    if (auto pid = std::exchange(orphan_pid_, {}); !pid.empty() && o->rc == ZOK) {
        // The grant began with a lost create reply: sweep any late orphan.
        auto kids = zk_children(s->zh, dir_);
        for (const auto& k : kids->children)
            if (k.rfind(pid, 0) == 0) be_.delete_node(*s, dir_ + "/" + k);
    }
    if (o->rc == ZOK) return;
    if (o->rc == ZNONODE) {
        if (was_lost) return;
        throw_error(errc::not_owner, kBackend, "the lock node of '" + name_ + "' was already deleted", o->rc,
                    zerror(o->rc));
    }
    if (is_session_gone(o->rc))
        throw_error(errc::not_owner, kBackend, "the ZooKeeper session that held '" + name_ + "' expired", o->rc,
                    zerror(o->rc));
    be_.delete_node(*s, node);  // queued for the reconnection
    throw_error(errc::in_doubt, kBackend,
                "release of '" + name_ + "' did not complete (" + zerror(o->rc) +
                    "); the node will be deleted once reconnected, or with the session",
                o->rc, zerror(o->rc));
}

// ---- URL -------------------------------------------------------------------------

std::string node_data() {
    char host[256] = {};
    ::gethostname(host, sizeof host - 1);
    return std::string("distlock ") + host + " pid " + std::to_string(::getpid());
}

std::shared_ptr<spi::backend> make_backend(spi::url& u) {
    settings s;
    s.host_list = u.hosts_or_throw(2181);
    for (const auto& h : s.host_list) {
        if (!s.hosts.empty()) s.hosts += ',';
        bool v6 = h.host.find(':') != std::string::npos && h.host.front() != '[';
        s.hosts += (v6 ? "[" + h.host + "]" : h.host) + ":" + std::to_string(h.port);
    }
    s.base = u.path().empty() || u.path() == "/" ? "/distlock" : u.path();
    if (auto why = base_path_problem(s.base); !why.empty())
        throw_error(errc::invalid_argument, kBackend, "bad base path '" + s.base + "': " + why);
    if (auto t = u.take_duration("session_timeout")) s.session_timeout = *t;
    if (s.session_timeout < 100ms || s.session_timeout > 24h)
        throw_error(errc::invalid_argument, kBackend, "session_timeout must be between 100ms and 24h");
    s.connect_timeout = u.take_duration("connect_timeout").value_or(std::max<ms>(s.session_timeout, 5s));
    if (s.connect_timeout.count() <= 0) throw_error(errc::invalid_argument, kBackend, "connect_timeout must be positive");
    if (auto level = u.take("log")) {
        static const std::map<std::string, int> levels{
            {"off", 0}, {"error", ZOO_LOG_LEVEL_ERROR}, {"warn", ZOO_LOG_LEVEL_WARN}, {"info", ZOO_LOG_LEVEL_INFO},
            {"debug", ZOO_LOG_LEVEL_DEBUG}};
        auto it = levels.find(*level);
        if (it == levels.end()) throw_error(errc::invalid_argument, kBackend, "log must be off, error, warn, info or debug");
        g_log_level = it->second;
    }
    // Level 0 turns the C client's logging off altogether: not even formatted
    // (its endpoint formatting shares one static buffer between zhandles' threads).
    zoo_set_debug_level(static_cast<ZooLogLevel>(g_log_level.load()));
    s.node_data = node_data();
    if (!u.user().empty() || !u.password().empty()) s.digest = u.user() + ":" + u.password();
    if (all_hosts_refuse(s.host_list))
        throw_error(errc::unavailable, kBackend, "every ZooKeeper server refused the connection (" + s.hosts + ")",
                    ECONNREFUSED, std::strerror(ECONNREFUSED));
    return std::make_shared<backend>(std::move(s));
}

}  // namespace

counters read_counters() noexcept {
    auto& c = stats();
    counters out;
    out.sessions_opened = c.sessions_opened.load();
    out.lock_nodes_created = c.lock_nodes_created.load();
    out.children_reads = c.children_reads.load();
    out.predecessor_watches = c.predecessor_watches.load();
    out.predecessor_wakeups = c.predecessor_wakeups.load();
    out.node_events = c.node_events.load();
    out.protected_recoveries = c.protected_recoveries.load();
    out.disconnections = c.disconnections.load();
    return out;
}

void register_backend(spi::registry& r) { r.add("zk", make_backend); }

}  // namespace distlock::backends::zookeeper
