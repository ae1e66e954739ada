#include "http_options.hpp"

#include <string>
#include <utility>

#include "distlock/error.hpp"
#include "distlock/spi/tls.hpp"

namespace distlock::backends::http {

options options_from_url(spi::url& u, std::string backend, std::uint16_t default_port) {
    options o;
    o.backend = std::move(backend);
    const auto tls = spi::take_tls(u, o.backend);
    spi::check_tls_files(tls, o.backend);
    o.tls.enabled = tls.enabled;
    o.tls.verify = tls.verify;
    o.tls.ca_file = tls.ca.path;
    o.tls.cert_file = tls.cert.path;
    o.tls.key_file = tls.key.path;
    o.tls.server_name = tls.server_name;
    if (auto v = u.take_duration("timeout")) {
        if (v->count() <= 0) throw_error(errc::invalid_argument, o.backend, "timeout must be positive");
        o.request_timeout = *v;
    }
    if (auto v = u.take_duration("connect_timeout")) {
        if (v->count() <= 0) throw_error(errc::invalid_argument, o.backend, "connect_timeout must be positive");
        o.connect_timeout = *v;
    }
    for (const auto& hp : u.hosts_or_throw(default_port)) {
        o.endpoints.push_back(std::string(o.tls.enabled ? "https://" : "http://") + url_host(hp.host) + ":" +
                              std::to_string(hp.port));
    }
    return o;
}

std::string url_host(const std::string& host) { return host.find(':') != std::string::npos ? "[" + host + "]" : host; }

void check_header(const std::string& backend, std::string_view line) {
    const auto colon = line.find(':');
    const std::string what =
        colon == std::string_view::npos ? "a header" : "the " + std::string(line.substr(0, colon)) + " header";
    for (char c : line)
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f)
            throw_error(errc::invalid_argument, backend,
                        what +
                            " has a control character (CR, LF, NUL, a byte below 0x20 or 0x7F), which would "
                            "inject headers into every request: refused");
}

}  // namespace distlock::backends::http
