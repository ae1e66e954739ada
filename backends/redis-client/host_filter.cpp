// The Redis client layer (redis_client.hpp): the hosts the data nodes'
// credentials may go to (master_hosts=), and whether a host a server named is
// one at all.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <charconv>
#include <cstring>

#include "endpoint.hpp"

namespace distlock::backends::redis_client {

namespace {

// The bytes of `text` when it is an IP address as written (inet_pton: dotted
// quads and IPv6 text only, never inet_aton's "10.1" or "0x7f.1").
bool ip_bytes(std::string_view text, int& family, unsigned char (&out)[16]) {
    if (text.empty() || text.size() > 64) return false;
    const std::string s(text);
    if (::inet_pton(AF_INET, s.c_str(), out) == 1) {
        family = AF_INET;
        return true;
    }
    if (::inet_pton(AF_INET6, s.c_str(), out) == 1) {
        family = AF_INET6;
        return true;
    }
    return false;
}

char ascii_lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

// A host name as DNS writes it (letters, digits, '-', '_' and dots, not
// starting with '-' or '.'), lowercased into `out`.
bool host_name(std::string_view text, std::string& out) {
    if (text.empty() || text.size() > 253 || text.front() == '-' || text.front() == '.') return false;
    out.clear();
    for (char c : text) {
        if (!spi::ascii_alnum(c) && c != '-' && c != '_' && c != '.') return false;
        out += ascii_lower(c);
    }
    return true;
}

bool port_number(std::string_view text, std::uint16_t& port) {
    unsigned value = 0;
    auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (text.empty() || ec != std::errc{} || p != text.data() + text.size() || value == 0 || value > 65535)
        return false;
    port = static_cast<std::uint16_t>(value);
    return true;
}

// Whether the first `bits` bits of two addresses are the same.
bool same_prefix(const unsigned char* a, const unsigned char* b, int bits) {
    const int bytes = bits / 8, rest = bits % 8;
    if (std::memcmp(a, b, static_cast<std::size_t>(bytes)) != 0) return false;
    if (rest == 0) return true;
    const auto mask = static_cast<unsigned char>(0xff << (8 - rest));
    return (a[bytes] & mask) == (b[bytes] & mask);
}

}  // namespace

bool plausible_host(std::string_view host) {
    int family = 0;
    unsigned char addr[16];
    std::string name;
    return ip_bytes(host, family, addr) || host_name(host, name);
}

bool host_filter::read_entry(std::string_view text, entry& e) {
    std::string_view host = text;
    if (const auto slash = text.find('/'); slash != std::string_view::npos) {  // a block: address/bits
        host = text.substr(0, slash);
        const auto bits = text.substr(slash + 1);
        auto [p, ec] = std::from_chars(bits.data(), bits.data() + bits.size(), e.bits);
        return !bits.empty() && ec == std::errc{} && p == bits.data() + bits.size() &&
               ip_bytes(host, e.family, e.addr) && e.bits >= 0 && e.bits <= (e.family == AF_INET ? 32 : 128);
    }
    if (!text.empty() && text.front() == '[') {  // [IPv6] or [IPv6]:port
        const auto close = text.find(']');
        if (close == std::string_view::npos) return false;
        const auto rest = text.substr(close + 1);
        if (!rest.empty() && (rest.front() != ':' || !port_number(rest.substr(1), e.port))) return false;
        e.bits = 128;
        return ip_bytes(text.substr(1, close - 1), e.family, e.addr) && e.family == AF_INET6;
    }
    if (const auto colon = text.find(':');
        colon != std::string_view::npos && text.find(':', colon + 1) == std::string_view::npos) {
        host = text.substr(0, colon);  // host:port (two colons or more: an IPv6 address alone)
        if (!port_number(text.substr(colon + 1), e.port)) return false;
    }
    if (ip_bytes(host, e.family, e.addr)) {
        e.bits = e.family == AF_INET ? 32 : 128;
        return true;
    }
    return host_name(host, e.name);
}

host_filter host_filter::parse(std::string_view text, const std::string& backend_name) {
    host_filter f;
    f.text_ = std::string(text);
    for (std::size_t start = 0;;) {
        const auto comma = text.find(',', start);
        const auto item = text.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
        entry e;
        if (item.empty() || !read_entry(item, e))
            throw_error(errc::invalid_argument, backend_name,
                        "master_hosts= takes host names, IP addresses (each with an optional :port; IPv6 as "
                        "[address]:port) and CIDR blocks, separated by commas: cannot read '" +
                            std::string(item) + "'");
        f.entries_.push_back(std::move(e));
        if (comma == std::string_view::npos) break;
        start = comma + 1;
    }
    return f;
}

void host_filter::allow(std::string_view host, std::uint16_t port) {
    entry e;
    e.port = port;
    if (ip_bytes(host, e.family, e.addr)) e.bits = e.family == AF_INET ? 32 : 128;
    else
        for (char c : host) e.name += ascii_lower(c);
    entries_.push_back(std::move(e));
}

bool host_filter::allows(std::string_view host, std::uint16_t port) const {
    if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
    int family = 0;
    unsigned char addr[16]{};
    const bool ip = ip_bytes(host, family, addr);
    std::string name;
    if (!ip)
        for (char c : host) name += ascii_lower(c);
    for (const auto& e : entries_) {
        if (e.port != 0 && e.port != port) continue;
        if (ip ? e.name.empty() && e.family == family && same_prefix(e.addr, addr, e.bits)
               : !e.name.empty() && e.name == name)
            return true;
    }
    return false;
}

}  // namespace distlock::backends::redis_client
