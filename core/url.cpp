// URL parsing on top of libcurl's URL API. Multi-host authorities
// ("h1:p1,h2:p2") are split first and each host:port is parsed by libcurl.
#include "distlock/spi/url.hpp"

#include <curl/curl.h>

#include <charconv>
#include <memory>

#include "distlock/error.hpp"
#include "distlock/provider.hpp"

namespace distlock::spi {
namespace {

[[noreturn]] void bad(const std::string& message) { throw_error(errc::invalid_argument, "url", message); }

struct curlu_deleter {
    void operator()(CURLU* u) const noexcept { curl_url_cleanup(u); }
};
using curlu_ptr = std::unique_ptr<CURLU, curlu_deleter>;

std::string part(CURLU* u, CURLUPart which, unsigned flags = 0) {
    char* out = nullptr;
    CURLUcode rc = curl_url_get(u, which, &out, flags);
    if (rc != CURLUE_OK || out == nullptr) return {};
    std::string s(out);
    curl_free(out);
    return s;
}

std::string decode(std::string_view text) {
    int len = 0;
    char* out = curl_easy_unescape(nullptr, text.data(), static_cast<int>(text.size()), &len);
    if (out == nullptr) bad("cannot percent-decode '" + std::string(text) + "'");
    std::string s(out, static_cast<std::size_t>(len));
    curl_free(out);
    return s;
}

curlu_ptr parse_with_curl(const std::string& text) {
    curlu_ptr u(curl_url());
    if (!u) throw std::bad_alloc();
    CURLUcode rc = curl_url_set(u.get(), CURLUPART_URL, text.c_str(), CURLU_NON_SUPPORT_SCHEME);
    if (rc != CURLUE_OK) bad("cannot parse '" + text + "': " + curl_url_strerror(rc));
    return u;
}

}  // namespace

url url::parse(std::string_view input) {
    std::string text(input);
    auto sep = text.find("://");
    if (sep == std::string::npos || sep == 0) bad("'" + text + "' is not a URL (expected scheme://...)");
    url out;
    out.scheme_ = text.substr(0, sep);
    for (char& c : out.scheme_) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));

    // Split the authority so that each host of a list is parsed on its own.
    std::string rest = text.substr(sep + 3);
    auto auth_end = rest.find_first_of("/?#");
    std::string authority = rest.substr(0, auth_end);
    std::string tail = auth_end == std::string::npos ? std::string{} : rest.substr(auth_end);
    std::string userinfo;
    if (auto at = authority.rfind('@'); at != std::string::npos) {
        userinfo = authority.substr(0, at + 1);
        authority = authority.substr(at + 1);
    }
    std::vector<std::string> host_texts;
    for (std::size_t start = 0;;) {
        auto comma = authority.find(',', start);
        host_texts.push_back(authority.substr(start, comma - start));
        if (comma == std::string::npos) break;
        start = comma + 1;
    }
    if (host_texts.size() > 1) {
        for (const auto& h : host_texts)
            if (h.empty()) bad("empty host in the host list of '" + text + "'");
    }

    // The first host carries user info, path and query; the others only host:port.
    // file:// and memory:// have no host: give curl a scheme it parses like a path.
    const bool hostless = host_texts.size() == 1 && host_texts[0].empty();
    std::string carrier_tail = (hostless && (tail.empty() || tail[0] != '/')) ? "/" + tail : tail;
    std::string carrier = std::string(hostless ? "file" : "x-distlock") + "://" + userinfo +
                          (hostless ? std::string{} : host_texts[0]) + carrier_tail;
    auto u = parse_with_curl(carrier);
    out.user_ = decode(part(u.get(), CURLUPART_USER));
    out.password_ = decode(part(u.get(), CURLUPART_PASSWORD));
    out.path_ = decode(part(u.get(), CURLUPART_PATH));
    if (out.path_ == "/" && tail.empty()) out.path_.clear();
    if (!part(u.get(), CURLUPART_FRAGMENT).empty()) bad("a fragment (#...) is not allowed in '" + text + "'");
    if (!hostless) {
        for (std::size_t i = 0; i < host_texts.size(); ++i) {
            auto hu = i == 0 ? std::move(u) : parse_with_curl("x-distlock://" + host_texts[i]);
            if (i != 0 && !part(hu.get(), CURLUPART_PATH).empty() && part(hu.get(), CURLUPART_PATH) != "/")
                bad("bad host '" + host_texts[i] + "' in '" + text + "'");
            host_port hp;
            hp.host = part(hu.get(), CURLUPART_HOST);
            if (hp.host.size() > 2 && hp.host.front() == '[' && hp.host.back() == ']')
                hp.host = hp.host.substr(1, hp.host.size() - 2);
            std::string port = part(hu.get(), CURLUPART_PORT);
            if (!port.empty()) {
                unsigned value = 0;
                auto [p, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
                if (ec != std::errc{} || p != port.data() + port.size() || value == 0 || value > 65535)
                    bad("bad port '" + port + "' in '" + text + "'");
                hp.port = static_cast<std::uint16_t>(value);
            }
            if (hp.host.empty()) bad("empty host in '" + text + "'");
            out.hosts_.push_back(std::move(hp));
            if (i == 0) u = std::move(hu);
        }
    }

    std::string query = part(u.get(), CURLUPART_QUERY);
    for (std::size_t start = 0; !query.empty() && start <= query.size();) {
        auto amp = query.find('&', start);
        std::string item = query.substr(start, amp - start);
        if (!item.empty()) {
            auto eq = item.find('=');
            std::string key = decode(item.substr(0, eq));
            std::string value = eq == std::string::npos ? std::string{} : decode(item.substr(eq + 1));
            if (key.empty()) bad("empty parameter name in '" + text + "'");
            if (!out.params_.emplace(key, value).second) bad("parameter '" + key + "' given twice in '" + text + "'");
        }
        if (amp == std::string::npos) break;
        start = amp + 1;
    }

    // Redacted form for messages: hide the password and token parameters.
    std::string red = out.scheme_ + "://";
    if (!userinfo.empty()) {
        auto colon = userinfo.find(':');
        red += colon == std::string::npos ? userinfo : userinfo.substr(0, colon) + ":***@";
    }
    red += authority + tail;
    for (const char* secret : {"token=", "password="}) {
        for (auto pos = red.find(secret); pos != std::string::npos; pos = red.find(secret, pos + 1)) {
            if (pos > 0 && red[pos - 1] != '?' && red[pos - 1] != '&') continue;
            auto vstart = pos + std::char_traits<char>::length(secret);
            auto vend = red.find('&', vstart);
            red.replace(vstart, vend == std::string::npos ? std::string::npos : vend - vstart, "***");
        }
    }
    out.redacted_ = red;
    return out;
}

