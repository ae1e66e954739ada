// distlock backend-author interface: the TLS parameters every network backend
// reads from its URL, parsed here once so that they mean the same everywhere:
//
//   tls=true           verify the server's certificate chain and host name
//   tls_ca=FILE        the CA bundle (PEM) to verify it with; none = the system's
//   tls_cert=FILE      a client certificate (PEM), for mutual TLS
//   tls_key=FILE       its private key (PEM); none = in tls_cert
//   tls_server_name=N  the name sent in SNI and verified; none = the URL's host
//   tls_insecure=true  accept any server certificate (tests only: connect()
//                      logs a warning through the provider's log hook each time)
//
// A backend may accept native names for the same settings (PostgreSQL's
// sslrootcert for tls_ca, MySQL's ssl_ca): give them in tls_aliases. A
// parameter and its alias that disagree are refused; a mode alias (sslmode,
// ssl_mode, the rediss:// scheme) is the backend's to compare with `enabled`
// and `verify`, through tls_conflict() for the same message.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "distlock/export.hpp"
#include "distlock/spi/url.hpp"

namespace distlock::spi {

// A file the TLS layer reads, and the URL parameter that named it (for
// messages: "tls_key", or the alias "sslkey"). An empty path = not given.
struct DISTLOCK_API tls_file {
    std::string path;
    std::string param;
    bool given() const noexcept { return !path.empty(); }
};

struct DISTLOCK_API tls_params {
    bool enabled = false;     // tls=true (a backend may also turn it on from its mode alias)
    bool verify = true;       // false = tls_insecure=true: any certificate, any name
    tls_file ca;              // not given = the system's CA bundle
    tls_file cert;            // client certificate for mutual TLS; not given = none
    tls_file key;             // its private key; not given = in `cert`
    std::string server_name;  // "" = the URL's host
    // Whether any tls* parameter or alias was given at all (a backend that has
    // no TLS refuses every one of them).
    bool any() const noexcept {
        return enabled || !verify || ca.given() || cert.given() || key.given() || !server_name.empty();
    }
};

// A backend's native names for tls_ca, tls_cert, tls_key and tls_server_name;
// "" = none.
struct DISTLOCK_API tls_aliases {
    std::string_view ca, cert, key, server_name;
};

// Where take_tls() starts, for a backend whose URL can say more than the
// parameters: rediss:// starts enabled; Redis's sentinels read sentinel_tls,
// sentinel_tls_ca, ... starting from the data nodes' settings.
struct DISTLOCK_API tls_start {
    std::string_view prefix = "tls";  // the parameters' names: <prefix>, <prefix>_ca, ...
    tls_params base{};                // the settings before the URL's parameters apply
    bool insecure = true;             // whether <prefix>_insecure is read
    std::string_view enabled_by;      // what else turns TLS on, for messages: "rediss://"
};

// Takes tls, tls_insecure, tls_ca, tls_cert, tls_key, tls_server_name (named
// after start.prefix) and the given aliases from `u`. Throws
// invalid_argument_error (for `backend`) when a value does not parse, when a
// tls_* parameter other than tls is given while TLS is off (the aliases are the
// backend's native syntax and need it not), and when a parameter and its alias
// are both given and differ. TLS off with nothing given = off, whatever
// start.base held. Reads no file.
DISTLOCK_API tls_params take_tls(url& u, std::string_view backend, const tls_aliases& aliases = {},
                                 const tls_start& start = {});

// Throws invalid_argument_error (for `backend`) naming the parameter, and the
// path, never the content, for each file of `p` that this process cannot open
// for reading (missing, a directory, no permission), for a key without its
// certificate, and for an encrypted private key (the TLS libraries would
// prompt on the terminal for its passphrase). Call it at connect: the client
// library would read them later with a vaguer message.
DISTLOCK_API void check_tls_files(const tls_params& p, std::string_view backend);
// The same for one file (a backend's own: PostgreSQL's sslcrl); none given = nothing.
DISTLOCK_API void check_tls_file(const tls_file& f, std::string_view backend);

// The invalid_argument_error of a tls* parameter and its native alias that
// disagree ("tls=true and sslmode=disable disagree").
[[noreturn]] DISTLOCK_API void tls_conflict(std::string_view backend, std::string_view param, std::string_view alias);

// Whether the URL asks for TLS in any way: tls=true, or any other tls_*
// parameter given (a backend without TLS refuses it before take_tls()).
DISTLOCK_API bool tls_asked(const url& u);

// Whether the URL says tls_insecure=true (the core's warning on connect; the
// parameter itself stays in `u` for the backend to take). False when the value
// does not parse: the backend's take_tls() refuses it then.
DISTLOCK_API bool tls_insecure_requested(const url& u);

// What connect() logs (warning) when tls_insecure_requested().
inline constexpr std::string_view tls_insecure_warning =
    "tls_insecure=true: the server's certificate and name are not verified (for tests only): anyone on the path "
    "can read and change this provider's traffic, credentials included";

// ---- database clients ------------------------------------------------------------
// The URL's TLS parameters as the two database client libraries take them, as
// docs/backends/sql.md ("TLS") says: for the postgres:// and mysql:// backends,
// and for an application's own client of the same database over the same URL
// (the CLI's optimistic stock helper), so that a URL means the same to both.

// libpq's connection keywords: tls=true is sslmode=verify-full (with the
// system's CA bundle unless tls_ca/sslrootcert names one), tls_insecure=true
// sslmode=require; sslmode, sslrootcert, sslcert, sslkey and sslcrl are libpq's
// own. Without any, nothing (libpq's default, prefer). With tls_server_name,
// `host` becomes that name (libpq verifies and sends in SNI its `host`) and the
// URL's host, which must then be a numeric address, goes in hostaddr.
DISTLOCK_API std::vector<std::pair<std::string, std::string>> take_libpq_tls(url& u, std::string_view backend,
                                                                             std::string& host);

// MariaDB Connector/C's: tls=true is ssl_mode=verify_identity, with the
// system's CA bundle unless tls_ca/ssl_ca names one. The modes that do not
// verify (preferred, required, verify_ca, tls_insecure) are refused: the
// library enforces TLS only when it verifies. tls_server_name is refused.
struct DISTLOCK_API mariadb_tls {
    enum class mode {
        library_default,  // nothing said: the library's default (no TLS)
        disabled,         // ssl_mode=disabled: clear is meant
        verify_identity,  // TLS, the chain and the host name verified
    };
    mode tls = mode::library_default;
    std::string ca, cert, key;  // "" = none
};
DISTLOCK_API mariadb_tls take_mariadb_tls(url& u, std::string_view backend);
// Whether the message of a failed TLS handshake (CR_SSL_CONNECTION_ERROR, 2026)
// of MariaDB Connector/C says it was refused by policy: the server's
// certificate (another CA's, expired, another name), a server in clear where
// TLS is required, or the server refusing this client's certificate. No retry
// fixes them (access_denied_error), and no login packet was sent.
DISTLOCK_API bool mariadb_tls_refused(std::string_view client_message) noexcept;

}  // namespace distlock::spi
