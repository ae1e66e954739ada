// The URL's TLS parameters as libpq and MariaDB Connector/C take them
// (spi/tls.hpp, "database clients"): one mapping for the SQL backends and for
// an application's own client of the same database.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/x509.h>

#include <algorithm>
#include <iterator>
#include <optional>

#include "distlock/error.hpp"
#include "distlock/spi/tls.hpp"

namespace distlock::spi {

std::vector<std::pair<std::string, std::string>> take_libpq_tls(url& u, std::string_view backend, std::string& host) {
    const std::string name(backend);
    const auto t = take_tls(u, backend, {"sslrootcert", "sslcert", "sslkey", ""});
    auto mode = u.take("sslmode");
    static constexpr std::string_view modes[] = {"disable", "allow", "prefer", "require", "verify-ca", "verify-full"};
    if (mode && std::find(std::begin(modes), std::end(modes), *mode) == std::end(modes))
        throw_error(errc::invalid_argument, name,
                    "unknown sslmode '" + *mode + "' (known: disable, allow, prefer, require, verify-ca, verify-full)");
    if (t.enabled) {
        const std::string implied = t.verify ? "verify-full" : "require";
        if (mode && *mode != implied)
            tls_conflict(backend, t.verify ? "tls=true" : "tls_insecure=true", "sslmode=" + *mode);
        mode = implied;
    }
    tls_file crl;
    if (auto v = u.take("sslcrl")) crl = {*v, "sslcrl"};
    check_tls_files(t, backend);
    check_tls_file(crl, backend);
    std::vector<std::pair<std::string, std::string>> keywords;
    if (mode) keywords.emplace_back("sslmode", *mode);
    // tls=true without a CA: the system's bundle, as the HTTP layer's (libpq's
    // own default is ~/.postgresql/root.crt). None with tls_insecure: libpq
    // verifies the chain (verify-ca) at sslmode=require when it has a CA.
    const bool insecure = t.enabled && !t.verify;
    const std::string ca = insecure ? "" : t.ca.given() ? t.ca.path : t.enabled ? X509_get_default_cert_file() : "";
    if (!ca.empty()) keywords.emplace_back("sslrootcert", ca);
    if (t.cert.given()) keywords.emplace_back("sslcert", t.cert.path);
    if (t.key.given()) keywords.emplace_back("sslkey", t.key.path);
    if (crl.given()) keywords.emplace_back("sslcrl", crl.path);
    if (!t.server_name.empty()) {
        // libpq verifies (and sends in SNI) `host`, and connects to `hostaddr`
        // when given, which must be a numeric address.
        unsigned char buf[sizeof(in6_addr)];
        if (inet_pton(AF_INET, host.c_str(), buf) != 1 && inet_pton(AF_INET6, host.c_str(), buf) != 1)
            throw_error(errc::unsupported, name,
                        "tls_server_name needs the URL's host as a numeric address (libpq connects to it as hostaddr)");
        keywords.emplace_back("hostaddr", host);
        host = t.server_name;
    }
    return keywords;
}

namespace {

// Why the modes that do not verify the server's certificate are refused.
constexpr std::string_view unverified_mode =
    "MariaDB Connector/C 3.3 enforces TLS only when it verifies the server's certificate and name: without "
    "verification it logs in in clear to a server (or an attacker on the path) that does not offer TLS, and "
    "verify_ca is not offered apart from the name. Use ssl_mode=verify_identity (tls=true), or disabled to say "
    "that clear is meant";

}  // namespace

mariadb_tls take_mariadb_tls(url& u, std::string_view backend) {
    using mode = mariadb_tls::mode;
    const std::string name(backend);
    const auto t = take_tls(u, backend, {"ssl_ca", "ssl_cert", "ssl_key", ""});
    if (!t.server_name.empty())
        throw_error(errc::unsupported, name,
                    "tls_server_name is not supported: the client library verifies the URL's host");
    std::optional<mode> m;
    if (auto v = u.take("ssl_mode")) {
        if (*v == "disabled") m = mode::disabled;
        else if (*v == "verify_identity") m = mode::verify_identity;
        else if (*v == "preferred" || *v == "required" || *v == "verify_ca")
            throw_error(errc::unsupported, name,
                        "ssl_mode=" + *v + " is not supported: " + std::string(unverified_mode));
        else
            throw_error(
                errc::invalid_argument, name,
                "unknown ssl_mode '" + *v + "' (known: disabled, preferred, required, verify_ca, verify_identity)");
    }
    if (t.enabled) {
        if (!t.verify)
            throw_error(errc::unsupported, name, "tls_insecure is not supported: " + std::string(unverified_mode));
        if (m && *m != mode::verify_identity) tls_conflict(backend, "tls=true", "ssl_mode");
        m = mode::verify_identity;
    }
    check_tls_files(t, backend);
    if ((t.ca.given() || t.cert.given() || t.key.given()) && (!m || *m == mode::disabled))
        throw_error(errc::invalid_argument, name,
                    "ssl_ca/ssl_cert/ssl_key need TLS: add tls=true or ssl_mode=verify_identity");
    mariadb_tls out;
    out.tls = m.value_or(mode::library_default);
    // tls=true without a CA: the system's bundle, as the HTTP layer's.
    out.ca = t.ca.given() ? t.ca.path : out.tls == mode::verify_identity ? X509_get_default_cert_file() : "";
    out.cert = t.cert.path;
    out.key = t.key.path;
    return out;
}

bool mariadb_tls_refused(std::string_view client_message) noexcept {
    for (std::string_view what :
         {"certificate", "SSL is required", "self-signed", "self signed", "unable to get local issuer", "unknown ca"})
        if (client_message.find(what) != std::string_view::npos) return true;
    return false;
}

}  // namespace distlock::spi
