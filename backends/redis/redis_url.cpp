// The URLs of redis:// and rediss:// (one server), redis-sentinel:// (the
// master a majority of sentinels names) and redis-cluster:// (any nodes of the
// cluster) into settings (settings.hpp): credentials, TLS, the sentinels' own
// credentials, master_hosts=, and the parameters every deployment takes; and
// register_backend, which adds the four schemes.
#include "settings.hpp"

#include <algorithm>

namespace distlock::backends::redis {

using namespace redis_client;

namespace {

// The parameters every deployment takes: strategy=, prefix=, pool=,
// min_replicas= and replica_timeout=.
void take_common(spi::url& u, settings& s, const std::string& scheme) {
    auto strat = u.take("strategy").value_or("plain");
    if (strat == "plain") s.strat = strategy_name::plain;
    else if (strat == "reentrant") s.strat = strategy_name::reentrant;
    else
        throw_error(errc::invalid_argument, kBackend,
                    "unknown strategy '" + strat + "' (" + scheme + ":// knows plain and reentrant)");
    if (auto prefix = u.take("prefix")) {
        if (s.strat == strategy_name::reentrant)
            throw_error(errc::invalid_argument, kBackend,
                        "prefix= does not apply to strategy=reentrant (Redisson's layout uses the lock name as key)");
        s.prefix = *prefix;
    }
    s.pool_size = static_cast<std::size_t>(u.take_int("pool", 1, 1024).value_or(8));
    s.confirm.min_replicas = static_cast<int>(u.take_int("min_replicas", 0, 100).value_or(0));
    // WAIT blocks the connection: it must end before the command timeout does.
    const auto given = u.take_duration("replica_timeout");
    s.confirm.timeout = given.value_or(std::min(std::chrono::milliseconds{1000}, s.ep.command_timeout / 2));
    if (given && (s.confirm.timeout.count() <= 0 || s.confirm.timeout >= s.ep.command_timeout))
        throw_error(errc::invalid_argument, kBackend,
                    "replica_timeout must be positive and shorter than timeout (" +
                        std::to_string(s.ep.command_timeout.count()) + " ms): WAIT blocks the connection that long");
    if (scheme != "redis") {
        s.failover_wait = u.take_duration("failover_timeout").value_or(std::chrono::milliseconds{10000});
        if (s.failover_wait.count() < 0)
            throw_error(errc::invalid_argument, kBackend, "failover_timeout must not be negative");
    }
    u.expect_all_taken();  // the last parameters taken: a misspelled one is refused before anything is sent
}

// master_hosts= (redis-sentinel://, redis-cluster://): the data nodes the
// URL's credentials may go to, besides `own` (the URL's own data nodes: a
// cluster's seeds); none given: no bound but the deployment's own vouching.
std::shared_ptr<const host_filter> take_master_hosts(spi::url& u, const std::vector<endpoint>& own) {
    auto text = u.take("master_hosts");
    if (!text) return nullptr;
    auto filter = host_filter::parse(*text, kBackend);
    for (const auto& ep : own) filter.allow(ep.host, ep.port);
    return std::make_shared<const host_filter>(std::move(filter));
}

// redis:// and rediss:// (TLS): one server.
std::shared_ptr<spi::backend> open_single(spi::url& u) {
    if (u.hosts().size() != 1)
        throw_error(errc::invalid_argument, kBackend,
                    u.scheme() + ":// takes one host (" + u.scheme() +
                        "://[user:password@]host[:port][/db]); use redlock:// for "
                        "independent masters, redis-sentinel:// or redis-cluster:// for several nodes");
    settings s;
    s.ep = endpoint_from_url(u, kBackend, std::chrono::milliseconds{1000}, std::chrono::milliseconds{2000});
    auto hosts = u.hosts_or_throw(6379);
    s.ep.host = hosts[0].host;
    s.ep.port = hosts[0].port;
    take_common(u, s, kBackend);
    return make_backend(std::move(s));
}

}  // namespace

void register_backend(spi::registry& r) {
    r.add("redis", open_single);
    r.add("rediss", open_single);
    // redis-sentinel://[user:password@]s1[:26379],s2,.../<master name>[/db]
    r.add("redis-sentinel", [](spi::url& u) -> std::shared_ptr<spi::backend> {
        settings s;
        s.where = deployment::sentinel;
        std::string_view path(u.path());
        if (!path.empty()) path.remove_prefix(1);
        const auto slash = path.find('/');
        s.sentinel.master_name = std::string(path.substr(0, slash));
        if (s.sentinel.master_name.empty())
            throw_error(errc::invalid_argument, kBackend,
                        "redis-sentinel:// needs the master's name as its path: "
                        "redis-sentinel://[user:password@]host:26379,.../<master name>[/db]");
        const auto db = slash == std::string_view::npos ? std::string_view{} : path.substr(slash + 1);
        s.ep = endpoint_from_url(u, kBackend, std::chrono::milliseconds{1000}, std::chrono::milliseconds{2000}, db);
        // The sentinels get their own credentials only (sentinel_user=,
        // sentinel_password=; none: no AUTH), never the data nodes' password
        // of the URL: a sentinel is often run by someone else, and one that is
        // not ours must not learn it. sentinel_credentials=data sends the URL's
        // to them as well (for sentinels that share the data nodes' password).
        endpoint sentinel = s.ep;
        sentinel.db = 0;
        sentinel.user.clear();
        sentinel.password.clear();
        const auto credentials = u.take("sentinel_credentials").value_or("own");
        auto user = u.take("sentinel_user");
        auto password = u.take("sentinel_password");
        if (credentials == "data") {
            if (user || password)
                throw_error(errc::invalid_argument, kBackend,
                            "sentinel_credentials=data sends the URL's credentials to the sentinels: drop "
                            "sentinel_user= and sentinel_password=");
            sentinel.user = s.ep.user;
            sentinel.password = s.ep.password;
        } else if (credentials != "own") {
            throw_error(errc::invalid_argument, kBackend,
                        "sentinel_credentials is own (sentinel_user= and sentinel_password=, the default) or data "
                        "(the URL's credentials), not '" +
                            credentials + "'");
        } else if (user && !password) {
            throw_error(errc::invalid_argument, kBackend, "sentinel_user= needs sentinel_password=");
        } else if (password && !password->empty()) {
            sentinel.user = user.value_or("");
            sentinel.password = *password;
        }
        // TLS to the sentinels: the data nodes' settings unless sentinel_tls*= say
        // otherwise (sentinels often have a CA or a client certificate of their own).
        const tls_options data_tls = s.ep.tls ? s.ep.tls->options() : tls_options{};
        const auto sentinel_tls = tls_from_url(u, kBackend, data_tls, "sentinel_tls");
        if (!(sentinel_tls == data_tls))
            sentinel.tls = sentinel_tls.enabled ? tls_context::make(sentinel_tls, kBackend, "sentinel_tls") : nullptr;
        for (const auto& h : u.hosts_or_throw(26379)) {
            sentinel.host = h.host;
            sentinel.port = h.port;
            for (const auto& other : s.sentinel.sentinels)
                if (other.label() == sentinel.label())
                    throw_error(errc::invalid_argument, kBackend,
                                "redis-sentinel:// lists the sentinel " + sentinel.label() +
                                    " twice: a majority of the listed sentinels must name the master (one vote each)");
            s.sentinel.sentinels.push_back(sentinel);
        }
        // Data nodes only: the sentinels are the URL's own, with their own credentials.
        s.ep.allowed = take_master_hosts(u, {});
        take_common(u, s, "redis-sentinel");
        return make_backend(std::move(s));
    });
    // redis-cluster://[user:password@]h1[:6379],h2,...: any nodes of the cluster.
    r.add("redis-cluster", [](spi::url& u) -> std::shared_ptr<spi::backend> {
        settings s;
        s.where = deployment::cluster;
        s.ep = endpoint_from_url(u, kBackend, std::chrono::milliseconds{1000}, std::chrono::milliseconds{2000});
        if (s.ep.db != 0)
            throw_error(errc::invalid_argument, kBackend, "a Redis Cluster has database 0 only: drop the URL's path");
        for (const auto& h : u.hosts_or_throw(6379)) {
            endpoint seed = s.ep;
            seed.host = h.host;
            seed.port = h.port;
            s.seeds.push_back(seed);
        }
        s.ep.allowed = take_master_hosts(u, s.seeds);
        for (auto& seed : s.seeds) seed.allowed = s.ep.allowed;
        take_common(u, s, "redis-cluster");
        return make_backend(std::move(s));
    });
}

}  // namespace distlock::backends::redis
