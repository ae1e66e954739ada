#include "redis_client.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/evp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <climits>
#include <cstring>

#include "distlock/spi/tls.hpp"

namespace distlock::backends::redis_client {
namespace {

bool starts_with(const redisReply* r, std::string_view prefix) {
    return r != nullptr && r->type == REDIS_REPLY_ERROR && r->str != nullptr &&
           std::string_view(r->str, r->len).substr(0, prefix.size()) == prefix;
}

}  // namespace

bool is_error(const redisReply* r) noexcept { return r != nullptr && r->type == REDIS_REPLY_ERROR; }

long long as_integer(const redisReply* r) noexcept {
    if (r == nullptr) return 0;
    if (r->type == REDIS_REPLY_INTEGER) return r->integer;
    if (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS) {
        long long v = 0;
        std::from_chars(r->str, r->str + r->len, v);
        return v;
    }
    return 0;
}

std::string reply_text(const redisReply* r) {
    if (r == nullptr) return "(no reply)";
    switch (r->type) {
        case REDIS_REPLY_STRING:
        case REDIS_REPLY_STATUS:
        case REDIS_REPLY_ERROR: return std::string(r->str, r->len);
        case REDIS_REPLY_INTEGER: return std::to_string(r->integer);
        case REDIS_REPLY_NIL: return "(nil)";
        case REDIS_REPLY_ARRAY: return "(array of " + std::to_string(r->elements) + ")";
        default: return "(reply type " + std::to_string(r->type) + ")";
    }
}

void throw_client_error(const redisReply* r, const std::string& backend, const std::string& context) {
    std::string text = reply_text(r);
    errc code = errc::unavailable;
    // An ACL that refuses a command or key inside a script is an ERR with these words.
    if (starts_with(r, "NOAUTH") || starts_with(r, "WRONGPASS") || starts_with(r, "NOPERM") ||
        text.find("The user executing the script can't") != std::string::npos ||
        text.find("invalid password") != std::string::npos || text.find("invalid username") != std::string::npos ||
        text.find("AUTH <password> called without") != std::string::npos ||
        text.find("no password is set") != std::string::npos)
        code = errc::access_denied;
    else if (starts_with(r, "WRONGTYPE")) code = errc::invalid_argument;
    // A server that wants a password the URL did not give: say where it goes.
    const std::string hint = starts_with(r, "NOAUTH")
                                 ? " (this server needs a password: redis://:PASSWORD@host:port, or "
                                   "redis://USER:PASSWORD@host:port for an ACL user)"
                                 : "";
    throw_error(code, backend, context + ": " + text + hint, 0, text);
}

void throw_client_error(const connection_failure& e, const std::string& backend, const std::string& context) {
    const errc code = e.not_redis() ? errc::invalid_argument : e.denied() ? errc::access_denied : errc::unavailable;
    throw_error(code, backend, context + ": " + e.what());
}

// ---- endpoint ------------------------------------------------------------------

endpoint endpoint_from_url(spi::url& u, const std::string& backend_name, std::chrono::milliseconds connect_default,
                           std::chrono::milliseconds command_default, std::optional<std::string_view> db_path) {
    endpoint ep;
    ep.backend_name = backend_name;
    ep.user = u.user();
    ep.password = u.password();
    if (!ep.user.empty() && ep.password.empty()) {
        // redis://SECRET@host: Lettuce's and redis-cli's form of a password for
        // the default user. Taken as a user name it would be sent as one and
        // shown in messages; an ACL user always comes with a password here.
        ep.password = std::move(ep.user);
        ep.user.clear();
    }
    std::string_view db = db_path ? *db_path : std::string_view(u.path());
    if (!db_path && !db.empty()) db.remove_prefix(1);
    if (!db.empty()) {
        int value = -1;
        auto [p, ec] = std::from_chars(db.data(), db.data() + db.size(), value);
        if (ec != std::errc{} || p != db.data() + db.size() || value < 0)
            throw_error(errc::invalid_argument, backend_name,
                        "the database must be a number (/0, /1, ...), not '" + std::string(db) + "'");
        ep.db = value;
    }
    ep.connect_timeout = u.take_duration("connect_timeout").value_or(connect_default);
    ep.command_timeout = u.take_duration("timeout").value_or(command_default);
    if (ep.connect_timeout.count() <= 0 || ep.command_timeout.count() <= 0)
        throw_error(errc::invalid_argument, backend_name, "connect_timeout and timeout must be positive");
    tls_options tls;
    tls.enabled = u.scheme() == "rediss";
    tls = tls_from_url(u, backend_name, std::move(tls));
    if (u.scheme() == "rediss" && !tls.enabled) spi::tls_conflict(backend_name, "tls=false", "rediss://");
    if (tls.enabled) ep.tls = tls_context::make(tls, backend_name);
    return ep;
}

// ---- host_filter -----------------------------------------------------------------

namespace {

// The bytes of `text` when it is an IP address as written (inet_pton: dotted
// quads and IPv6 text only, never inet_aton's "10.1" or "0x7f.1").
bool ip_bytes(std::string_view text, int& family, unsigned char (&out)[16]) {
    if (text.empty() || text.size() > 64) return false;
    const std::string s(text);
    if (::inet_pton(AF_INET, s.c_str(), out) == 1) {
        family = AF_INET;
        return true;
    }
    if (::inet_pton(AF_INET6, s.c_str(), out) == 1) {
        family = AF_INET6;
        return true;
    }
    return false;
}

char ascii_lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

// A host name as DNS writes it (letters, digits, '-', '_' and dots, not
// starting with '-' or '.'), lowercased into `out`.
bool host_name(std::string_view text, std::string& out) {
    if (text.empty() || text.size() > 253 || text.front() == '-' || text.front() == '.') return false;
    out.clear();
    for (char c : text) {
        if (!spi::ascii_alnum(c) && c != '-' && c != '_' && c != '.') return false;
        out += ascii_lower(c);
    }
    return true;
}

bool port_number(std::string_view text, std::uint16_t& port) {
    unsigned value = 0;
    auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (text.empty() || ec != std::errc{} || p != text.data() + text.size() || value == 0 || value > 65535)
        return false;
    port = static_cast<std::uint16_t>(value);
    return true;
}

// Whether the first `bits` bits of two addresses are the same.
bool same_prefix(const unsigned char* a, const unsigned char* b, int bits) {
    const int bytes = bits / 8, rest = bits % 8;
    if (std::memcmp(a, b, static_cast<std::size_t>(bytes)) != 0) return false;
    if (rest == 0) return true;
    const auto mask = static_cast<unsigned char>(0xff << (8 - rest));
    return (a[bytes] & mask) == (b[bytes] & mask);
}

}  // namespace

bool plausible_host(std::string_view host) {
    int family = 0;
    unsigned char addr[16];
    std::string name;
    return ip_bytes(host, family, addr) || host_name(host, name);
}

bool host_filter::read_entry(std::string_view text, entry& e) {
    std::string_view host = text;
    if (const auto slash = text.find('/'); slash != std::string_view::npos) {  // a block: address/bits
        host = text.substr(0, slash);
        const auto bits = text.substr(slash + 1);
        auto [p, ec] = std::from_chars(bits.data(), bits.data() + bits.size(), e.bits);
        return !bits.empty() && ec == std::errc{} && p == bits.data() + bits.size() &&
               ip_bytes(host, e.family, e.addr) && e.bits >= 0 && e.bits <= (e.family == AF_INET ? 32 : 128);
    }
    if (!text.empty() && text.front() == '[') {  // [IPv6] or [IPv6]:port
        const auto close = text.find(']');
        if (close == std::string_view::npos) return false;
        const auto rest = text.substr(close + 1);
        if (!rest.empty() && (rest.front() != ':' || !port_number(rest.substr(1), e.port))) return false;
        e.bits = 128;
        return ip_bytes(text.substr(1, close - 1), e.family, e.addr) && e.family == AF_INET6;
    }
    if (const auto colon = text.find(':');
        colon != std::string_view::npos && text.find(':', colon + 1) == std::string_view::npos) {
        host = text.substr(0, colon);  // host:port (two colons or more: an IPv6 address alone)
        if (!port_number(text.substr(colon + 1), e.port)) return false;
    }
    if (ip_bytes(host, e.family, e.addr)) {
        e.bits = e.family == AF_INET ? 32 : 128;
        return true;
    }
    return host_name(host, e.name);
}

host_filter host_filter::parse(std::string_view text, const std::string& backend_name) {
    host_filter f;
    f.text_ = std::string(text);
    for (std::size_t start = 0;;) {
        const auto comma = text.find(',', start);
        const auto item = text.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
        entry e;
        if (item.empty() || !read_entry(item, e))
            throw_error(errc::invalid_argument, backend_name,
                        "master_hosts= takes host names, IP addresses (each with an optional :port; IPv6 as "
                        "[address]:port) and CIDR blocks, separated by commas: cannot read '" +
                            std::string(item) + "'");
        f.entries_.push_back(std::move(e));
        if (comma == std::string_view::npos) break;
        start = comma + 1;
    }
    return f;
}

void host_filter::allow(std::string_view host, std::uint16_t port) {
    entry e;
    e.port = port;
    if (ip_bytes(host, e.family, e.addr)) e.bits = e.family == AF_INET ? 32 : 128;
    else
        for (char c : host) e.name += ascii_lower(c);
    entries_.push_back(std::move(e));
}

bool host_filter::allows(std::string_view host, std::uint16_t port) const {
    if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
    int family = 0;
    unsigned char addr[16]{};
    const bool ip = ip_bytes(host, family, addr);
    std::string name;
    if (!ip)
        for (char c : host) name += ascii_lower(c);
    for (const auto& e : entries_) {
        if (e.port != 0 && e.port != port) continue;
        if (ip ? e.name.empty() && e.family == family && same_prefix(e.addr, addr, e.bits)
               : !e.name.empty() && e.name == name)
            return true;
    }
    return false;
}

// ---- connection ----------------------------------------------------------------

namespace {

// The reply object functions hiredis's reader calls as it parses: its own,
// behind a budget per reply (connection::reply_budget, the reader's privdata).
// A function that returns null makes the reader fail ("out of memory"): the
// connection then reports the cap that was hit instead.
const redisReplyObjectFunctions* hiredis_functions = nullptr;

connection::reply_budget& budget_of(const redisReadTask* t) {
    return *static_cast<connection::reply_budget*>(t->privdata);
}

// Charges `bytes` to the reply `t` belongs to (a task without a parent starts a
// new reply); false when that goes past max_reply_bytes.
bool charge(const redisReadTask* t, std::size_t bytes, const char* what) {
    auto& b = budget_of(t);
    if (t->parent == nullptr) b.used = 0;
    if (bytes > max_reply_bytes - std::min(b.used, max_reply_bytes)) {
        b.exceeded =
            std::string("a reply larger than ") + std::to_string(max_reply_bytes >> 20) + " MiB (" + what + ")";
        return false;
    }
    b.used += bytes;
    return true;
}

void* capped_string(const redisReadTask* t, char* str, std::size_t len) {
    if (!charge(t, len + sizeof(redisReply), "a string")) return nullptr;
    return hiredis_functions->createString(t, str, len);
}

// hiredis 0.14 counts elements in an int, 1.x in a size_t.
template <class F>
struct count_of;
template <class R, class T, class N>
struct count_of<R (*)(T, N)> {
    using type = N;
};
using element_count = count_of<decltype(redisReplyObjectFunctions::createArray)>::type;

void* capped_array(const redisReadTask* t, element_count n) {
    const auto elements = static_cast<long long>(n);
    if (elements > max_reply_elements) {
        budget_of(t).exceeded = "an array of " + std::to_string(elements) + " elements (at most " +
                                std::to_string(max_reply_elements) + ")";
        return nullptr;
    }
    if (!charge(t, static_cast<std::size_t>(elements) * (sizeof(redisReply) + sizeof(redisReply*)), "an array"))
        return nullptr;
    return hiredis_functions->createArray(t, n);
}

redisReader* capped_reader(connection::reply_budget& budget) {
    redisReader* r = redisReaderCreate();
    if (r == nullptr) throw std::bad_alloc();
    static const redisReplyObjectFunctions capped = [&] {
        hiredis_functions = r->fn;  // hiredis's defaults, the same for every reader
        redisReplyObjectFunctions f = *r->fn;
        f.createString = capped_string;
        f.createArray = capped_array;
        return f;
    }();
    r->fn = const_cast<redisReplyObjectFunctions*>(&capped);
    r->privdata = &budget;
    return r;
}

// The length a bulk string the reader is waiting for the bytes of announces
// (its length line is complete): hiredis buffers the whole string before it
// makes an object of it, so a cap checked only then would come after the
// memory is spent.
std::optional<long long> announced_bulk(const redisReader* r) {
    if (r->ridx < 0) return std::nullopt;
#if HIREDIS_MAJOR >= 1
    const redisReadTask* t = r->task[r->ridx];
#else
    const redisReadTask* t = &r->rstack[r->ridx];
#endif
    if (t == nullptr || t->type != REDIS_REPLY_STRING) return std::nullopt;
    // The reader stands after the '$': the length's digits, then "\r\n".
    const char* p = r->buf + r->pos;
    const char* end = r->buf + r->len;
    long long len = 0;
    auto [stop, ec] = std::from_chars(p, end, len);
    if (ec != std::errc{} || stop == p || end - stop < 2 || stop[0] != '\r' || stop[1] != '\n') return std::nullopt;
    return len;
}

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

// A connected non-blocking TCP socket to ep by `until` (close-on-exec from the
// start: a fork and exec in another thread never inherits it), or unavailable_error.
int connect_socket(const endpoint& ep, clock::time_point until) {
    const auto where = "cannot connect to " + ep.label() + " (connect_timeout " +
                       std::to_string(ep.connect_timeout.count()) + " ms): ";
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    const auto port = std::to_string(ep.port);
    if (int rc = ::getaddrinfo(ep.host.c_str(), port.c_str(), &hints, &found); rc != 0) {
        const std::string why = rc == EAI_SYSTEM ? std::strerror(errno) : ::gai_strerror(rc);
        throw_error(errc::unavailable, ep.backend_name, where + why, rc, why);
    }
    std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> addresses(found, ::freeaddrinfo);
    int err = ECONNREFUSED;
    for (const addrinfo* a = found; a != nullptr; a = a->ai_next) {
        int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
        if (fd < 0) {
            err = errno;
            continue;
        }
        int rc = ::connect(fd, a->ai_addr, a->ai_addrlen);
        if (rc != 0 && errno == EINPROGRESS) {
            pollfd p{fd, POLLOUT, 0};
            do rc = ::poll(&p, 1, poll_ms(until));
            while (rc < 0 && errno == EINTR);
            socklen_t len = sizeof err;
            if (rc == 0) err = ETIMEDOUT;
            else if (rc < 0 || ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
            rc = err == 0 ? 0 : -1;
        } else if (rc != 0) {
            err = errno;
        }
        if (rc == 0) {
            // As hiredis did: no Nagle delay for small commands; keepalive finds a
            // dead peer of an idle pooled connection (idle 15 s, then 3 probes 5 s apart).
            int on = 1, idle = 15, interval = 5, count = 3;
            ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
            ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof on);
            ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
            ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof interval);
            ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof count);
            return fd;
        }
        ::close(fd);
        if (clock::now() >= until) break;
    }
    const std::string why = std::strerror(err);
    throw_error(errc::unavailable, ep.backend_name, where + why, err, why);
}

