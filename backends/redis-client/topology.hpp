// The Redis client layer (redis_client.hpp): where the commands of a key go.
//   single    one server (redis://)
//   sentinel  the master a majority of the listed sentinels names (redis-sentinel://),
//             all asked at once: asked again when a master fails or turns out to
//             be a replica (READONLY), with ROLE checked on the node named, as
//             Redis's sentinel client guidelines say
//   cluster   the master that serves the key's hash slot (redis-cluster://): the
//             slot map from CLUSTER SLOTS, MOVED and ASK followed to the
//             cluster's own nodes only, the map read again when a node fails or
//             a slot moves
// The data nodes' credentials go only to a node the deployment vouches for: a
// sentinel majority's master, a node the cluster lists (CLUSTER SLOTS, CLUSTER
// NODES) and, with master_hosts=, one the operator's list allows (checked by
// connection::open). A node one sentinel names alone, or a redirect elsewhere,
// is refused before anything is sent there.
// topology::run() is how every command of redis:// goes out; batches of scripts
// (renewals) go through run_items(), one pipeline per node.
#pragma once

#include <array>
#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "redis_client.hpp"

namespace distlock::backends::redis_client {

// Redis Cluster's hash slot of a key: CRC16 (XMODEM) of its hash tag (the text
// between the first '{' and the next '}', when not empty) or of the whole key,
// modulo 16384.
int key_slot(std::string_view key) noexcept;

class topology {
public:
    // `failover_wait`: how long a command keeps looking for the server of its key
    // (a failover, a slot moving) before it fails as unavailable.
    // `pool_size`: idle connections kept per node.
    topology(endpoint base, std::size_t pool_size, std::chrono::milliseconds failover_wait)
        : base_(std::move(base)), pool_size_(pool_size), failover_wait_(failover_wait) {}
    virtual ~topology() = default;
    topology(const topology&) = delete;
    topology& operator=(const topology&) = delete;

    // Credentials, database and timeouts of the data nodes.
    const endpoint& base() const noexcept { return base_; }
    // The server that serves `key` now ("" = any data node); it may ask the
    // sentinels or the cluster first. Throws unavailable_error (none answers),
    // access_denied_error or invalid_argument_error (an unknown master name).
    virtual pool& pool_for(std::string_view key) = 0;
    // The pool of one node (ASK redirections, the cluster's slot map).
    pool& pool_at(const std::string& host, std::uint16_t port);
    // Every data node known now (masters): for PING and break_lock.
    virtual std::vector<pool*> masters() = 0;
    // The node at `where` answered, but may no longer be the one to ask: its
    // writes reached too few replicas (min_replicas). A master cut off from its
    // replicas and sentinels still answers while they promote another; the
    // next pool_for() looks again (the sentinels: at most every 100 ms). Never throws.
    void suspect(const endpoint& where) noexcept;
    // Where the pub/sub connection for `channel` goes now; `after_failure`: the
    // last connection there failed (look again).
    virtual endpoint endpoint_for(std::string_view channel, bool after_failure) = 0;
    // Groups keys by the server that serves them: item indexes per node, and per
    // hash slot within a node (a script's keys must share one slot in a cluster).
    struct node_items {
        pool* node;
        std::vector<std::vector<std::size_t>> slots;
    };
    virtual std::vector<node_items> by_node(const std::vector<std::string_view>& keys);

