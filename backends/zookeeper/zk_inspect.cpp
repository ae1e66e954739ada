// zk:// backend::inspect: the mutex (exclusive) or the LeaderLatch election
// (leader) of a name, in one sync and getChildren and, when held, one getData
// of the holder's node (its label, and its czxid: the token).
#include <algorithm>

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

lock_info inspect(session_manager& zk, std::string_view name, spi::lock_kind kind) {
    const bool leader = kind == spi::lock_kind::leader;
    const auto dir = dir_of(zk.config(), name);
    auto s = zk.session_for(clock::now() + zk.config().connect_timeout);
    // A sync of the lock path, then one getChildren of it sent right behind
    // (one round trip for both); when someone holds it, one getData of the
    // holder's node (its label, and its czxid: the token). A holder that leaves
    // in between makes us look again.
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
            throw_error(errc::unavailable, kBackend, "the holder of '" + std::string(name) + "' kept changing");
        lock_info info;
        op_ptr sync;
        if (!synced) {
            stats().inspect_requests++;
            sync = zk_sync_async(s->zh, dir);
        }
        stats().inspect_requests++;
        auto kids = zk_children(s->zh, dir, zk.config().max_children);
        if (sync) wait_op(sync);
        const int rc = sync && sync->rc != ZOK ? sync->rc : kids->rc;
        if (is_connection_error(rc) && zk.wait_connected(*s, zk.reconnect_limit(clock::now()))) continue;
        if (sync && sync->rc != ZOK) throw_client_error(sync->rc, kBackend, "inspect: sync " + dir + " failed");
        synced = true;
        if (kids->rc != ZOK && kids->rc != ZNONODE) throw_op_error(*kids, "inspect: getChildren " + dir + " failed");
        zk.touch(*s);
        std::vector<std::string> queue;
        for (auto& k : kids->children)
            if (leader ? is_latch_node(k) : is_mutex_node(k)) queue.push_back(std::move(k));
        if (leader) sort_latch_children(queue);
        else sort_children(queue);
        info.held = !queue.empty();
        info.waiters = static_cast<std::uint32_t>(queue.empty() ? 0 : queue.size() - 1);
        if (queue.empty()) return info;
        stats().inspect_requests++;
        auto d = zk_get_data(s->zh, dir + "/" + queue.front());
        if (d->rc == ZNONODE) continue;  // released meanwhile: look again
        if (is_connection_error(d->rc) && zk.wait_connected(*s, zk.reconnect_limit(clock::now()))) continue;
        if (d->rc != ZOK) throw_client_error(d->rc, kBackend, "inspect: getData of the holder's node failed");
        info.token = static_cast<std::uint64_t>(d->stat.czxid);
        std::string why;
        if (auto label = label_of(*d, why)) info.holder = std::move(label);
        else info.unknown.emplace("holder", std::move(why));
        info.unknown.emplace("remaining",
                             "no per-lock lease: the node lives as long as its holder's ZooKeeper session, which the "
                             "holder's client keeps alive; the server does not tell when that session would expire");
        return info;
    }
}

}  // namespace distlock::backends::zookeeper
