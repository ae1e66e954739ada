// The Redis client layer, inside (connection.cpp only): hiredis's reply reader
// behind the caps of connection.hpp (max_reply_bytes, max_reply_elements).
#pragma once

#include <hiredis/hiredis.h>

#include <optional>

#include "connection.hpp"

namespace distlock::backends::redis_client {

// A reader whose reply objects are charged to `budget` (its privdata): one that
// goes past a cap makes the reader fail, and budget.exceeded says which cap.
redisReader* capped_reader(connection::reply_budget& budget);

// The length a bulk string the reader is waiting for the bytes of announces
// (its length line is complete), if it waits for one.
std::optional<long long> announced_bulk(const redisReader* r);

}  // namespace distlock::backends::redis_client
