#include "topology.hpp"

#include <algorithm>
#include <charconv>
#include <condition_variable>
#include <set>

namespace distlock::backends::redis_client {

int key_slot(std::string_view key) noexcept {
    if (auto open = key.find('{'); open != std::string_view::npos) {
        if (auto close = key.find('}', open + 1); close != std::string_view::npos && close > open + 1)
            key = key.substr(open + 1, close - open - 1);
    }
    std::uint16_t crc = 0;  // CRC16-CCITT (XMODEM): polynomial 0x1021, initial value 0
    for (unsigned char byte : key) {
        crc ^= static_cast<std::uint16_t>(byte << 8);
        for (int bit = 0; bit < 8; ++bit)
            crc = (crc & 0x8000) != 0 ? static_cast<std::uint16_t>((crc << 1) ^ 0x1021)
                                      : static_cast<std::uint16_t>(crc << 1);
    }
    return crc & 16383;
}

void topology::pause(int hop, deadline until) {
    auto d = std::chrono::milliseconds(std::min(200, 10 << std::min(hop, 5)));
    auto left = until - clock::now();
    if (left <= clock::duration::zero()) return;
    std::this_thread::sleep_for(std::min<clock::duration>(d, left));
}

pool& topology::pool_at(const std::string& host, std::uint16_t port) {
    std::string label = host + ":" + std::to_string(port);
    std::lock_guard lk(nodes_mutex_);
    auto it = nodes_.find(label);
    if (it == nodes_.end()) {
        endpoint ep = base_;
        ep.host = host;
        ep.port = port;
        it = nodes_.emplace(std::move(label), std::make_unique<pool>(std::move(ep), pool_size_)).first;
    }
    return *it->second;
}

void topology::vouch(const std::string& host, std::uint16_t port, pool& from) {
    throw_error(
        errc::access_denied, base_.backend_name,
        from.where().label() + " sent a command elsewhere (MOVED/ASK " +
            (plausible_host(host) ? host + ":" + std::to_string(port) : std::string("to no valid address")) +
            "): only a cluster redirects, and the data nodes' credentials go to the deployment's own nodes only");
}

std::vector<topology::node_items> topology::by_node(const std::vector<std::string_view>& keys) {
    if (keys.empty()) return {};
    std::vector<std::size_t> all(keys.size());
    for (std::size_t i = 0; i < all.size(); ++i) all[i] = i;
    return {node_items{&pool_for(keys[0]), {std::move(all)}}};
}

std::string replica_shortfall(long long acked, int n, std::chrono::milliseconds timeout) {
    return "acknowledged by " + std::to_string(acked) + " of " + std::to_string(n) + " replicas within " +
           std::to_string(timeout.count()) + " ms (min_replicas)";
}

long long wait_replicas(connection& c, int n, std::chrono::milliseconds timeout) {
    const std::string count = std::to_string(n), ms = std::to_string(timeout.count());
    auto r = c.command({"WAIT", count, ms});
    if (is_error(r.get())) throw_client_error(r.get(), c.where().backend_name, "WAIT");
    return as_integer(r.get());
}

std::vector<topology::item_result> topology::run_items(const script& s, const std::vector<std::string_view>& keys,
                                                       const std::vector<std::string_view>& args,
                                                       std::size_t keys_per_item, std::size_t args_per_item,
                                                       std::size_t per_call, int min_replicas,
                                                       std::chrono::milliseconds replica_timeout) {
    const std::size_t items = keys.size() / keys_per_item;
    std::vector<item_result> out(items);
    auto fail = [&](const std::vector<std::size_t>& which, const std::string& why) {
        for (auto i : which) out[i].error = why;
    };
    std::vector<std::string_view> firsts(items);
    for (std::size_t i = 0; i < items; ++i) firsts[i] = keys[i * keys_per_item];
    std::vector<node_items> nodes;
    try {
        nodes = by_node(firsts);
    } catch (const std::exception& e) {
        for (auto& r : out) r.error = e.what();
        return out;
    }
    struct call {
        std::vector<std::size_t> items;
        std::vector<std::string_view> keys, args;
        std::string numkeys;
    };
    // The reply of one call: an integer per item.
    auto take = [&](const call& c, const redisReply* r) {
        if (is_error(r) || r->type != REDIS_REPLY_ARRAY || r->elements != c.items.size()) {
            fail(c.items, "renewal script failed: " + reply_text(r));
            return;
        }
        for (std::size_t j = 0; j < c.items.size(); ++j) {
            auto& res = out[c.items[j]];
            res.ok = true;
            res.value = as_integer(r->element[j]);
        }
    };
    for (auto& node : nodes) {
        std::vector<call> calls;
        std::vector<std::size_t> all;
        for (const auto& slot : node.slots) {
            for (std::size_t start = 0; start < slot.size(); start += per_call) {
                call c;
                for (std::size_t j = start; j < std::min(slot.size(), start + per_call); ++j) {
                    const std::size_t i = slot[j];
                    c.items.push_back(i);
                    all.push_back(i);
                    for (std::size_t k = 0; k < keys_per_item; ++k) c.keys.push_back(keys[i * keys_per_item + k]);
                    for (std::size_t a = 0; a < args_per_item; ++a) c.args.push_back(args[i * args_per_item + a]);
                }
                calls.push_back(std::move(c));
            }
        }
        try {
            auto [replies, acks] = node.node->run([&](connection& conn) {
                const bool sharded = conn.where().sharded;
                for (auto& c : calls) {
                    auto cmd = s.eval_args(c.keys, c.args, c.numkeys, sharded);
                    cmd[0] = "EVALSHA";
                    cmd[1] = s.sha1(sharded);
                    conn.append(cmd);
                }
                const std::string count = std::to_string(min_replicas), ms = std::to_string(replica_timeout.count());
                if (min_replicas > 0) conn.append({"WAIT", count, ms});
                conn.flush();
                std::vector<reply_ptr> rs;
                for (std::size_t n = 0; n < calls.size(); ++n) rs.push_back(conn.read_reply());
                long long acked = min_replicas > 0 ? as_integer(conn.read_reply().get()) : 0;
                // A server that forgot the script (restart, failover, SCRIPT FLUSH):
                // once more with EVAL, and WAIT again for those writes.
                bool again = false;
                for (std::size_t n = 0; n < calls.size(); ++n) {
                    if (!is_error(rs[n].get()) || reply_text(rs[n].get()).rfind("NOSCRIPT", 0) != 0) continue;
                    rs[n] = s.eval(conn, calls[n].keys, calls[n].args);
                    again = true;
                }
                if (again && min_replicas > 0) acked = wait_replicas(conn, min_replicas, replica_timeout);
                return std::pair(std::move(rs), acked);
            });
            if (min_replicas > 0 && acks < min_replicas) {
                fail(all, "the renewal was " + replica_shortfall(acks, min_replicas, replica_timeout));
                continue;
            }
            for (std::size_t n = 0; n < calls.size(); ++n) take(calls[n], replies[n].get());
        } catch (const redirect& r) {
            // A slot of this node moved or is moving: each call on its own, so
            // that MOVED and ASK are followed (renewals are idempotent: a call
            // the pipeline had already run does no harm run again).
            if (r.how() == redirect::kind::moved) learn(r, *node.node);
            for (auto& c : calls) {
                try {
                    auto [reply, acked] = run(
                        c.keys.front(),
                        [&](connection& conn) {
                            auto rep = s.run(conn, c.keys, c.args);
                            const long long n =
                                min_replicas > 0 ? wait_replicas(conn, min_replicas, replica_timeout) : 0;
                            return std::pair(std::move(rep), n);
                        },
                        clock::now() + base_.command_timeout);
                    if (min_replicas > 0 && acked < min_replicas) {
                        fail(c.items, "the renewal was " + replica_shortfall(acked, min_replicas, replica_timeout));
                        continue;
                    }
                    take(c, reply.get());
                } catch (const std::exception& e) {
                    fail(c.items, e.what());
                }
            }
        } catch (const connection_failure& e) {
            failed(*node.node);
            fail(all, e.what());
        } catch (const error& e) {
            if (e.code_value() == errc::unavailable) failed(*node.node);  // no connection to the node
            fail(all, e.what());
        } catch (const std::exception& e) {
            fail(all, e.what());
        }
    }
    return out;
}

namespace {

// Runs f(), which asks one node of several (a sentinel, a cluster node) and
// returns what it found or null; a node that cannot be reached or used adds
// why to `errors` (null then). Bad credentials end the search: thrown.
template <class F>
pool* ask_node(std::string& errors, F&& f) {
    try {
        return f();
    } catch (const access_denied_error&) {
        throw;
    } catch (const connection_failure& e) {
        errors += "; " + std::string(e.what());
    } catch (const error& e) {
        errors += "; " + e.reason();
    }
    return nullptr;
}

// ---- one server ---------------------------------------------------------------------

class single_topology final : public topology {
public:
    single_topology(endpoint ep, std::size_t pool_size)
        : topology(std::move(ep), pool_size, std::chrono::milliseconds{0}), pool_(&pool_at(base_.host, base_.port)) {}
    pool& pool_for(std::string_view) override { return *pool_; }
    std::vector<pool*> masters() override { return {pool_}; }
    endpoint endpoint_for(std::string_view, bool) override { return base_; }

protected:
    bool follows() const noexcept override { return false; }
    void learn(const redirect&, pool&) noexcept override {}
    void failed(pool&) noexcept override {}

private:
    pool* pool_;
};

// ---- Sentinel -------------------------------------------------------------------------

// What one sentinel said of the master.
struct sentinel_answer {
    std::optional<std::pair<std::string, std::uint16_t>> master;  // the address it names
    bool unknown = false;                                         // it knows no master of that name
    bool denied = false;  // it refused our credentials, or wants some (why: `error`)
    std::string error;    // why it names none
};

// Asks one sentinel; never throws.
sentinel_answer ask_sentinel(const endpoint& sentinel, const std::string& master_name) noexcept {
    sentinel_answer out;
    try {
        try {
            auto c = connection::open(sentinel);
            auto r = c->command({"SENTINEL", "get-master-addr-by-name", master_name});
            if (is_error(r.get()) && reply_text(r.get()).rfind("NOAUTH", 0) == 0) {
                out.denied = true;
                out.error =
                    "the sentinel at " + sentinel.label() +
                    " needs a password: give it as sentinel_password= (and sentinel_user= for an ACL user); "
                    "the sentinels never get the URL's own, which is the data nodes' (sentinel_credentials=data "
                    "sends it to them too)";
            } else if (is_error(r.get())) {
                throw_client_error(r.get(), sentinel.backend_name, "SENTINEL at " + sentinel.label());
            } else if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 || r->element[0]->type != REDIS_REPLY_STRING) {
                out.unknown = true;
                out.error = sentinel.label() + " knows no master of that name";
            } else {
                const std::string host(r->element[0]->str, r->element[0]->len);
                std::uint16_t port = 0;
                const auto* p = r->element[1];
                const bool port_ok = p->type == REDIS_REPLY_STRING &&
                                     std::from_chars(p->str, p->str + p->len, port).ec == std::errc{} && port != 0;
                if (plausible_host(host) && port_ok) out.master.emplace(host, port);
                else out.error = sentinel.label() + " names no valid address";
            }
        } catch (const access_denied_error& e) {
            out.denied = true;
            out.error = e.reason();
        } catch (const connection_failure& e) {
            out.error = e.what();
        } catch (const error& e) {
            out.error = e.reason();
        }
    } catch (...) {  // no memory for the message
        out.master.reset();
    }
    return out;
}

// The address at least `quorum` answers name, if any.
std::optional<std::pair<std::string, std::uint16_t>> agreed(const std::vector<sentinel_answer>& answers,
                                                            std::size_t quorum) {
    std::map<std::pair<std::string, std::uint16_t>, std::size_t> votes;
    for (const auto& a : answers)
        if (a.master && ++votes[*a.master] >= quorum) return a.master;
    return std::nullopt;
}

class sentinel_topology final : public topology {
public:
    sentinel_topology(endpoint base, std::size_t pool_size, sentinel_settings s, std::chrono::milliseconds wait)
        : topology(std::move(base), pool_size, wait), s_(std::move(s)), quorum_(s_.sentinels.size() / 2 + 1) {}
    ~sentinel_topology() override {
        for (auto& a : askers_) a.thread.join();  // each bounded by its sentinel's timeouts
    }

