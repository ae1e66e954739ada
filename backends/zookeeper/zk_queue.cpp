// zk:// the queue engine of the lock recipes (Curator's LockInternals): one
// handle's node in the queue of a lock path, from its protected-mode create to
// its turn and its release (zk_queue.hpp). The order of the queue is its
// driver's (zk_queue_drivers.cpp).
#include "zk_queue.hpp"

#include <algorithm>
#include <utility>

#include "zk_names.hpp"

namespace distlock::backends::zookeeper {

std::string dir_of(const settings& s, std::string_view name) { return s.base + "/" + encode_segment(name); }

std::string last_segment(const std::string& path) { return path.substr(path.rfind('/') + 1); }

queue_engine::queue_engine(session_manager& zk, const spi::lock_request& r)
    : zk_(zk), name_(r.name), dir_(dir_of(zk.config(), r.name)), holder_(r.holder), id_(zk.new_grant_id()) {}

queue_engine::~queue_engine() { unhold(); }

created queue_engine::create_node(const attempt& a, std::string_view node_name) {
    const auto& s = a.s;
    const auto& dir = a.dir;
    created c;
    const auto uuid = spi::random_uuid();
    const auto prefix = node_prefix(uuid, node_name);
    const auto pid = protected_id(uuid);
    for (int tries = 0;; ++tries) {
        if (tries > 10)
            throw_error(errc::unavailable, kBackend, "cannot create a node under " + dir + " for '" + name_ + "'");
        // The listing rides in the same round trip: the server answers a
        // session's requests in order, so it already shows our new node.
        c.listed = clock::now();
        auto o = zk_create_async(s->zh, dir + "/" + prefix, holder_, ZOO_EPHEMERAL_SEQUENTIAL, zk_.config().acl);
        auto listing = zk_children(s->zh, dir, zk_.config().max_children);
        wait_op(o);
        if (o->rc == ZOK) {
            c.node = o->value;
            c.czxid = static_cast<std::uint64_t>(o->stat.czxid);
            stats().lock_nodes_created++;
            c.listing = std::move(listing);
            return c;
        }
        if (o->rc == ZNONODE) {
            zk_.make_parents(*s, dir);
            continue;
        }
        if (is_session_gone(o->rc)) {
            c.session_lost = true;
            return c;
        }
        if (!is_connection_error(o->rc)) throw_client_error(o->rc, kBackend, "cannot create a lock node under " + dir);
        // Outcome unknown: the node may exist. Find it once reconnected.
        c.orphan_pid = pid;
        if (!reconnected(a)) {
            if (zk_.session_alive(*s)) {
                zk_.delete_protected_later(*s, dir, pid);
                throw_error(errc::unavailable, kBackend,
                            "lost the connection to ZooKeeper while creating the lock node of '" + name_ + "'");
            }
            c.session_lost = true;
            return c;
        }
        auto kids = zk_children(s->zh, dir, zk_.config().max_children);
        if (kids->rc == kListingTooLarge) {
            zk_.delete_protected_later(*s, dir, pid);
            throw_op_error(*kids, "cannot look for the lock node of '" + name_ + "' under " + dir);
        }
        if (kids->rc != ZOK && kids->rc != ZNONODE) continue;  // try again (bounded by `tries`)
        for (const auto& k : kids->children) {
            if (k.rfind(pid, 0) != 0) continue;
            auto st = zk_exists(s->zh, dir + "/" + k, false);
            if (st->rc == ZOK && st->stat.ephemeralOwner == zk_.session_id(*s)) {
                c.node = dir + "/" + k;
                c.czxid = static_cast<std::uint64_t>(st->stat.czxid);
                stats().protected_recoveries++;
                return c;  // no listing: wait_turn lists afresh
            }
            if (st->rc == ZOK) zk_.delete_node(*s, dir + "/" + k);  // made by a session that is gone
            break;
        }
    }
}

bool queue_engine::reconnected(const attempt& a) {
    return zk_.wait_connected(*a.s, zk_.reconnect_limit(a.once ? clock::now() : a.until));
}

bool queue_engine::remove_duplicates(const attempt& a, const std::vector<std::string>& children) {
    if (a.c.orphan_pid.empty()) return false;
    const std::string mine = last_segment(a.c.node);
    bool removed = false;
    for (const auto& k : children)
        if (k != mine && k.rfind(a.c.orphan_pid, 0) == 0) {
            zk_.delete_node(*a.s, a.dir + "/" + k);
            removed = true;
        }
    return removed;
}

step queue_engine::wait_turn(attempt& a, const queue_driver& d, const spi::loss_sink* lost) {
    const auto& s = a.s;
    const auto& dir = a.dir;
    const std::string mine = last_segment(a.c.node);  // "_c_<uuid>-<lock name><10 digits>"
    for (;;) {
        if (!a.c.listing) a.c.listed = clock::now();
        auto kids =
            a.c.listing ? wait_op(std::exchange(a.c.listing, {})) : zk_children(s->zh, dir, zk_.config().max_children);
        if (is_connection_error(kids->rc)) {
            if (!reconnected(a)) {
                if (!zk_.session_alive(*s)) return step::again;
                throw_error(errc::unavailable, kBackend,
                            "lost the connection to ZooKeeper while waiting for '" + name_ + "'");
            }
            continue;
        }
        if (kids->rc == ZNONODE || is_session_gone(kids->rc)) return step::again;
        if (kids->rc != ZOK) throw_op_error(*kids, "getChildren " + dir + " failed");
        zk_.touch(*s);
        auto& children = kids->children;
        // An election's queue follows LeaderLatch's order, the other queues
        // the lock recipes' order (each sorts the other's nodes after its own).
        d.sort(children);
        if (std::find(children.begin(), children.end(), mine) == children.end()) return step::again;  // gone
        // After a create whose reply was lost, a second node carrying this
        // attempt's uuid may show up: it would queue us behind ourselves.
        if (remove_duplicates(a, children)) continue;
        auto t = turn_of(children, mine, d.reader);
        if (t.what == turn::state::missing) return step::again;
        if (t.what == turn::state::held) {
            // Held. (The keepalive's exists, every session timeout / 3, also
            // sets a watch on our node, so that a delete by someone else is
            // reported at once from then on; a lock held only briefly costs no
            // request beyond create, listing and delete.)
            if (lost) hold(a, *lost);
            return step::held;
        }
        // Another holder is ahead of us (the semaphore's internal mutex, held
        // only while a client counts the leases, does not count).
        if (lost) waited_ = true;
        if (a.once || clock::now() >= a.until) return step::timeout;
        session_manager::waiter w{dir + "/" + t.watch};
        zk_.add_waiter(w);
        stats().predecessor_watches++;
        auto o = zk_get(s->zh, w.path, true);
        if (o->rc == ZOK) zk_.wait_event(w, *s, a.until);
        zk_.remove_waiter(w);
        if (o->rc == ZNONODE || o->rc == ZOK) {
            if (o->rc == ZOK && !w.fired && clock::now() >= a.until) return step::timeout;
            continue;
        }
        if (is_session_gone(o->rc)) return step::again;
        if (!is_connection_error(o->rc)) throw_client_error(o->rc, kBackend, "getData " + w.path + " failed");
        // Connection loss: the loop waits for the reconnection.
    }
}

void queue_engine::hold(const attempt& a, const spi::loss_sink& lost) {
    node_dir_ = a.dir;
    orphan_pid_ = a.c.orphan_pid;
    zk_.register_held(id_, held_grant{a.c.node, a.s->gen, a.c.czxid, false, lost});
}

void queue_engine::unhold() { zk_.unregister_held(id_); }

void queue_engine::release() {
    auto held = zk_.unregister_held(id_);
    const auto& node = held.node;
    if (node.empty()) throw_error(errc::not_owner, kBackend, "lock '" + name_ + "' is not held by this handle");
    auto s = zk_.current();
    if (!s || s->gen != held.gen || !zk_.session_alive(*s))
        throw_error(errc::not_owner, kBackend, "the ZooKeeper session that held '" + name_ + "' expired");
    auto o = zk_delete(s->zh, node);
    if (auto pid = std::exchange(orphan_pid_, {}); !pid.empty() && o->rc == ZOK) {
        // The grant began with a lost create reply: sweep any late orphan.
        auto kids = zk_children(s->zh, node_dir_, zk_.config().max_children);
        for (const auto& k : kids->children)
            if (k.rfind(pid, 0) == 0) zk_.delete_node(*s, node_dir_ + "/" + k);
    }
    if (o->rc == ZOK) return;
    if (o->rc == ZNONODE) {
        if (held.lost) return;
        throw_error(errc::not_owner, kBackend, "the lock node of '" + name_ + "' was already deleted", o->rc,
                    zerror(o->rc));
    }
    if (is_session_gone(o->rc))
        throw_error(errc::not_owner, kBackend, "the ZooKeeper session that held '" + name_ + "' expired", o->rc,
                    zerror(o->rc));
    zk_.delete_node(*s, node);  // queued for the reconnection
    // A session silent for its loss bound (this process paused past it, say,
    // and released at once on resuming, before its connection noticed) is
    // presumed expired, as the keepalive presumes it: the server has deleted
    // the node, or will, and another client may hold the lock. That is a loss.
    if (auto why = zk_.presumed_expired(*s))
        throw_error(errc::not_owner, kBackend, "release of '" + name_ + "' failed (" + zerror(o->rc) + "): " + *why,
                    o->rc, zerror(o->rc));
    throw_error(errc::in_doubt, kBackend,
                "release of '" + name_ + "' did not complete (" + zerror(o->rc) +
                    "); the node will be deleted once reconnected, or with the session",
                o->rc, zerror(o->rc));
}

// ---- the handle every recipe builds on ------------------------------------------------

std::optional<spi::grant> recipe_handle::acquire(spi::deadline until, const spi::loss_sink& lost) {
    engine_.set_waited(false);
    auto g = take(until, lost);
    if (g) g->waited = engine_.waited();
    return g;
}

std::chrono::milliseconds recipe_handle::check_interval() const {
    return spi::renewal_period(engine_.zk().timeout(), ms(50));
}
std::unique_ptr<spi::wake_subscription> recipe_handle::watch_releases(spi::wake_sink wake) {
    return engine_.zk().releases().subscribe(watched(), std::move(wake));
}

std::chrono::milliseconds recipe_handle::validity() const {
    return session_manager::loss_after(engine_.zk().timeout());
}

}  // namespace distlock::backends::zookeeper
