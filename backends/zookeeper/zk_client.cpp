#include "zk_client.hpp"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <map>
#include <string_view>

#include "zk_names.hpp"

namespace distlock::backends::zookeeper {
namespace {

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
void on_string(int rc, const char*, const void* data) { finish(take(data), rc); }
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

}  // namespace

atomic_counters& stats() {
    static atomic_counters c;
    return c;
}

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
    out.inspect_requests = c.inspect_requests.load();
    return out;
}

// ---- logging ----------------------------------------------------------------------
namespace {

// The level of a line of the C client: "<time>:<pid>(0x<tid>):ZOO_<LEVEL>@<function>@<line>: <text>".
int level_of(const char* line) {
    static const std::pair<const char*, int> names[] = {{":ZOO_ERROR@", ZOO_LOG_LEVEL_ERROR},
                                                        {":ZOO_WARN@", ZOO_LOG_LEVEL_WARN},
                                                        {":ZOO_INFO@", ZOO_LOG_LEVEL_INFO},
                                                        {":ZOO_DEBUG@", ZOO_LOG_LEVEL_DEBUG}};
    for (const auto& [name, level] : names)
        if (std::strstr(line, name)) return level;
    return ZOO_LOG_LEVEL_ERROR;  // not the C client's format: shown from error up
}

template <int Level>
void sink(const char* line) {
    if (Level > 0 && line && level_of(line) <= Level) std::fprintf(stderr, "[zookeeper] %s\n", line);
}

std::mutex g_levels_mutex;
std::array<int, ZOO_LOG_LEVEL_DEBUG + 1> g_levels{};  // live providers per level

void apply_levels() {  // under g_levels_mutex
    int top = 0;
    for (int l = 1; l <= ZOO_LOG_LEVEL_DEBUG; ++l)
        if (g_levels[static_cast<std::size_t>(l)] > 0) top = l;
    zoo_set_debug_level(static_cast<ZooLogLevel>(top));
}

}  // namespace

int parse_log_level(const std::optional<std::string>& value) {
    if (!value) return 0;
    static const std::map<std::string, int> levels{{"off", 0},
                                                   {"error", ZOO_LOG_LEVEL_ERROR},
                                                   {"warn", ZOO_LOG_LEVEL_WARN},
                                                   {"info", ZOO_LOG_LEVEL_INFO},
                                                   {"debug", ZOO_LOG_LEVEL_DEBUG}};
    auto it = levels.find(*value);
    if (it == levels.end())
        throw_error(errc::invalid_argument, kBackend, "log must be off, error, warn, info or debug");
    return it->second;
}

log_callback_fn log_sink_for(int level) {
    // Never null: a handle without a callback writes to the C client's log stream (stderr).
    switch (level) {
        case ZOO_LOG_LEVEL_ERROR: return sink<ZOO_LOG_LEVEL_ERROR>;
        case ZOO_LOG_LEVEL_WARN: return sink<ZOO_LOG_LEVEL_WARN>;
        case ZOO_LOG_LEVEL_INFO: return sink<ZOO_LOG_LEVEL_INFO>;
        case ZOO_LOG_LEVEL_DEBUG: return sink<ZOO_LOG_LEVEL_DEBUG>;
        default: return sink<0>;
    }
}

log_level_use::log_level_use(int level) : level_(std::clamp(level, 0, static_cast<int>(ZOO_LOG_LEVEL_DEBUG))) {
    std::lock_guard lk(g_levels_mutex);
    ++g_levels[static_cast<std::size_t>(level_)];
    apply_levels();
}
log_level_use::~log_level_use() {
    std::lock_guard lk(g_levels_mutex);
    --g_levels[static_cast<std::size_t>(level_)];
    apply_levels();
}

bool is_connection_error(int rc) { return rc == ZCONNECTIONLOSS || rc == ZOPERATIONTIMEOUT || rc == ZCLOSING; }
bool is_session_gone(int rc) { return rc == ZSESSIONEXPIRED || rc == ZINVALIDSTATE || rc == ZSESSIONMOVED; }

