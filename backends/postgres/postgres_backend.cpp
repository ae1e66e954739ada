// postgres://user:pw@host:port/db?strategy=... — PostgreSQL through libpq. This
// folder supplies only the PostgreSQL dialect of the SQL strategy layer
// (backends/sql): a connection wrapper (postgres_connection.cpp), the SQL texts
// (postgres_texts.cpp), the check and migration of the lock tables
// (postgres_migrate.cpp); this file, the URL, the advisory-lock key of a name,
// and the registration.
#include "distlock/spi/tls.hpp"
#include "postgres_dialect.hpp"
#include "postgres_dialect_impl.hpp"

namespace distlock::backends::postgres {

std::int64_t advisory_key(std::string_view name) {
    const std::string digest = spi::sha256(name);
    std::uint64_t k = 0;
    for (int i = 0; i < 8; ++i) k = (k << 8) | static_cast<unsigned char>(digest[static_cast<std::size_t>(i)]);
    return static_cast<std::int64_t>(k);
}

std::shared_ptr<s::dialect> make_dialect(spi::url& u, const s::conn_settings& cs) {
    endpoint ep;
    auto hosts = u.hosts_or_throw(5432);
    if (hosts.size() != 1) throw_error(errc::invalid_argument, kBackend, "postgres:// takes one host");
    ep.host = hosts[0].host;
    ep.port = std::to_string(hosts[0].port);
    ep.user = u.user();
    ep.password = u.password();
    ep.dbname = u.path().empty() ? std::string{} : u.path().substr(1);
    if (ep.dbname.empty() || ep.dbname.find('/') != std::string::npos)
        throw_error(errc::invalid_argument, kBackend, "postgres:// needs a database: postgres://user:pw@host:port/db");
    if (spi::has_dot_segment(ep.dbname))
        throw_error(errc::invalid_argument, kBackend, "the database cannot be '.' or '..'");
    if (ep.user.empty())
        throw_error(errc::invalid_argument, kBackend, "postgres:// needs a user: postgres://user:pw@host/db");
    if (auto schema = u.take("schema")) ep.schema = *schema;
    // tls=true means what it means on every backend, sslmode=verify-full: libpq
    // then sends nothing of the session (no startup packet, no password) before
    // the server's certificate and name have been verified, and it never falls
    // back to a connection in clear (docs/backends/sql.md, "TLS").
    ep.tls = spi::take_libpq_tls(u, kBackend, ep.host);
    if (!s::is_identifier(ep.schema, 63))
        throw_error(
            errc::invalid_argument, kBackend,
            "schema '" + ep.schema + "' is not a plain identifier ([A-Za-z_][A-Za-z0-9_]*, at most 63 characters)");
    return std::make_shared<dialect>(std::move(ep), cs, cs.table);
}

void register_backend(spi::registry& r) {
    auto open = [](spi::url& u) -> std::shared_ptr<spi::backend> {
        auto settings = s::take_settings(u, kBackend, "advisory");
        auto dialect = make_dialect(u, settings.conn);
        u.expect_all_taken();  // before connecting (and creating tables)
        return s::make_backend(std::move(dialect), settings);
    };
    r.add("postgres", open);
    r.add("postgresql", open);  // as libpq's own URIs are written
}

}  // namespace distlock::backends::postgres