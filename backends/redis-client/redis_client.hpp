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
#pragma once

#include <hiredis/hiredis.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "distlock/spi/backend.hpp"
#include "tls_stream.hpp"

namespace distlock::backends::redis_client {

using namespace std::chrono_literals;
using spi::clock;
using spi::deadline;

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

// What one reply may make the client allocate, whatever the server says: its
// strings plus a redisReply per element (max_reply_bytes), and elements per
// array (max_reply_elements). A reply past either (a multi-bulk of 2^31
// elements, a 512 MB bulk string announced) fails the connection before hiredis
// allocates it. distlock's replies are a few kB; a CLUSTER SLOTS of the largest
// cluster is well under 8 MB.
inline constexpr std::size_t max_reply_bytes = std::size_t{64} << 20;
inline constexpr long long max_reply_elements = 1 << 20;
// A line of a reply (status, error, integer, a length) that has not ended
// after this many bytes fails the connection too.
inline constexpr std::size_t max_line_bytes = std::size_t{1} << 20;

// A command in the Redis protocol (an array of bulk strings).
std::string format_command(const std::vector<std::string_view>& args);
// Sends `data` from offset `sent` on (moved on as it goes) on the non-blocking
// socket `fd` until `until`, with MSG_NOSIGNAL: 0 when all is sent, else the
// errno of the failure (ETIMEDOUT when `until` passed).
int send_all(int fd, std::string_view data, std::size_t& sent, clock::time_point until);

class connection {
public:
    // Connects (within connect_timeout), AUTHs and SELECTs (within the command
    // timeout). Throws unavailable_error (refused, timeout), access_denied_error
    // (bad credentials, or a host the endpoint's `allowed` refuses: then
    // nothing is sent) or invalid_argument_error (bad db).
    static std::unique_ptr<connection> open(const endpoint& ep);
    ~connection();
    connection(const connection&) = delete;
    connection& operator=(const connection&) = delete;

    // One command; returns the reply, which may be an error reply. Throws
    // connection_failure when the connection breaks (it is then unusable).
    reply_ptr command(const std::vector<std::string_view>& args);

    // Pipelining: append commands, then flush() and read_reply() once per command.
    // The first command appended after every reply was read starts the
    // exchange's clock: its replies must all be read within the command timeout.
    void append(const std::vector<std::string_view>& args);
    void flush();
    reply_ptr read_reply();

    // For callers that poll the socket themselves (exchange_all(), the
    // subscriber's reader thread): receive() reads what the socket holds now
    // (call it when poll() says POLLIN); take_reply() returns a complete reply
    // from what was received, or null. Both throw connection_failure (end of
    // file, an error, bytes that are not the Redis protocol, a reply past the caps).
    int fd() const noexcept { return fd_; }
    void receive();
    // Sends `data` now (plain or TLS) until `until`: 0, or the errno of the
    // failure (ETIMEDOUT when `until` passed). For the subscriber, whose
    // writers send preformatted commands while its reader thread reads: it
    // serialises both under its mutex (an SSL session is not thread-safe).
    int send_now(std::string_view data, clock::time_point until);
    reply_ptr take_reply();

    bool broken() const noexcept { return broken_; }
    // After ASKING (a redirection while a cluster slot migrates): the next
    // command alone is served by this node, so scripts go as EVAL, never as an
    // EVALSHA that a NOSCRIPT would make two commands.
    bool asking() const noexcept { return asking_; }
    void set_asking(bool on) noexcept { asking_ = on; }
    void poison() noexcept { broken_ = true; }
    bool reused() const noexcept { return uses_ > 0; }
    void mark_used() noexcept { ++uses_; }
    const endpoint& where() const noexcept { return ep_; }

    // What a reply has cost so far (the reader's object functions count it).
    struct reply_budget {
        std::size_t used = 0;
        std::string exceeded;  // why the reply went past a cap ("" = it did not)
    };

private:
    enum class failure { eof, io, timeout, protocol, too_large, refused };
    connection(int fd, const endpoint& ep);
    int send_from(std::string_view data, std::size_t& sent, clock::time_point until);  // plain or TLS
    [[noreturn]] void fail(const std::string& what, failure kind, bool maybe_sent, int err = 0);
    void wait_for(short events, const char* what, bool maybe_sent);  // until until_, or fail
    void receive_tls(char* buf, std::size_t size);
    std::string plaintext_hint() const;  // for a plaintext connection closed before any reply
    void check_pending();                // a partial reply that announces (or holds) more than the caps allow fails

