// The Redis client layer (redis_client.hpp): one connection: opened with AUTH
// and SELECT, commands sent and replies read (plain or TLS) under the command
// timeout, and its failures described.
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "connection.hpp"
#include "reply_caps.hpp"
#include "socket_io.hpp"

namespace distlock::backends::redis_client {

namespace {

// Every occurrence of `secret` in the error replies of `r` as '*' (in place):
// a server or proxy that repeats the password in an error must not put it in
// a message.
void mask(redisReply* r, const std::string& secret) {
    if (r == nullptr || secret.empty()) return;
    if (r->type == REDIS_REPLY_ERROR && r->str != nullptr) {
        std::string_view text(r->str, r->len);
        for (auto at = text.find(secret); at != std::string_view::npos; at = text.find(secret, at + secret.size()))
            std::memset(r->str + at, '*', secret.size());
    }
    if (r->type == REDIS_REPLY_ARRAY)
        for (std::size_t i = 0; i < r->elements; ++i) mask(r->element[i], secret);
}

// The text of an AUTH refusal: fixed, never the server's words (some servers
// and proxies repeat the password they were sent).
std::string auth_refusal(const redisReply* r) {
    const auto text = reply_text(r);
    if (text.find("without any password configured") != std::string::npos ||
        text.find("no password is set") != std::string::npos)
        return "the server has no password set for that user: drop it from the URL";
    if (error_starts_with(r, "WRONGPASS") || text.find("invalid password") != std::string::npos ||
        text.find("invalid username") != std::string::npos)
        return "wrong user name or password, or the user is disabled";
    std::string word;  // the error code alone ("ERR", "NOPERM"...)
    for (char c : text.substr(0, text.find(' ')))
        if (spi::ascii_alnum(c) || c == '_') word += c;
    return "the server refused it (" + (word.empty() ? std::string("no error code") : word) + ")";
}

}  // namespace

connection::connection(int fd, const endpoint& ep) : fd_(fd), ep_(ep) {
    try {
        reader_ = capped_reader(budget_);
    } catch (...) {
        ::close(fd_);
        throw;
    }
}

connection::~connection() {
    if (reader_ != nullptr) redisReaderFree(reader_);
    tls_.reset();  // no close_notify: nothing more is written on a connection we drop
    ::close(fd_);
}

std::unique_ptr<connection> connection::open(const endpoint& ep) {
    if (ep.allowed && !ep.allowed->allows(ep.host, ep.port))
        throw_error(errc::access_denied, ep.backend_name,
                    "refused to connect to " + ep.label() + ": not in master_hosts=" + ep.allowed->text() +
                        " (the data nodes' credentials go to those hosts only)",
                    0, "master_hosts");
    // The TCP connection and the TLS handshake share connect_timeout.
    const auto connected_by = clock::now() + ep.connect_timeout;
    std::unique_ptr<connection> c(new connection(connect_socket(ep, connected_by), ep));
    if (ep.tls) {
        c->tls_ = std::make_unique<tls_stream>(*ep.tls, c->fd_, ep.host);
        c->tls_->handshake(connected_by, ep.backend_name, ep.label());
    }
    std::string db = std::to_string(ep.db);
    int expected = 0;
    try {
        if (!ep.user.empty()) {
            c->append({"AUTH", ep.user, ep.password});
            ++expected;
        } else if (!ep.password.empty()) {
            c->append({"AUTH", ep.password});
            ++expected;
        }
        if (ep.db != 0) {
            c->append({"SELECT", db});
            ++expected;
        }
        for (int i = 0; i < expected; ++i) {
            auto r = c->read_reply();
            if (!is_error(r.get())) continue;
            const bool is_auth = i == 0 && (!ep.user.empty() || !ep.password.empty());
            if (is_auth) {
                std::string who = ep.user.empty() ? "the default user" : "user '" + ep.user + "'";
                const auto why = auth_refusal(r.get());
                throw_error(errc::access_denied, ep.backend_name,
                            "authentication as " + who + " at " + ep.label() + " failed: " + why, 0, why);
            }
            if (error_starts_with(r.get(), "NOAUTH") || error_starts_with(r.get(), "NOPERM"))
                throw_client_error(r.get(), ep.backend_name, "SELECT " + db + " at " + ep.label());
            std::string text = reply_text(r.get());
            throw_error(errc::invalid_argument, ep.backend_name,
                        "cannot select database " + db + " at " + ep.label() + ": " + text, 0, text);
        }
    } catch (const connection_failure& e) {
        throw_client_error(e, ep.backend_name, "connection to " + ep.label() + " failed during AUTH/SELECT");
    }
    return c;
}

void connection::fail(const std::string& what, failure kind, bool maybe_sent, int err) {
    broken_ = true;
    const auto at = what + " on " + ep_.label() + ": ";
    // A TLS server that requires a client certificate closes the session
    // opened without one, or with one it does not trust, after the handshake:
    // its alert may be lost in the reset.
    if (tls_ && !replied_ && tls_->asked_for_certificate() && (kind == failure::eof || kind == failure::io)) {
        const auto& p = ep_.tls->prefix();
        const auto& cert = ep_.tls->options().cert_file;
        throw connection_failure(
            at + "the TLS server asked for a client certificate and closed the connection (" +
                (cert.empty() ? p + "_cert= and " + p + "_key= give one" : "it refused " + p + "_cert=" + cert) + ")",
            false, maybe_sent, false, true);
    }
    switch (kind) {
        case failure::protocol:
            throw connection_failure(at + "the reply is not the Redis protocol (" + std::string(reader_->errstr) +
                                         "): is " + ep_.label() + " a Redis server?",
                                     false, maybe_sent, true);
        case failure::too_large:
            throw connection_failure(at + "the server sent " + budget_.exceeded + ": refused", false, maybe_sent);
        case failure::timeout:
            throw connection_failure(
                at + "no reply within the command timeout (" + std::to_string(ep_.command_timeout.count()) + " ms)",
                false, maybe_sent);
        case failure::eof:
            throw connection_failure(at + "the server closed the connection" + plaintext_hint(), true, maybe_sent);
        case failure::refused: throw connection_failure(at + tls_->error(), false, maybe_sent, false, true);
        case failure::io:
            if (tls_ && err == EPROTO) throw connection_failure(at + tls_->error(), false, maybe_sent);
            break;
    }
    // A reset (or a write to a peer that closed) of a pooled connection is stale too.
    const bool reset = err == ECONNRESET || err == EPIPE;
    throw connection_failure(at + std::strerror(err) + (reset ? plaintext_hint() : ""), reset, maybe_sent);
}

std::string connection::plaintext_hint() const {
    // A Redis TLS port closes a plaintext session before any reply.
    if (tls_ || replied_) return "";
    return " (if " + ep_.label() + " is a TLS port: rediss:// or tls=true)";
}

void connection::wait_for(short events, const char* what, bool maybe_sent) {
    for (;;) {
        pollfd p{fd_, events, 0};
        const int rc = ::poll(&p, 1, poll_ms(until_));
        if (rc > 0) return;  // ready, or an error or hang-up the read or send reports
        if (rc == 0) fail(what, failure::timeout, maybe_sent);
        if (errno != EINTR) fail(what, failure::io, maybe_sent, errno);
    }
}

reply_ptr connection::command(const std::vector<std::string_view>& args) {
    append(args);
    return read_reply();
}

void connection::append(const std::vector<std::string_view>& args) {
    if (awaited_ == 0 && out_.empty()) until_ = clock::now() + ep_.command_timeout;
    append_command(out_, args);
    ++awaited_;
}

int connection::send_from(std::string_view data, std::size_t& sent, clock::time_point until) {
    if (!tls_) return send_all(fd_, data, sent, until);
    while (sent < data.size()) {
        std::size_t n = 0;
        const auto r = tls_->write(data.data() + sent, data.size() - sent, n);
        if (r == tls_io::ok) {
            sent += n;
            continue;
        }
        if (r == tls_io::closed) return EPIPE;
        if (r == tls_io::failed) return errno;
        // The same bytes again once the socket is ready (OpenSSL's rule for a retried write).
        pollfd p{fd_, static_cast<short>(r == tls_io::want_read ? POLLIN : POLLOUT), 0};
        const int rc = ::poll(&p, 1, poll_ms(until));
        if (rc == 0) return ETIMEDOUT;
        if (rc < 0 && errno != EINTR) return errno;
    }
    return 0;
}

int connection::send_now(std::string_view data, clock::time_point until) {
    std::size_t sent = 0;
    return send_from(data, sent, until);
}

void connection::flush() {
    if (out_.empty()) return;
    if (int err = send_from(out_, sent_, until_); err != 0) {
        if (err == ETIMEDOUT) fail("cannot send", failure::timeout, true);
        if (tls_ && tls_->refused()) fail("cannot send", failure::refused, true);
        fail("cannot send", failure::io, true, err);
    }
    out_.clear();
    sent_ = 0;
}

void connection::receive() {
    char buf[16 * 1024];
    if (tls_) return receive_tls(buf, sizeof buf);
    ssize_t n;
    do n = ::recv(fd_, buf, sizeof buf, 0);
    while (n < 0 && errno == EINTR);
    if (n == 0) fail("no reply", failure::eof, true);
    if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK) return;
        fail("no reply", failure::io, true, errno);
    }
    if (redisReaderFeed(reader_, buf, static_cast<std::size_t>(n)) != REDIS_OK)
        fail("no reply", failure::protocol, true);
}