void throw_client_error(int rc, std::string_view backend, const std::string& what) {
    errc code = errc::unavailable;
    if (rc == ZNOAUTH || rc == ZAUTHFAILED) code = errc::access_denied;
    else if (rc == ZBADARGUMENTS || rc == ZINVALIDACL) code = errc::invalid_argument;
    throw_error(code, std::string(backend), what + ": " + zerror(rc), rc, zerror(rc));
}
void throw_op_error(const op& o, const std::string& what) {
    if (o.rc == kListingTooLarge) throw_error(errc::unavailable, kBackend, what + ": " + o.value);
    throw_client_error(o.rc, kBackend, what);
}

const ACL_vector& acl_of(acl_mode mode) {
    // "auth" with an empty id: every identity the session authenticated (the C
    // client's ZOO_CREATOR_ALL_ACL), plus read for anyone.
    static ACL creator_read[] = {{ZOO_PERM_ALL, {const_cast<char*>("auth"), const_cast<char*>("")}},
                                 {ZOO_PERM_READ, {const_cast<char*>("world"), const_cast<char*>("anyone")}}};
    static ACL_vector read_acl{2, creator_read};
    switch (mode) {
        case acl_mode::creator: return ZOO_CREATOR_ALL_ACL;
        case acl_mode::read: return read_acl;
        case acl_mode::open: break;
    }
    return ZOO_OPEN_ACL_UNSAFE;
}

const op_ptr& wait_op(const op_ptr& o) {
    std::unique_lock lk(o->m);
    o->cv.wait(lk, [&] { return o->done; });
    return o;
}

op_ptr zk_create_async(zhandle_t* zh, const std::string& path, const std::string& data, int flags, acl_mode acl) {
    return submit([&](void* ctx) {
        return zoo_acreate2(zh, path.c_str(), data.data(), static_cast<int>(data.size()), &acl_of(acl), flags,
                            on_string_stat, ctx);
    });
}
op_ptr zk_exists_watch_async(zhandle_t* zh, const std::string& path) {
    auto o = std::make_shared<op>();
    void* ctx = hold(o);
    // With a watch: from the first keepalive of a grant on, a delete of our
    // node by someone else is reported as soon as it happens.
    int rc = zoo_aexists(zh, path.c_str(), 1, on_stat, ctx);
    if (rc != ZOK) {
        take(ctx);
        o->rc = rc;
        o->done = true;
    }
    return o;
}

op_ptr zk_sync_async(zhandle_t* zh, const std::string& path) {
    return submit([&](void* ctx) { return zoo_async(zh, path.c_str(), on_string, ctx); });
}

