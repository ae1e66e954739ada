// The etcd key layout of each lock kind (names_of), our own key names, and the
// range bodies over a name's keys.
#include "etcd_layout.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>

#include "http/http_codec.hpp"

namespace distlock::backends::etcd {

using http::base64_encode;

names names_of(const std::string& prefix, std::string_view name, spi::lock_kind kind) {
    const auto enc = http::encode_name(name);
    switch (kind) {
        case spi::lock_kind::read:
            return {prefix + "/" + enc + ":rw/read/", prefix + "/" + enc + ":rw/write/", {}, true, true,
                    prefix + "/" + enc + ":rw-grant"};
        case spi::lock_kind::write:
            return {prefix + "/" + enc + ":rw/write/", prefix + "/" + enc + ":rw/", {}, true, false, {}};
        case spi::lock_kind::permit:
            return {prefix + "/" + enc + ":sem/permit/",
                    prefix + "/" + enc + ":sem/permit/",
                    prefix + "/" + enc + ":sem/size",
                    true,
                    true,
                    {}};
        case spi::lock_kind::exclusive:
        case spi::lock_kind::leader: break;  // an election is the mutex: Go's Election layout is the mutex's
    }
    return {prefix + "/" + enc + "/", prefix + "/" + enc + "/", {}, false, true, {}};
}

std::string unique_suffix() {
    static std::atomic<std::int64_t> last{0};
    const std::int64_t now =
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
            .count();
    auto prev = last.load();
    std::int64_t mine;
    do {
        mine = std::max(now, prev + 1);
    } while (!last.compare_exchange_weak(prev, mine));
    return std::to_string(mine);
}

json prefix_range(const std::string& p) {
    return json{{"key", base64_encode(p)}, {"range_end", base64_encode(prefix_end(p))}};
}

json created_at(const std::string& key, std::int64_t revision) {
    return json{{"key", base64_encode(key)},
                {"target", "CREATE"},
                {"result", "EQUAL"},
                {"create_revision", std::to_string(revision)}};
}

json count_of(const std::string& p) {
    json range = prefix_range(p);
    range["count_only"] = true;
    return range;
}

json oldest_first(const std::string& p, std::size_t limit) {
    json range = prefix_range(p);
    range["sort_order"] = "ASCEND";
    range["sort_target"] = "CREATE";
    range["limit"] = std::to_string(limit);
    return range;
}

}  // namespace distlock::backends::etcd
