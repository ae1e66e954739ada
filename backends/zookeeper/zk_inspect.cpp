// zk:// backend::inspect: the mutex (exclusive) or the LeaderLatch election
// (leader) of a name, in one sync and getChildren and, when held, one getData
// of the holder's node (its label, and its czxid: the token).
#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "zk_lock.hpp"
#include "zk_names.hpp"
#include "zk_queue.hpp"

namespace distlock::backends::zookeeper {
namespace {

// A node's data as a holder label: 1..255 bytes without control characters
// (what distlock writes; Curator's default, the local IP address as text,
// passes too), else nullopt with why in `why`.
std::optional<std::string> label_of(const op& o, std::string& why) {
    const auto size = static_cast<std::size_t>(std::max(o.stat.dataLength, 0));
    if (size == 0) {
        why = "the holder's node has no data (a client that stores no label there, e.g. kazoo without an identifier)";
        return std::nullopt;
    }
    bool control = size > 255 || o.value.size() != size;
    for (unsigned char c : o.value) control = control || c < 0x20 || c == 0x7F;
    if (control) {
        why = "the holder's node data (" + std::to_string(size) +
              " bytes) is not a label: binary or longer than 255 bytes";
        return std::nullopt;
    }
    return o.value;
}

}  // namespace

namespace {

// Grants whose node data inspect reads (one getData each); the others are
// listed without their label and token.
constexpr std::size_t max_grants_read = 100;
// Grants listed at most.
constexpr std::size_t max_grants_listed = 1000;

constexpr const char* no_zk_lease =
    "no per-lock lease: the node lives as long as its holder's ZooKeeper session, which the server does not say "
    "when it would expire";

// One look at a path for the read-write lock and the semaphore: a sync (the
// first time), its children, and getData of the nodes `pick` chooses from
// them (sorted); `fill` then makes the info of what was read. A node that
// went between the listing and its getData makes it look again.
template <class Info, class Pick, class Fill>
Info look(session_manager& zk, std::string_view name, const std::string& path, Pick pick, Fill fill) {
    auto s = zk.session_for(clock::now() + zk.config().connect_timeout);
    // The sync: a follower answers reads from what it has applied, which may
    // lag behind the quorum, and ZooKeeper orders reads per session only: the
    // provider's session may be on another server than the holder's. Behind a
    // sync, the listing shows every grant and release that completed before
    // inspect was called. Once synced, the session never reads older state (a
    // reconnection goes only to a server at least as recent), so a second look
    // needs no second sync.
    bool synced = false;
    for (int tries = 0;; ++tries) {
        if (tries > 10)
            throw_error(errc::unavailable, kBackend, "the holders of '" + std::string(name) + "' kept changing");
        op_ptr sync;
        if (!synced) {
            stats().inspect_requests++;
            sync = zk_sync_async(s->zh, path);
        }
        stats().inspect_requests++;
        auto kids = zk_children(s->zh, path, zk.config().max_children);
        if (sync) wait_op(sync);
        const int rc = sync && sync->rc != ZOK ? sync->rc : kids->rc;
        if (is_connection_error(rc) && zk.wait_connected(*s, zk.reconnect_limit(clock::now()))) continue;
        if (sync && sync->rc != ZOK) throw_client_error(sync->rc, kBackend, "inspect: sync " + path + " failed");
        synced = true;
        if (kids->rc != ZOK && kids->rc != ZNONODE) throw_op_error(*kids, "inspect: getChildren " + path + " failed");
        zk.touch(*s);
        auto children = std::move(kids->children);
        sort_children(children);
        const std::vector<std::string> wanted = pick(children);
        std::vector<op_ptr> read;
        bool again = false;
        for (const auto& node : wanted) {
            stats().inspect_requests++;
            auto d = zk_get_data(s->zh, path + "/" + node);
            if (d->rc == ZNONODE) again = true;  // released meanwhile: look again
            else if (is_connection_error(d->rc) && zk.wait_connected(*s, zk.reconnect_limit(clock::now())))
                again = true;
            else if (d->rc != ZOK) throw_client_error(d->rc, kBackend, "inspect: getData of a holder's node failed");
            if (again) break;
            read.push_back(std::move(d));
        }
        if (again) continue;
        return fill(children, read);
    }
}

// A grant from its node's getData: its czxid as the token, its data as the label.
grant_info grant_of(const op& o, std::map<std::string, std::string>& unknown, const std::string& prefix) {
    grant_info g;
    g.token = static_cast<std::uint64_t>(o.stat.czxid);
    std::string why;
    if (auto label = label_of(o, why)) g.holder = std::move(label);
    else unknown.try_emplace(prefix + ".holder", std::move(why));
    unknown.try_emplace(prefix + ".remaining", no_zk_lease);
    return g;
}

// `n` grants past the ones read: listed without label or token.
void unread_grants(std::vector<grant_info>& out, std::size_t n, std::map<std::string, std::string>& unknown,
                   const std::string& prefix) {
    if (n == 0) return;
    const auto why = "only the first " + std::to_string(max_grants_read) + " grants' nodes are read";
    unknown.try_emplace(prefix + ".holder", why);
    unknown.try_emplace(prefix + ".token", why);
    unknown.try_emplace(prefix + ".remaining", no_zk_lease);
    out.resize(out.size() + n);
}

}  // namespace

lock_info inspect(session_manager& zk, std::string_view name, spi::lock_kind kind) {
    // A sync of the lock path, then one getChildren of it sent right behind
    // (one round trip for both); when someone holds it, one getData of the
    // holder's node (its label, and its czxid: the token). A holder that leaves
    // in between makes us look again (look(), above, says why the sync).
    const bool leader = kind == spi::lock_kind::leader;
    auto queue_of = [leader](const std::vector<std::string>& sorted) {
        std::vector<std::string> queue;
        for (const auto& k : sorted)
            if (leader ? is_latch_node(k) : is_mutex_node(k)) queue.push_back(k);
        if (leader) sort_latch_children(queue);
        return queue;
    };
    return look<lock_info>(
        zk, name, dir_of(zk.config(), name),
        [&](const std::vector<std::string>& sorted) {
            auto queue = queue_of(sorted);
            if (queue.size() > 1) queue.resize(1);
            return queue;
        },
        [&](const std::vector<std::string>& sorted, const std::vector<op_ptr>& read) {
            lock_info info;
            const auto queue = queue_of(sorted);
            info.held = !queue.empty();
            info.waiters = static_cast<std::uint32_t>(queue.empty() ? 0 : queue.size() - 1);
            if (read.empty()) return info;
            info.token = static_cast<std::uint64_t>(read.front()->stat.czxid);
            std::string why;
            if (auto label = label_of(*read.front(), why)) info.holder = std::move(label);
            else info.unknown.emplace("holder", std::move(why));
            info.unknown.emplace("remaining",
                                 "no per-lock lease: the node lives as long as its holder's ZooKeeper session, which "
                                 "the holder's client keeps alive; the server does not tell when that session would "
                                 "expire");
            return info;
        });
}

// Curator's InterProcessReadWriteLock on the name's lock path: the first node,
// when a writer's (or a mutex's: it counts as a writer), is the writer; else
// the read nodes before the first write node hold; the other write nodes wait.
read_write_info inspect_read_write(session_manager& zk, std::string_view name) {
    const auto dir = dir_of(zk.config(), name);
    struct shape {
        bool write_held = false;
        std::size_t readers = 0, writers = 0;
    };
    auto shape_of = [](const std::vector<std::string>& sorted) {
        shape sh;
        bool writer_seen = false;
        for (const auto& c : sorted) {
            if (!is_queue_node(c)) continue;
            if (is_read_node(c)) {
                if (!writer_seen) ++sh.readers;
                continue;
            }
            if (!writer_seen && sh.readers == 0) sh.write_held = true;
            writer_seen = true;
            ++sh.writers;
        }
        return sh;
    };
    return look<read_write_info>(
        zk, name, dir,
        [&](const std::vector<std::string>& sorted) {
            std::vector<std::string> holders;
            const auto sh = shape_of(sorted);
            for (const auto& c : sorted) {
                if (!is_queue_node(c)) continue;
                if (sh.write_held || !is_read_node(c) || holders.size() >= std::min(sh.readers, max_grants_read)) break;
                holders.push_back(c);
            }
            if (sh.write_held)
                for (const auto& c : sorted)
                    if (is_queue_node(c)) {
                        holders.push_back(c);
                        break;
                    }
            return holders;
        },
        [&](const std::vector<std::string>& sorted, const std::vector<op_ptr>& read) {
            read_write_info info;
            const auto sh = shape_of(sorted);
            info.write_held = sh.write_held;
            info.writers_waiting = static_cast<std::uint32_t>(sh.writers - (sh.write_held ? 1 : 0));
            info.readers.emplace();
            if (sh.write_held) {
                if (!read.empty()) info.writer = grant_of(*read.front(), info.unknown, "writer");
                return info;
            }
            if (sh.readers > max_grants_listed) {
                info.readers.reset();
                info.unknown.emplace("readers", std::to_string(sh.readers) + " read grants: more than the " +
                                                    std::to_string(max_grants_listed) + " inspect lists");
                return info;
            }
            for (const auto& o : read) info.readers->push_back(grant_of(*o, info.unknown, "readers"));
            unread_grants(*info.readers, sh.readers - read.size(), info.unknown, "readers");
            return info;
        });
}

// Curator's InterProcessSemaphoreV2: the lease nodes under <path>/leases, the
// first `size` of them (by sequence) holding; the size in the data of
// <path>/leases, where distlock keeps it (Curator keeps none).
semaphore_info inspect_semaphore(session_manager& zk, std::string_view name) {
    const auto leases = dir_of(zk.config(), name) + "/" + std::string(kSemaphoreLeases);
    std::optional<std::uint32_t> size;
    bool sized = false;
    auto lease_nodes = [](const std::vector<std::string>& sorted) {
        std::vector<std::string> out;
        for (const auto& c : sorted)
            if (c.find(kLeaseName) != std::string::npos) out.push_back(c);
        return out;
    };
    return look<semaphore_info>(
        zk, name, leases,
        [&](const std::vector<std::string>& sorted) {
            // The size first (its getData is one more round trip, once).
            if (!sized) {
                auto s = zk.session_for(clock::now() + zk.config().connect_timeout);
                stats().inspect_requests++;
                auto d = zk_get_data(s->zh, leases);
                if (d->rc == ZOK) size = permits_in(d->value);
                else if (d->rc != ZNONODE) throw_client_error(d->rc, kBackend, "inspect: getData of the leases failed");
                sized = true;
            }
            auto nodes = lease_nodes(sorted);
            const std::size_t held = size ? std::min<std::size_t>(*size, nodes.size()) : 0;
            nodes.resize(std::min(held, max_grants_read));
            return nodes;
        },
        [&](const std::vector<std::string>& sorted, const std::vector<op_ptr>& read) {
            semaphore_info info;
            const auto nodes = lease_nodes(sorted);
            if (!size) {
                const char* why = nodes.empty() ? "no semaphore of this name on the server: its size is set by its "
                                                  "first acquirer"
                                                : "the leases node keeps no size (a Curator semaphore keeps none): "
                                                  "which leases hold and which wait is not known";
                info.unknown.emplace("size", why);
                info.unknown.emplace("free", why);
                if (nodes.empty()) info.permits.emplace();
                else info.unknown.emplace("permits", why);
                return info;
            }
            const std::size_t held = std::min<std::size_t>(*size, nodes.size());
            info.size = size;
            info.free = static_cast<std::uint32_t>(*size - held);
            info.permits.emplace();
            if (held > max_grants_listed) {
                info.permits.reset();
                info.unknown.emplace("permits", std::to_string(held) + " permits taken: more than the " +
                                                    std::to_string(max_grants_listed) + " inspect lists");
                return info;
            }
            for (const auto& o : read) info.permits->push_back(grant_of(*o, info.unknown, "permits"));
            unread_grants(*info.permits, held - read.size(), info.unknown, "permits");
            return info;
        });
}

}  // namespace distlock::backends::zookeeper