    pool& pool_for(std::string_view) override {
        if (auto* p = master_.load()) return *p;
        return find(nullptr);
    }
    std::vector<pool*> masters() override { return {&pool_for("")}; }
    endpoint endpoint_for(std::string_view, bool after_failure) override {
        pool* p = master_.load();
        if (p == nullptr || after_failure) {
            try {
                p = &find(p);
            } catch (const std::exception&) {
                if (p == nullptr) throw;  // no master known: the subscriber tries again later
            }
        }
        return p->where();
    }

protected:
    bool follows() const noexcept override { return true; }
    // A demoted master (READONLY), or a failed one: look again. Quietly: while
    // the sentinels still name the dead master, the caller tries again later.
    void learn(const redirect&, pool& from) noexcept override { quiet_find(&from); }
    void failed(pool& p) noexcept override { quiet_find(&p); }

private:
    void quiet_find(pool* failed_one) noexcept {
        try {
            find(failed_one);
        } catch (...) {}
    }

    // The answers of one round of asking, filled by one thread per sentinel.
    struct round {
        std::mutex mutex;
        std::condition_variable cv;
        std::vector<sentinel_answer> answers;
        std::vector<bool> done;
    };
    struct asker {
        std::thread thread;
        std::shared_ptr<round> of;
        std::size_t index;
    };

