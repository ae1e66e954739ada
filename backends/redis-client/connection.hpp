// The Redis client layer (redis_client.hpp): one connection, and the caps on
// what one reply may make it allocate.
#pragma once

#include <hiredis/hiredis.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "endpoint.hpp"
#include "replies.hpp"
#include "tls_stream.hpp"

namespace distlock::backends::redis_client {

using spi::clock;

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
// The same, added to the end of `out`.
void append_command(std::string& out, const std::vector<std::string_view>& args);
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

}  // namespace distlock::backends::redis_client
