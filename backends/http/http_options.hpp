// The HTTP layer's connection settings: the endpoints, timeouts, TLS and fixed
// headers of a client, and options_from_url(): the URL parameters both
// backends accept (tls, tls_ca, tls_cert, tls_key, tls_insecure, timeout,
// connect_timeout).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "distlock/spi/url.hpp"

namespace distlock::backends::http {

struct tls_options {
    bool enabled = false;  // https:// instead of http://
    std::string ca_file;   // "" = the system's CA bundle
    std::string cert_file; // client certificate (PEM) for mutual TLS; "" = none
    std::string key_file;  // its private key (PEM); "" = in cert_file
    bool verify = true;    // false = accept any server certificate (tests only)
};

struct options {
    std::string backend = "http";                      // name used in errors
    std::vector<std::string> endpoints;                 // base URLs: "http://127.0.0.1:2379"
    std::chrono::milliseconds connect_timeout{2000};    // TCP + TLS handshake bound
    std::chrono::milliseconds request_timeout{5000};    // whole-request bound when a request gives none
    tls_options tls;
    std::vector<std::string> headers;                   // sent on every request ("X-Consul-Token: ...")
};

// Reads the shared parameters from the URL and builds one endpoint per host
// (missing ports = default_port).
options options_from_url(spi::url& u, std::string backend, std::uint16_t default_port);

}  // namespace distlock::backends::http