    // Asks every sentinel at once (a sentinel that does not answer costs its
    // own timeouts, not the others'); returns as soon as a quorum names one
    // address, or when every sentinel has answered. The threads of sentinels
    // still connecting then finish on their own and are joined later.
    std::vector<sentinel_answer> ask_all() {
        std::erase_if(askers_, [](asker& a) {
            {
                std::lock_guard lk(a.of->mutex);
                if (!a.of->done[a.index]) return false;
            }
            a.thread.join();  // it has answered: it is ending
            return true;
        });
        const std::size_t n = s_.sentinels.size();
        auto r = std::make_shared<round>();
        r->answers.resize(n);
        r->done.assign(n, false);
        for (std::size_t i = 0; i < n; ++i) {
            try {
                askers_.push_back(asker{std::thread([r, i, sentinel = s_.sentinels[i], name = s_.master_name] {
                                            auto answer = ask_sentinel(sentinel, name);
                                            std::lock_guard lk(r->mutex);
                                            r->answers[i] = std::move(answer);
                                            r->done[i] = true;
                                            r->cv.notify_all();
                                        }),
                                        r, i});
            } catch (const std::exception& e) {  // no thread: that sentinel counts as silent
                std::lock_guard lk(r->mutex);
                r->answers[i].error = s_.sentinels[i].label() + ": cannot ask (" + e.what() + ")";
                r->done[i] = true;
            }
        }
        std::unique_lock lk(r->mutex);
        r->cv.wait(lk, [&] {
            return std::find(r->done.begin(), r->done.end(), false) == r->done.end() || agreed(r->answers, quorum_);
        });
        return r->answers;
    }

