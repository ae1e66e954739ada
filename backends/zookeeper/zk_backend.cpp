// zk://h1:2181,h2:2181/base/path: Apache Curator's InterProcessMutex recipe
// over the ZooKeeper C client (multi-threaded flavour), so that a C++ process
// and a Java process using Curator share one lock.
//
// As Curator splits framework and recipes, so do the files of this folder:
//   zk_client    the C client's calls, its errors, its log, a TCP probe
//   zk_session   the provider's session: watcher (losses go to the grants'
//                loss sinks), reconnection, guaranteed deletes, the upkeep
//                thread (disconnection deadline, cleanups)
//   zk_held      the session's registry of held grants, keyed by handle
//   zk_lock      a lock kind's recipe (Curator's node layouts)
//   zk_queue     the queue engine (Curator's LockInternals): protected-mode
//                create, the wait for a turn, release
//   zk_queue_drivers  the orders of the mutex, read-write lock and election
//   zk_queue_lock     the mutex, read-write lock and election handle
//   zk_semaphore the semaphore (InterProcessSemaphoreV2)
//   zk_keepalive, zk_inspect, zk_break_lock  the backend's other lock calls
//   zk_names     lock names as paths, the order of lock nodes, counters
//   zk_backend   this file: the spi::backend, the URL, the registration
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "distlock/spi/tls.hpp"
#include "zk_lock.hpp"
#include "zk_names.hpp"

namespace distlock::backends::zookeeper {
namespace {

class backend final : public spi::backend {
public:
    explicit backend(settings s) : log_(s.log_level), zk_(std::move(s)) {
        const auto timeout = zk_.timeout();
        caps_.unsupported = {
            {feature::lease_expiry,
             "no per-lock lease: a lock node lives as long as its holder's session, which the client keeps alive "
             "with heartbeats; session expiry is proved by the ZooKeeper tests (SIGSTOP past the session timeout)"},
        };
        // The server expires a silent session after its timeout, rounded up to its tick.
        // Read-write locks (Curator's InterProcessReadWriteLock: FIFO by sequence)
        // and semaphores (InterProcessSemaphoreV2; the size kept in the data of
        // <path>/leases) are supported: see zk_semaphore.cpp.
        // Elections are Curator's LeaderLatch (zk_queue_drivers.cpp).
        caps_.implements = {feature::read_write, feature::semaphore, feature::permit_limit,
                            feature::election,   feature::inspect,   feature::inspect_primitives};
        caps_.crash_release_bound = timeout + timeout / 2;
        caps_.reentrant = true;
    }

    std::string_view name() const noexcept override { return kBackend; }
    const capabilities& caps() const noexcept override { return caps_; }
    std::unique_ptr<spi::lock_handle> make_lock(const spi::lock_request& r) override {
        return make_lock_handle(zk_, r);
    }
    ms default_lease() const override { return zk_.timeout(); }

    std::optional<std::chrono::nanoseconds> round_trip() override {
        auto s = zk_.session_for(clock::now() + zk_.config().session_timeout);
        auto t0 = clock::now();
        auto o = zk_exists(s->zh, "/", false);
        auto t1 = clock::now();
        if (o->rc != ZOK) throw_client_error(o->rc, kBackend, "exists / failed");
        zk_.touch(*s);
        return t1 - t0;
    }

    void keepalive_batch(std::span<spi::lock_handle* const> handles,
                         std::span<spi::keepalive_result> results) override {
        keepalive_locks(zk_, handles, results);
    }
    read_write_info inspect_read_write(std::string_view name) override {
        return zookeeper::inspect_read_write(zk_, name);
    }
    semaphore_info inspect_semaphore(std::string_view name) override { return zookeeper::inspect_semaphore(zk_, name); }
    lock_info inspect(std::string_view name, spi::lock_kind kind) override {
        return zookeeper::inspect(zk_, name, kind);
    }
    void break_lock(std::string_view name) override { zookeeper::break_lock(zk_, name); }

private:
    log_level_use log_;  // before zk_: set while its sessions open and close
    session_manager zk_;
    capabilities caps_;
};

// ---- URL -------------------------------------------------------------------------

// The URL's acl= (see acl_mode): creator by default with credentials, open
// without; creator and read need credentials (an identity to grant to).
acl_mode acl_from(const std::optional<std::string>& value, bool credentials) {
    if (!value) return credentials ? acl_mode::creator : acl_mode::open;
    if (*value == "open") return acl_mode::open;
    if (*value != "creator" && *value != "read")
        throw_error(errc::invalid_argument, kBackend, "acl must be creator, read or open");
    if (!credentials)
        throw_error(errc::invalid_argument, kBackend,
                    "acl=" + *value + " needs credentials (zk://user:password@...): the nodes would belong to nobody");
    return *value == "creator" ? acl_mode::creator : acl_mode::read;
}

std::shared_ptr<spi::backend> make_backend(spi::url& u) {
    // Before anything reaches the network: a session in clear where TLS was
    // asked for would send the digest credentials and every lock name in clear.
    if (spi::tls_asked(u))
        throw_error(errc::unsupported, kBackend,
                    "TLS is not supported: the ZooKeeper C client this build uses (Debian 12's 3.8.0) was built "
                    "without OpenSSL, so it has no zookeeper_init_ssl; a client library built with OpenSSL would "
                    "lift this. To encrypt today, reach the server's secureClientPort through a local TLS tunnel "
                    "(stunnel, socat) and point zk:// at the tunnel: docs/backends/zookeeper.md, \"TLS\"");
    (void)spi::take_tls(u, kBackend);  // tls=false, said explicitly
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
    if (s.connect_timeout.count() <= 0)
        throw_error(errc::invalid_argument, kBackend, "connect_timeout must be positive");
    s.log_level = parse_log_level(u.take("log"));
    if (!u.user().empty() || !u.password().empty()) s.digest = u.user() + ":" + u.password();
    s.acl = acl_from(u.take("acl"), !s.digest.empty());
    s.max_children = static_cast<std::size_t>(
        u.take_int("max_children", 1, static_cast<long long>(kMaxChildrenLimit)).value_or(kDefaultMaxChildren));
    u.expect_all_taken();  // before anything is sent
    if (all_hosts_refuse(s.host_list))
        throw_error(errc::unavailable, kBackend, "every ZooKeeper server refused the connection (" + s.hosts + ")",
                    ECONNREFUSED, std::strerror(ECONNREFUSED));
    return std::make_shared<backend>(std::move(s));
}

}  // namespace

void register_backend(spi::registry& r) { r.add("zk", make_backend); }

}  // namespace distlock::backends::zookeeper
