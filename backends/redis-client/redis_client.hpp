// The Redis client layer shared by redis:// (backends/redis) and redlock://
// (backends/redlock): a thin layer over hiredis's blocking API. Never included
// outside those folders.
//
//  - endpoint:    where and how to connect (host, port, AUTH, SELECT, timeouts),
//                 read from the URL by endpoint_from_url()
//  - host_filter: the nodes the data nodes' credentials may go to (master_hosts=)
//  - server_duration():  a server's or a publisher's milliseconds, made safe
//                 for clock arithmetic
//  - throw_client_error():  a hiredis failure or a Redis error reply as a distlock error
//  - connection:  one socket and hiredis's reply parser (not thread-safe: used by
//                 one thread at a time). The socket is ours, not hiredis's: made
//                 close-on-exec atomically, written with send(MSG_NOSIGNAL) (a
//                 peer that closed never raises SIGPIPE), every exchange bounded
//                 as a whole by the command timeout (not per read), and replies
//                 capped before hiredis allocates them (max_reply_bytes); over
//                 TLS (endpoint::tls, tls_stream.hpp) the same socket carries
//                 an OpenSSL session, its handshake inside connect_timeout
//  - pool:        idle connections of one endpoint, handed out one per call
//  - script:      a Lua script run by EVALSHA with a fallback to EVAL on NOSCRIPT
//  - exchange_all():  one command to each of several endpoints at once (Redlock),
//                 all replies awaited together under one deadline
//  - subscriber:  in subscriber.hpp
//
// One header a job: endpoint.hpp, replies.hpp, connection.hpp, pool.hpp,
// script.hpp, exchange.hpp; this one includes them all.
#pragma once

#include "connection.hpp"
#include "endpoint.hpp"
#include "exchange.hpp"
#include "pool.hpp"
#include "replies.hpp"
#include "script.hpp"

namespace distlock::backends::redis_client {

using namespace std::chrono_literals;
using spi::clock;
using spi::deadline;

}  // namespace distlock::backends::redis_client
