// zk://h1:2181,h2:2181/base/path: Apache Curator's lock recipes over the
// session layer (zk_session.hpp), so that a C++ process and a Java process
// using Curator share one lock, read-write lock or semaphore.
//
// Layout: a lock "name" lives at <base>/<encoded name> (a CONTAINER node, as
// Curator makes it; persistent when the server has no containers).
//  - mutex (InterProcessMutex): each attempt creates an EPHEMERAL_SEQUENTIAL
//    child "_c_<uuid>-lock-<10 digit sequence>". The children sorted by their
//    sequence form the queue; the first holds the lock, every other one watches
//    (getData) only the node just before its own, so a release wakes one waiter.
//  - read-write lock (InterProcessReadWriteLock): the same, with children
//    "_c_<uuid>-__READ__<seq>" and "_c_<uuid>-__WRIT__<seq>" under the same path
//    (one sequence for both). A writer holds when first and watches the node
//    before it; a reader holds when no write node comes before it and watches
//    the nearest write node before it. A mutex node of the same name counts as
//    a writer for readers.
//  - semaphore (InterProcessSemaphoreV2): an attempt takes the mutex recipe on
//    <path>/locks, creates "<path>/leases/_c_<uuid>-lease-<seq>", lists the
//    leases with a child watch until they are no more than the permits, then
//    gives the internal mutex back. distlock keeps the semaphore's size in the
//    data of <path>/leases (which Curator leaves empty and never reads).
//  - election (LeaderLatch): each candidate creates an EPHEMERAL_SEQUENTIAL
//    "_c_<uuid>-latch-<seq>" (protected mode) whose data is its id; sorted by
//    the text after "latch-", the first leads and every other one watches
//    (getData) the node just before its own, as LeaderLatch.checkLeadership does.
// Every node distlock creates carries the holder label (lock_request::holder:
// the provider's, or an election's id) as its data. Curator's lock recipes
// never read their nodes' data (its own is the local IP address by default);
// LeaderLatch reads the leader's as its participant id.
// The fencing token is the held node's czxid (a global, strictly increasing
// transaction id): the lock node, or the lease node of a permit.
#include "zk_lock.hpp"

#include <algorithm>
#include <iterator>
#include <utility>

#include "zk_names.hpp"

namespace distlock::backends::zookeeper {
namespace {

std::string last_segment(const std::string& path) { return path.substr(path.rfind('/') + 1); }

enum class step { held, again, timeout };

// What create_node() made.
struct created {
    std::string node;  // full path; empty when session_lost
    std::uint64_t czxid = 0;
    op_ptr listing;          // the children of the directory, asked right behind the create
    spi::deadline listed{};  // when the create (and that listing) was sent
    std::string orphan_pid;  // "_c_<uuid>-" when a create lost its reply (else empty)
    bool session_lost = false;
};

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
    std::optional<spi::grant> acquire_queue(spi::deadline until, const spi::loss_sink& lost);
    std::optional<spi::grant> acquire_permit(spi::deadline until, const spi::loss_sink& lost);

    // An EPHEMERAL_SEQUENTIAL "_c_<uuid>-<lock_name><seq>" under `dir`, with
    // Curator's protected mode (after a connection loss, look for a child
    // carrying our uuid before creating again).
    created create_node(const std::shared_ptr<session>& s, const std::string& dir, std::string_view lock_name,
                        spi::deadline until, bool once);
    // Waits for the turn of `node` in the queue of `dir` (Curator's rules, see
    // turn_of). On step::held, `listed` is when the listing that showed it
    // first was sent, and the node is registered as held when `hold` is given.
    step wait_turn(const std::shared_ptr<session>& s, const std::string& dir, const std::string& node,
                   std::uint64_t czxid, bool reader, spi::deadline until, bool once, op_ptr listing,
                   spi::deadline& listed, const std::string& orphan_pid, const spi::loss_sink* hold);
    // The semaphore's lease, taken while holding its internal mutex.
    step take_lease(const std::shared_ptr<session>& s, const std::string& leases, spi::deadline until, bool once,
                    const spi::loss_sink& lost, std::uint64_t& czxid, spi::deadline& listed);
    // permit_limit: the size kept in the data of <path>/leases against ours.
    void check_permits(session& s, const std::string& leases, std::size_t others);
    // Gives the semaphore's internal mutex back (a guaranteed delete).
    void release_internal(session& s, const std::string& dir, const std::string& node, const std::string& orphan_pid);

