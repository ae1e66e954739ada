// What etcd shows of a name's mutex (inspect: the holder, its token and
// lease, the waiters) and breaking a name's locks (break_lock), both over one
// range of the mutex's directory.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <limits>
#include <string>

#include "distlock/error.hpp"
#include "etcd_gateway.hpp"
#include "etcd_layout.hpp"
#include "etcd_lock.hpp"
#include "http/http_codec.hpp"

namespace distlock::backends::etcd {
namespace {

using http::base64_encode;

// The name's mutex directory and one range of it: its first key by create
// revision (the holder), and the count of every key in it.
struct head {
    std::string dir;
    json reply;
};
head read_head(gateway& g, std::string_view name, bool keys_only) {
    head h{names_of(g.config().prefix, name, spi::lock_kind::exclusive).own, {}};
    json range = oldest_first(h.dir, 1);
    if (keys_only) range["keys_only"] = true;
    h.reply = g.call("/v3/kv/range", range);
    return h;
}

// The holder's label and token, from its key's value and mod revision.
void describe_holder(lock_info& info, const json& holder) {
    auto value = b64d(holder, "value");
    if (value.empty()) {
        // Go's concurrency.Mutex (etcdctl lock) puts an empty value.
        info.unknown.emplace("holder",
                             "the holder's key has an empty value: a holder that stores no label "
                             "(Go's concurrency.Mutex, etcdctl lock)");
        info.unknown.emplace("token",
                             "the holder stores no label, so it is not distlock, whose token is its key's "
                             "mod revision; a Go concurrency.Mutex's (etcdctl lock's ETCD_LOCK_REV) is the "
                             "store revision when it found its turn, which etcd does not keep");
    } else {
        info.holder = std::move(value);
        info.token = static_cast<std::uint64_t>(as_i64(holder, "mod_revision"));
    }
}

// The lease's time to live, in whole seconds rounded down by etcd; -1 once
// the lease is gone (its keys are being deleted).
void lease_remaining(gateway& g, lock_info& info, std::int64_t lease) {
    try {
        auto ttl = g.call("/v3/lease/timetolive", json{{"ID", std::to_string(lease)}});
        info.remaining = lease_seconds(as_i64(ttl, "TTL"));
    } catch (const grpc_error& e) {  // lease not found: expired between the two reads
        if (e.code != 5) throw_error(errc::unavailable, kBackend, "lease time to live: " + e.reason(), e.code);
        info.remaining = std::chrono::milliseconds{0};
    }
}

}  // namespace

lock_info inspect(gateway& g, std::string_view name) {
    lock_info info;
    // The holder (the first key by create revision) and how many keys stand:
    // the range's count is of every key in the range, whatever its limit.
    const auto reply = read_head(g, name, false).reply;
    const auto& kvs = list(reply, "kvs");
    const auto count = std::max<std::int64_t>(as_i64(reply, "count"), static_cast<std::int64_t>(kvs.size()));
    info.held = !kvs.empty();
    info.waiters =
        static_cast<std::uint32_t>(std::clamp<std::int64_t>(count - 1, 0, std::numeric_limits<std::uint32_t>::max()));
    if (kvs.empty()) return info;
    const auto& holder = kvs[0];
    describe_holder(info, holder);
    const auto lease = as_i64(holder, "lease");
    if (lease == 0) {
        info.unknown.emplace("remaining", "the holder's key has no lease: it stays until deleted");
        return info;
    }
    lease_remaining(g, info, lease);
    return info;
}

void break_lock(gateway& g, std::string_view name) {
    // The mutex: its holder's key (the first by create revision). The
    // read-write lock and the semaphore: every key (holders and waiters; a
    // waiter whose key is gone starts again).
    for (auto kind : {spi::lock_kind::write, spi::lock_kind::permit})
        g.call("/v3/kv/deleterange", prefix_range(names_of(g.config().prefix, name, kind).blockers));
    const auto h = read_head(g, name, true);
    const auto& kvs = list(h.reply, "kvs");
    if (kvs.empty()) return;
    // Only a key of this name's directory, whatever the reply says.
    const auto key = b64d(kvs[0], "key");
    if (key.compare(0, h.dir.size(), h.dir) != 0)
        throw_error(errc::unavailable, kBackend, "break_lock: the range of " + h.dir + " answered a key outside it");
    g.call("/v3/kv/deleterange", json{{"key", base64_encode(key)}});
}

}  // namespace distlock::backends::etcd
