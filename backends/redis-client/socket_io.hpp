// The Redis client layer, inside (connection.cpp only): the TCP socket of a
// connection (format_command() and send_all() are in connection.hpp).
#pragma once

#include "connection.hpp"

namespace distlock::backends::redis_client {

// A connected non-blocking TCP socket to ep by `until` (close-on-exec from the
// start), or unavailable_error.
int connect_socket(const endpoint& ep, clock::time_point until);

}  // namespace distlock::backends::redis_client