    // Asks the sentinels for the master, unless another thread already moved on
    // from `failed_one` or asked a moment ago; checks ROLE on the node named.
    // Only a master a majority of the listed sentinels names is trusted with
    // the data nodes' credentials: one sentinel (another team's, shared, or
    // spoofed) could name a host of its own to collect them.
    pool& find(pool* failed_one) {
        std::lock_guard lk(mutex_);
        pool* current = master_.load();
        if (current != nullptr && (current != failed_one || clock::now() - asked_at_ < std::chrono::milliseconds{100}))
            return *current;
        asked_at_ = clock::now();
        const auto answers = ask_all();
        if (auto address = agreed(answers, quorum_)) {
            const auto& [host, port] = *address;
            pool& candidate = pool_at(host, port);
            // The node named must say it is the master (it may still be a
            // replica being promoted, or a demoted master not yet told).
            reply_ptr role;
            try {
                role = candidate.run([](connection& node) { return node.command({"ROLE"}); });
            } catch (const connection_failure& e) {
                throw_client_error(e, base_.backend_name, "the sentinels' master " + candidate.where().label());
            }
            if (is_error(role.get())) throw_client_error(role.get(), base_.backend_name, "ROLE at " + host);
            if (role->type != REDIS_REPLY_ARRAY || role->elements == 0 || reply_text(role->element[0]) != "master")
                throw_error(errc::unavailable, base_.backend_name,
                            "the sentinels name " + candidate.where().label() + ", which is not a master yet");
            if (current != &candidate) candidate.clear_idle();
            master_.store(&candidate);
            return candidate;
        }
        std::string seen;
        std::size_t unknown = 0;
        const sentinel_answer* denied = nullptr;
        for (const auto& a : answers) {
            seen +=
                "; " + (a.master ? "one names " + a.master->first + ":" + std::to_string(a.master->second) : a.error);
            unknown += a.unknown ? 1 : 0;
            if (a.denied && denied == nullptr) denied = &a;
        }
        if (denied != nullptr) throw_error(errc::access_denied, base_.backend_name, denied->error, 0, "NOAUTH");
        if (unknown >= quorum_ && current == nullptr)
            throw_error(errc::invalid_argument, base_.backend_name,
                        "no sentinel knows a master named '" + s_.master_name + "'" + seen);
        throw_error(errc::unavailable, base_.backend_name,
                    "no majority of the " + std::to_string(answers.size()) + " sentinels listed (" +
                        std::to_string(quorum_) + ") names one master for '" + s_.master_name + "'" + seen);
    }