op_ptr zk_create(zhandle_t* zh, const std::string& path, const std::string& data, int flags, acl_mode acl) {
    auto o = std::make_shared<op>();
    std::vector<char> made(path.size() + 32);
    o->rc = zoo_create2(zh, path.c_str(), data.empty() ? nullptr : data.data(),
                        data.empty() ? -1 : static_cast<int>(data.size()), &acl_of(acl), flags, made.data(),
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
op_ptr zk_get_data(zhandle_t* zh, const std::string& path) {
    auto o = std::make_shared<op>();
    char buf[256];
    int len = static_cast<int>(sizeof buf);
    o->rc = zoo_get(zh, path.c_str(), 0, buf, &len, &o->stat);
    if (o->rc == ZOK && len > 0) o->value.assign(buf, static_cast<std::size_t>(len));
    o->done = true;
    return o;
}
op_ptr zk_set(zhandle_t* zh, const std::string& path, const std::string& data) {
    auto o = std::make_shared<op>();
    o->rc = zoo_set2(zh, path.c_str(), data.data(), static_cast<int>(data.size()), -1, &o->stat);
    o->done = true;
    return o;
}
op_ptr zk_children(zhandle_t* zh, const std::string& path, std::size_t max_children, bool watch) {
    stats().children_reads++;
    auto o = std::make_shared<op>();
    String_vector v{};
    o->rc = zoo_get_children(zh, path.c_str(), watch ? 1 : 0, &v);
    if (o->rc != ZOK) {
        o->done = true;
        return o;
    }
    // The caps are checked before anything is copied.
    const auto count = static_cast<std::size_t>(std::max(v.count, 0));
    std::size_t bytes = 0;
    for (std::size_t i = 0; i < count && bytes <= kMaxListingBytes && v.data; ++i) bytes += std::strlen(v.data[i]);
    if (count > max_children || bytes > kMaxListingBytes) {
        o->rc = kListingTooLarge;
        o->value = count > max_children
                       ? std::to_string(count) +
                             " children, more than distlock reads (max_children=" + std::to_string(max_children) + ")"
                       : "the children's names exceed " + std::to_string(kMaxListingBytes >> 20) +
                             " MiB, more than distlock reads";
        o->value += "; refused: a client may be flooding the lock path (see the acl= parameter)";
    } else {
        o->children.reserve(count);
        for (std::size_t i = 0; i < count && v.data; ++i) o->children.emplace_back(v.data[i]);
    }
    deallocate_String_vector(&v);
    o->done = true;
    return o;
}

// ---- descriptors: close-on-exec ------------------------------------------------
namespace {

// The descriptors of this process of `type` (S_IFIFO, S_IFSOCK) that an exec
// would keep (no FD_CLOEXEC), with their inodes. Empty without /proc.
std::vector<std::pair<int, ino_t>> inheritable(mode_t type) {
    std::vector<std::pair<int, ino_t>> out;
    DIR* d = ::opendir("/proc/self/fd");  // itself close-on-exec
    if (!d) return out;
    const int own = ::dirfd(d);
    while (const dirent* e = ::readdir(d)) {
        int fd = 0;
        const char* c = e->d_name;
        if (*c < '0' || *c > '9') continue;
        for (; *c >= '0' && *c <= '9' && fd < (1 << 24); ++c) fd = fd * 10 + (*c - '0');
        if (*c != '\0' || fd == own) continue;
        const int flags = ::fcntl(fd, F_GETFD);
        if (flags < 0 || (flags & FD_CLOEXEC)) continue;
        // The kind and inode from the link ("pipe:[123]", "socket:[456]"), not
        // fstat(): the descriptor may be the C client's thread's, made or closed
        // meanwhile, and the link names it without touching it.
        char link[64];
        const std::string path = "/proc/self/fd/" + std::to_string(fd);
        const ssize_t n = ::readlink(path.c_str(), link, sizeof link - 1);
        if (n <= 0) continue;
        const std::string_view target(link, static_cast<std::size_t>(n));
        const std::string_view kind = type == S_IFIFO ? "pipe:[" : type == S_IFSOCK ? "socket:[" : "";
        if (kind.empty() || target.substr(0, kind.size()) != kind || target.back() != ']') continue;
        ino_t inode = 0;
        const auto digits = target.substr(kind.size(), target.size() - kind.size() - 1);
        const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), inode);
        if (ec != std::errc{} || end != digits.data() + digits.size()) continue;
        out.emplace_back(fd, inode);
    }
    ::closedir(d);
    return out;
}

void set_cloexec(int fd) {
    const int flags = ::fcntl(fd, F_GETFD);
    if (flags >= 0) ::fcntl(fd, F_SETFD, flags | FD_CLOEXEC);
}

}  // namespace

zhandle_t* zk_init(const std::string& hosts, watcher_fn watcher, ms session_timeout, void* context, int log_level) {
    // The pipe is made inside zookeeper_init2 on this thread: the inheritable
    // pipes that appear across the call are its two ends. (One that another
    // thread makes at the same moment would be marked too.)
    const auto before = inheritable(S_IFIFO);
    zhandle_t* zh = zookeeper_init2(hosts.c_str(), watcher, static_cast<int>(session_timeout.count()), nullptr, context,
                                    0, log_sink_for(log_level));
    const int err = errno;
    if (zh)
        for (const auto& p : inheritable(S_IFIFO))
            if (std::find(before.begin(), before.end(), p) == before.end()) set_cloexec(p.first);
    errno = err;
    return zh;
}

void mark_connection_cloexec(zhandle_t* zh) {
    sockaddr_storage server{};
    socklen_t server_len = sizeof server;
    if (!zookeeper_get_connected_host(zh, reinterpret_cast<sockaddr*>(&server), &server_len)) return;
    for (const auto& [fd, inode] : inheritable(S_IFSOCK)) {
        sockaddr_storage peer{};
        socklen_t peer_len = sizeof peer;
        if (::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_len) == 0 && peer_len == server_len &&
            std::memcmp(&peer, &server, peer_len) == 0)
            set_cloexec(fd);
    }
}

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

}  // namespace distlock::backends::zookeeper
