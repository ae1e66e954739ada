// A session of a MySQL / MariaDB server through mysql-connector-c++ 1.1
// (mysql_connection.cpp): what the dialect (mysql_dialect_impl.hpp) connects
// with, and the string literal both it and the texts render bytes as.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "distlock/spi/tls.hpp"
#include "sql/sql.hpp"

namespace distlock::backends::mysql {

struct endpoint {
    std::string host, user, password, schema;
    std::uint16_t port = 3306;
    spi::mariadb_tls tls;  // ssl_mode= as MariaDB Connector/C 3.3 can do it (docs/backends/sql.md, "TLS")
};

// A string literal of any bytes, every byte as it is (NUL included): X'..'.
std::string hex_literal(std::string_view bytes);

// A new session, and what the server said of itself at login.
struct opened {
    std::unique_ptr<sql::connection> conn;
    std::string version;  // VERSION()
    // The session's database as the server names it (lower case where the
    // server folds table names), and whether it folds them.
    std::string database;
    bool folds_case = false;
};

// The whole connect (TCP, handshake, login) is bounded by connect_timeout,
// and each statement after by timeout (call_deadline.hpp).
opened open_connection(const endpoint& ep, const sql::conn_settings& cs);

}  // namespace distlock::backends::mysql
