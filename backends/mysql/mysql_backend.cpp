// mysql://user:pw@host:port/db?strategy=... — MySQL 8 / MariaDB 10.6+ through
// mysql-connector-c++ 1.1 (Debian's libmysqlcppconn). This folder supplies only
// the MySQL dialect of the SQL strategy layer (backends/sql): a connection
// wrapper (mysql_connection.cpp), the SQL texts (mysql_texts.cpp), the migration
// (mysql_migrate.cpp); this file, the URL, the dialect's connect and the
// GET_LOCK key of a name, and the registration.

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
    ep.tls = spi::take_mariadb_tls(u, kBackend);  // tls*, and ssl_mode, ssl_ca, ssl_cert, ssl_key
    auto fence = fence_kind::automatic;
    if (auto f = u.take("fence")) {
        if (*f == "sequence") fence = fence_kind::sequence;
        else if (*f == "table") fence = fence_kind::table;
        else throw_error(errc::invalid_argument, kBackend, "unknown fence '" + *f + "' (known: sequence, table)");
    }
    auto engine = lock_engine::innodb;
    if (auto e = u.take("engine")) {
        if (*e == "memory") engine = lock_engine::memory;
        else if (*e != "innodb")
            throw_error(errc::invalid_argument, kBackend, "unknown engine '" + *e + "' (known: innodb, memory)");
    }
    return std::make_shared<dialect>(std::move(ep), cs, fence, engine);
}

void register_backend(spi::registry& r) {
    r.add("mysql", [](spi::url& u) -> std::shared_ptr<spi::backend> {
        auto settings = s::take_settings(u, kBackend, "get-lock");
        auto dialect = make_dialect(u, settings.conn);
        u.expect_all_taken();  // before connecting (and creating tables)
        return s::make_backend(std::move(dialect), settings);
    });
}

}  // namespace distlock::backends::mysql