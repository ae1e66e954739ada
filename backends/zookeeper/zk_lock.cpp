// zk://h1:2181,h2:2181/base/path: Apache Curator's InterProcessMutex recipe
// over the session layer (zk_session.hpp), so that a C++ process and a Java
// process using Curator share one lock.
//
// Layout: the lock "name" lives at <base>/<encoded name> (a CONTAINER node, as
// Curator makes it; persistent when the server has no containers). Each attempt
// creates an EPHEMERAL_SEQUENTIAL child "_c_<uuid>-lock-<10 digit sequence>".
// The children sorted by the text after the last "lock-" form the queue; the
// first holds the lock, every other one watches (getData) only the node just
// before its own, so a release wakes one waiter. The fencing token is the lock
// node's czxid (a global, strictly increasing transaction id).
#include "zk_lock.hpp"

#include <algorithm>
#include <iterator>
#include <utility>

#include "zk_names.hpp"

namespace distlock::backends::zookeeper {
namespace {

std::string last_segment(const std::string& path) { return path.substr(path.rfind('/') + 1); }

class handle final : public spi::lock_handle, public held_node {
public:
    handle(session_manager& zk, const spi::lock_request& r);
    ~handle() override;

    std::optional<spi::grant> acquire(spi::deadline until, const spi::loss_sink& lost) override;
    void release() override;
    // The session's state and, once per period, whether our node still exists
    // (a watch on it tells sooner): a third of the session timeout.
    std::chrono::milliseconds check_interval() const override;
    // The session is this lock's lease: a process paused past it has lost the
    // lock without hearing so yet. A grant or a keepalive confirms it for the
    // time after which a disconnected session is presumed expired.
    std::chrono::milliseconds validity() const override;

private:
    enum class step { held, again, timeout };
    // `listing` (sent at `listed`) is the first children listing; on step::held,
    // `listed` is when the listing that showed our node first was sent.
    step wait_turn(const std::shared_ptr<session>& s, const std::string& node, std::uint64_t czxid,
                   spi::deadline until, bool once, op_ptr listing, spi::deadline& listed, const spi::loss_sink& lost);

