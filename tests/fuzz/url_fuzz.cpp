// libFuzzer target: no message about a URL ever shows its password.
//
// An input is three parts separated by NUL bytes: a scheme S (letters, digits,
// '+', '-', '.'), a password tail P and a rest R. The URL fuzzed is
//     S "://user:" MARK P "@" R
// so that MARK starts the password whatever P and R hold ('@', ':', '/', '#',
// '%', '?', more '@'...). Whatever url::parse() throws, and redact_url() and
// redacted() of what it accepts, must not contain MARK (R must not hold MARK
// itself, nor S). A violation aborts: libFuzzer keeps the input as a crash.
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

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    std::string_view in(reinterpret_cast<const char*>(data), size);
    const auto a = in.find('\0');
    if (a == std::string_view::npos) return 0;
    const auto b = in.find('\0', a + 1);
    if (b == std::string_view::npos) return 0;
    const auto scheme = in.substr(0, a), tail = in.substr(a + 1, b - a - 1), rest = in.substr(b + 1);
    for (char c : scheme)
        if (!scheme_char(c)) return 0;
    if (scheme.find(mark) != std::string_view::npos || rest.find(mark) != std::string_view::npos ||
        rest.find('\0') != std::string_view::npos ||
        tail.find('\0') != std::string_view::npos)
        return 0;
    std::string url = std::string(scheme) + "://user:" + std::string(mark) + std::string(tail) + "@" + std::string(rest);
    require_hidden(distlock::spi::redact_url(url), "redact_url", url);
    try {
        auto u = distlock::spi::url::parse(url);
        require_hidden(u.redacted(), "redacted()", url);
        for (auto key : {"lease", "timeout", "pool", "strategy", "token", "password", "secret"}) {
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
