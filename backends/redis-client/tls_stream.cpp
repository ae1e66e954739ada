#include "tls_stream.hpp"

#include <arpa/inet.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstring>

#include "distlock/spi/tls.hpp"

namespace distlock::backends::redis_client {
namespace {

// ---- the socket BIO: OpenSSL's own writes with write(), which raises SIGPIPE
// on a peer that closed; this one sends with MSG_NOSIGNAL, as the plain path does.

int fd_of(BIO* b) { return static_cast<int>(reinterpret_cast<std::intptr_t>(BIO_get_data(b))); }

int bio_write(BIO* b, const char* data, int len) {
    BIO_clear_retry_flags(b);
    ssize_t n;
    do n = ::send(fd_of(b), data, static_cast<std::size_t>(len), MSG_NOSIGNAL);
    while (n < 0 && errno == EINTR);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) BIO_set_retry_write(b);
    return static_cast<int>(n);
}

int bio_read(BIO* b, char* data, int len) {
    BIO_clear_retry_flags(b);
    ssize_t n;
    do n = ::recv(fd_of(b), data, static_cast<std::size_t>(len), 0);
    while (n < 0 && errno == EINTR);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) BIO_set_retry_read(b);
    return static_cast<int>(n);
}

long bio_ctrl(BIO*, int cmd, long, void*) { return cmd == BIO_CTRL_FLUSH ? 1 : 0; }

BIO* socket_bio(int fd) {
    static BIO_METHOD* method = [] {
        BIO_METHOD* m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "distlock nosignal socket");
        if (m != nullptr) {
            BIO_meth_set_write(m, bio_write);
            BIO_meth_set_read(m, bio_read);
            BIO_meth_set_ctrl(m, bio_ctrl);
        }
        return m;
    }();
    BIO* b = method != nullptr ? BIO_new(method) : nullptr;
    if (b == nullptr) throw std::bad_alloc();
    BIO_set_data(b, reinterpret_cast<void*>(static_cast<std::intptr_t>(fd)));
    BIO_set_init(b, 1);
    return b;
}

// The first error OpenSSL queued on this thread, as text, and the queue emptied.
std::string openssl_error() {
    const unsigned long e = ERR_get_error();
    ERR_clear_error();
    if (e == 0) return "no detail from OpenSSL";
    char buf[256];
    ERR_error_string_n(e, buf, sizeof buf);
    return buf;
}

// A passphrase-protected key is refused rather than asked for on the terminal.
int no_passphrase(char*, int, int, void*) { return 0; }

bool is_ip_address(const std::string& host) {
    unsigned char addr[16];
    return ::inet_pton(AF_INET, host.c_str(), addr) == 1 || ::inet_pton(AF_INET6, host.c_str(), addr) == 1;
}

// The handshake failed because the bytes from the server are not TLS: a
// plaintext port.
bool not_tls(unsigned long e) {
    if (ERR_GET_LIB(e) != ERR_LIB_SSL) return false;
    switch (ERR_GET_REASON(e)) {
        case SSL_R_WRONG_VERSION_NUMBER:
        case SSL_R_UNKNOWN_PROTOCOL:
        case SSL_R_PACKET_LENGTH_TOO_LONG:
        case SSL_R_RECORD_LENGTH_MISMATCH:
        case SSL_R_UNEXPECTED_RECORD:
        case SSL_R_UNEXPECTED_MESSAGE:
        case SSL_R_HTTP_REQUEST:
        case SSL_R_HTTPS_PROXY_REQUEST: return true;
        default: return false;
    }
}

}  // namespace

// Called by OpenSSL when the server asks for a client certificate: remembered
// for the error a closed session then gets.
int asked_for_certificate(SSL* ssl, void*) {
    if (auto* s = static_cast<tls_stream*>(SSL_get_app_data(ssl))) s->asked_for_certificate_ = true;
    return 1;
}

int poll_ms(spi::clock::time_point until) {
    const auto left = until - spi::clock::now();
    if (left <= spi::clock::duration::zero()) return 0;
    const auto ms = std::chrono::ceil<std::chrono::milliseconds>(left).count();
    return static_cast<int>(std::min<long long>(ms, INT_MAX));
}