    session_manager& zk_;
    std::string name_, dir_;
    // "_c_<uuid>-" of the current grant when one of its creates lost its reply
    // (empty otherwise): nodes with this prefix other than ours are orphans.
    std::string orphan_pid_;
};

// The lock path of a name: <base>/<encoded name>.
std::string dir_of(const settings& s, std::string_view name) { return s.base + "/" + encode_segment(name); }

handle::handle(session_manager& zk, const spi::lock_request& r)
    : zk_(zk), name_(r.name), dir_(dir_of(zk.config(), r.name)) {}

handle::~handle() { zk_.forget(*this); }

std::chrono::milliseconds handle::check_interval() const { return std::max(ms(50), zk_.timeout() / 3); }
std::chrono::milliseconds handle::validity() const { return session_manager::loss_after(zk_.timeout()); }

std::optional<spi::grant> handle::acquire(spi::deadline until, const spi::loss_sink& lost) {
    const bool once = until <= clock::now();
    for (int round = 0;; ++round) {
        if (round > 0 && !once && clock::now() >= until) return std::nullopt;
        if (round > 20) throw_error(errc::unavailable, kBackend, "lock node of '" + name_ + "' kept vanishing");
        auto s = zk_.session_for(until);
        orphan_pid_.clear();
        const auto uuid = spi::random_uuid();
        const auto prefix = node_prefix(uuid);
        const auto pid = protected_id(uuid);

        // 1. Create our node (Curator's protected mode: after a connection loss,
        //    look for a child carrying our uuid before creating again).
        std::string node;
        std::uint64_t czxid = 0;
        op_ptr first_listing;
        spi::deadline listed{};  // when the listing that decides was sent
        bool session_lost = false;
        for (int tries = 0; node.empty() && !session_lost; ++tries) {
            if (tries > 10) throw_error(errc::unavailable, kBackend, "cannot create the lock node for '" + name_ + "'");
            // The listing rides in the same round trip: the server answers a
            // session's requests in order, so it already shows our new node.
            listed = clock::now();
            auto o = zk_create_async(s->zh, dir_ + "/" + prefix, zk_.config().node_data, ZOO_EPHEMERAL_SEQUENTIAL);
            auto listing = zk_children(s->zh, dir_);
            wait_op(o);
            if (o->rc == ZOK) {
                node = o->value;
                czxid = static_cast<std::uint64_t>(o->stat.czxid);
                stats().lock_nodes_created++;
                first_listing = std::move(listing);
                break;
            }
            if (o->rc == ZNONODE) {
                zk_.make_parents(*s, dir_);
                continue;
            }
            if (is_session_gone(o->rc)) {
                session_lost = true;
                break;
            }
            if (!is_connection_error(o->rc)) throw_client_error(o->rc, "cannot create a lock node under " + dir_);
            // Outcome unknown: the node may exist. Find it once reconnected.
            orphan_pid_ = pid;
            if (!zk_.wait_connected(*s, zk_.reconnect_limit(once ? clock::now() : until))) {
                if (zk_.session_alive(*s)) {
                    zk_.delete_protected_later(*s, dir_, pid);
                    throw_error(errc::unavailable, kBackend,
                                "lost the connection to ZooKeeper while creating the lock node of '" + name_ + "'");
                }
                session_lost = true;
                break;
            }
            auto kids = zk_children(s->zh, dir_);
            if (kids->rc != ZOK && kids->rc != ZNONODE) continue;  // try again (bounded by `tries`)
            for (const auto& k : kids->children) {
                if (k.rfind(pid, 0) != 0) continue;
                auto st = zk_exists(s->zh, dir_ + "/" + k, false);
                if (st->rc == ZOK && st->stat.ephemeralOwner == zk_.session_id(*s)) {
                    node = dir_ + "/" + k;
                    czxid = static_cast<std::uint64_t>(st->stat.czxid);
                    stats().protected_recoveries++;
                } else if (st->rc == ZOK) {
                    zk_.delete_node(*s, dir_ + "/" + k);  // made by a session that is gone
                }
                break;
            }
        }
        if (session_lost) continue;

        // 2. Wait for our turn; on any failure our node goes (Curator deletes it).
        step result;
        try {
            result = wait_turn(s, node, czxid, until, once, std::move(first_listing), listed, lost);
        } catch (...) {
            zk_.unregister_held(*this);
            zk_.delete_node(*s, node);
            throw;
        }
        // Held for the session's life; the server confirmed the session (and our
        // node first) in reply to the listing sent at `listed`.
        if (result == step::held) return spi::grant{czxid, listed};
        if (result == step::timeout) {
            zk_.delete_node(*s, node);
            return std::nullopt;
        }
        // step::again: our node vanished (session expired, or deleted): start over.
        if (zk_.session_alive(*s)) zk_.delete_node(*s, node);
    }
}

handle::step handle::wait_turn(const std::shared_ptr<session>& s, const std::string& node, std::uint64_t czxid,
                               spi::deadline until, bool once, op_ptr listing, spi::deadline& listed,
                               const spi::loss_sink& lost) {
    const std::string mine = last_segment(node);  // "_c_<uuid>-lock-<10 digits>"
    for (;;) {
        if (!listing) listed = clock::now();
        auto kids = listing ? wait_op(std::exchange(listing, {})) : zk_children(s->zh, dir_);
        if (is_connection_error(kids->rc)) {
            if (!zk_.wait_connected(*s, zk_.reconnect_limit(once ? clock::now() : until))) {
                if (!zk_.session_alive(*s)) return step::again;
                throw_error(errc::unavailable, kBackend,
                            "lost the connection to ZooKeeper while waiting for '" + name_ + "'");
            }
            continue;
        }
        if (kids->rc == ZNONODE || is_session_gone(kids->rc)) return step::again;
        if (kids->rc != ZOK) throw_client_error(kids->rc, "getChildren " + dir_ + " failed");
        zk_.touch(*s);
        auto& children = kids->children;
        sort_children(children);
        auto it = std::find(children.begin(), children.end(), mine);
        if (it == children.end()) return step::again;  // our node is gone
        // After a create whose reply was lost, a second node carrying this
        // attempt's uuid may show up (the server ran the create after our
        // protected-mode lookup, or a follower's read was behind): it would queue
        // us behind ourselves. Delete it.
        if (!orphan_pid_.empty()) {
            bool removed = false;
            for (const auto& k : children)
                if (k != mine && k.rfind(orphan_pid_, 0) == 0) {
                    zk_.delete_node(*s, dir_ + "/" + k);
                    removed = true;
                }
            if (removed) continue;
        }
        if (it == children.begin()) {
            // Ours is first: held. (The keepalive's exists, every session
            // timeout / 3, also sets a watch on our node, so that a delete by
            // someone else is reported at once from then on; a lock held only
            // briefly costs no request beyond create, listing and delete.)
            zk_.register_held(*this, node, s->gen, czxid, lost);
            return step::held;
        }
        if (once || clock::now() >= until) return step::timeout;
        session_manager::waiter w{dir_ + "/" + *std::prev(it)};
        zk_.add_waiter(w);
        stats().predecessor_watches++;
        auto o = zk_get(s->zh, w.path, true);
        if (o->rc == ZOK) zk_.wait_event(w, *s, until);
        zk_.remove_waiter(w);
        if (o->rc == ZNONODE || o->rc == ZOK) {
            if (o->rc == ZOK && !w.fired && clock::now() >= until) return step::timeout;
            continue;
        }
        if (is_session_gone(o->rc)) return step::again;
        if (!is_connection_error(o->rc)) throw_client_error(o->rc, "getData " + w.path + " failed");
        // Connection loss: the loop waits for the reconnection.
    }
}

void handle::release() {
    auto [node, gen, was_lost] = zk_.unregister_held(*this);
    if (node.empty()) throw_error(errc::not_owner, kBackend, "lock '" + name_ + "' is not held by this handle");
    auto s = zk_.current();
    if (!s || s->gen != gen || !zk_.session_alive(*s))
        throw_error(errc::not_owner, kBackend, "the ZooKeeper session that held '" + name_ + "' expired");
    auto o = zk_delete(s->zh, node);
    if (auto pid = std::exchange(orphan_pid_, {}); !pid.empty() && o->rc == ZOK) {
        // The grant began with a lost create reply: sweep any late orphan.
        auto kids = zk_children(s->zh, dir_);
        for (const auto& k : kids->children)
            if (k.rfind(pid, 0) == 0) zk_.delete_node(*s, dir_ + "/" + k);
    }
    if (o->rc == ZOK) return;
    if (o->rc == ZNONODE) {
        if (was_lost) return;
        throw_error(errc::not_owner, kBackend, "the lock node of '" + name_ + "' was already deleted", o->rc,
                    zerror(o->rc));
    }
    if (is_session_gone(o->rc))
        throw_error(errc::not_owner, kBackend, "the ZooKeeper session that held '" + name_ + "' expired", o->rc,
                    zerror(o->rc));
    zk_.delete_node(*s, node);  // queued for the reconnection
    throw_error(errc::in_doubt, kBackend,
                "release of '" + name_ + "' did not complete (" + zerror(o->rc) +
                    "); the node will be deleted once reconnected, or with the session",
                o->rc, zerror(o->rc));
}

}  // namespace

std::unique_ptr<spi::lock_handle> make_lock_handle(session_manager& zk, const spi::lock_request& r) {
    return std::make_unique<handle>(zk, r);
}

void keepalive_locks(session_manager& zk, std::span<spi::lock_handle* const> handles,
                     std::span<spi::keepalive_result> results) {
    // Ask the server about every held node at once (pipelined), then collect.
    struct pending {
        std::size_t index;
        op_ptr o;
        std::uint64_t czxid;
        std::shared_ptr<session> s;
    };
    std::vector<pending> asked;
    for (std::size_t i = 0; i < handles.size(); ++i) {
        auto& h = static_cast<handle&>(*handles[i]);
        std::shared_ptr<session> s;
        std::string node;
        std::uint64_t czxid = 0;
        if (auto r = zk.local_check(h, s, node, czxid)) {
            if (r->state == spi::keepalive_result::status::lost) zk.mark_lost(h);
            results[i] = *r;
            continue;
        }
        auto o = zk_exists_watch_async(s->zh, node);
        asked.push_back({i, std::move(o), czxid, std::move(s)});
    }
    for (auto& p : asked) {
        wait_op(p.o);
        auto& h = static_cast<handle&>(*handles[p.index]);
        int rc = p.o->rc;
        if (rc == ZOK && static_cast<std::uint64_t>(p.o->stat.czxid) == p.czxid) {
            zk.touch(*p.s);
            results[p.index] = spi::keepalive_result::ok();
        } else if (rc == ZOK || rc == ZNONODE) {
            zk.mark_lost(h);
            results[p.index] = spi::keepalive_result::lost("the lock node is gone from the server");
        } else if (is_session_gone(rc)) {
            zk.mark_lost(h);
            results[p.index] = spi::keepalive_result::lost(std::string("the ZooKeeper session is gone: ") + zerror(rc));
        } else {
            results[p.index] = spi::keepalive_result::failed(std::string("exists failed: ") + zerror(rc));
        }
    }
}

void break_lock(session_manager& zk, std::string_view name) {
    with_separate_session(zk.config(), zk.timeout(), "break_lock", [&](zhandle_t* zh) {
        const auto dir = dir_of(zk.config(), name);
        auto kids = zk_children(zh, dir);
        if (kids->rc == ZNONODE) return;
        if (kids->rc != ZOK) throw_client_error(kids->rc, "break_lock: getChildren " + dir + " failed");
        sort_children(kids->children);
        if (kids->children.empty()) return;
        auto o = zk_delete(zh, dir + "/" + kids->children.front());
        if (o->rc != ZOK && o->rc != ZNONODE) throw_client_error(o->rc, "break_lock: delete failed");
    });
}

}  // namespace distlock::backends::zookeeper