void connection::receive_tls(char* buf, std::size_t size) {
    // One record's bytes at most (what OpenSSL holds decrypted after a read is
    // read too: poll() cannot see it), so the caps are checked as often as on
    // the plain path.
    do {
        std::size_t n = 0;
        switch (tls_->read(buf, size, n)) {
            case tls_io::ok: break;
            case tls_io::want_read: return;
            case tls_io::want_write: wait_for(POLLOUT, "no reply", true); continue;
            case tls_io::closed: fail("no reply", failure::eof, true);
            case tls_io::failed: fail("no reply", tls_->refused() ? failure::refused : failure::io, true, errno);
        }
        if (redisReaderFeed(reader_, buf, n) != REDIS_OK) fail("no reply", failure::protocol, true);
    } while (tls_->pending());
}

void connection::check_pending() {
    // The reader waits for the bytes of a bulk string, or for the end of a line.
    // A bulk string announced past what is left of the budget fails now, before
    // its bytes are buffered. A line (status, error, integer, a length) is short:
    // one that has not ended after max_line_bytes fails too (hiredis would scan
    // it again for its end at every read, and keep it all).
    if (auto announced = announced_bulk(reader_)) {
        const bool nested = reader_->ridx > 0;
        const std::size_t left = max_reply_bytes - (nested ? std::min(budget_.used, max_reply_bytes) : 0);
        if (*announced > 0 && static_cast<unsigned long long>(*announced) > left) {
            budget_.exceeded = "a bulk string of " + std::to_string(*announced) + " bytes (at most " +
                               std::to_string(max_reply_bytes >> 20) + " MiB a reply)";
            fail("no reply", failure::too_large, true);
        }
        return;
    }
    if (reader_->len - reader_->pos > max_line_bytes) {
        budget_.exceeded = "a line of over " + std::to_string(max_line_bytes >> 10) + " KiB that does not end";
        fail("no reply", failure::too_large, true);
    }
}

reply_ptr connection::take_reply() {
    void* out = nullptr;
    if (redisReaderGetReply(reader_, &out) != REDIS_OK)
        fail("no reply", budget_.exceeded.empty() ? failure::protocol : failure::too_large, true);
    if (out == nullptr) {
        check_pending();
        return nullptr;
    }
    reply_ptr r(static_cast<redisReply*>(out));
    replied_ = true;
    if (awaited_ > 0) --awaited_;
    mask(r.get(), ep_.password);
    return r;
}

reply_ptr connection::read_reply() {
    flush();
    reply_ptr r;
    while (!(r = take_reply())) {
        wait_for(POLLIN, "no reply", true);
        receive();
    }
    if (ep_.follow_redirects) {
        if (auto to = redirect_of(r.get())) {
            broken_ = true;  // replies of a pipeline may still be pending: never reuse it
            throw *to;
        }
    }
    return r;
}

}  // namespace distlock::backends::redis_client