    sentinel_settings s_;
    std::size_t quorum_;
    std::mutex mutex_;
    std::atomic<pool*> master_{nullptr};
    clock::time_point asked_at_{};
    std::vector<asker> askers_;  // threads of earlier rounds (mutex_)
};

// ---- Cluster ---------------------------------------------------------------------------

class cluster_topology final : public topology {
public:
    cluster_topology(endpoint base, std::size_t pool_size, std::vector<endpoint> seeds, std::chrono::milliseconds wait)
        : topology(std::move(base), pool_size, wait), seeds_(std::move(seeds)) {
        slots_.fill(nullptr);
        for (const auto& s : seeds_) members_.insert(s.label());
    }

    pool& pool_for(std::string_view key) override {
        const int slot = key.empty() ? -1 : key_slot(key);
        for (int pass = 0; pass < 2; ++pass) {
            {
                std::shared_lock lk(map_mutex_);
                if (slot >= 0 && slots_[static_cast<std::size_t>(slot)] != nullptr)
                    return *slots_[static_cast<std::size_t>(slot)];
                if (slot < 0 && loaded_) {
                    for (auto* p : slots_)
                        if (p != nullptr) return *p;
                }
            }
            if (pass == 0) refresh(true);
        }
        throw_error(errc::unavailable, base_.backend_name,
                    slot >= 0 ? "no cluster node serves hash slot " + std::to_string(slot) + " (is the cluster down?)"
                              : std::string("the cluster serves no slot"));
    }

    std::vector<pool*> masters() override {
        pool_for("");
        return masters_now();
    }

    endpoint endpoint_for(std::string_view channel, bool after_failure) override {
        if (after_failure) quiet_refresh();
        return pool_for(channel).where();
    }

    std::vector<node_items> by_node(const std::vector<std::string_view>& keys) override {
        std::vector<node_items> out;
        std::map<int, std::vector<std::size_t>> slots;
        for (std::size_t i = 0; i < keys.size(); ++i) slots[key_slot(keys[i])].push_back(i);
        for (auto& [slot, items] : slots) {
            pool* node = &pool_for(keys[items[0]]);
            auto it = std::find_if(out.begin(), out.end(), [&](const node_items& n) { return n.node == node; });
            if (it == out.end()) it = out.insert(out.end(), node_items{node, {}});
            it->slots.push_back(std::move(items));
        }
        return out;
    }

protected:
    bool follows() const noexcept override { return true; }
    void learn(const redirect& r, pool& from) noexcept override {
        if (r.how() == redirect::kind::moved && r.slot() >= 0 && r.slot() < 16384) {
            try {
                pool& to = pool_at(r.host().empty() ? from.where().host : r.host(), r.port());
                std::unique_lock lk(map_mutex_);
                slots_[static_cast<std::size_t>(r.slot())] = &to;
            } catch (...) {  // no memory: the refresh below may still do
            }
        }
        quiet_refresh();
    }
    void failed(pool&) noexcept override { quiet_refresh(); }

