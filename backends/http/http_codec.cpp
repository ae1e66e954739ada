#include "http_codec.hpp"

#include <curl/curl.h>

#include <new>

#include "distlock/error.hpp"
#include "distlock/spi/backend.hpp"

namespace distlock::backends::http {

std::string base64_encode(std::string_view in) {
    static constexpr char table[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    std::string out;
    out.reserve((in.size() + 2) / 3 * 4);
    std::size_t i = 0;
    for (; i + 2 < in.size(); i += 3) {
        unsigned v = (static_cast<unsigned char>(in[i]) << 16) | (static_cast<unsigned char>(in[i + 1]) << 8) |
                     static_cast<unsigned char>(in[i + 2]);
        out += table[(v >> 18) & 63];
        out += table[(v >> 12) & 63];
        out += table[(v >> 6) & 63];
        out += table[v & 63];
    }
    if (i < in.size()) {
        unsigned v = static_cast<unsigned char>(in[i]) << 16;
        if (i + 1 < in.size()) v |= static_cast<unsigned char>(in[i + 1]) << 8;
        out += table[(v >> 18) & 63];
        out += table[(v >> 12) & 63];
        out += i + 1 < in.size() ? table[(v >> 6) & 63] : '=';
        out += '=';
    }
    return out;
}

std::optional<std::string> base64_decode(std::string_view in) {
    auto value = [](char c) -> int {
        if (c >= 'A' && c <= 'Z') return c - 'A';
        if (c >= 'a' && c <= 'z') return c - 'a' + 26;
        if (c >= '0' && c <= '9') return c - '0' + 52;
        if (c == '+' || c == '-') return 62;
        if (c == '/' || c == '_') return 63;
        return -1;
    };
    while (!in.empty() && in.back() == '=') in.remove_suffix(1);
    std::string out;
    unsigned acc = 0;
    int bits = 0;
    for (char c : in) {
        int v = value(c);
        if (v < 0) return std::nullopt;
        acc = (acc << 6) | static_cast<unsigned>(v);
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out += static_cast<char>((acc >> bits) & 0xFF);
        }
    }
    return out;
}

std::string encode_name(std::string_view name) {
    static constexpr char digits[] = "0123456789ABCDEF";
    const bool dot_segment = name == "." || name == "..";
    std::string out;
    out.reserve(name.size());
    for (char c : name) {
        if (spi::ascii_alnum(c) || c == '_' || c == '-' || (c == '.' && !dot_segment)) {
            out += c;
        } else {
            const auto b = static_cast<unsigned char>(c);
            out += '%';
            out += digits[b >> 4];
            out += digits[b & 15];
        }
    }
    return out;
}

void check_prefix(const std::string& backend, std::string_view prefix) {
    auto refuse = [&](const std::string& why) {
        throw_error(errc::invalid_argument, backend,
                    "the URL's path (the key prefix) " + why +
                        ": a client library or the server would normalise it, and keys would not stay under it");
    };
    for (std::size_t start = 0;;) {
        const auto slash = prefix.find('/', start);
        const auto segment =
            prefix.substr(start, slash == std::string_view::npos ? std::string_view::npos : slash - start);
        if (segment.empty()) refuse("has an empty segment ('//', or a '/' at an end)");
        if (segment == "." || segment == "..") refuse("has a '.' or '..' segment");
        for (char c : segment)
            if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) refuse("has a control character");
        if (slash == std::string_view::npos) return;
        start = slash + 1;
    }
}

bool valid_utf8(std::string_view s) {
    for (std::size_t i = 0; i < s.size();) {
        const auto b = static_cast<unsigned char>(s[i]);
        if (b < 0x80) {
            ++i;
            continue;
        }
        // The length of the sequence and the range of its second byte (which
        // rules out overlong forms, surrogates and code points past U+10FFFF).
        std::size_t n;
        unsigned char lo = 0x80, hi = 0xBF;
        if (b >= 0xC2 && b <= 0xDF) n = 2;
        else if (b == 0xE0) n = 3, lo = 0xA0;
        else if (b == 0xED) n = 3, hi = 0x9F;
        else if (b >= 0xE1 && b <= 0xEF) n = 3;
        else if (b == 0xF0) n = 4, lo = 0x90;
        else if (b >= 0xF1 && b <= 0xF3) n = 4;
        else if (b == 0xF4) n = 4, hi = 0x8F;
        else return false;
        if (s.size() - i < n) return false;
        for (std::size_t k = 1; k < n; ++k) {
            const auto c = static_cast<unsigned char>(s[i + k]);
            if (c < (k == 1 ? lo : 0x80) || c > (k == 1 ? hi : 0xBF)) return false;
        }
        i += n;
    }
    return true;
}

namespace {
std::string curl_escape(std::string_view s) {
    char* e = curl_easy_escape(nullptr, s.data(), static_cast<int>(s.size()));
    if (e == nullptr) throw std::bad_alloc();
    std::string out(e);
    curl_free(e);
    return out;
}
}  // namespace

std::string escape_path(std::string_view key) {
    std::string out;
    std::size_t start = 0;
    for (;;) {
        auto slash = key.find('/', start);
        out += curl_escape(key.substr(start, slash == std::string_view::npos ? std::string_view::npos : slash - start));
        if (slash == std::string_view::npos) break;
        out += '/';
        start = slash + 1;
    }
    return out;
}

bool json_depth_within(std::string_view text, int limit) noexcept {
    int depth = 0;
    bool in_string = false;
    for (std::size_t i = 0; i < text.size(); ++i) {
        const char c = text[i];
        if (in_string) {
            if (c == '\\') ++i;  // the escaped character, whatever it is
            else if (c == '"') in_string = false;
        } else if (c == '"') {
            in_string = true;
        } else if (c == '[' || c == '{') {
            if (++depth > limit) return false;
        } else if (c == ']' || c == '}') {
            --depth;
        }
    }
    return true;
}

}  // namespace distlock::backends::http
