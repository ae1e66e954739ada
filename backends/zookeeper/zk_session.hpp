// zk:// internals: the ZooKeeper session of a provider, what Curator's framework
// does for its recipes (zk_queue.hpp). Never included outside backends/zookeeper/.
//
// One zhandle (one session) per provider. Its watcher runs on the C client's
// completion thread and never blocks: it updates the session state, wakes the
// waiters of a path, and reports lost grants through their loss sinks (which
// only record and queue: the user's on_lost runs on the core's callback
// thread). An upkeep thread of our own declares the grants of a session that
// stayed disconnected too long lost, and finishes, once reconnected, the
// deletes whose outcome was unknown (Curator's guaranteed deletes and
// protected-mode cleanups).
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "zk_client.hpp"
#include "zk_held.hpp"
#include "zk_release_watch.hpp"

namespace distlock::backends::zookeeper {

// ---- settings from the URL ----------------------------------------------------
struct settings {
    std::string hosts;  // "h1:p1,h2:p2" for zookeeper_init
    std::vector<spi::host_port> host_list;
    std::string base;  // "/distlock" by default
    ms session_timeout{10s};
    ms connect_timeout{10s};
    std::string digest;             // "user:password" from the URL: digest auth of every session
    acl_mode acl = acl_mode::open;  // of every node distlock creates (acl=; creator by default with a digest)
    std::size_t max_children = kDefaultMaxChildren;  // the most children of a lock path distlock reads
    int log_level = 0;  // log=: the C client's lines of this provider's sessions shown up to it (0 = none)
};

class session_manager;

// One zhandle = one ZooKeeper session (the C client reconnects it to any server
// of the ensemble until the server expires it; then a new one is made).
struct session {
    session_manager* owner = nullptr;
    std::uint64_t gen = 0;  // our own number: 1, 2, ... per provider
    zhandle_t* zh = nullptr;
    // Guarded by session_manager::mu_:
    bool connected = false, ever_connected = false, expired = false, auth_failed = false;
    std::int64_t id = 0;
    ms timeout{0};  // negotiated
    clock::time_point last_contact{}, disconnected_at{};
    bool disconnect_loss_reported = false;

    ~session() {
        if (zh) zookeeper_close(zh);  // joins the C client's threads: never call it on them
    }
};

// Work for the upkeep thread left behind by a request whose outcome was
// unknown (connection loss): delete `path`, or the children of `dir` whose
// names start with `prefix` (protected mode), once the session is back.
struct cleanup {
    std::uint64_t gen;
    std::string path, dir, prefix;
};

class session_manager {
public:
    // Opens the first session and waits for it (connect_timeout at most): throws
    // unavailable_error, or access_denied_error when the credentials are refused.
    explicit session_manager(settings s);
    ~session_manager();

    const settings& config() const noexcept { return settings_; }
    ms timeout() const noexcept { return timeout_; }  // negotiated by the first session
    // A session without contact for this long is presumed expired (the server may
    // expire it at its timeout, rounded to its tick): a little before the timeout.
    static ms loss_after(ms timeout) { return timeout - timeout / 10; }

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
    std::shared_ptr<session> session_for(spi::deadline until);
    std::shared_ptr<session> current();
    // Waits until `s` is connected again (true), expired or `until` passed (false).
    bool wait_connected(session& s, spi::deadline until);
    std::int64_t session_id(session& s);
    bool session_alive(session& s);
    // Why `s` is presumed expired: expired, or no contact with the server for
    // loss_after(its timeout) (a client paused that long, or cut off, whose
    // connection has not yet noticed). nullopt when it may still be alive.
    std::optional<std::string> presumed_expired(session& s);
    void touch(session& s);

    // Makes every missing parent of `dir` (and `dir`) as a container node; the
    // base path itself persistent when its ACL is owned (acl=creator, read).
    void make_parents(session& s, const std::string& dir);
    // Guaranteed delete (Curator's guaranteed()): now, or once reconnected.
    void delete_node(session& s, const std::string& path);
    void delete_protected_later(session& s, const std::string& dir, const std::string& prefix);

    // A waiter registers the path it waits on before it sets the watch.
    struct waiter {
        std::string path;
        bool fired = false;
    };
    void add_waiter(waiter& w);
    void remove_waiter(waiter& w);
    // Waits until the watch of `w` fired, the session changed state, or `until`.
    void wait_event(waiter& w, session& s, spi::deadline until);

    // The held grants (zk_held.hpp), watched for loss (reported through their
    // sinks): each handle's under the id it got here.
    grant_id new_grant_id();
    void register_held(grant_id id, held_grant g);
    // Forgets the grant of `id` and returns it (an empty one when none is held).
    held_grant unregister_held(grant_id id);
    // Keepalive check of one held grant without a round trip: lost, failed or ok
    // (nullopt: ask the server about `node` on `out`).
    std::optional<spi::keepalive_result> local_check(grant_id id, std::shared_ptr<session>& out, std::string& node,
                                                     std::uint64_t& czxid);
    void mark_lost(grant_id id);

    // Called on the completion thread by the session watcher: never blocks.
    void on_event(session& s, int type, int state, const char* path);

    // The release events of asynchronous waits (zk_release_watch.hpp).
    release_watches& releases() noexcept { return releases_; }

private:
    std::shared_ptr<session> open_session();  // under mu_
    static std::string disconnected_reason(const session& s);

    void lose(held_grant& h, std::string why);                 // under mu_
    void lose_all(std::uint64_t gen, const std::string& why);  // under mu_
    // ---- the upkeep thread: the disconnection deadline and cleanups ----
    void upkeep_loop();
    void run_cleanups(const std::shared_ptr<session>& s);

    settings settings_;
    release_watches releases_{*this};  // before the first session: its watcher reports to it
    ms timeout_{0};
    std::atomic<bool> containers_{true};

    std::mutex mu_;
    std::condition_variable wake_;       // session state changes, watch events
    std::condition_variable upkeep_cv_;  // work for the upkeep thread
    std::shared_ptr<session> current_;
    std::uint64_t next_gen_ = 0;
    std::uint64_t session_events_ = 0;
    std::uint64_t reconnected_gen_ = 0;  // a (re)connection of this session wants cleanups run
    std::unordered_multimap<std::string, waiter*> waiters_;
    held_registry held_;
    std::vector<cleanup> cleanups_;
    bool stop_ = false;
    std::thread upkeep_;
};

// Runs `f` on a separate, short-lived session of the same servers and
// credentials (connected within connect_timeout, else unavailable_error naming
// `what`), then closes it: an operator's view, apart from the provider's session.
void with_separate_session(const settings& s, ms session_timeout, const std::string& what,
                           const std::function<void(zhandle_t*)>& f);

}  // namespace distlock::backends::zookeeper