    // A redirect is followed only to a node the cluster itself lists: one in
    // the slot maps read so far, else in CLUSTER NODES (which also lists an
    // importing node that serves no slot yet), as the seeds or the nodes they
    // named say. A node that redirects anywhere else (a forged or broken reply)
    // cannot make the client send the credentials there.
    void vouch(const std::string& host, std::uint16_t port, pool& from) override {
        if (plausible_host(host) && port != 0) {
            const auto label = host + ":" + std::to_string(port);
            if (member(label)) return;
            learn_members();
            if (member(label)) return;
            throw_error(errc::access_denied, base_.backend_name,
                        from.where().label() + " sent a command to " + label +
                            ", which is not a node of the cluster (CLUSTER SLOTS, CLUSTER NODES): not followed, the "
                            "data nodes' credentials go to the cluster's own nodes only");
        }
        topology::vouch(host, port, from);
    }

private:
    bool member(const std::string& label) {
        std::lock_guard lk(members_mutex_);
        return members_.count(label) != 0;
    }
    void add_members(const std::vector<std::string>& labels) {
        std::lock_guard lk(members_mutex_);
        members_.insert(labels.begin(), labels.end());
    }

    // Reads CLUSTER NODES from a seed or a node known now (the first that
    // answers) and adds every node it lists: "<id> <ip:port@cport[,hostname]> ...".
    void learn_members() {
        std::vector<std::pair<std::string, std::uint16_t>> ask;
        for (const auto& s : seeds_) ask.emplace_back(s.host, s.port);
        for (auto* p : masters_now()) ask.emplace_back(p->where().host, p->where().port);
        for (const auto& [host, port] : ask) {
            try {
                auto reply = pool_at(host, port).run([](connection& c) { return c.command({"CLUSTER", "NODES"}); });
                if (reply->type != REDIS_REPLY_STRING) continue;
                std::vector<std::string> labels;
                std::string_view text(reply->str, reply->len);
                while (!text.empty()) {
                    const auto eol = text.find('\n');
                    auto line = text.substr(0, eol);
                    text = eol == std::string_view::npos ? std::string_view{} : text.substr(eol + 1);
                    const auto first = line.find(' ');
                    if (first == std::string_view::npos) continue;
                    auto field = line.substr(first + 1, line.find(' ', first + 1) - first - 1);
                    const auto at = field.find('@');
                    const auto address = field.substr(0, at);
                    const auto colon = address.rfind(':');
                    std::uint16_t port = 0;
                    if (colon == std::string_view::npos ||
                        std::from_chars(address.data() + colon + 1, address.data() + address.size(), port).ec !=
                            std::errc{})
                        continue;
                    std::vector<std::string_view> hosts{address.substr(0, colon)};
                    if (const auto comma = field.find(',');
                        comma != std::string_view::npos && at != std::string_view::npos && comma > at)
                        hosts.push_back(field.substr(comma + 1));  // the node's announced host name
                    for (auto h : hosts)
                        if (port != 0 && plausible_host(h))
                            labels.push_back(std::string(h) + ":" + std::to_string(port));
                }
                add_members(labels);
                return;
            } catch (const std::exception&) {  // that node cannot tell: the next one
            }
        }
    }

    // The distinct masters of the slot map now.
    std::vector<pool*> masters_now() {
        std::shared_lock lk(map_mutex_);
        std::vector<pool*> out;
        for (auto* p : slots_)
            if (p != nullptr && std::find(out.begin(), out.end(), p) == out.end()) out.push_back(p);
        return out;
    }

    void quiet_refresh() noexcept {
        try {
            refresh(false);
        } catch (...) {}
    }