// The text of an AUTH refusal: fixed, never the server's words (some servers
// and proxies repeat the password they were sent).
std::string auth_refusal(const redisReply* r) {
    const auto text = reply_text(r);
    if (text.find("without any password configured") != std::string::npos ||
        text.find("no password is set") != std::string::npos)
        return "the server has no password set for that user: drop it from the URL";
    if (starts_with(r, "WRONGPASS") || text.find("invalid password") != std::string::npos ||
        text.find("invalid username") != std::string::npos)
        return "wrong user name or password, or the user is disabled";
    std::string word;  // the error code alone ("ERR", "NOPERM"...)
    for (char c : text.substr(0, text.find(' ')))
        if (spi::ascii_alnum(c) || c == '_') word += c;
    return "the server refused it (" + (word.empty() ? std::string("no error code") : word) + ")";
}

}  // namespace

std::string format_command(const std::vector<std::string_view>& args) {
    std::string out = "*" + std::to_string(args.size()) + "\r\n";
    for (auto a : args) {
        out += "$" + std::to_string(a.size()) + "\r\n";
        out.append(a);
        out += "\r\n";
    }
    return out;
}

int send_all(int fd, std::string_view data, std::size_t& sent, clock::time_point until) {
    while (sent < data.size()) {
        const ssize_t n = ::send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
        if (n > 0) {
            sent += static_cast<std::size_t>(n);
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) return errno;
        pollfd p{fd, POLLOUT, 0};
        const int rc = ::poll(&p, 1, poll_ms(until));
        if (rc == 0) return ETIMEDOUT;
        if (rc < 0 && errno != EINTR) return errno;
    }
    return 0;
}

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
            if (starts_with(r.get(), "NOAUTH") || starts_with(r.get(), "NOPERM"))
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
    out_ += format_command(args);
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

