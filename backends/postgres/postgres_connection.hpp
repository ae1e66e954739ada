// A session of a PostgreSQL server through libpq (postgres_connection.cpp):
// what the dialect (postgres_dialect_impl.hpp) connects with.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "sql/sql.hpp"

namespace distlock::backends::postgres {

struct endpoint {
    std::string host, port, user, password, dbname;
    std::string schema = "public";  // where every object distlock makes or uses lives (schema=)
    // libpq's TLS keywords (sslmode, sslrootcert, hostaddr...) with their
    // values, from the URL's TLS parameters (spi::take_libpq_tls()); none = libpq's
    // defaults (sslmode=prefer).
    std::vector<std::pair<std::string, std::string>> tls;
};

// A new session: asynchronous libpq calls bounded by the query timeout, the
// server's bytes handed to libpq through a relay that caps them (relay.hpp).
std::unique_ptr<sql::connection> open_connection(const endpoint& ep, const sql::conn_settings& cs);

}  // namespace distlock::backends::postgres
