#include "distlock/spi/tls.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <optional>

#include "distlock/error.hpp"

namespace distlock::spi {
namespace {

[[noreturn]] void bad(std::string_view backend, const std::string& message) {
    throw_error(errc::invalid_argument, std::string(backend), message);
}

// The value of `param` (already taken: `own`), else of its `alias`; both
// given and different is a conflict.
tls_file pick(url& u, std::string_view backend, const std::optional<std::string>& own, std::string_view param,
              std::string_view alias) {
    std::optional<std::string> native;
    if (!alias.empty()) native = u.take(alias);
    if (own && own->empty()) bad(backend, std::string(param) + " is empty");
    if (native && native->empty()) bad(backend, std::string(alias) + " is empty");
    if (own && native && *own != *native) tls_conflict(backend, param, alias);
    if (own) return {*own, std::string(param)};
    if (native) return {*native, std::string(alias)};
    return {};
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

tls_params take_tls(url& u, std::string_view backend, const tls_aliases& aliases) {
    tls_params p;
    p.enabled = u.take_bool("tls").value_or(false);
    if (auto v = u.take_bool("tls_insecure")) p.verify = !*v;
    const auto ca = u.take("tls_ca"), cert = u.take("tls_cert"), key = u.take("tls_key");
    const auto name = u.take("tls_server_name");
    // As the HTTP layer always asked; the aliases are the backend's native
    // syntax, whose own mode parameter (sslmode, ssl_mode) turns TLS on.
    if (!p.enabled && (ca || cert || key || name || !p.verify))
        bad(backend, "tls_ca/tls_cert/tls_key/tls_server_name/tls_insecure need tls=true");
    p.ca = pick(u, backend, ca, "tls_ca", aliases.ca);
    p.cert = pick(u, backend, cert, "tls_cert", aliases.cert);
    p.key = pick(u, backend, key, "tls_key", aliases.key);
    p.server_name = pick(u, backend, name, "tls_server_name", aliases.server_name).path;
    return p;
}

void check_tls_files(const tls_params& p, std::string_view backend) {
    check_tls_file(p.ca, backend);
    check_tls_file(p.cert, backend);
    check_tls_file(p.key, backend);
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