    int fd_;
    endpoint ep_;
    std::unique_ptr<tls_stream> tls_;  // null: plaintext
    redisReader* reader_ = nullptr;
    reply_budget budget_;
    std::string out_;            // commands appended, not yet sent
    std::size_t sent_ = 0;       // bytes of out_ already sent
    std::size_t awaited_ = 0;    // replies of the commands appended not yet read
    clock::time_point until_{};  // the current exchange's end
    bool broken_ = false;
    bool replied_ = false;  // a reply was read (the server accepted the session)
    bool asking_ = false;
    std::uint64_t uses_ = 0;
};

class pool {
public:
    pool(endpoint ep, std::size_t max_idle) : ep_(std::move(ep)), max_idle_(max_idle) {}

    // A connection borrowed from the pool; given back when destroyed unless broken.
    class borrowed {
    public:
        borrowed(pool& p, std::unique_ptr<connection> c) : pool_(&p), conn_(std::move(c)) {}
        borrowed(borrowed&&) noexcept = default;
        borrowed& operator=(borrowed&&) noexcept = delete;
        ~borrowed();
        connection* operator->() const noexcept { return conn_.get(); }
        connection& operator*() const noexcept { return *conn_; }

    private:
        pool* pool_;
        std::unique_ptr<connection> conn_;
    };

    borrowed get();  // an idle connection or a new one (may throw like connection::open)
    void clear_idle();
    const endpoint& where() const noexcept { return ep_; }

    // Runs f(connection&), retrying once on a fresh connection when a pooled one
    // turns out to be stale (the server restarted or closed it while idle).
    template <class F>
    auto run(F&& f) {
        for (int attempt = 0;; ++attempt) {
            auto c = get();
            const bool reused = c->reused();
            try {
                auto result = f(*c);
                c->mark_used();
                return result;
            } catch (const connection_failure& e) {
                if (reused && e.stale() && attempt == 0) {
                    clear_idle();
                    continue;
                }
                throw;
            }
        }
    }

private:
    void put(std::unique_ptr<connection> c);
    endpoint ep_;
    std::size_t max_idle_;
    std::mutex mutex_;
    std::vector<std::unique_ptr<connection>> idle_;
};

// A Lua script: EVALSHA with a fallback to EVAL when the server does not know it
// (after a restart or SCRIPT FLUSH).
class script {
public:
    // `text` publishes with redis.call('publish', ...); a sharded endpoint
    // (Redis Cluster) runs the same text with 'spublish' instead.
    explicit script(std::string text);
    const std::string& text(bool sharded = false) const noexcept { return sharded ? sharded_text_ : text_; }
    const std::string& sha1(bool sharded = false) const noexcept { return sharded ? sharded_sha1_ : sha1_; }
    reply_ptr run(connection& c, const std::vector<std::string_view>& keys,
                  const std::vector<std::string_view>& args) const;
    // EVAL only (after a NOSCRIPT reply), which also caches the script again.
    reply_ptr eval(connection& c, const std::vector<std::string_view>& keys,
                   const std::vector<std::string_view>& args) const;
    // The EVAL command line (for pipelines and exchange_all()).
    std::vector<std::string_view> eval_args(const std::vector<std::string_view>& keys,
                                            const std::vector<std::string_view>& args, std::string& numkeys,
                                            bool sharded = false) const;

private:
    std::string text_, sha1_, sharded_text_, sharded_sha1_;
};

// One command to each pool at once; the replies are awaited together until the
// endpoints' command timeout. result[i] is the reply of pools[i], or its error.
struct exchange_result {
    reply_ptr reply;                // null when the node failed
    std::string error;              // why it failed (connect refused, timeout, ...)
    errc code = errc::unavailable;  // for a failure: access_denied when the node refused our credentials
    bool maybe_sent = false;
};
std::vector<exchange_result> exchange_all(const std::vector<pool*>& pools,
                                          const std::vector<std::vector<std::string_view>>& commands);

}  // namespace distlock::backends::redis_client