    // Runs f(connection&) on the server of `key`. Follows MOVED and ASK; when the
    // server fails before the command went out, or answers that the topology is
    // changing (READONLY, TRYAGAIN, CLUSTERDOWN...), finds the server again and
    // tries again until `failover_wait` (and `cap`) passes. A failure after the
    // command may have reached the server is thrown (connection_failure), as
    // by pool::run; a pooled connection found stale is replaced once.
    template <class F>
    auto run(std::string_view key, F&& f, deadline cap = deadline::max()) {
        const deadline until = std::min(cap, clock::now() + base_.command_timeout + failover_wait_);
        std::optional<std::pair<std::string, std::uint16_t>> asking;
        bool stale_retried = false;
        int redirections = 0;  // MOVED and ASK followed (a loop of them is a broken cluster)
        for (int hop = 0;; ++hop) {
            pool* p = nullptr;
            std::optional<pool::borrowed> c;
            try {
                p = asking ? &pool_at(asking->first, asking->second) : &pool_for(key);
                c.emplace(p->get());
            } catch (const error& e) {  // no server to connect to
                if (!follows() || e.code_value() != errc::unavailable || clock::now() >= until) throw;
                if (p != nullptr) failed(*p);
                pause(hop, until);
                asking.reset();
                continue;
            }
            const bool reused = (*c)->reused();
            try {
                struct asking_scope {  // ASKING covers the one command f sends
                    connection* c = nullptr;
                    ~asking_scope() {
                        if (c != nullptr) c->set_asking(false);
                    }
                } scope;
                if (asking) {
                    asking.reset();
                    auto ok = (*c)->command({"ASKING"});
                    if (is_error(ok.get())) throw_client_error(ok.get(), base_.backend_name, "ASKING");
                    (*c)->set_asking(true);
                    scope.c = &**c;
                }
                auto result = f(**c);
                (*c)->mark_used();
                return result;
            } catch (const redirect& r) {
                const bool retry = r.how() == redirect::kind::retry;
                if ((!retry && ++redirections > max_redirections) || (retry && clock::now() >= until))
                    throw_error(errc::unavailable, base_.backend_name,
                                "no server took the command (" + std::to_string(hop + 1) + " tries): " + r.what());
                std::string to = r.host().empty() ? p->where().host : r.host();  // "": the node asked
                if (!retry) vouch(to, r.port(), *p);  // throws access_denied_error: never followed
                if (r.how() == redirect::kind::ask) asking.emplace(std::move(to), r.port());
                else learn(r, *p);
                if (r.how() == redirect::kind::retry) pause(hop, until);
            } catch (const connection_failure& e) {
                if (reused && e.stale() && !stale_retried) {
                    stale_retried = true;
                    p->clear_idle();
                    continue;
                }
                if (!follows() || e.maybe_sent() || clock::now() >= until) throw;
                failed(*p);
                pause(hop, until);
            }
        }
    }

    // Runs script `s` over many items (item k: `keys_per_item` keys from `keys`,
    // `args_per_item` arguments from `args`) with at most `per_call` items a
    // call and never two hash slots in one call; the calls of one node go out as
    // one pipeline (one round trip per node), followed by `WAIT min_replicas
    // replica_timeout` when min_replicas > 0. The script's reply is an array
    // with one integer per item of its call. Never throws: per item, its
    // integer or why the call failed.
    struct item_result {
        bool ok = false;
        long long value = 0;
        std::string error;
    };
    std::vector<item_result> run_items(const script& s, const std::vector<std::string_view>& keys,
                                       const std::vector<std::string_view>& args, std::size_t keys_per_item,
                                       std::size_t args_per_item, std::size_t per_call, int min_replicas,
                                       std::chrono::milliseconds replica_timeout);

protected:
    // The servers can change (sentinel, cluster): failures are worth a new look.
    virtual bool follows() const noexcept = 0;
    // A MOVED or retry reply seen on `from` (never throws).
    virtual void learn(const redirect& r, pool& from) noexcept = 0;
    // A connection to `p` failed (never throws: the next pool_for() looks again).
    virtual void failed(pool& p) noexcept = 0;
    // `from` sent a command to host:port (MOVED, ASK): returns when that is a
    // node the deployment vouches for, else throws access_denied_error. By
    // default none is (only a cluster redirects).
    virtual void vouch(const std::string& host, std::uint16_t port, pool& from);
    static void pause(int hop, deadline until);

    endpoint base_;
    std::size_t pool_size_;
    std::chrono::milliseconds failover_wait_;
    static constexpr int max_redirections = 16;

private:
    std::mutex nodes_mutex_;
    std::map<std::string, std::unique_ptr<pool>, std::less<>> nodes_;  // by host:port, never removed
};

struct sentinel_settings {
    std::vector<endpoint> sentinels;  // with the sentinels' credentials
    std::string master_name;
};

std::unique_ptr<topology> make_single_topology(endpoint ep, std::size_t pool_size);
std::unique_ptr<topology> make_sentinel_topology(endpoint base, std::size_t pool_size, sentinel_settings s,
                                                 std::chrono::milliseconds failover_wait);
// `seeds`: nodes to read the slot map from (any of them).
std::unique_ptr<topology> make_cluster_topology(endpoint base, std::size_t pool_size, std::vector<endpoint> seeds,
                                                std::chrono::milliseconds failover_wait);

// Blocks until WAIT on `c` says `n` replicas have every write of this
// connection, or `timeout` passes: the number of replicas that acknowledged.
long long wait_replicas(connection& c, int n, std::chrono::milliseconds timeout);
// "acknowledged by <acked> of <n> replicas within <timeout> ms (min_replicas)":
// why a grant or renewal did not count.
std::string replica_shortfall(long long acked, int n, std::chrono::milliseconds timeout);

}  // namespace distlock::backends::redis_client
