// The Redis client layer (redis_client.hpp): replies, what they say, and the
// failures of a connection and the errors of a reply as distlock errors.
#pragma once

#include <hiredis/hiredis.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

#include "distlock/spi/backend.hpp"

namespace distlock::backends::redis_client {

// Milliseconds that a server or another client gave (a PTTL, a lease in a
// pub/sub message) as a duration clamped to [0, ceiling] and never past
// max_server_duration (10^12 ms, about 31 years): it goes into clock
// arithmetic in nanoseconds, where 2^63 - 1 ms (and anything past about 292
// years from the clock's epoch) overflows, undefined behaviour; a negative one
// would be a deadline in the past.
inline constexpr std::chrono::milliseconds max_server_duration{1'000'000'000'000};
inline std::chrono::milliseconds server_duration(long long ms,
                                                 std::chrono::milliseconds ceiling = max_server_duration) noexcept {
    const long long top = std::clamp<long long>(ceiling.count(), 0, max_server_duration.count());
    return std::chrono::milliseconds(std::clamp<long long>(ms, 0, top));
}

struct reply_deleter {
    void operator()(redisReply* r) const noexcept {
        if (r != nullptr) freeReplyObject(r);
    }
};
using reply_ptr = std::unique_ptr<redisReply, reply_deleter>;

// The connection failed (refused, reset, closed, timed out). Internal: the
// backends turn it into unavailable_error / in_doubt_error at their boundary.
class connection_failure : public std::runtime_error {
public:
    connection_failure(const std::string& what, bool stale, bool maybe_sent, bool not_redis = false,
                       bool denied = false)
        : std::runtime_error(what), stale_(stale), maybe_sent_(maybe_sent), not_redis_(not_redis), denied_(denied) {}
    // The server closed or reset a connection that had been idle in the pool: the
    // command never reached a live server, so it is safe to retry it once.
    bool stale() const noexcept { return stale_; }
    // The command may have reached the server (its effect is unknown).
    bool maybe_sent() const noexcept { return maybe_sent_; }
    // The server's bytes are not the Redis protocol: the URL points at a server of
    // another kind, which no retry fixes.
    bool not_redis() const noexcept { return not_redis_; }
    // The TLS server refused the session after the handshake (a TLS 1.3 server
    // that wants a client certificate, or refused ours, says so then).
    bool denied() const noexcept { return denied_; }

private:
    bool stale_, maybe_sent_, not_redis_, denied_;
};

// A reply that sends the command elsewhere (only on an endpoint with
// follow_redirects): the command did not run where it was sent.
//   moved  MOVED <slot> <host:port>: the slot is served by that node now
//   ask    ASK <slot> <host:port>: this once, ASKING then the command there
//   retry  READONLY (a demoted master), TRYAGAIN, CLUSTERDOWN, LOADING,
//          MASTERDOWN: the topology is changing; find the server again
class redirect : public std::runtime_error {
public:
    enum class kind { moved, ask, retry };
    redirect(kind k, int slot, std::string host, std::uint16_t port, const std::string& text)
        : std::runtime_error(text), kind_(k), slot_(slot), host_(std::move(host)), port_(port) {}
    kind how() const noexcept { return kind_; }
    int slot() const noexcept { return slot_; }
    const std::string& host() const noexcept { return host_; }
    std::uint16_t port() const noexcept { return port_; }

private:
    kind kind_;
    int slot_;
    std::string host_;
    std::uint16_t port_;
};

// A connection_failure as a distlock error: invalid_argument when the server is
// not a Redis server, access_denied when its TLS refused us, unavailable otherwise.
[[noreturn]] void throw_client_error(const connection_failure& e, const std::string& backend,
                                     const std::string& context);

// Throws the distlock error matching a Redis error reply (NOAUTH/WRONGPASS/NOPERM
// -> access_denied, WRONGTYPE -> invalid_argument, else unavailable).
[[noreturn]] void throw_client_error(const redisReply* r, const std::string& backend, const std::string& context);
bool is_error(const redisReply* r) noexcept;
std::string reply_text(const redisReply* r);
// An integer reply, or a string / status reply read as a number; 0 for anything
// else (no reply, nil, an error, an array).
long long as_integer(const redisReply* r) noexcept;
// Whether `r` is an error reply whose text begins with `prefix` ("NOSCRIPT", "NOAUTH").
bool error_starts_with(const redisReply* r, std::string_view prefix);
// The redirection an error reply asks for, if any (see `redirect`).
std::optional<redirect> redirect_of(const redisReply* r);

}  // namespace distlock::backends::redis_client
