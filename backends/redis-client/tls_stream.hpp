// TLS for the Redis client layer (rediss://, tls=true): OpenSSL over the
// connection's own non-blocking socket, hiredis still only parsing replies.
//
//  - tls_options:  what the URL asked for (tls, tls_ca, tls_cert, tls_key,
//                  tls_server_name, tls_insecure), read by tls_from_url()
//  - tls_context:  one SSL_CTX per provider (the CA store, the client
//                  certificate and key are read once, when the URL is opened)
//  - tls_stream:   one SSL session on one socket: a handshake bounded by the
//                  caller's deadline, then reads and writes that never block
//                  and never raise SIGPIPE (the records go out through
//                  send(MSG_NOSIGNAL), like the plain socket's bytes)
//
// Never included outside backends/redis-client, backends/redis and
// backends/redlock: OpenSSL stays out of the public headers.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "distlock/spi/backend.hpp"

struct ssl_ctx_st;
struct ssl_st;

namespace distlock::backends::redis_client {

// Milliseconds left until `until` for poll(), rounded up (0 = passed). Shared
// by the plain and TLS paths of the client layer.
int poll_ms(spi::clock::time_point until);

struct tls_options {
    bool enabled = false;     // TLS on every connection of the URL
    std::string ca_file;      // PEM CA bundle; "" = the system's store
    std::string cert_file;    // client certificate (PEM) for mutual TLS; "" = none
    std::string key_file;     // its private key (PEM); "" = in cert_file
    std::string server_name;  // SNI and the name verified; "" = the host connected to
    bool verify = true;       // false (tls_insecure=true) = any certificate; tests only

    bool operator==(const tls_options&) const = default;
};

// Reads tls=, tls_ca=, tls_cert=, tls_key=, tls_server_name= and tls_insecure=
// (with `prefix` instead of "tls": sentinel_tls=, sentinel_tls_ca=, ..., but no
// sentinel_tls_insecure: the sentinels are verified unless the whole URL says
// tls_insecure, which connect() warns about) from the URL, starting from `base`
// (rediss:// starts enabled; the sentinels start from the data nodes'
// settings). Throws invalid_argument_error: a tls_* parameter without TLS,
// tls_key without tls_cert, a file that cannot be opened (spi::check_tls_files:
// never a FIFO that would block). spi::take_tls() reads them; this adds the
// client layer's own checks.
tls_options tls_from_url(spi::url& u, const std::string& backend, tls_options base, std::string_view prefix = "tls");

class tls_context {
public:
    // Reads the CA file (else the system store), the client certificate and
    // key; TLS 1.2 at least. Throws invalid_argument_error naming the file
    // (never its contents) that cannot be read or does not match.
    // `prefix`: the parameters' names in messages ("tls", "sentinel_tls").
    static std::shared_ptr<const tls_context> make(const tls_options& o, const std::string& backend,
                                                   const std::string& prefix = "tls");
    ~tls_context();
    tls_context(const tls_context&) = delete;
    tls_context& operator=(const tls_context&) = delete;

    const tls_options& options() const noexcept { return options_; }
    const std::string& prefix() const noexcept { return prefix_; }
    ssl_ctx_st* native() const noexcept { return ctx_; }

private:
    tls_context(tls_options o, std::string prefix, ssl_ctx_st* ctx)
        : options_(std::move(o)), prefix_(std::move(prefix)), ctx_(ctx) {}
    tls_options options_;
    std::string prefix_;
    ssl_ctx_st* ctx_;
};

// What a read or a write did: `done` bytes > 0, or why none were.
enum class tls_io { ok, want_read, want_write, closed, failed };

class tls_stream {
public:
    // Sets up the session on `fd` (not owned) for `host`: SNI (a host name,
    // never an IP address) and the name or address the certificate must hold.
    tls_stream(const tls_context& ctx, int fd, const std::string& host);
    ~tls_stream();
    tls_stream(const tls_stream&) = delete;
    tls_stream& operator=(const tls_stream&) = delete;

    // The handshake, polling the socket until `until`. Throws
    // access_denied_error (the certificate is not trusted, expired, for another
    // name; the server wants a client certificate), invalid_argument_error (the
    // server does not speak TLS) or unavailable_error (timeout, reset). `where`
    // names the server in the message.
    void handshake(spi::clock::time_point until, const std::string& backend, const std::string& where);

    // Non-blocking: `n` bytes moved on ok; want_read / want_write: poll for that
    // and call again; closed: the peer ended the session (or the connection);
    // failed: `error()` says why.
    tls_io read(char* buf, std::size_t size, std::size_t& n);
    tls_io write(const char* buf, std::size_t size, std::size_t& n);
    // Decrypted bytes OpenSSL holds that no read has returned yet.
    bool pending() const noexcept;
    const std::string& error() const noexcept { return error_; }
    // The failure was the server's alert (a client certificate it wants or
    // refused): access_denied, not unavailable.
    bool refused() const noexcept { return refused_; }
    // The server asked for a client certificate in the handshake (one that
    // requires it closes the session when there was none, or it refused ours;
    // its alert may be lost in the reset).
    bool asked_for_certificate() const noexcept { return asked_for_certificate_; }

private:
    tls_io result(int rc, std::size_t& n);
    ssl_st* ssl_ = nullptr;
    int fd_;
    const tls_context& ctx_;
    std::string error_;
    bool refused_ = false;
    bool asked_for_certificate_ = false;
    friend int asked_for_certificate(ssl_st*, void*);
};

}  // namespace distlock::backends::redis_client
