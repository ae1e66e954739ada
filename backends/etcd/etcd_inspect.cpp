// What etcd shows of a name's mutex (inspect: the holder, its token and
// lease, the waiters) and breaking a name's locks (break_lock), both over one
// range of the mutex's directory.
#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <limits>
#include <map>
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

namespace {

// Grants listed at most (the range asks one more), and leases whose time to
// live is read (one call each; a provider's grants share its session lease).
constexpr std::size_t max_grants_listed = 1000;
constexpr std::size_t max_leases_read = 100;

// The keys of a range, oldest first (at most max_grants_listed + 1), and
// whether the range holds more.
struct keys_in {
    json kvs;
    bool more = false;
};
keys_in oldest_keys(gateway& g, const std::string& p) {
    const auto reply = g.call("/v3/kv/range", oldest_first(p, max_grants_listed + 1));
    keys_in out{list(reply, "kvs"), false};
    out.more =
        as_i64(reply, "count") > static_cast<std::int64_t>(max_grants_listed) || out.kvs.size() > max_grants_listed;
    return out;
}

// A grant from its key: the token its key's mod revision where that is the
// token, the lease left from its lease's time to live (read once per lease).
class grant_reader {
public:
    explicit grant_reader(gateway& g) : g_(g) {}
    grant_info read(const json& kv, bool token_is_revision, std::map<std::string, std::string>& unknown,
                    const std::string& prefix) {
        grant_info out;
        if (token_is_revision) out.token = static_cast<std::uint64_t>(as_i64(kv, "mod_revision"));
        else
            unknown.try_emplace(prefix + ".token",
                                "a reader's token is its key's revision, or the revision of the write that granted it "
                                "when it waited (the name's :rw-grant key): a read does not tell which");
        unknown.try_emplace(prefix + ".holder",
                            "the key holds a random token of its acquisition, not the holder's label");
        const auto lease = as_i64(kv, "lease");
        if (lease == 0) {
            unknown.try_emplace(prefix + ".remaining", "the key has no lease: it stays until deleted");
            return out;
        }
        if (auto it = left_.find(lease); it != left_.end()) {
            out.remaining = it->second;
        } else if (left_.size() < max_leases_read) {
            lock_info one;
            lease_remaining(g_, one, lease);
            left_.emplace(lease, *one.remaining);
            out.remaining = one.remaining;
        } else {
            unknown.try_emplace(prefix + ".remaining", "the time to live of only the first " +
                                                           std::to_string(max_leases_read) + " leases is read");
        }
        return out;
    }

private:
    gateway& g_;
    std::map<std::int64_t, std::chrono::milliseconds> left_;
};

}  // namespace

// Go's recipe.RWMutex order on the name's :rw/ keys (oldest first): the oldest
// key, when a write key, is the writer; else the read keys older than the
// first write key hold; every other write key waits.
read_write_info inspect_read_write(gateway& g, std::string_view name) {
    read_write_info info;
    const auto root = names_of(g.config().prefix, name, spi::lock_kind::write).blockers;  // <enc>:rw/
    const auto writes = names_of(g.config().prefix, name, spi::lock_kind::write).own;
    const auto keys = oldest_keys(g, root);
    grant_reader reader(g);
    info.write_held = false;
    info.readers.emplace();
    std::uint32_t writers = 0;
    bool writer_seen = false;
    for (const auto& kv : keys.kvs) {
        const bool write = b64d(kv, "key").compare(0, writes.size(), writes) == 0;
        if (!write) {
            if (!writer_seen && info.readers->size() < max_grants_listed)
                info.readers->push_back(reader.read(kv, false, info.unknown, "readers"));
            continue;
        }
        if (!writer_seen && info.readers->empty()) {
            info.write_held = true;
            info.writer = reader.read(kv, true, info.unknown, "writer");
        }
        writer_seen = true;
        ++writers;
    }
    if (keys.more) {
        const auto why = "more than " + std::to_string(max_grants_listed) + " keys stand: not all are listed";
        if (!writer_seen) {
            info.readers.reset();
            info.unknown.emplace("readers", why);
        }
        info.unknown.emplace("writers_waiting", why);
    } else {
        info.writers_waiting = writers - (*info.write_held ? 1 : 0);
    }
    return info;
}

// The semaphore's :sem/permit/ keys (oldest first): the first `size` hold;
// the size is what its size key says.
semaphore_info inspect_semaphore(gateway& g, std::string_view name) {
    semaphore_info info;
    const auto n = names_of(g.config().prefix, name, spi::lock_kind::permit);
    const auto size_reply = g.call("/v3/kv/range", json{{"key", base64_encode(n.size_key)}});
    const auto& size_kvs = list(size_reply, "kvs");
    std::optional<std::uint32_t> size;
    if (!size_kvs.empty()) {
        const auto text = b64d(size_kvs[0], "value");
        std::uint32_t v = 0;
        const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
        if (ec == std::errc{} && end == text.data() + text.size() && v > 0) size = v;
    }
    const auto keys = oldest_keys(g, n.own);
    if (!size) {
        const char* why = keys.kvs.empty()
                              ? "no semaphore of this name on the server: its size is set by its first acquirer"
                              : "the size key is missing or not a count: which keys hold and which wait is not known";
        info.unknown.emplace("size", why);
        info.unknown.emplace("free", why);
        if (keys.kvs.empty()) info.permits.emplace();
        else info.unknown.emplace("permits", why);
        return info;
    }
    info.size = size;
    info.permits.emplace();
    grant_reader reader(g);
    for (const auto& kv : keys.kvs) {
        if (info.permits->size() >= *size || info.permits->size() >= max_grants_listed) break;
        info.permits->push_back(reader.read(kv, true, info.unknown, "permits"));
    }
    if (*size > max_grants_listed && keys.more) {
        info.permits.reset();
        info.unknown.emplace("permits", "more than " + std::to_string(max_grants_listed) + " permits: not listed");
        info.unknown.emplace("free", "more than " + std::to_string(max_grants_listed) + " permits: not counted");
        return info;
    }
    info.free = *size - static_cast<std::uint32_t>(info.permits->size());
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