namespace {
// The redirection an error reply asks for, if any (see `redirect`).
std::optional<redirect> redirect_of(const redisReply* r) {
    if (r == nullptr || r->type != REDIS_REPLY_ERROR || r->str == nullptr) return std::nullopt;
    const std::string_view text(r->str, r->len);
    const bool moved = text.substr(0, 6) == "MOVED ", ask = text.substr(0, 4) == "ASK ";
    if (moved || ask) {
        // "MOVED 3999 127.0.0.1:6381": the slot, then host:port (the host may be
        // empty: the node we asked, in Redis 7's unknown-endpoint form).
        auto rest = text.substr(moved ? 6 : 4);
        const auto space = rest.find(' ');
        int slot = -1;
        std::from_chars(rest.data(), rest.data() + std::min(space, rest.size()), slot);
        auto addr = space == std::string_view::npos ? std::string_view{} : rest.substr(space + 1);
        const auto colon = addr.rfind(':');
        std::uint16_t port = 0;
        if (colon != std::string_view::npos) std::from_chars(addr.data() + colon + 1, addr.data() + addr.size(), port);
        std::string host(addr.substr(0, colon == std::string_view::npos ? 0 : colon));
        return redirect(moved ? redirect::kind::moved : redirect::kind::ask, slot, std::move(host), port,
                        std::string(text));
    }
    for (std::string_view retry : {"READONLY", "TRYAGAIN", "CLUSTERDOWN", "LOADING", "MASTERDOWN"})
        if (text.substr(0, retry.size()) == retry) return redirect(redirect::kind::retry, -1, "", 0, std::string(text));
    return std::nullopt;
}
}  // namespace

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

