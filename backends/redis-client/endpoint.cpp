// The Redis client layer (redis_client.hpp): an endpoint read from the URL
// (credentials, database, timeouts, TLS).
#include <charconv>

#include "distlock/spi/tls.hpp"
#include "endpoint.hpp"

namespace distlock::backends::redis_client {

endpoint endpoint_from_url(spi::url& u, const std::string& backend_name, std::chrono::milliseconds connect_default,
                           std::chrono::milliseconds command_default, std::optional<std::string_view> db_path) {
    endpoint ep;
    ep.backend_name = backend_name;
    ep.user = u.user();
    ep.password = u.password();
    if (!ep.user.empty() && ep.password.empty()) {
        // redis://SECRET@host: Lettuce's and redis-cli's form of a password for
        // the default user. Taken as a user name it would be sent as one and
        // shown in messages; an ACL user always comes with a password here.
        ep.password = std::move(ep.user);
        ep.user.clear();
    }
    std::string_view db = db_path ? *db_path : std::string_view(u.path());
    if (!db_path && !db.empty()) db.remove_prefix(1);
    if (!db.empty()) {
        int value = -1;
        auto [p, ec] = std::from_chars(db.data(), db.data() + db.size(), value);
        if (ec != std::errc{} || p != db.data() + db.size() || value < 0)
            throw_error(errc::invalid_argument, backend_name,
                        "the database must be a number (/0, /1, ...), not '" + std::string(db) + "'");
        ep.db = value;
    }
    ep.connect_timeout = u.take_duration("connect_timeout").value_or(connect_default);
    ep.command_timeout = u.take_duration("timeout").value_or(command_default);
    if (ep.connect_timeout.count() <= 0 || ep.command_timeout.count() <= 0)
        throw_error(errc::invalid_argument, backend_name, "connect_timeout and timeout must be positive");
    tls_options tls;
    tls.enabled = u.scheme() == "rediss";
    tls = tls_from_url(u, backend_name, std::move(tls));
    if (u.scheme() == "rediss" && !tls.enabled) spi::tls_conflict(backend_name, "tls=false", "rediss://");
    if (tls.enabled) ep.tls = tls_context::make(tls, backend_name);
    return ep;
}

}  // namespace distlock::backends::redis_client
