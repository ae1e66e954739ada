// zk:// internals: the thin layer over the ZooKeeper C client (multi-threaded
// flavour) that the session layer (zk_session.hpp) and the lock recipes
// (zk_queue.hpp) build on. Never included outside backends/zookeeper/.
//
//  - error translation: throw_client_error() and the two classes of return codes
//    the callers branch on (connection trouble, session gone)
//  - op: one request's result; the zk_* wrappers run one request each
//  - the process-wide counters behind read_counters() (zk_names.hpp)
//  - the C client's log, per provider, on stderr only when its URL asks for it
//  - all_hosts_refuse(): a TCP probe, so that a dead ensemble fails fast
//  - the ACLs of the nodes distlock creates, the cap on child lists, and
//    close-on-exec for the C client's descriptors
#pragma once

#include <zookeeper/zookeeper.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "distlock/spi/backend.hpp"

namespace distlock::backends::zookeeper {

using namespace std::chrono_literals;
using clock = std::chrono::steady_clock;
using ms = std::chrono::milliseconds;
inline constexpr const char* kBackend = "zookeeper";

// ---- process-wide counters (read by tests through read_counters()) ----------
struct atomic_counters {
    std::atomic<std::uint64_t> sessions_opened{0}, lock_nodes_created{0}, children_reads{0}, predecessor_watches{0},
        predecessor_wakeups{0}, node_events{0}, protected_recoveries{0}, disconnections{0}, inspect_requests{0};
};
atomic_counters& stats();

// ---- logging: the C client's own log, per provider ---------------------------
// The C client formats a line when its process-wide level lets it through and
// hands it to the log callback of the handle it concerns: a plain function,
// without context, so every level has its own (log_sink_for). A handle's
// callback is that of its provider's log= level and drops the lines above it:
// one provider's log= never makes another provider's sessions print, and
// log=off never silences another. The lines a provider asked for go to stderr
// (the one place distlock writes to: it has no way to the provider's log hook,
// see docs/backends/zookeeper.md). Levels: 0 = off, else a ZooLogLevel.
// The URL's log= (off, error, warn, info, debug; off when not given). Throws
// invalid_argument_error.
int parse_log_level(const std::optional<std::string>& value);
log_callback_fn log_sink_for(int level);
// While it lives, one provider's share of the C client's process-wide level:
// the highest level of the live providers (0 when none asked: lines are not
// even formatted; the C client's endpoint formatting shares one static buffer
// between threads).
class log_level_use {
public:
    explicit log_level_use(int level);
    ~log_level_use();
    log_level_use(const log_level_use&) = delete;
    log_level_use& operator=(const log_level_use&) = delete;

private:
    int level_;
};

// ---- ACLs of the nodes distlock creates (the URL's acl=) ----------------------
//   open     world:anyone:cdrwa (ZOO_OPEN_ACL_UNSAFE): anyone who reaches the
//            ensemble may delete a holder's node or queue before it
//   read     the creator's identity (the "auth" scheme: every identity the
//            session authenticated, here the URL's digest) may do anything,
//            anyone may read (list, getData: inspect and monitors)
//   creator  the creator's identity only (ZOO_CREATOR_ALL_ACL)
// read and creator need credentials: the server refuses an "auth" ACL from an
// unauthenticated session (ZINVALIDACL).
enum class acl_mode { open, read, creator };
const ACL_vector& acl_of(acl_mode mode);

// ---- child lists are capped ---------------------------------------------------
// The C client reads a reply of whatever length the server announces, so a lock
// path flooded with children (by a client the ACL lets in) is fetched whole
// once; distlock then copies and sorts none of it past these caps, and fails
// with unavailable_error instead of processing (or waiting behind) the flood.
inline constexpr std::size_t kDefaultMaxChildren = 10000;
inline constexpr std::size_t kMaxChildrenLimit = 1000000;  // the most max_children= accepts
inline constexpr std::size_t kMaxListingBytes = 4u << 20;  // the children's names together
// The return code of a listing refused by the caps (not a ZooKeeper code).
inline constexpr int kListingTooLarge = -1000;

// ---- return codes -----------------------------------------------------------
bool is_connection_error(int rc);
bool is_session_gone(int rc);
// A ZooKeeper return code as a distlock error: access_denied for ZNOAUTH and
// ZAUTHFAILED, invalid_argument for ZBADARGUMENTS and ZINVALIDACL, else unavailable.
[[noreturn]] void throw_client_error(int rc, std::string_view backend, const std::string& what);

// ---- one request, waited for by the calling thread -------------------------
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
// throw_client_error for a request's result: a listing refused by the caps
// says what it found (o.value).
[[noreturn]] void throw_op_error(const op& o, const std::string& what);

const op_ptr& wait_op(const op_ptr& o);

// Asynchronous forms (the server answers a session's requests in order, so a
// request sent right behind one is pipelined: one round trip for both).
op_ptr zk_create_async(zhandle_t* zh, const std::string& path, const std::string& data, int flags, acl_mode acl);
// exists with a watch, not waited for (the keepalive of held nodes).
op_ptr zk_exists_watch_async(zhandle_t* zh, const std::string& path);
// sync of `path`, not waited for: the server the session is connected to (a
// follower may lag behind the quorum) catches up with the leader before it
// answers what the session sends behind it, so a read pipelined right behind
// sees every write that completed before the sync was sent.
op_ptr zk_sync_async(zhandle_t* zh, const std::string& path);

// Waited forms: the C client's synchronous calls. In the multi-threaded client
// their answer wakes the caller straight from the I/O thread (an asynchronous
// completion goes through the completion thread first: one thread hop more,
// measurable on a busy machine). They always return: on a lost connection with
// ZCONNECTIONLOSS once the client gives up on it (2/3 of the session timeout
// without an answer at most).
op_ptr zk_create(zhandle_t* zh, const std::string& path, const std::string& data, int flags, acl_mode acl);
op_ptr zk_delete(zhandle_t* zh, const std::string& path);
op_ptr zk_exists(zhandle_t* zh, const std::string& path, bool watch);
op_ptr zk_get(zhandle_t* zh, const std::string& path, bool watch);  // the data is not needed
// getChildren; with `watch`, a child watch (a ZOO_CHILD_EVENT for `path` when a
// child is created or deleted: the semaphore's wait). More than `max_children`
// children, or more than kMaxListingBytes of names, is rc kListingTooLarge
// with no children (and what was found in `value`).
op_ptr zk_children(zhandle_t* zh, const std::string& path, std::size_t max_children, bool watch = false);
// getData that keeps the data (in value, up to 256 bytes), and setData (any version).
op_ptr zk_get_data(zhandle_t* zh, const std::string& path);
op_ptr zk_set(zhandle_t* zh, const std::string& path, const std::string& data);

// ---- descriptors: close-on-exec ------------------------------------------------
// The C client (3.8) makes its wake-up pipe (in zookeeper_init) and its socket
// (for every connection, on its I/O thread) without close-on-exec, so a
// fork+exec anywhere in the process would hand them to the new program (which
// could then write into the session). zk_init() marks the pipe it made;
// mark_connection_cloexec(), called on every ZOO_CONNECTED_STATE, marks the
// socket: the descriptors of this process connected to the server the handle is
// connected to (any other ZooKeeper session's to it are marked too). Between a
// connection's socket() and that event a concurrent exec can still inherit it.
zhandle_t* zk_init(const std::string& hosts, watcher_fn watcher, ms session_timeout, void* context, int log_level);
void mark_connection_cloexec(zhandle_t* zh);

// Fails fast when every host refuses TCP connections (the C client would retry
// silently forever). Any host that accepts or does not answer at once lets the
// real handshake decide, within connect_timeout.
bool all_hosts_refuse(const std::vector<spi::host_port>& hosts);

}  // namespace distlock::backends::zookeeper
