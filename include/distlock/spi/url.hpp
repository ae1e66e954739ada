// distlock backend-author interface: the parsed connection URL.
//
// Parsing is done by libcurl's URL API (per host for multi-host URLs such as
// redlock://h1:p1,h2:p2 and zk://h1,h2,h3/base). Query parameters are taken one
// by one by the core and the backend; whatever is left is an unknown parameter
// and connect() rejects it.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "distlock/export.hpp"

namespace distlock::spi {

// `text` (a URL, or text meant as one that no parser accepts) as it may be shown
// in a message: everything that could be the password (from the first ':' after
// "://" to the last '@'), a user info without ':' whole (it may be a password
// alone, as Lettuce writes redis://PASSWORD@host; for every scheme), and the
// values of the secret parameters (token=, password=, secret= and any name
// ending so, in any case: Token=, SENTINEL_PASSWORD=; to the next '&') as
// "***". Every message of distlock that shows a URL shows it through this.
DISTLOCK_API std::string redact_url(std::string_view text);

// Whether `path` has a "." or ".." segment between its '/'s ("a/../b", "/.",
// ".."): a path a server, a client library or the kernel would resolve into
// another one.
DISTLOCK_API bool has_dot_segment(std::string_view path) noexcept;

struct DISTLOCK_API host_port {
    std::string host;
    std::uint16_t port = 0;  // 0 = not given in the URL
};

class DISTLOCK_API url {
public:
    // Throws invalid_argument_error (backend "url") for anything libcurl rejects,
    // an empty scheme, a repeated parameter or a bad host list.
    static url parse(std::string_view text);

    const std::string& scheme() const noexcept { return scheme_; }
    const std::string& user() const noexcept { return user_; }          // percent-decoded
    const std::string& password() const noexcept { return password_; }  // percent-decoded
    const std::vector<host_port>& hosts() const noexcept { return hosts_; }
    // Percent-decoded, "" or starts with '/'; as written: "." and ".." segments
    // are not resolved (a backend refuses them, see has_dot_segment, or takes
    // them literally).
    const std::string& path() const noexcept { return path_; }
    // The text as given, with the password and the values of the secret
    // parameters (token=, password=, secret=) as "***" (see redact_url).
    const std::string& redacted() const noexcept { return redacted_; }
    // Every secret of the URL, as written and percent-decoded: the password,
    // a user info without ':' (a password alone, for some clients), the values
    // of the secret parameters. The core hides them in every error message
    // that passes the public API, whoever wrote it (a server's or a client
    // library's message that quotes one).
    const std::vector<std::string>& secrets() const noexcept { return secrets_; }

    // Query parameters, percent-decoded. take*() removes the parameter so that
    // expect_all_taken() can reject what nobody understood. The typed forms throw
    // invalid_argument_error naming the parameter when the value does not parse.
    std::optional<std::string> take(std::string_view key);
    std::optional<std::chrono::milliseconds> take_duration(std::string_view key);
    std::optional<long long> take_int(std::string_view key, long long min, long long max);
    std::optional<bool> take_bool(std::string_view key);  // true/false/1/0/yes/no/on/off
    // Throws invalid_argument_error naming what is left, and listing the
    // parameters asked for so far (the valid ones, when every take*() came
    // first). A backend calls it once it has taken all its parameters and
    // before it sends anything; connect() calls it again after the factory.
    // The core's own parameters (lease=, holder=, which connect() takes before
    // the factory) are never counted as left.
    void expect_all_taken() const;

    // Host list helper: hosts() with missing ports set to `default_port`; throws
    // invalid_argument_error when there is no host.
    std::vector<host_port> hosts_or_throw(std::uint16_t default_port) const;

private:
    void add_secret(const std::string& secret);
    std::string scheme_, user_, password_, path_, redacted_;
    std::vector<host_port> hosts_;
    std::vector<std::string> secrets_;
    std::map<std::string, std::string, std::less<>> params_;
    std::set<std::string, std::less<>> asked_;  // every parameter name take*() was called for
};

}  // namespace distlock::spi