// ---- pool ------------------------------------------------------------------------

pool::borrowed::~borrowed() {
    if (conn_ && !conn_->broken()) pool_->put(std::move(conn_));
}

pool::borrowed pool::get() {
    {
        std::lock_guard lk(mutex_);
        if (!idle_.empty()) {
            auto c = std::move(idle_.back());
            idle_.pop_back();
            return borrowed(*this, std::move(c));
        }
    }
    return borrowed(*this, connection::open(ep_));
}

void pool::put(std::unique_ptr<connection> c) {
    std::lock_guard lk(mutex_);
    if (idle_.size() < max_idle_) idle_.push_back(std::move(c));
}

void pool::clear_idle() {
    std::vector<std::unique_ptr<connection>> drop;
    std::lock_guard lk(mutex_);
    drop.swap(idle_);
}

// ---- script ------------------------------------------------------------------------

namespace {
std::string sha1_hex(const std::string& text) {
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    EVP_Digest(text.data(), text.size(), md, &len, EVP_sha1(), nullptr);
    return spi::to_hex(std::string_view(reinterpret_cast<const char*>(md), len));
}
}  // namespace

script::script(std::string text) : text_(std::move(text)), sharded_text_(text_) {
    constexpr std::string_view plain = "redis.call('publish',", sharded = "redis.call('spublish',";
    for (auto at = sharded_text_.find(plain); at != std::string::npos;
         at = sharded_text_.find(plain, at + sharded.size()))
        sharded_text_.replace(at, plain.size(), sharded);
    sha1_ = sha1_hex(text_);
    sharded_sha1_ = sha1_hex(sharded_text_);
}