tls_options tls_from_url(spi::url& u, const std::string& backend, tls_options o, std::string_view prefix) {
    const std::string p(prefix);
    spi::tls_start start;
    start.prefix = prefix;
    start.insecure = prefix == "tls";
    start.enabled_by = prefix == "tls" ? "rediss://" : "tls=true, which they inherit";
    start.base.enabled = o.enabled;
    start.base.verify = o.verify;
    start.base.ca = {o.ca_file, p + "_ca"};
    start.base.cert = {o.cert_file, p + "_cert"};
    start.base.key = {o.key_file, p + "_key"};
    start.base.server_name = o.server_name;
    const auto t = spi::take_tls(u, backend, {}, start);
    if (!t.enabled) return tls_options{};
    spi::check_tls_files(t, backend);
    return {true, t.ca.path, t.cert.path, t.key.path, t.server_name, t.verify};
}

// ---- tls_context --------------------------------------------------------------

std::shared_ptr<const tls_context> tls_context::make(const tls_options& o, const std::string& backend,
                                                     const std::string& prefix) {
    ERR_clear_error();
    SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
    if (ctx == nullptr) throw_error(errc::unavailable, backend, "cannot set up TLS: " + openssl_error());
    std::shared_ptr<const tls_context> out(new tls_context(o, prefix, ctx));
    auto refuse = [&](const std::string& what, const std::string& file) {
        const auto why = openssl_error();
        throw_error(errc::invalid_argument, backend, "cannot use " + what + file + ": " + why, 0, why);
    };
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    SSL_CTX_set_default_passwd_cb(ctx, no_passphrase);
    SSL_CTX_set_cert_cb(ctx, asked_for_certificate, nullptr);
    SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    if (o.verify) {
        SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
        if (!o.ca_file.empty()) {
            if (SSL_CTX_load_verify_locations(ctx, o.ca_file.c_str(), nullptr) != 1)
                refuse("the CA file " + prefix + "_ca=", o.ca_file);
        } else if (SSL_CTX_set_default_verify_paths(ctx) != 1) {
            throw_error(errc::unavailable, backend, "cannot load the system's CA store: " + openssl_error());
        }
    } else {
        SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, nullptr);
    }
    if (!o.cert_file.empty()) {
        if (SSL_CTX_use_certificate_chain_file(ctx, o.cert_file.c_str()) != 1)
            refuse("the client certificate " + prefix + "_cert=", o.cert_file);
        const auto& key = o.key_file.empty() ? o.cert_file : o.key_file;
        if (SSL_CTX_use_PrivateKey_file(ctx, key.c_str(), SSL_FILETYPE_PEM) != 1)
            refuse("the client key " + prefix + "_key=", key);
        if (SSL_CTX_check_private_key(ctx) != 1)
            refuse("a client key that does not match " + prefix + "_cert: " + prefix + "_key=", key);
    }
    return out;
}

tls_context::~tls_context() { SSL_CTX_free(ctx_); }

// ---- tls_stream ---------------------------------------------------------------

