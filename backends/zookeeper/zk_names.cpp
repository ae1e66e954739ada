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

std::string node_prefix(std::string_view uuid, std::string_view lock_name) {
    return "_c_" + std::string(uuid) + "-" + std::string(lock_name);
}
std::string protected_id(std::string_view uuid) { return "_c_" + std::string(uuid) + "-"; }

std::string_view sort_key(std::string_view child) {
    if (auto i = child.rfind("lock-"); i != std::string_view::npos) return child.substr(i + 5);
    if (auto i = child.rfind(kReadName); i != std::string_view::npos) return child.substr(i + kReadName.size());
    if (auto i = child.rfind(kWriteName); i != std::string_view::npos) return child.substr(i + kWriteName.size());
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

std::string_view latch_sort_key(std::string_view child) {
    if (auto i = child.rfind(kLatchName); i != std::string_view::npos) return child.substr(i + kLatchName.size());
    return child;
}

void sort_latch_children(std::vector<std::string>& children) {
    std::stable_sort(children.begin(), children.end(), [](const std::string& a, const std::string& b) {
        auto ka = latch_sort_key(a), kb = latch_sort_key(b);
        return ka != kb ? ka < kb : a < b;
    });
}

bool is_latch_node(std::string_view child) { return child.find(kLatchName) != std::string_view::npos; }

bool is_mutex_node(std::string_view child) {
    return child.find(kMutexName) != std::string_view::npos || child.find("__lock__") != std::string_view::npos;
}

namespace {
constexpr std::string_view kPermitsTag = "distlock permits=";
}

std::string permits_data(std::uint32_t permits) { return std::string(kPermitsTag) + std::to_string(permits); }

std::optional<std::uint32_t> permits_in(std::string_view data) {
    if (data.substr(0, kPermitsTag.size()) != kPermitsTag) return std::nullopt;
    auto digits = data.substr(kPermitsTag.size());
    if (digits.empty() || digits.size() > 10) return std::nullopt;
    std::uint64_t v = 0;
    for (char c : digits) {
        if (c < '0' || c > '9') return std::nullopt;
        v = v * 10 + static_cast<std::uint64_t>(c - '0');
    }
    if (v == 0 || v > 0xFFFFFFFFull) return std::nullopt;
    return static_cast<std::uint32_t>(v);
}

bool is_read_node(std::string_view child) {
    return child.find(kReadName) != std::string_view::npos || child.find("__rlock__") != std::string_view::npos;
}

bool is_queue_node(std::string_view child) {
    return is_read_node(child) || child.find(kWriteName) != std::string_view::npos ||
           child.find("lock-") != std::string_view::npos || child.find("__lock__") != std::string_view::npos;
}

turn turn_of(const std::vector<std::string>& sorted, std::string_view mine, bool reader) {
    turn t;
    const std::string* before = nullptr;  // writer: the child before; reader: the nearest writer before
    for (const auto& c : sorted) {
        if (c == mine) {
            t.what = before ? turn::state::wait : turn::state::held;
            if (before) t.watch = *before;
            return t;
        }
        if (!reader) before = &c;
        else if (is_queue_node(c) && !is_read_node(c)) before = &c;
    }
    return t;  // missing
}

std::vector<std::string> holders_of(const std::vector<std::string>& sorted) {
    std::vector<std::string> out;
    for (const auto& c : sorted) {
        if (!is_queue_node(c)) continue;
        if (!out.empty() && !is_read_node(c)) break;
        out.push_back(c);
        if (!is_read_node(c)) break;
    }
    return out;
}

}  // namespace distlock::backends::zookeeper
