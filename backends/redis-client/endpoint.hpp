// The Redis client layer (redis_client.hpp): an endpoint, where and how to
// connect, and the hosts the data nodes' credentials may go to.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "distlock/spi/backend.hpp"
#include "tls_stream.hpp"

namespace distlock::backends::redis_client {

// Where the data nodes' credentials may go (redis-sentinel:// and
// redis-cluster://, master_hosts=): host names, IP addresses (each with an
// optional :port; IPv6 as [addr]:port) and CIDR blocks, comma-separated. A
// sentinel or a cluster node names the nodes to connect to; one that is not
// ours must not be able to send our password to a host of its choice. Names
// are compared as written (case aside, never resolved first): an address
// given as a name matches a name entry only, an IP address only an address
// or a block.
class host_filter {
public:
    // Throws invalid_argument_error naming the entry it cannot read.
    static host_filter parse(std::string_view text, const std::string& backend_name);
    // Allows host:port too (the URL's own nodes, always allowed).
    void allow(std::string_view host, std::uint16_t port);
    bool allows(std::string_view host, std::uint16_t port) const;
    const std::string& text() const noexcept { return text_; }

private:
    struct entry {
        std::string name;          // a host name (lowercase), or "" for an address or block
        int family = 0;            // AF_INET / AF_INET6 for an address or block
        unsigned char addr[16]{};  // its bytes
        int bits = 0;              // the block's prefix length (the whole address for one address)
        std::uint16_t port = 0;    // 0 = any port
    };
    static bool read_entry(std::string_view text, entry& out);
    std::vector<entry> entries_;
    std::string text_;
};

struct endpoint {
    std::string backend_name = "redis";  // for errors: "redis" or "redlock"
    std::string host = "127.0.0.1";
    std::uint16_t port = 6379;
    std::string user;      // ACL user ("" = the default user)
    std::string password;  // "" = no AUTH; masked in every error reply read on the connection
    int db = 0;            // SELECT db when not 0
    std::chrono::milliseconds connect_timeout{1000};
    std::chrono::milliseconds command_timeout{2000};
    // Set by a topology that follows servers (topology.hpp): replies that send
    // the client elsewhere (MOVED, ASK, READONLY, TRYAGAIN, ...) are thrown as
    // `redirect` instead of returned.
    bool follow_redirects = false;
    // Redis Cluster: scripts publish with SPUBLISH and waiters SSUBSCRIBE
    // (sharded pub/sub, as Redisson does on Redis 7 clusters).
    bool sharded = false;
    // When set, connection::open refuses (access_denied_error) a host:port it
    // does not allow, before connecting: master_hosts=.
    std::shared_ptr<const host_filter> allowed;
    // TLS on every connection to this endpoint (null = plaintext): one context
    // shared by every endpoint of the provider (the sentinels may have their
    // own). Verification is against `host` unless tls_server_name= says otherwise.
    std::shared_ptr<const tls_context> tls;

    std::string label() const { return host + ":" + std::to_string(port); }
};

// Whether `host`, as a server gave it (a sentinel's master, a MOVED target, a
// CLUSTER SLOTS entry), is a host name or an IP address at all; anything else
// is never connected to (nor shown).
bool plausible_host(std::string_view host);

// Fills an endpoint from the URL's user info, database path and the connect_timeout=,
// timeout= and TLS parameters (taken from `u`; the rediss scheme turns TLS on:
// tls_from_url()). Throws invalid_argument_error. A user
// info without ':' (redis://PASSWORD@host, as Lettuce and redis-cli write it) is
// the password of the default user, never a user name.
// `db_path`: the text of the database number ("" = 0); by default the URL's path
// without its '/'.
endpoint endpoint_from_url(spi::url& u, const std::string& backend_name, std::chrono::milliseconds connect_default,
                           std::chrono::milliseconds command_default,
                           std::optional<std::string_view> db_path = std::nullopt);

}  // namespace distlock::backends::redis_client