tls_stream::tls_stream(const tls_context& ctx, int fd, const std::string& host) : fd_(fd), ctx_(ctx) {
    ERR_clear_error();
    ssl_ = SSL_new(ctx.native());
    if (ssl_ == nullptr) throw std::bad_alloc();
    BIO* b = socket_bio(fd);
    SSL_set_bio(ssl_, b, b);
    SSL_set_app_data(ssl_, this);
    const auto& o = ctx.options();
    const std::string& name = o.server_name.empty() ? host : o.server_name;
    const bool ip = is_ip_address(name);
    if (!ip) SSL_set_tlsext_host_name(ssl_, name.c_str());  // SNI carries names only
    if (o.verify) {
        X509_VERIFY_PARAM* param = SSL_get0_param(ssl_);
        X509_VERIFY_PARAM_set_hostflags(param, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
        const int ok = ip ? X509_VERIFY_PARAM_set1_ip_asc(param, name.c_str()) : SSL_set1_host(ssl_, name.c_str());
        if (ok != 1) {
            SSL_free(ssl_);
            throw_error(errc::invalid_argument, "redis", "cannot verify TLS for the host name '" + name + "'");
        }
    }
}

tls_stream::~tls_stream() { SSL_free(ssl_); }

void tls_stream::handshake(spi::clock::time_point until, const std::string& backend, const std::string& where) {
    const auto& o = ctx_.options();
    for (;;) {
        ERR_clear_error();
        errno = 0;
        const int rc = SSL_connect(ssl_);
        if (rc == 1) return;
        const int why = SSL_get_error(ssl_, rc);
        if (why == SSL_ERROR_WANT_READ || why == SSL_ERROR_WANT_WRITE) {
            pollfd p{fd_, static_cast<short>(why == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT), 0};
            int n;
            do n = ::poll(&p, 1, poll_ms(until));
            while (n < 0 && errno == EINTR);
            if (n == 0)
                throw_error(errc::unavailable, backend,
                            "the TLS handshake with " + where +
                                " did not end within connect_timeout (a plaintext Redis port waits silently: "
                                "is it the server's tls-port?)");
            continue;
        }
        const auto sys = errno;
        const long verified = SSL_get_verify_result(ssl_);
        if (o.verify && verified != X509_V_OK) {
            const std::string text = X509_verify_cert_error_string(verified);
            ERR_clear_error();
            throw_error(errc::access_denied, backend,
                        "the TLS certificate of " + where + " was refused: " + text +
                            (o.ca_file.empty()
                                 ? " (verified against the system's CA store; " + ctx_.prefix() + "_ca= names another)"
                                 : " (verified against " + ctx_.prefix() + "_ca=" + o.ca_file + ")"),
                        static_cast<int>(verified), text);
        }
        const unsigned long e = ERR_peek_error();
        if (not_tls(e)) {
            const auto text = openssl_error();
            throw_error(errc::invalid_argument, backend,
                        where + " does not speak TLS (" + text +
                            "): is it a plaintext port? use redis:// there, or "
                            "the server's tls-port",
                        0, text);
        }
        if (why == SSL_ERROR_SSL && e != 0) {
            // An alert from the server (it wants a client certificate, refused
            // ours, or no version or cipher is common): a setting, not a retry.
            const auto text = openssl_error();
            throw_error(errc::access_denied, backend, "the TLS handshake with " + where + " failed: " + text, 0, text);
        }
        ERR_clear_error();
        const std::string text = sys != 0 ? std::strerror(sys) : "the server closed the connection";
        throw_error(errc::unavailable, backend, "the TLS handshake with " + where + " failed: " + text, sys, text);
    }
}

tls_io tls_stream::result(int rc, std::size_t& n) {
    if (rc > 0) {
        n = static_cast<std::size_t>(rc);
        return tls_io::ok;
    }
    n = 0;
    const auto sys = errno;
    switch (SSL_get_error(ssl_, rc)) {
        case SSL_ERROR_WANT_READ: return tls_io::want_read;
        case SSL_ERROR_WANT_WRITE: return tls_io::want_write;
        case SSL_ERROR_ZERO_RETURN: return tls_io::closed;
        case SSL_ERROR_SYSCALL:
            ERR_clear_error();
            if (sys == 0 || sys == ECONNRESET || sys == EPIPE) return tls_io::closed;  // an end without close_notify
            error_ = std::strerror(sys);
            errno = sys;
            return tls_io::failed;
        default: {
            // An alert from the server after the handshake (TLS 1.3 servers
            // check the client's certificate then): a setting, not a retry.
            const unsigned long e = ERR_peek_error();
            refused_ = ERR_GET_LIB(e) == ERR_LIB_SSL && ERR_GET_REASON(e) >= SSL_AD_REASON_OFFSET;
            error_ = "TLS: " + openssl_error();
            errno = EPROTO;
            return tls_io::failed;
        }
    }
}

bool tls_stream::pending() const noexcept { return SSL_pending(ssl_) > 0; }

tls_io tls_stream::read(char* buf, std::size_t size, std::size_t& n) {
    ERR_clear_error();
    errno = 0;
    return result(SSL_read(ssl_, buf, static_cast<int>(std::min<std::size_t>(size, INT_MAX))), n);
}

tls_io tls_stream::write(const char* buf, std::size_t size, std::size_t& n) {
    ERR_clear_error();
    errno = 0;
    return result(SSL_write(ssl_, buf, static_cast<int>(std::min<std::size_t>(size, INT_MAX))), n);
}

}  // namespace distlock::backends::redis_client
