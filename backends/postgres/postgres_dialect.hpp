// The PostgreSQL dialect of the SQL layer (backends/sql/sql.hpp), made from a postgres://
// URL: what the backend registered by register_backend() runs on, and what the
// SQL tests use for statements of their own.
#pragma once

#include <memory>

#include "distlock/spi/url.hpp"
#include "sql/sql.hpp"

namespace distlock::backends::postgres {

// Takes the URL's host, user, password and database (the parameters are the
// caller's); throws invalid_argument_error when one is missing or malformed.
std::shared_ptr<sql::dialect> make_dialect(spi::url& u, const sql::conn_settings& cs);

}  // namespace distlock::backends::postgres