    // Reads the slot map (CLUSTER SLOTS) from a known master or a seed.
    void refresh(bool force) {
        std::lock_guard r(refresh_mutex_);
        if (!force && clock::now() - refreshed_at_ < std::chrono::milliseconds{100}) return;
        refreshed_at_ = clock::now();
        std::vector<std::pair<std::string, std::uint16_t>> ask;
        {
            std::shared_lock lk(map_mutex_);
            for (auto* p : slots_)
                if (p != nullptr) {
                    std::pair<std::string, std::uint16_t> a{p->where().host, p->where().port};
                    if (std::find(ask.begin(), ask.end(), a) == ask.end()) ask.push_back(std::move(a));
                }
        }
        for (const auto& s : seeds_) {
            std::pair<std::string, std::uint16_t> a{s.host, s.port};
            if (std::find(ask.begin(), ask.end(), a) == ask.end()) ask.push_back(std::move(a));
        }
        std::string errors;
        for (const auto& [host, port] : ask) {
            std::array<pool*, 16384> fresh{};
            fresh.fill(nullptr);
            std::vector<std::string> listed;  // every node of the map (masters and replicas): members
            pool* answered = ask_node(errors, [&, &host = host, &port = port]() -> pool* {
                pool& node = pool_at(host, port);
                auto reply = node.run([](connection& c) { return c.command({"CLUSTER", "SLOTS"}); });
                if (is_error(reply.get()))
                    throw_client_error(reply.get(), base_.backend_name, "CLUSTER SLOTS at " + host);
                // A node's address: host ("" or "?": the node asked) and port,
                // or nullopt when it is none.
                auto address_of = [&](const redisReply* n) -> std::optional<std::pair<std::string, std::uint16_t>> {
                    if (n->type != REDIS_REPLY_ARRAY || n->elements < 2 || n->element[0]->type != REDIS_REPLY_STRING)
                        return std::nullopt;
                    std::string h(n->element[0]->str, n->element[0]->len);
                    if (h.empty() || h == "?") h = host;
                    const auto p = as_integer(n->element[1]);
                    if (!plausible_host(h) || p <= 0 || p > 65535) return std::nullopt;
                    return std::pair(std::move(h), static_cast<std::uint16_t>(p));
                };
                bool any = false;
                for (std::size_t i = 0; reply->type == REDIS_REPLY_ARRAY && i < reply->elements; ++i) {
                    const redisReply* range = reply->element[i];
                    if (range->type != REDIS_REPLY_ARRAY || range->elements < 3) continue;
                    for (std::size_t k = 2; k < range->elements; ++k)
                        if (auto a = address_of(range->element[k]))
                            listed.push_back(a->first + ":" + std::to_string(a->second));
                    const auto master = address_of(range->element[2]);
                    if (!master) continue;
                    pool* owner = &pool_at(master->first, master->second);
                    const auto from = as_integer(range->element[0]), to = as_integer(range->element[1]);
                    for (auto slot = std::max(0LL, from); slot <= std::min(16383LL, to); ++slot) {
                        fresh[static_cast<std::size_t>(slot)] = owner;
                        any = true;
                    }
                }
                if (!any) {
                    errors += "; " + host + ":" + std::to_string(port) + " serves no slot";
                    return nullptr;
                }
                return &node;
            });
            if (answered == nullptr) continue;
            add_members(listed);
            std::unique_lock lk(map_mutex_);
            slots_ = fresh;
            loaded_ = true;
            return;
        }
        throw_error(errc::unavailable, base_.backend_name, "no cluster node gave the slot map" + errors);
    }

    std::vector<endpoint> seeds_;
    std::shared_mutex map_mutex_;
    std::array<pool*, 16384> slots_;
    bool loaded_ = false;
    std::mutex refresh_mutex_;
    clock::time_point refreshed_at_{};
    std::mutex members_mutex_;
    std::set<std::string> members_;  // "host:port" of every node the cluster listed, and the seeds
};

}  // namespace

std::unique_ptr<topology> make_single_topology(endpoint ep, std::size_t pool_size) {
    return std::make_unique<single_topology>(std::move(ep), pool_size);
}

std::unique_ptr<topology> make_sentinel_topology(endpoint base, std::size_t pool_size, sentinel_settings s,
                                                 std::chrono::milliseconds failover_wait) {
    base.follow_redirects = true;
    return std::make_unique<sentinel_topology>(std::move(base), pool_size, std::move(s), failover_wait);
}

std::unique_ptr<topology> make_cluster_topology(endpoint base, std::size_t pool_size, std::vector<endpoint> seeds,
                                                std::chrono::milliseconds failover_wait) {
    base.follow_redirects = true;
    base.sharded = true;
    return std::make_unique<cluster_topology>(std::move(base), pool_size, std::move(seeds), failover_wait);
}

}  // namespace distlock::backends::redis_client
