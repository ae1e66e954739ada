// Internal to backends/redis/: URL parameters shared by redis:// and redlock://.
#pragma once

#include <memory>

#include "client.hpp"

namespace distlock::backends::redis {

// Fills an endpoint from the URL's user info, database path and the connect_timeout=
// and timeout= parameters (taken from `u`). Throws invalid_argument_error.
endpoint endpoint_from_url(spi::url& u, const std::string& backend_name, std::chrono::milliseconds connect_default,
                           std::chrono::milliseconds command_default);

// The Redlock backend (redlock_backend.cpp).
std::shared_ptr<spi::backend> make_redlock(spi::url& u);

}  // namespace distlock::backends::redis
