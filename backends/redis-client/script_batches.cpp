// The Redis client layer (topology.hpp): topology::run_items(), a script over
// many items (renewals) in one pipeline per node, each call within one hash
// slot, with a fallback to one call at a time when a slot moves.
#include "topology.hpp"

namespace distlock::backends::redis_client {

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
                    // Sent call by call: the server starts on the first while
                    // the rest are formatted, and the buffer stays one call's
                    // size (100,000 renewals are about 13 MB).
                    conn.flush();
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
                failed(*node.node);  // a master cut off from its replicas: look again
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
                    std::optional<endpoint> ran_on;
                    auto [reply, acked] = run(
                        c.keys.front(),
                        [&](connection& conn) {
                            ran_on = conn.where();
                            auto rep = s.run(conn, c.keys, c.args);
                            const long long n =
                                min_replicas > 0 ? wait_replicas(conn, min_replicas, replica_timeout) : 0;
                            return std::pair(std::move(rep), n);
                        },
                        clock::now() + base_.command_timeout);
                    if (min_replicas > 0 && acked < min_replicas) {
                        if (ran_on) suspect(*ran_on);
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

}  // namespace distlock::backends::redis_client