std::vector<std::string_view> script::eval_args(const std::vector<std::string_view>& keys,
                                                const std::vector<std::string_view>& args, std::string& numkeys,
                                                bool sharded) const {
    numkeys = std::to_string(keys.size());
    std::vector<std::string_view> cmd{"EVAL", text(sharded), numkeys};
    cmd.insert(cmd.end(), keys.begin(), keys.end());
    cmd.insert(cmd.end(), args.begin(), args.end());
    return cmd;
}

reply_ptr script::run(connection& c, const std::vector<std::string_view>& keys,
                      const std::vector<std::string_view>& args) const {
    std::string numkeys;
    const bool sharded = c.where().sharded;
    auto cmd = eval_args(keys, args, numkeys, sharded);
    if (c.asking()) return c.command(cmd);  // one command: EVAL
    cmd[0] = "EVALSHA";
    cmd[1] = sha1(sharded);
    auto r = c.command(cmd);
    if (!starts_with(r.get(), "NOSCRIPT")) return r;
    cmd[0] = "EVAL";
    cmd[1] = text(sharded);
    return c.command(cmd);
}

reply_ptr script::eval(connection& c, const std::vector<std::string_view>& keys,
                       const std::vector<std::string_view>& args) const {
    std::string numkeys;
    return c.command(eval_args(keys, args, numkeys, c.where().sharded));
}

