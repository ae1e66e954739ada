// zk:// internals: the thin layer over the ZooKeeper C client (multi-threaded
// flavour) that the session layer (zk_session.hpp) and the lock recipe
// (zk_lock.cpp) build on. Never included outside backends/zookeeper/.
//
//  - error translation: throw_client_error() and the two classes of return codes
//    the callers branch on (connection trouble, session gone)
//  - op: one request's result; the zk_* wrappers run one request each
//  - the process-wide counters behind read_counters() (zk_names.hpp)
//  - the C client's log, routed to stderr only when the URL asks for it
//  - all_hosts_refuse(): a TCP probe, so that a dead ensemble fails fast
#pragma once

#include <zookeeper/zookeeper.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
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
    std::atomic<std::uint64_t> sessions_opened{0}, lock_nodes_created{0}, children_reads{0},
        predecessor_watches{0}, predecessor_wakeups{0}, node_events{0}, protected_recoveries{0}, disconnections{0},
        inspect_requests{0};
};
atomic_counters& stats();

// ---- logging: the C client logs to stderr at INFO by default; route it -------
// The sink given to zookeeper_init2: prints only when a level was chosen.
void log_sink(const char* message);
// Applies the URL's log= (off, error, warn, info, debug; nullopt keeps the
// process's level) to the C client. Throws invalid_argument_error.
void set_log_level(const std::optional<std::string>& level);

// ---- return codes -----------------------------------------------------------
bool is_connection_error(int rc);
bool is_session_gone(int rc);
// A ZooKeeper return code as a distlock error: access_denied for ZNOAUTH and
// ZAUTHFAILED, invalid_argument for ZBADARGUMENTS and ZINVALIDACL, else unavailable.
[[noreturn]] void throw_client_error(int rc, const std::string& what);

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

const op_ptr& wait_op(const op_ptr& o);

// Asynchronous forms (the server answers a session's requests in order, so a
// request sent right behind one is pipelined: one round trip for both).
op_ptr zk_create_async(zhandle_t* zh, const std::string& path, const std::string& data, int flags);
// exists with a watch, not waited for (the keepalive of held nodes).
op_ptr zk_exists_watch_async(zhandle_t* zh, const std::string& path);

// Waited forms: the C client's synchronous calls. In the multi-threaded client
// their answer wakes the caller straight from the I/O thread (an asynchronous
// completion goes through the completion thread first: one thread hop more,
// measurable on a busy machine). They always return: on a lost connection with
// ZCONNECTIONLOSS once the client gives up on it (2/3 of the session timeout
// without an answer at most).
op_ptr zk_create(zhandle_t* zh, const std::string& path, const std::string& data, int flags);
op_ptr zk_delete(zhandle_t* zh, const std::string& path);
op_ptr zk_exists(zhandle_t* zh, const std::string& path, bool watch);
op_ptr zk_get(zhandle_t* zh, const std::string& path, bool watch);  // the data is not needed
// getChildren; with `watch`, a child watch (a ZOO_CHILD_EVENT for `path` when a
// child is created or deleted: the semaphore's wait).
op_ptr zk_children(zhandle_t* zh, const std::string& path, bool watch = false);
// getData that keeps the data (in value, up to 256 bytes), and setData (any version).
op_ptr zk_get_data(zhandle_t* zh, const std::string& path);
op_ptr zk_set(zhandle_t* zh, const std::string& path, const std::string& data);

// Fails fast when every host refuses TCP connections (the C client would retry
// silently forever). Any host that accepts or does not answer at once lets the
// real handshake decide, within connect_timeout.
bool all_hosts_refuse(const std::vector<spi::host_port>& hosts);

}  // namespace distlock::backends::zookeeper
