// mysql://user:pw@host:port/db?strategy=... — MySQL 8 / MariaDB 10.6+ through
// mysql-connector-c++ 1.1 (Debian's libmysqlcppconn). This folder supplies only
// the MySQL dialect of the SQL strategy layer (backends/sql): a connection
// wrapper (mysql_connection.cpp), the SQL texts (mysql_texts.cpp), the migration
// (mysql_migrate.cpp); this file, the URL, the dialect's connect and the
// GET_LOCK key of a name, and the registration.
#include <openssl/x509.h>

#include <optional>

#include "distlock/spi/tls.hpp"
#include "mysql_dialect.hpp"
#include "mysql_dialect_impl.hpp"

namespace distlock::backends::mysql {

std::string get_lock_key(std::string_view name_space, std::string_view name) {
    return "distlock:" + spi::sha256_hex(std::string(name_space) + std::string(name)).substr(0, 55);
}

std::unique_ptr<s::connection> dialect::connect() {
    auto c = open_connection(ep_, cs_);
    mariadb_ = c.version.find("MariaDB") != std::string::npos;
    // The namespace of the server's names for this database, the first
    // time (the backend's first connection, before its texts are made).
    std::call_once(namespace_once_, [&] {
        std::string table = cs_.table;
        if (c.folds_case)
            for (auto& ch : table) ch = spi::ascii_lower(ch);
        namespace_ = c.database + '\0' + table + '\0';
    });
    return std::move(c.conn);
}

namespace {

// Why the modes that do not verify the server's certificate are refused.
constexpr std::string_view unverified_mode =
    "MariaDB Connector/C 3.3 enforces TLS only when it verifies the server's certificate and name: without "
    "verification it logs in in clear to a server (or an attacker on the path) that does not offer TLS, and "
    "verify_ca is not offered apart from the name. Use ssl_mode=verify_identity (tls=true), or disabled to say "
    "that clear is meant";

// The URL's TLS parameters (spi/tls.hpp) and MySQL's own ssl_mode, ssl_ca,
// ssl_cert, ssl_key.
void tls_from_url(spi::url& u, endpoint& ep) {
    const auto t = spi::take_tls(u, kBackend, {"ssl_ca", "ssl_cert", "ssl_key", ""});
    if (!t.server_name.empty())
        throw_error(errc::unsupported, kBackend,
                    "tls_server_name is not supported: the client library verifies the URL's host");
    std::optional<tls_mode> mode;
    if (auto m = u.take("ssl_mode")) {
        if (*m == "disabled") mode = tls_mode::disabled;
        else if (*m == "verify_identity") mode = tls_mode::verify_identity;
        else if (*m == "preferred" || *m == "required" || *m == "verify_ca")
            throw_error(errc::unsupported, kBackend,
                        "ssl_mode=" + *m + " is not supported: " + std::string(unverified_mode));
        else
            throw_error(
                errc::invalid_argument, kBackend,
                "unknown ssl_mode '" + *m + "' (known: disabled, preferred, required, verify_ca, verify_identity)");
    }
    if (t.enabled) {
        if (!t.verify)
            throw_error(errc::unsupported, kBackend, "tls_insecure is not supported: " + std::string(unverified_mode));
        if (mode && *mode != tls_mode::verify_identity) spi::tls_conflict(kBackend, "tls=true", "ssl_mode");
        mode = tls_mode::verify_identity;
    }
    spi::check_tls_files(t, kBackend);
    if ((t.ca.given() || t.cert.given() || t.key.given()) && (!mode || *mode == tls_mode::disabled))
        throw_error(errc::invalid_argument, kBackend,
                    "ssl_ca/ssl_cert/ssl_key need TLS: add tls=true or ssl_mode=verify_identity");
    ep.tls = mode.value_or(tls_mode::library_default);
    // tls=true without a CA: the system's bundle, as the HTTP layer's.
    ep.tls_ca = t.ca.given() ? t.ca.path : ep.tls == tls_mode::verify_identity ? X509_get_default_cert_file() : "";
    ep.tls_cert = t.cert.path;
    ep.tls_key = t.key.path;
}

}  // namespace

std::shared_ptr<s::dialect> make_dialect(spi::url& u, const s::conn_settings& cs) {
    endpoint ep;
    auto hosts = u.hosts_or_throw(3306);
    if (hosts.size() != 1) throw_error(errc::invalid_argument, kBackend, "mysql:// takes one host");
    ep.host = hosts[0].host;
    ep.port = hosts[0].port;
    ep.user = u.user();
    ep.password = u.password();
    ep.schema = u.path().empty() ? std::string{} : u.path().substr(1);
    if (ep.schema.empty() || ep.schema.find('/') != std::string::npos)
        throw_error(errc::invalid_argument, kBackend, "mysql:// needs a database: mysql://user:pw@host:port/db");
    if (spi::has_dot_segment(ep.schema))
        throw_error(errc::invalid_argument, kBackend, "the database cannot be '.' or '..'");
    if (ep.user.empty())
        throw_error(errc::invalid_argument, kBackend, "mysql:// needs a user: mysql://user:pw@host/db");
    tls_from_url(u, ep);
    auto fence = fence_kind::automatic;
    if (auto f = u.take("fence")) {
        if (*f == "sequence") fence = fence_kind::sequence;
        else if (*f == "table") fence = fence_kind::table;
        else throw_error(errc::invalid_argument, kBackend, "unknown fence '" + *f + "' (known: sequence, table)");
    }
    return std::make_shared<dialect>(std::move(ep), cs, fence);
}

void register_backend(spi::registry& r) {
    r.add("mysql", [](spi::url& u) -> std::shared_ptr<spi::backend> {
        auto settings = s::take_settings(u, kBackend, "get-lock");
        return s::make_backend(make_dialect(u, settings.conn), settings);
    });
}

}  // namespace distlock::backends::mysql