#include "http_transfer.hpp"

#include <curl/curl.h>

#include "distlock/error.hpp"

namespace distlock::backends::http {
namespace {

// The server refused the handshake or the client refused the server: no retry
// helps. Under TLS 1.3 a server checks the client's certificate after the
// client has finished its handshake, so its refusal (an alert) arrives with
// the first read: a receive error that names the alert.
bool refused(const transfer_result& r) {
    switch (static_cast<CURLcode>(r.curl_code)) {
        case CURLE_PEER_FAILED_VERIFICATION:
        case CURLE_SSL_CIPHER:
        case CURLE_SSL_ISSUER_ERROR: return true;
        case CURLE_RECV_ERROR:
        case CURLE_SEND_ERROR:
        case CURLE_SSL_CONNECT_ERROR:
            return r.error.find("alert") != std::string::npos && (r.error.find("certificate") != std::string::npos ||
                                                                  r.error.find("unknown ca") != std::string::npos ||
                                                                  r.error.find("access denied") != std::string::npos);
        default: return false;
    }
}

// A file of the URL's (tls_ca, tls_cert, tls_key) that the TLS library could
// open but not use (not PEM, a key that is not the certificate's).
bool local_file_problem(int rc) {
    switch (static_cast<CURLcode>(rc)) {
        case CURLE_SSL_CERTPROBLEM:
        case CURLE_SSL_CACERT_BADFILE:
        case CURLE_SSL_CRL_BADFILE: return true;
        default: return false;
    }
}

}  // namespace

std::string response::header(std::string_view name) const {
    for (const auto& [k, v] : headers)
        if (k == name) return v;
    return {};
}

void throw_client_error(const transfer_result& r, const std::string& backend, const std::string& what) {
    std::string msg = what + " failed";
    if (r.how == outcome::timed_out || r.curl_code == CURLE_OPERATION_TIMEDOUT) msg += ": timed out";
    if (!r.error.empty()) msg += ": " + r.error;
    // Bytes that are not HTTP (HTTP/0.9 is refused): a server of another kind at
    // this address, which no retry fixes.
    const bool not_http = r.curl_code == CURLE_UNSUPPORTED_PROTOCOL || r.curl_code == CURLE_WEIRD_SERVER_REPLY;
    if (!r.resp.endpoint.empty())
        msg += not_http ? " (is " + r.resp.endpoint + " the " + backend + " HTTP API?)" : " (" + r.resp.endpoint + ")";
    const errc code = not_http || local_file_problem(r.curl_code) ? errc::invalid_argument
                      : refused(r)                                ? errc::access_denied
                                                                  : errc::unavailable;
    throw_error(code, backend, msg, r.curl_code, curl_easy_strerror(static_cast<CURLcode>(r.curl_code)));
}

}  // namespace distlock::backends::http
