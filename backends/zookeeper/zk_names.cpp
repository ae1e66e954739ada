#include "zk_names.hpp"

#include <algorithm>

namespace distlock::backends::zookeeper {

std::string encode_segment(std::string_view name) {
    static constexpr char digits[] = "0123456789ABCDEF";
    std::string out;
    out.reserve(name.size());
    for (unsigned char c : name) {
        if (c >= 0x21 && c <= 0x7E && c != '/' && c != '%') {
            out += static_cast<char>(c);
        } else {
            out += '%';
            out += digits[c >> 4];
            out += digits[c & 15];
        }
    }
    if (out == ".") out = "%2E";
    else if (out == "..") out = "%2E%2E";
    return out;
}

std::string base_path_problem(std::string_view base) {
    if (base.empty() || base.front() != '/') return "the base path must start with '/'";
    if (base == "/") return "the base path must not be the root";
    if (base.back() == '/') return "the base path must not end with '/'";
    std::size_t start = 1;
    while (start <= base.size()) {
        auto end = base.find('/', start);
        if (end == std::string_view::npos) end = base.size();
        auto seg = base.substr(start, end - start);
        if (seg.empty()) return "the base path has an empty segment";
        if (seg == "." || seg == "..") return "the base path has a '.' or '..' segment";
        if (start == 1 && seg == "zookeeper") return "/zookeeper is reserved by the server";
        for (unsigned char c : seg)
            if (c < 0x20 || c == 0x7F) return "the base path has a control character";
        start = end + 1;
    }
    return {};
}

std::string node_prefix(std::string_view uuid) { return "_c_" + std::string(uuid) + "-lock-"; }
std::string protected_id(std::string_view uuid) { return "_c_" + std::string(uuid) + "-"; }

std::string_view sort_key(std::string_view child) {
    if (auto i = child.rfind("lock-"); i != std::string_view::npos) return child.substr(i + 5);
    if (auto i = child.rfind("__lock__"); i != std::string_view::npos) return child.substr(i + 8);
    if (auto i = child.rfind("__rlock__"); i != std::string_view::npos) return child.substr(i + 9);
    return child;
}

void sort_children(std::vector<std::string>& children) {
    std::stable_sort(children.begin(), children.end(), [](const std::string& a, const std::string& b) {
        auto ka = sort_key(a), kb = sort_key(b);
        return ka != kb ? ka < kb : a < b;
    });
}

}  // namespace distlock::backends::zookeeper