    session_manager& zk_;
    std::string name_, dir_;
    spi::lock_kind kind_;
    std::uint32_t permits_;
    std::string holder_;  // the data of our nodes
    // Whether this acquisition found another client ahead of it (grant::waited).
    bool waited_ = false;
    // The directory of the held node: the lock path, or the semaphore's leases.
    std::string node_dir_;
    // "_c_<uuid>-" of the current grant when one of its creates lost its reply
    // (empty otherwise): nodes with this prefix other than ours are orphans.
    std::string orphan_pid_;
};

// The lock path of a name: <base>/<encoded name>.
std::string dir_of(const settings& s, std::string_view name) { return s.base + "/" + encode_segment(name); }

handle::handle(session_manager& zk, const spi::lock_request& r)
    : zk_(zk),
      name_(r.name),
      dir_(dir_of(zk.config(), r.name)),
      kind_(r.kind),
      permits_(r.permits),
      holder_(r.holder) {}

handle::~handle() { zk_.forget(*this); }

std::chrono::milliseconds handle::check_interval() const { return spi::renewal_period(zk_.timeout(), ms(50)); }
std::chrono::milliseconds handle::validity() const { return session_manager::loss_after(zk_.timeout()); }

std::optional<spi::grant> handle::acquire(spi::deadline until, const spi::loss_sink& lost) {
    waited_ = false;
    auto g = kind_ == spi::lock_kind::permit ? acquire_permit(until, lost) : acquire_queue(until, lost);
    if (g) g->waited = waited_;
    return g;
}

created handle::create_node(const std::shared_ptr<session>& s, const std::string& dir, std::string_view lock_name,
                            spi::deadline until, bool once) {
    created c;
    const auto uuid = spi::random_uuid();
    const auto prefix = node_prefix(uuid, lock_name);
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
        if (!zk_.wait_connected(*s, zk_.reconnect_limit(once ? clock::now() : until))) {
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

std::optional<spi::grant> handle::acquire_queue(spi::deadline until, const spi::loss_sink& lost) {
    const bool once = until <= clock::now();
    const bool reader = kind_ == spi::lock_kind::read;
    const std::string_view lock_name = reader                            ? kReadName
                                       : kind_ == spi::lock_kind::write  ? kWriteName
                                       : kind_ == spi::lock_kind::leader ? kLatchName
                                                                         : kMutexName;
    for (int round = 0;; ++round) {
        if (round > 0 && !once && clock::now() >= until) return std::nullopt;
        if (round > 20) throw_error(errc::unavailable, kBackend, "lock node of '" + name_ + "' kept vanishing");
        auto s = zk_.session_for(until);
        orphan_pid_.clear();
        // 1. Create our node.
        auto c = create_node(s, dir_, lock_name, until, once);
        orphan_pid_ = c.orphan_pid;
        if (c.session_lost) continue;
        node_dir_ = dir_;

        // 2. Wait for our turn; on any failure our node goes (Curator deletes it).
        step result;
        try {
            result = wait_turn(s, dir_, c.node, c.czxid, reader, until, once, std::move(c.listing), c.listed,
                               orphan_pid_, &lost);
        } catch (...) {
            zk_.unregister_held(*this);
            zk_.delete_node(*s, c.node);
            throw;
        }
        // Held for the session's life; the server confirmed the session (and our
        // node's turn) in reply to the listing sent at `listed`.
        if (result == step::held) return spi::grant{c.czxid, c.listed};
        if (result == step::timeout) {
            zk_.delete_node(*s, c.node);
            return std::nullopt;
        }
        // step::again: our node vanished (session expired, or deleted): start over.
        if (zk_.session_alive(*s)) zk_.delete_node(*s, c.node);
    }
}

step handle::wait_turn(const std::shared_ptr<session>& s, const std::string& dir, const std::string& node,
                       std::uint64_t czxid, bool reader, spi::deadline until, bool once, op_ptr listing,
                       spi::deadline& listed, const std::string& orphan_pid, const spi::loss_sink* hold) {
    const std::string mine = last_segment(node);  // "_c_<uuid>-<lock name><10 digits>"
    for (;;) {
        if (!listing) listed = clock::now();
        auto kids = listing ? wait_op(std::exchange(listing, {})) : zk_children(s->zh, dir, zk_.config().max_children);
        if (is_connection_error(kids->rc)) {
            if (!zk_.wait_connected(*s, zk_.reconnect_limit(once ? clock::now() : until))) {
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
        if (kind_ == spi::lock_kind::leader) sort_latch_children(children);
        else sort_children(children);
        if (std::find(children.begin(), children.end(), mine) == children.end()) return step::again;  // gone
        // After a create whose reply was lost, a second node carrying this
        // attempt's uuid may show up (the server ran the create after our
        // protected-mode lookup, or a follower's read was behind): it would queue
        // us behind ourselves. Delete it.
        if (!orphan_pid.empty()) {
            bool removed = false;
            for (const auto& k : children)
                if (k != mine && k.rfind(orphan_pid, 0) == 0) {
                    zk_.delete_node(*s, dir + "/" + k);
                    removed = true;
                }
            if (removed) continue;
        }
        auto t = turn_of(children, mine, reader);
        if (t.what == turn::state::missing) return step::again;
        if (t.what == turn::state::held) {
            // Held. (The keepalive's exists, every session timeout / 3, also
            // sets a watch on our node, so that a delete by someone else is
            // reported at once from then on; a lock held only briefly costs no
            // request beyond create, listing and delete.)
            if (hold) zk_.register_held(*this, node, s->gen, czxid, *hold);
            return step::held;
        }
        // Another holder is ahead of us (the semaphore's internal mutex, held
        // only while a client counts the leases, does not count).
        if (hold) waited_ = true;
        if (once || clock::now() >= until) return step::timeout;
        session_manager::waiter w{dir + "/" + t.watch};
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
        if (!is_connection_error(o->rc)) throw_client_error(o->rc, kBackend, "getData " + w.path + " failed");
        // Connection loss: the loop waits for the reconnection.
    }
}

// ---- semaphore ---------------------------------------------------------------------

std::optional<spi::grant> handle::acquire_permit(spi::deadline until, const spi::loss_sink& lost) {
    const bool once = until <= clock::now();
    const std::string locks = dir_ + "/" + std::string(kSemaphoreLocks);
    const std::string leases = dir_ + "/" + std::string(kSemaphoreLeases);
    for (int round = 0;; ++round) {
        if (round > 0 && !once && clock::now() >= until) return std::nullopt;
        if (round > 20) throw_error(errc::unavailable, kBackend, "semaphore nodes of '" + name_ + "' kept vanishing");
        auto s = zk_.session_for(until);
        orphan_pid_.clear();
        // 1. Curator's internal mutex on <path>/locks: one client at a time
        //    counts the leases (and waits while they are too many).
        auto lk = create_node(s, locks, kMutexName, until, once);
        if (lk.session_lost) continue;
        step r;
        try {
            r = wait_turn(s, locks, lk.node, lk.czxid, false, until, once, std::move(lk.listing), lk.listed,
                          lk.orphan_pid, nullptr);
        } catch (...) {
            release_internal(*s, locks, lk.node, lk.orphan_pid);
            throw;
        }
        if (r != step::held) {
            release_internal(*s, locks, lk.node, lk.orphan_pid);
            if (r == step::timeout) return std::nullopt;
            continue;
        }
        // 2.-3. Our lease node, counted; 4. the internal mutex goes back whatever happened.
        std::uint64_t czxid = 0;
        spi::deadline listed{};
        try {
            r = take_lease(s, leases, until, once, lost, czxid, listed);
        } catch (...) {
            release_internal(*s, locks, lk.node, lk.orphan_pid);
            throw;
        }
        release_internal(*s, locks, lk.node, lk.orphan_pid);
        if (r == step::held) return spi::grant{czxid, listed};
        if (r == step::timeout) return std::nullopt;
    }
}

step handle::take_lease(const std::shared_ptr<session>& s, const std::string& leases, spi::deadline until, bool once,
                        const spi::loss_sink& lost, std::uint64_t& czxid, spi::deadline& listed) {
    auto c = create_node(s, leases, kLeaseName, until, once);
    if (c.session_lost) return step::again;
    orphan_pid_ = c.orphan_pid;
    node_dir_ = leases;
    czxid = c.czxid;
    const std::string mine = last_segment(c.node);
    auto drop = [&] {
        if (zk_.session_alive(*s)) zk_.delete_node(*s, c.node);
    };
    struct unwait {
        session_manager& zk;
        session_manager::waiter& w;
        ~unwait() { zk.remove_waiter(w); }
    };
    bool checked = false;
    try {
        for (;;) {
            // The waiter is registered before the watch is set: no event is missed.
            session_manager::waiter w{leases};
            zk_.add_waiter(w);
            unwait guard{zk_, w};
            listed = clock::now();
            auto kids = zk_children(s->zh, leases, zk_.config().max_children, true);
            if (is_connection_error(kids->rc)) {
                if (!zk_.wait_connected(*s, zk_.reconnect_limit(once ? clock::now() : until))) {
                    if (!zk_.session_alive(*s)) return step::again;
                    throw_error(errc::unavailable, kBackend,
                                "lost the connection to ZooKeeper while waiting for a permit of '" + name_ + "'");
                }
                continue;
            }
            if (kids->rc == ZNONODE || is_session_gone(kids->rc)) {
                drop();
                return step::again;
            }
            if (kids->rc != ZOK) throw_op_error(*kids, "getChildren " + leases + " failed");
            zk_.touch(*s);
            const auto& children = kids->children;
            if (std::find(children.begin(), children.end(), mine) == children.end()) {
                drop();
                return step::again;
            }
            if (!orphan_pid_.empty()) {  // a late duplicate of our own lease (see wait_turn)
                bool removed = false;
                for (const auto& k : children)
                    if (k != mine && k.rfind(orphan_pid_, 0) == 0) {
                        zk_.delete_node(*s, leases + "/" + k);
                        removed = true;
                    }
                if (removed) continue;
            }
            if (!checked) {
                check_permits(*s, leases, children.size() - 1);
                checked = true;
            }
            // Curator counts every lease, ours included, in no order.
            if (children.size() <= permits_) {
                zk_.register_held(*this, c.node, s->gen, czxid, lost);
                return step::held;
            }
            waited_ = true;  // every permit is taken
            if (once || clock::now() >= until) {
                zk_.delete_node(*s, c.node);
                return step::timeout;
            }
            zk_.wait_event(w, *s, until);
        }
    } catch (...) {
        zk_.unregister_held(*this);
        drop();
        throw;
    }
}

void handle::check_permits(session& s, const std::string& leases, std::size_t others) {
    auto d = zk_get_data(s.zh, leases);
    if (d->rc != ZOK) throw_client_error(d->rc, kBackend, "getData " + leases + " failed");
    const auto stored = permits_in(d->value);
    // The size stands while the semaphore has holders; the first lease of an
    // empty semaphore (or one that only Curator clients hold) sets it.
    if (others > 0 && stored && *stored != permits_)
        throw_error(errc::invalid_argument, kBackend,
                    "semaphore '" + name_ + "' is held with " + std::to_string(*stored) +
                        " permits; this one asks for " + std::to_string(permits_));
    if (stored == permits_) return;
    auto o = zk_set(s.zh, leases, permits_data(permits_));
    if (o->rc != ZOK) throw_client_error(o->rc, kBackend, "setData " + leases + " failed");
}

void handle::release_internal(session& s, const std::string& dir, const std::string& node,
                              const std::string& orphan_pid) {
    if (!zk_.session_alive(s)) return;  // the server deleted it with the session
    zk_.delete_node(s, node);
    if (orphan_pid.empty()) return;
    auto kids = zk_children(s.zh, dir, zk_.config().max_children);
    if (kids->rc != ZOK) {
        if (is_connection_error(kids->rc)) zk_.delete_protected_later(s, dir, orphan_pid);
        return;
    }
    for (const auto& k : kids->children)
        if (k.rfind(orphan_pid, 0) == 0) zk_.delete_node(s, dir + "/" + k);
}

// ---- release -------------------------------------------------------------------------

void handle::release() {
    auto [node, gen, was_lost] = zk_.unregister_held(*this);
    if (node.empty()) throw_error(errc::not_owner, kBackend, "lock '" + name_ + "' is not held by this handle");
    auto s = zk_.current();
    if (!s || s->gen != gen || !zk_.session_alive(*s))
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
        // Every primitive of the name: the holders of its mutex or read-write
        // lock, and every lease of its semaphore.
        const auto dir = dir_of(zk.config(), name);
        auto kids = zk_children(zh, dir, zk.config().max_children);
        if (kids->rc == ZNONODE) return;
        if (kids->rc != ZOK) throw_op_error(*kids, "break_lock: getChildren " + dir + " failed");
        sort_children(kids->children);
        std::vector<std::string> doomed;
        for (const auto& k : holders_of(kids->children)) doomed.push_back(dir + "/" + k);
        // The leader of its election (the first latch node).
        auto latches = kids->children;
        sort_latch_children(latches);
        if (!latches.empty() && is_latch_node(latches.front())) doomed.push_back(dir + "/" + latches.front());
        const auto leases = dir + "/" + std::string(kSemaphoreLeases);
        auto lease_kids = zk_children(zh, leases, zk.config().max_children);
        if (lease_kids->rc == kListingTooLarge) throw_op_error(*lease_kids, "break_lock: getChildren " + leases);
        if (lease_kids->rc == ZOK)
            for (const auto& k : lease_kids->children) doomed.push_back(leases + "/" + k);
        for (const auto& path : doomed) {
            auto o = zk_delete(zh, path);
            if (o->rc != ZOK && o->rc != ZNONODE) throw_client_error(o->rc, kBackend, "break_lock: delete failed");
        }
    });
}

// ---- inspect ---------------------------------------------------------------------------

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
