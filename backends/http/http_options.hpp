// The HTTP layer's connection settings: the endpoints, timeouts, TLS and fixed
// headers of a client, and options_from_url(): the URL parameters both
// backends accept (timeout, connect_timeout, and the TLS parameters every
// network backend shares: include/distlock/spi/tls.hpp; tls_server_name goes
// through CURLOPT_CONNECT_TO, client::client). No proxy: every request goes
// straight to an endpoint, whatever the environment's http_proxy/ALL_PROXY
// say (client::prepare), and
// there is deliberately no proxy= parameter (a proxy would read every token
// and password, and answer in the server's place).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "distlock/spi/url.hpp"

namespace distlock::backends::http {

struct tls_options {
    bool enabled = false;     // https:// instead of http://
    std::string ca_file;      // "" = the system's CA bundle
    std::string cert_file;    // client certificate (PEM) for mutual TLS; "" = none
    std::string key_file;     // its private key (PEM); "" = in cert_file
    bool verify = true;       // false = accept any server certificate (tests only)
    std::string server_name;  // sent in SNI and verified instead of the endpoint's host; "" = the host
};

// The most a reply may take in memory: its body, each line of a stream (an etcd
// watch message), and its headers. Neither API needs more (a Consul value is at
// most 512 KiB, etcd's requests at most 1.5 MiB by default); a reply that goes
// past it is cut off and fails (unavailable_error): a broken or hostile server
// cannot make a client grow without bound.
inline constexpr std::size_t default_max_reply_bytes = std::size_t{16} << 20;

struct options {
    std::string backend = "http";                     // name used in errors
    std::vector<std::string> endpoints;               // base URLs: "http://127.0.0.1:2379"
    std::chrono::milliseconds connect_timeout{2000};  // TCP + TLS handshake bound
    std::chrono::milliseconds request_timeout{5000};  // whole-request bound when a request gives none
    tls_options tls;
    std::vector<std::string> headers;                       // sent on every request ("X-Consul-Token: ...")
    std::size_t max_reply_bytes = default_max_reply_bytes;  // see above
};

// Throws invalid_argument_error (for `backend`) when the value of the header
// line `line` ("Name: value") holds a control character (CR, LF, NUL, any
// byte below 0x20, or 0x7F): curl sends header lines as given, so a CR LF in a
// token would add headers of the caller's choosing to every request. The
// message names the header, never its value (a token).
void check_header(const std::string& backend, std::string_view line);

// A host as a URL writes it: an IPv6 address in brackets.
std::string url_host(const std::string& host);

// Reads the shared parameters from the URL and builds one endpoint per host
// (missing ports = default_port).
options options_from_url(spi::url& u, std::string backend, std::uint16_t default_port);

}  // namespace distlock::backends::http
