// postgres://user:pw@host:port/db?strategy=... — PostgreSQL through libpq. This
// folder supplies only the PostgreSQL dialect of the SQL strategy layer
// (backends/sql): a connection wrapper (postgres_connection.cpp), the SQL texts
// (postgres_texts.cpp), the check and migration of the lock tables
// (postgres_migrate.cpp); this file, the URL, the advisory-lock key of a name,
// and the registration.
#include <arpa/inet.h>
#include <openssl/x509.h>

#include <algorithm>
#include <iterator>

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

namespace {

// The URL's TLS parameters as libpq keywords (docs/backends/sql.md, "TLS").
// tls=true means what it means on every backend, sslmode=verify-full: libpq
// then sends nothing of the session (no startup packet, no password) before
// the server's certificate and name have been verified, and it never falls
// back to a connection in clear. Without any, libpq's default (prefer) stays.
void tls_options(spi::url& u, endpoint& ep) {
    const auto t = spi::take_tls(u, kBackend, {"sslrootcert", "sslcert", "sslkey", ""});
    auto mode = u.take("sslmode");
    static constexpr std::string_view modes[] = {"disable", "allow", "prefer", "require", "verify-ca", "verify-full"};
    if (mode && std::find(std::begin(modes), std::end(modes), *mode) == std::end(modes))
        throw_error(errc::invalid_argument, kBackend,
                    "unknown sslmode '" + *mode + "' (known: disable, allow, prefer, require, verify-ca, verify-full)");
    if (t.enabled) {
        const std::string implied = t.verify ? "verify-full" : "require";
        if (mode && *mode != implied)
            spi::tls_conflict(kBackend, t.verify ? "tls=true" : "tls_insecure=true", "sslmode=" + *mode);
        mode = implied;
    }
    spi::tls_file crl;
    if (auto v = u.take("sslcrl")) crl = {*v, "sslcrl"};
    spi::check_tls_files(t, kBackend);
    spi::check_tls_file(crl, kBackend);
    if (mode) ep.tls.emplace_back("sslmode", *mode);
    // tls=true without a CA: the system's bundle, as the HTTP layer's (libpq's
    // own default is ~/.postgresql/root.crt). None with tls_insecure: libpq
    // verifies the chain (verify-ca) at sslmode=require when it has a CA.
    const bool insecure = t.enabled && !t.verify;
    const std::string ca = insecure ? "" : t.ca.given() ? t.ca.path : t.enabled ? X509_get_default_cert_file() : "";
    if (!ca.empty()) ep.tls.emplace_back("sslrootcert", ca);
    if (t.cert.given()) ep.tls.emplace_back("sslcert", t.cert.path);
    if (t.key.given()) ep.tls.emplace_back("sslkey", t.key.path);
    if (crl.given()) ep.tls.emplace_back("sslcrl", crl.path);
    if (!t.server_name.empty()) {
        // libpq verifies (and sends in SNI) `host`, and connects to `hostaddr`
        // when given, which must be a numeric address.
        unsigned char buf[sizeof(in6_addr)];
        if (inet_pton(AF_INET, ep.host.c_str(), buf) != 1 && inet_pton(AF_INET6, ep.host.c_str(), buf) != 1)
            throw_error(errc::unsupported, kBackend,
                        "tls_server_name needs the URL's host as a numeric address (libpq connects to it as hostaddr)");
        ep.tls.emplace_back("hostaddr", ep.host);
        ep.host = t.server_name;
    }
}

}  // namespace

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
    tls_options(u, ep);
    if (!s::is_identifier(ep.schema, 63))
        throw_error(
            errc::invalid_argument, kBackend,
            "schema '" + ep.schema + "' is not a plain identifier ([A-Za-z_][A-Za-z0-9_]*, at most 63 characters)");
    return std::make_shared<dialect>(std::move(ep), cs, cs.table);
}

void register_backend(spi::registry& r) {
    r.add("postgres", [](spi::url& u) -> std::shared_ptr<spi::backend> {
        auto settings = s::take_settings(u, kBackend, "advisory");
        return s::make_backend(make_dialect(u, settings.conn), settings);
    });
}

}  // namespace distlock::backends::postgres