// zk:// internals: the queue engine of Curator's lock recipes (its
// LockInternals), the orderings that drive it (its LockInternalsDrivers), and
// the handle every recipe builds on. Never included outside backends/zookeeper/.
//
//  - queue_engine (zk_queue.cpp): one handle's session, lock path, node and
//    listing: creates an EPHEMERAL_SEQUENTIAL node with protected mode, waits
//    for its turn, registers the grant with the session, releases it
//  - queue_driver (zk_queue_drivers.cpp): the node name and order of the
//    mutex, the read-write lock and the election (LeaderLatch)
//  - recipe_handle: a lock handle over one engine; the recipes are
//    zk_queue_lock.cpp (mutex, read-write lock, election: an asynchronous
//    wait keeps its node between its one-attempt calls) and
//    zk_semaphore.cpp (semaphore)
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "zk_session.hpp"

namespace distlock::backends::zookeeper {

// How a wait for a turn ended.
enum class step { held, again, timeout };

// The ordering of one queue recipe: the name of its nodes ("_c_<uuid>-<name><seq>"),
// how it sorts the children of its lock path, and whether its node reads
// (turn_of in zk_names.hpp).
struct queue_driver {
    std::string_view node_name;
    void (*sort)(std::vector<std::string>& children);
    bool reader;
};
// InterProcessMutex (also the semaphore's internal mutex).
extern const queue_driver kMutexDriver;
// InterProcessReadWriteLock: its read and write nodes.
extern const queue_driver kReadDriver;
extern const queue_driver kWriteDriver;
// LeaderLatch.
extern const queue_driver kLatchDriver;

// What queue_engine::create_node() made.
struct created {
    std::string node;  // full path; empty when session_lost
    std::uint64_t czxid = 0;
    op_ptr listing;          // the children of the directory, asked right behind the create
    spi::deadline listed{};  // when the create (and that listing) was sent
    std::string orphan_pid;  // "_c_<uuid>-" when a create lost its reply (else empty)
    bool session_lost = false;
};

// One try for a place in the queue of `dir` on session `s`, until `until`
// (`once`: a single attempt, no waiting).
struct attempt {
    std::shared_ptr<session> s;
    std::string dir;
    spi::deadline until;
    bool once = false;
    created c;  // our node, once created
};

// Curator's LockInternals for one handle: the session manager, the lock path of
// its name, and the node of its current grant.
class queue_engine {
public:
    queue_engine(session_manager& zk, const spi::lock_request& r);
    ~queue_engine();  // unregisters any grant
    queue_engine(const queue_engine&) = delete;
    queue_engine& operator=(const queue_engine&) = delete;

    session_manager& zk() const noexcept { return zk_; }
    const std::string& name() const noexcept { return name_; }
    const std::string& dir() const noexcept { return dir_; }  // <base>/<encoded name>
    grant_id id() const noexcept { return id_; }

    // An EPHEMERAL_SEQUENTIAL "_c_<uuid>-<node_name><seq>" under a.dir, with
    // Curator's protected mode (after a connection loss, look for a child
    // carrying our uuid before creating again).
    created create_node(const attempt& a, std::string_view node_name);
    // Waits for the turn of a.c.node in the queue of a.dir, ordered by `d`
    // (Curator's rules, see turn_of). On step::held, a.c.listed is when the
    // listing that showed it first was sent, and the grant is registered as held
    // (reporting its loss to `lost`) when `lost` is given; a wait then counts
    // for grant::waited.
    step wait_turn(attempt& a, const queue_driver& d, const spi::loss_sink* lost);

    // Waits for the session of `a` to be connected again, as long as `a` may
    // wait (true), or false (expired, or too long).
    bool reconnected(const attempt& a);
    // Deletes the nodes of a.dir carrying a.c.orphan_pid other than ours (a late
    // duplicate of our own create: the server ran the create after our
    // protected-mode lookup, or a follower's read was behind); true when there
    // was one.
    bool remove_duplicates(const attempt& a, const std::vector<std::string>& children);

    // The grant of this handle is the node a.c.node (a semaphore's lease: a.dir
    // is its leases). Registers it with the session, to report its loss.
    void hold(const attempt& a, const spi::loss_sink& lost);
    // Forgets the grant (after a failed acquisition).
    void unhold();

    // Whether this acquisition found another client ahead of it (grant::waited).
    bool waited() const noexcept { return waited_; }
    void set_waited(bool w) noexcept { waited_ = w; }

    // Deletes the held node (release()'s contract: not_owner, in_doubt).
    void release();

private:
    session_manager& zk_;
    std::string name_, dir_;
    std::string holder_;  // the data of our nodes
    grant_id id_;
    bool waited_ = false;
    // The directory of the held node: the lock path, or the semaphore's leases.
    std::string node_dir_;
    // "_c_<uuid>-" of the current grant when one of its creates lost its reply
    // (empty otherwise): nodes with this prefix other than ours are orphans.
    std::string orphan_pid_;
};

// Every lock handle of this backend: one engine, valid as long as the session.
class recipe_handle : public spi::lock_handle {
public:
    recipe_handle(session_manager& zk, const spi::lock_request& r) : engine_(zk, r) {}

    // Runs the recipe's take() and says whether it waited.
    std::optional<spi::grant> acquire(spi::deadline until, const spi::loss_sink& lost) final;
    void release() final { engine_.release(); }
    // The session's state and, once per period, whether our node still exists
    // (a watch on it tells sooner): a third of the session timeout.
    std::chrono::milliseconds check_interval() const final;
    // The session is this lock's lease: a process paused past it has lost the
    // lock without hearing so yet. A grant or a keepalive confirms it for the
    // time after which a disconnected session is presumed expired.
    std::chrono::milliseconds validity() const final;
    // Asynchronous waits: the session's shared watch of the directories
    // watched() names (zk_release_watch.hpp); no thread or session of its own.
    // (The queue locks override it to keep their node for the whole wait.)
    std::unique_ptr<spi::wake_subscription> watch_releases(spi::wake_sink wake) override;

    // The key of this handle's grant with the session (keepalive_locks).
    grant_id grant() const noexcept { return engine_.id(); }

protected:
    virtual std::optional<spi::grant> take(spi::deadline until, const spi::loss_sink& lost) = 0;
    // Where a release of this lock shows, for watch_releases().
    virtual std::vector<release_watches::spec> watched() const = 0;
    queue_engine engine_;
};

// The handles of the recipes: a queue of `d` (mutex, read-write lock,
// election), and the semaphore.
std::unique_ptr<spi::lock_handle> make_queue_lock(session_manager& zk, const spi::lock_request& r,
                                                  const queue_driver& d);
std::unique_ptr<spi::lock_handle> make_semaphore(session_manager& zk, const spi::lock_request& r);

// The lock path of a name: <base>/<encoded name>.
std::string dir_of(const settings& s, std::string_view name);
// The last segment of a node's path: "_c_<uuid>-<node name><10 digits>".
std::string last_segment(const std::string& path);

}  // namespace distlock::backends::zookeeper