// ---- exchange (one command to several servers at once) ------------------------------

std::vector<exchange_result> exchange_all(const std::vector<pool*>& pools,
                                          const std::vector<std::vector<std::string_view>>& commands) {
    const std::size_t n = pools.size();
    std::vector<exchange_result> out(n);
    std::vector<std::optional<pool::borrowed>> conns(n);
    auto timeout = 0ms;
    // A node that failed: why; its connection is never reused (a reply may be pending).
    auto fail_node = [&](std::size_t i, const connection_failure& e) {
        out[i].error = e.what();
        out[i].maybe_sent = e.maybe_sent();
        if (e.not_redis()) out[i].code = errc::invalid_argument;
        if (e.denied()) out[i].code = errc::access_denied;
        if (conns[i]) (**conns[i]).poison();
        conns[i].reset();
        pools[i]->clear_idle();
    };
    for (std::size_t i = 0; i < n; ++i) {
        timeout = std::max(timeout, pools[i]->where().command_timeout);
        try {
            conns[i].emplace(pools[i]->get());
            (*conns[i])->append(commands[i]);
            (*conns[i])->flush();
        } catch (const connection_failure& e) {
            fail_node(i, e);
        } catch (const error& e) {
            out[i].error = e.reason();  // the caller names the backend and the category
            out[i].code = e.code_value();
            conns[i].reset();
        }
    }
    const auto until = clock::now() + timeout;
    std::vector<std::size_t> waiting;
    for (std::size_t i = 0; i < n; ++i)
        if (conns[i]) waiting.push_back(i);
    while (!waiting.empty()) {
        std::vector<pollfd> fds;
        for (auto i : waiting) fds.push_back(pollfd{(**conns[i]).fd(), POLLIN, 0});
        const int wait_ms = poll_ms(until);
        if (wait_ms == 0) {
            for (auto i : waiting) {
                out[i].error = "no reply within the command timeout (" + std::to_string(timeout.count()) + " ms) on " +
                               pools[i]->where().label();
                out[i].maybe_sent = true;
                (**conns[i]).poison();
                conns[i].reset();
                pools[i]->clear_idle();
            }
            break;
        }
        int rc = ::poll(fds.data(), fds.size(), wait_ms);
        if (rc < 0 && errno != EINTR) {
            const std::string why = std::string("poll failed: ") + std::strerror(errno);
            for (auto i : waiting) fail_node(i, connection_failure(why, false, true));
            break;
        }
        std::vector<std::size_t> still;
        for (std::size_t k = 0; k < waiting.size(); ++k) {
            auto i = waiting[k];
            if (rc <= 0 || fds[k].revents == 0) {
                still.push_back(i);
                continue;
            }
            try {
                (**conns[i]).receive();
                auto r = (**conns[i]).take_reply();
                if (!r) {
                    still.push_back(i);
                    continue;
                }
                out[i].reply = std::move(r);
                (**conns[i]).mark_used();
            } catch (const connection_failure& e) {
                fail_node(i, e);
            }
        }
        waiting.swap(still);
    }
    return out;
}

}  // namespace distlock::backends::redis_client