std::optional<std::string> url::take(std::string_view key) {
    auto it = params_.find(key);
    if (it == params_.end()) return std::nullopt;
    std::string value = std::move(it->second);
    params_.erase(it);
    return value;
}

std::optional<std::chrono::milliseconds> url::take_duration(std::string_view key) {
    auto v = take(key);
    if (!v) return std::nullopt;
    try {
        return parse_duration(*v);
    } catch (const error&) {
        bad("parameter " + std::string(key) + "=" + *v + " is not a duration (e.g. 500ms, 2s, 1m)");
    }
}

std::optional<long long> url::take_int(std::string_view key, long long min, long long max) {
    auto v = take(key);
    if (!v) return std::nullopt;
    long long value = 0;
    auto [p, ec] = std::from_chars(v->data(), v->data() + v->size(), value);
    if (v->empty() || ec != std::errc{} || p != v->data() + v->size() || value < min || value > max)
        bad("parameter " + std::string(key) + "=" + *v + " must be an integer in [" + std::to_string(min) + ", " +
            std::to_string(max) + "]");
    return value;
}

std::optional<bool> url::take_bool(std::string_view key) {
    auto v = take(key);
    if (!v) return std::nullopt;
    if (*v == "true" || *v == "1" || *v == "yes" || *v == "on") return true;
    if (*v == "false" || *v == "0" || *v == "no" || *v == "off") return false;
    bad("parameter " + std::string(key) + "=" + *v + " must be true or false");
}

void url::expect_all_taken() const {
    if (params_.empty()) return;
    std::string names;
    for (const auto& [k, v] : params_) names += (names.empty() ? "" : ", ") + k;
    bad("unknown parameter(s) for " + scheme_ + "://: " + names);
}

std::vector<host_port> url::hosts_or_throw(std::uint16_t default_port) const {
    if (hosts_.empty()) bad(scheme_ + ":// needs a host");
    auto out = hosts_;
    for (auto& h : out)
        if (h.port == 0) h.port = default_port;
    return out;
}

}  // namespace distlock::spi
