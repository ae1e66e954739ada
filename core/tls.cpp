#include "distlock/spi/tls.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <optional>

#include "distlock/error.hpp"
#include "distlock/spi/backend.hpp"

namespace distlock::spi {
namespace {

[[noreturn]] void bad(std::string_view backend, const std::string& message) {
    throw_error(errc::invalid_argument, std::string(backend), message);
}

// The value of `param` (already taken: `own`), else of its `alias`, else
// `base`; both given and different is a conflict.
tls_file pick(url& u, std::string_view backend, const std::optional<std::string>& own, const std::string& param,
              std::string_view alias, tls_file base) {
    std::optional<std::string> native;
    if (!alias.empty()) native = u.take(alias);
    if (own && own->empty()) bad(backend, param + " is empty");
    if (native && native->empty()) bad(backend, std::string(alias) + " is empty");
    if (own && native && *own != *native) tls_conflict(backend, param, alias);
    if (own) return {*own, param};
    if (native) return {*native, std::string(alias)};
    return base;
}

// A DNS name or an IP address: what may go into the ClientHello (SNI) and be
// verified against the certificate, nothing a library would read as a URL,
// a list or a port.
bool server_name_ok(const std::string& name) {
    if (name.find(':') != std::string::npos) {
        unsigned char addr[16];
        return name.size() < 64 && ::inet_pton(AF_INET6, name.c_str(), addr) == 1;
    }
    if (name.size() > 253 || name.front() == '-' || name.front() == '.') return false;
    for (char c : name)
        if (!ascii_alnum(c) && c != '-' && c != '_' && c != '.') return false;
    return true;
}

// Whether the PEM file at `path` holds an encrypted private key (PKCS#8
// "ENCRYPTED PRIVATE KEY", or a traditional key with "Proc-Type: 4,ENCRYPTED").
// Reads at most 1 MiB, and only a regular file (check_tls_file ran first).
bool encrypted_pem(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0) return false;
    std::string text;
    char buf[8192];
    for (ssize_t n; text.size() < (1u << 20) && (n = ::read(fd, buf, sizeof buf)) > 0;)
        text.append(buf, static_cast<std::size_t>(n));
    ::close(fd);
    return text.find("-----BEGIN ENCRYPTED PRIVATE KEY-----") != std::string::npos ||
           text.find("Proc-Type: 4,ENCRYPTED") != std::string::npos;
}

}  // namespace

// Opened, not only stat()ed: the permission bits do not tell what an ACL, a
// capability or a read-only mount allow. Nothing is read.
void check_tls_file(const tls_file& f, std::string_view backend) {
    if (!f.given()) return;
    const int fd = ::open(f.path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0) {
        const int err = errno;
        bad(backend, f.param + ": cannot read '" + f.path + "' (" + std::strerror(err) + ")");
    }
    struct stat st {};
    const bool regular = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
    ::close(fd);
    if (!regular) bad(backend, f.param + ": '" + f.path + "' is not a regular file");
}

tls_params take_tls(url& u, std::string_view backend, const tls_aliases& aliases, const tls_start& start) {
    const std::string n(start.prefix);
    tls_params p = start.base;
    if (auto v = u.take_bool(n)) p.enabled = *v;
    std::optional<bool> insecure;
    if (start.insecure) insecure = u.take_bool(n + "_insecure");
    const auto ca = u.take(n + "_ca"), cert = u.take(n + "_cert"), key = u.take(n + "_key");
    const auto name = u.take(n + "_server_name");
    const bool given = ca || cert || key || name || insecure;
    // As the HTTP layer always asked; the aliases are the backend's native
    // syntax, whose own mode parameter (sslmode, ssl_mode) turns TLS on.
    if (!p.enabled && given) {
        std::string names = n + "_ca/" + n + "_cert/" + n + "_key/" + n + "_server_name";
        if (start.insecure) names += "/" + n + "_insecure";
        bad(backend, names + " need " + n + "=true" +
                         (start.enabled_by.empty() ? "" : " (or " + std::string(start.enabled_by) + ")"));
    }
    if (!p.enabled) p = tls_params{};  // off: nothing inherited (sentinel_tls=false)
    if (insecure) p.verify = !*insecure;
    p.ca = pick(u, backend, ca, n + "_ca", aliases.ca, p.ca);
    p.cert = pick(u, backend, cert, n + "_cert", aliases.cert, p.cert);
    p.key = pick(u, backend, key, n + "_key", aliases.key, p.key);
    const auto server = pick(u, backend, name, n + "_server_name", aliases.server_name, {p.server_name, ""});
    if (server.given() && !server_name_ok(server.path))
        bad(backend, server.param + " must be a host name or an IP address");
    p.server_name = server.path;
    return p;
}

void check_tls_files(const tls_params& p, std::string_view backend) {
    // (Every key parameter's name ends in "key", its certificate's in "cert":
    // tls_key and tls_cert, sslkey and sslcert, ssl_key and ssl_cert.)
    if (p.key.given() && !p.cert.given())
        bad(backend, p.key.param + ": a client key needs " + p.key.param.substr(0, p.key.param.size() - 3) +
                         "cert, the certificate it belongs to");
    check_tls_file(p.ca, backend);
    check_tls_file(p.cert, backend);
    check_tls_file(p.key, backend);
    // A key under a passphrase: the TLS libraries would ask for it on the
    // terminal (OpenSSL's default prompt: libcurl and MariaDB Connector/C give
    // none), so a service could block on a prompt nobody sees. There is no
    // passphrase parameter: refused, before any library reads the file.
    const tls_file& key = p.key.given() ? p.key : p.cert;
    if (key.given() && encrypted_pem(key.path))
        bad(backend, key.param + ": '" + key.path +
                         "' holds an encrypted private key (a passphrase is not supported): give the key unencrypted, "
                         "readable by this user only");
}

void tls_conflict(std::string_view backend, std::string_view param, std::string_view alias) {
    bad(backend, std::string(param) + " and " + std::string(alias) + " are both given and disagree: give one");
}

bool tls_asked(const url& u) {
    url copy = u;
    bool asked = false;
    try {
        asked = copy.take_bool("tls").value_or(false);
    } catch (const error&) {
        asked = true;  // tls=maybe: not "no"
    }
    for (const char* name : {"tls_insecure", "tls_ca", "tls_cert", "tls_key", "tls_server_name"})
        asked = copy.take(name).has_value() || asked;
    return asked;
}

bool tls_insecure_requested(const url& u) {
    url copy = u;
    try {
        return copy.take_bool("tls_insecure").value_or(false);
    } catch (const error&) {
        return false;
    }
}

}  // namespace distlock::spi
