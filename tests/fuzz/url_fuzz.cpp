// libFuzzer target: no message about a URL ever shows its password or the
// value of a secret parameter.
//
// An input is three or four parts separated by NUL bytes: a scheme S (letters,
// digits, '+', '-', '.'), a secret tail P, a rest R, and an optional mode M.
// MARK starts the secret whatever P and R hold. The URL fuzzed is, by mode:
//     (none)    S "://user:" MARK P "@" R           a password ('@', ':', '/', '#', '%'... in P)
//     "u"       S "://" MARK P "@" R                a password alone as the user info (Lettuce's
//                                                   redis://PASSWORD@host): P holds no ':', '/',
//                                                   '?' or '#', and R's authority (up to its first
//                                                   '/', '?' or '#') no ':' before an '@' (else
//                                                   MARK P is a user name, or a host)
//     "q" N     S "://" R "?" NAME "=" MARK P       a secret parameter, NAME the N-th (byte N
//                                                   modulo the list) of secret_names: case
//                                                   variants, percent-encoded; P holds no '&'
// Bytes of P may be anything but NUL (non-UTF-8 included). Whatever url::parse()
// throws, and redact_url() and redacted() of what it accepts, must not contain
// MARK (R must not hold MARK itself, nor S). A violation aborts: libFuzzer keeps
// the input as a crash.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "distlock/error.hpp"
#include "distlock/spi/url.hpp"

namespace {

constexpr std::string_view mark = "Zq7";

constexpr std::string_view secret_names[] = {
    "token",   "Token",   "TOKEN",      "password",          "PASSWORD",          "Password",
    "secret",  "SECRET",  "sEcReT",     "sentinel_password", "Sentinel_Password", "SENTINEL_PASSWORD",
    "tok%65n", "TOK%45N", "pass%57ord", "x_Secret",          "api-TOKEN",         "%74oken",
};

void require_hidden(std::string_view what, std::string_view where, const std::string& url) {
    if (what.find(mark) == std::string_view::npos) return;
    std::fprintf(stderr, "secret shown by %.*s: '%.*s' for the URL '%s'\n", static_cast<int>(where.size()),
                 where.data(), static_cast<int>(what.size()), what.data(), url.c_str());
    std::abort();
}

bool scheme_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '+' || c == '-' ||
           c == '.';
}

// The URL of the input, or "" when the input does not describe one.
std::string url_of(std::string_view in) {
    const auto a = in.find('\0');
    if (a == std::string_view::npos) return {};
    const auto b = in.find('\0', a + 1);
    if (b == std::string_view::npos) return {};
    const auto c = in.find('\0', b + 1);
    const auto scheme = in.substr(0, a), tail = in.substr(a + 1, b - a - 1);
    const auto rest = in.substr(b + 1, c == std::string_view::npos ? std::string_view::npos : c - b - 1);
    const auto mode = c == std::string_view::npos ? std::string_view{} : in.substr(c + 1);
    for (char ch : scheme)
        if (!scheme_char(ch)) return {};
    if (scheme.find(mark) != std::string_view::npos || rest.find(mark) != std::string_view::npos ||
        mode.find('\0') != std::string_view::npos)
        return {};
    const std::string s(scheme), p(tail), r(rest), m(mark);
    if (mode.empty()) return s + "://user:" + m + p + "@" + r;
    if (mode == "u") {
        if (p.find_first_of(":/?#") != std::string::npos) return {};
        const auto authority = r.substr(0, r.find_first_of("/?#"));
        const auto at = authority.rfind('@');
        if (at != std::string::npos && authority.substr(0, at).find(':') != std::string::npos) return {};
        return s + "://" + m + p + "@" + r;
    }
    if (mode.size() == 2 && mode[0] == 'q') {
        if (p.find('&') != std::string::npos) return {};
        const auto& name = secret_names[static_cast<unsigned char>(mode[1]) % std::size(secret_names)];
        return s + "://" + r + "?" + std::string(name) + "=" + m + p;
    }
    return {};
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string url = url_of(std::string_view(reinterpret_cast<const char*>(data), size));
    if (url.empty()) return 0;
    require_hidden(distlock::spi::redact_url(url), "redact_url", url);
    try {
        auto u = distlock::spi::url::parse(url);
        require_hidden(u.redacted(), "redacted()", url);
        for (auto key : {"lease", "timeout", "pool", "strategy", "token", "password", "secret", "Token", "PASSWORD",
                         "Sentinel_Password"}) {
            try {
                (void)u.take_duration(key);
            } catch (const distlock::error& e) {
                require_hidden(e.what(), "take_duration", url);
            }
        }
        try {
            u.expect_all_taken();
        } catch (const distlock::error& e) {
            require_hidden(e.what(), "expect_all_taken", url);
        }
    } catch (const distlock::error& e) {
        require_hidden(e.what(), "url::parse", url);
    }
    return 0;
}
