// URL parsing on top of libcurl's URL API. Multi-host authorities
// ("h1:p1,h2:p2") are split first and each host:port is parsed by libcurl.
#include "distlock/spi/url.hpp"

#include <curl/curl.h>

#include <algorithm>
#include <charconv>
#include <memory>
#include <optional>
#include <vector>

#include "distlock/error.hpp"
#include "distlock/provider.hpp"
#include "distlock/spi/backend.hpp"

namespace distlock::spi {
namespace {

[[noreturn]] void bad(const std::string& message) { throw_error(errc::invalid_argument, "", message); }

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

// Percent-decoded `text`; nullopt when libcurl cannot decode it.
std::optional<std::string> unescape(std::string_view text) {
    int len = 0;
    char* out = curl_easy_unescape(nullptr, text.data(), static_cast<int>(text.size()), &len);
    if (out == nullptr) return std::nullopt;
    std::string s(out, static_cast<std::size_t>(len));
    curl_free(out);
    return s;
}

// Percent-decodes `text`, the `what` of the URL shown (redacted) as `shown`.
// The text itself is never in the message: it may be a password.
std::string decode(std::string_view text, std::string_view what, const std::string& shown) {
    auto s = unescape(text);
    if (!s) bad("cannot percent-decode " + std::string(what) + " of '" + shown + "'");
    return *s;
}

// `carrier` is what libcurl is given (an internal scheme, one host of a list);
// messages show the user's URL, redacted, as `shown`. The path is kept as
// written (CURLU_PATH_AS_IS): libcurl would resolve "." and ".." segments, and
// consul://h/a/../.. would reach the backend as the default prefix with
// nothing left for it to refuse. Each backend decides what a dot segment in
// its path means (every built-in one refuses it).
curlu_ptr parse_with_curl(const std::string& carrier, const std::string& shown) {
    curlu_ptr u(curl_url());
    if (!u) throw std::bad_alloc();
    CURLUcode rc = curl_url_set(u.get(), CURLUPART_URL, carrier.c_str(), CURLU_NON_SUPPORT_SCHEME | CURLU_PATH_AS_IS);
    if (rc != CURLUE_OK) bad("cannot parse '" + shown + "': " + curl_url_strerror(rc));
    return u;
}

// A parameter whose value is hidden in every message: "token", "password",
// "secret" and any name ending in one of them ("sentinel_password"), in any
// case ("Token", "PASSWORD", "Sentinel_Password": a backend that reads only
// the lowercase name rejects the others as unknown, naming them, and the
// message must not show their values either).
bool secret_parameter(std::string_view key) {
    std::string lower(key);
    for (char& c : lower) c = ascii_lower(c);
    const std::string_view k(lower);
    for (std::string_view secret : {"token", "password", "secret"})
        if (k.size() >= secret.size() && k.substr(k.size() - secret.size()) == secret) return true;
    return false;
}

// Where the user info at the start of `rest` (the text after "://") ends: the
// position of its '@', npos when there is none. url::parse and redact_url()
// both read it so:
//  - up to the last '@', when what comes before it holds a ':' (a password
//    may hold any character, '@', '/', '?' and '#' included: whatever comes
//    before the last '@' may be part of it), or holds no '/', '?' or '#';
//  - else that '@' is in a path or a query (file:///var/app@1,
//    redis://h/0?prefix=a@b), and the user info, if any, ends at the last '@'
//    before the first '/', '?' or '#' (redis://PASSWORD@h/0?prefix=a@b).
std::size_t userinfo_end(std::string_view rest) {
    constexpr auto npos = std::string_view::npos;
    const auto at = rest.rfind('@');
    if (at == npos) return npos;
    const auto candidate = rest.substr(0, at);
    if (candidate.find(':') != npos || candidate.find_first_of("/?#") == npos) return at;
    return rest.substr(0, rest.find_first_of("/?#")).rfind('@');
}

// Marks in `hide` the value of every secret parameter of `text` after `from`:
// each '=' whose name (from the '?' or '&' before it) is secret_parameter(),
// up to the next '&' (a value may hold an '@' or a '#').
void hide_secret_values(std::string_view text, std::size_t from, std::vector<bool>& hide) {
    constexpr auto npos = std::string_view::npos;
    for (auto eq = text.find('=', from); eq != npos; eq = text.find('=', eq + 1)) {
        const auto start = text.find_last_of("?&", eq);
        if (start == npos || start < from) continue;
        const auto name = text.substr(start + 1, eq - start - 1);
        if (!secret_parameter(unescape(name).value_or(std::string(name)))) continue;
        const auto end = std::min(text.find('&', eq + 1), text.size());
        std::fill(hide.begin() + static_cast<long>(eq + 1), hide.begin() + static_cast<long>(end), true);
    }
}

// `text` with each run of the characters marked in `hide` as "***".
std::string shown(std::string_view text, const std::vector<bool>& hide) {
    std::string out;
    for (std::size_t i = 0; i < text.size(); ++i) {
        if (!hide[i]) out += text[i];
        else if (i == 0 || !hide[i - 1]) out += "***";
    }
    return out;
}

}  // namespace

// Works on the text alone, so that a URL no parser accepts is shown safely too.
// Every reading is hidden together, whichever is right: the user info as
// url::parse reads it (userinfo_end), the password taken to run from the first
// ':' after "://" to the last '@' (a password may hold unescaped '@', ':', '/',
// '?', '#' or '%'), the user info of the authority alone (up to its last '@',
// before any '/', '?' or '#': "PASSWORD@h:1/0?prefix=a@b", whose ':' is a
// port's), and the value of every secret parameter, up to the next '&' (it may
// hold an '@' or a '#'). A user info without ':' is hidden whole, for every
// scheme: Lettuce and others write a password alone so
// (redis://PASSWORD@host), and a backend may read it so; a user name alone is
// hidden with it. Each run of hidden characters is shown as "***".
std::string redact_url(std::string_view text) {
    constexpr auto npos = std::string_view::npos;
    std::vector<bool> hide(text.size(), false);
    const auto sep = text.find("://");
    const std::size_t rest = sep == npos ? 0 : sep + 3;
    const auto after = text.substr(rest);
    // The user info ending at `at` (its '@'): from its first ':' when it has
    // one (the user name stays), else whole.
    auto hide_userinfo = [&](std::size_t at) {
        if (at == npos) return;
        const auto colon = after.substr(0, at).find(':');
        const std::size_t from = colon != npos ? colon + 1 : 0;
        std::fill(hide.begin() + static_cast<long>(rest + from), hide.begin() + static_cast<long>(rest + at), true);
    };
    hide_userinfo(userinfo_end(after));
    if (const auto last = after.rfind('@'); last != npos && after.substr(0, last).find(':') != npos)
        hide_userinfo(last);
    hide_userinfo(after.substr(0, after.find_first_of("/?#")).rfind('@'));
    hide_secret_values(text, rest, hide);
    return shown(text, hide);
}

bool has_dot_segment(std::string_view path) noexcept {
    for (std::size_t start = 0; start <= path.size();) {
        const auto slash = std::min(path.find('/', start), path.size());
        const auto segment = path.substr(start, slash - start);
        if (segment == "." || segment == "..") return true;
        start = slash + 1;
    }
    return false;
}

url url::parse(std::string_view input) {
    std::string text(input);
    const std::string shown = redact_url(text);  // the only form of the text any message shows
    auto sep = text.find("://");
    if (sep == std::string::npos || sep == 0) bad("'" + shown + "' is not a URL (expected scheme://...)");
    url out;
    out.scheme_ = text.substr(0, sep);
    for (char& c : out.scheme_) c = ascii_lower(c);

    // The user info as redact_url() sees it: a parse that split it elsewhere (a
    // password with an unescaped '/', '?' or '#') would connect to a fragment of
    // the password as a host. Then the authority, split so that each host of a
    // list is parsed on its own.
    std::string rest = text.substr(sep + 3);
    std::string userinfo;
    if (const auto at = userinfo_end(rest); at != std::string::npos) {
        userinfo = rest.substr(0, at + 1);
        if (userinfo.find_first_of("/?#") != std::string::npos)  // a password with them (userinfo_end)
            bad("'" + shown +
                "' has an '@' after a '/', '?' or '#': percent-encode '/', '?' and '#' in a password "
                "(%2F, %3F, %23) and '@' in a path or parameter (%40)");
        rest = rest.substr(at + 1);
    }
    auto auth_end = rest.find_first_of("/?#");
    std::string authority = rest.substr(0, auth_end);
    std::string tail = auth_end == std::string::npos ? std::string{} : rest.substr(auth_end);
    std::vector<std::string> host_texts;
    for (std::size_t start = 0;;) {
        auto comma = authority.find(',', start);
        host_texts.push_back(authority.substr(start, comma - start));
        if (comma == std::string::npos) break;
        start = comma + 1;
    }
    if (host_texts.size() > 1) {
        for (const auto& h : host_texts)
            if (h.empty()) bad("empty host in the host list of '" + shown + "'");
    }

    // The first host carries user info, path and query; the others only host:port.
    // file:// and memory:// have no host: give curl a scheme it parses like a path.
    const bool hostless = host_texts.size() == 1 && host_texts[0].empty();
    std::string carrier_tail = (hostless && (tail.empty() || tail[0] != '/')) ? "/" + tail : tail;
    std::string carrier = std::string(hostless ? "file" : "x-distlock") + "://" + userinfo +
                          (hostless ? std::string{} : host_texts[0]) + carrier_tail;
    auto u = parse_with_curl(carrier, shown);
    const auto raw_user = part(u.get(), CURLUPART_USER), raw_password = part(u.get(), CURLUPART_PASSWORD);
    out.user_ = decode(raw_user, "the user name", shown);
    out.password_ = decode(raw_password, "the password", shown);
    const bool user_alone = !userinfo.empty() && userinfo.find(':') == std::string::npos;
    out.add_secret(raw_password);
    out.add_secret(out.password_);
    if (user_alone) {
        out.add_secret(raw_user);
        out.add_secret(out.user_);
    }
    out.path_ = decode(part(u.get(), CURLUPART_PATH), "the path", shown);
    if (out.path_ == "/" && tail.empty()) out.path_.clear();
    if (!part(u.get(), CURLUPART_FRAGMENT).empty()) bad("a fragment (#...) is not allowed in '" + shown + "'");
    if (!hostless) {
        for (std::size_t i = 0; i < host_texts.size(); ++i) {
            auto hu = i == 0 ? std::move(u) : parse_with_curl("x-distlock://" + host_texts[i], shown);
            if (i != 0 && !part(hu.get(), CURLUPART_PATH).empty() && part(hu.get(), CURLUPART_PATH) != "/")
                bad("bad host '" + host_texts[i] + "' in '" + shown + "'");
            host_port hp;
            hp.host = part(hu.get(), CURLUPART_HOST);
            if (hp.host.size() > 2 && hp.host.front() == '[' && hp.host.back() == ']')
                hp.host = hp.host.substr(1, hp.host.size() - 2);
            std::string port = part(hu.get(), CURLUPART_PORT);
            if (!port.empty()) {
                unsigned value = 0;
                auto [p, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
                if (ec != std::errc{} || p != port.data() + port.size() || value == 0 || value > 65535)
                    bad("a port must be a number from 1 to 65535 in '" + shown + "'");
                hp.port = static_cast<std::uint16_t>(value);
            }
            if (hp.host.empty()) bad("empty host in '" + shown + "'");
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
            std::string key = decode(item.substr(0, eq), "a parameter name", shown);
            std::string value =
                eq == std::string::npos ? std::string{} : decode(item.substr(eq + 1), "a parameter value", shown);
            if (key.empty()) bad("empty parameter name in '" + shown + "'");
            if (secret_parameter(key) && eq != std::string::npos) {
                out.add_secret(item.substr(eq + 1));
                out.add_secret(value);
            }
            if (!out.params_.emplace(key, value).second) bad("parameter '" + key + "' given twice in '" + shown + "'");
        }
        if (amp == std::string::npos) break;
        start = amp + 1;
    }

    out.redacted_ = shown;
    return out;
}

void url::add_secret(const std::string& secret) {
    if (!secret.empty() && std::find(secrets_.begin(), secrets_.end(), secret) == secrets_.end())
        secrets_.push_back(secret);
}

std::optional<std::string> url::take(std::string_view key) {
    if (asked_.find(key) == asked_.end()) asked_.emplace(key);
    auto it = params_.find(key);
    if (it == params_.end()) return std::nullopt;
    std::string value = std::move(it->second);
    params_.erase(it);
    return value;
}

namespace {
// "key=value" for a message, as redact_url() shows it in the URL: the value
// hidden for a secret parameter, and so is what follows a secret name inside
// a value ("lease=soon?token=..." is one parameter to the parser, two to the
// reader).
std::string param_text(std::string_view key, const std::string& value) {
    const std::string text = std::string(key) + "=" + value;
    std::vector<bool> hide(text.size(), false);
    if (secret_parameter(key)) std::fill(hide.begin() + static_cast<long>(key.size() + 1), hide.end(), true);
    hide_secret_values(text, key.size() + 1, hide);
    return shown(text, hide);
}
}  // namespace

std::optional<std::chrono::milliseconds> url::take_duration(std::string_view key) {
    auto v = take(key);
    if (!v) return std::nullopt;
    try {
        return parse_duration(*v);
    } catch (const error&) {
        bad("parameter " + param_text(key, *v) + " is not a duration (e.g. 500ms, 2s, 1m)");
    }
}

std::optional<long long> url::take_int(std::string_view key, long long min, long long max) {
    auto v = take(key);
    if (!v) return std::nullopt;
    long long value = 0;
    auto [p, ec] = std::from_chars(v->data(), v->data() + v->size(), value);
    if (v->empty() || ec != std::errc{} || p != v->data() + v->size() || value < min || value > max)
        bad("parameter " + param_text(key, *v) + " must be an integer in [" + std::to_string(min) + ", " +
            std::to_string(max) + "]");
    return value;
}

std::optional<bool> url::take_bool(std::string_view key) {
    auto v = take(key);
    if (!v) return std::nullopt;
    if (*v == "true" || *v == "1" || *v == "yes" || *v == "on") return true;
    if (*v == "false" || *v == "0" || *v == "no" || *v == "off") return false;
    bad("parameter " + param_text(key, *v) + " must be true or false");
}

void url::expect_all_taken() const {
    // The core's own parameters, which connect() takes before the factory: a
    // backend made from a URL by its factory alone (a wrapping backend, a
    // test) leaves them to the core.
    auto core_own = [](const std::string& k) { return k == "lease" || k == "holder"; };
    std::string names;
    for (const auto& [k, v] : params_)
        if (!core_own(k)) names += (names.empty() ? "" : ", ") + k;
    if (names.empty()) return;
    std::string known;
    for (const auto& k : asked_) known += (known.empty() ? "" : ", ") + k;
    bad("unknown parameter(s) for " + scheme_ + "://: " + names +
        (known.empty() ? std::string(" (it takes none)") : " (its parameters: " + known + ")"));
}

std::vector<host_port> url::hosts_or_throw(std::uint16_t default_port) const {
    if (hosts_.empty()) bad(scheme_ + ":// needs a host");
    auto out = hosts_;
    for (auto& h : out)
        if (h.port == 0) h.port = default_port;
    return out;
}

}  // namespace distlock::spi
