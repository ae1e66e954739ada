// The Redis client layer (topology.hpp): Redis Cluster (redis-cluster://):
// the hash slot of a key, the slot map from CLUSTER SLOTS, MOVED and ASK
// followed to the cluster's own nodes only.
#include <algorithm>
#include <charconv>
#include <set>

#include "topology.hpp"

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

std::unique_ptr<topology> make_cluster_topology(endpoint base, std::size_t pool_size, std::vector<endpoint> seeds,
                                                std::chrono::milliseconds failover_wait) {
    base.follow_redirects = true;
    base.sharded = true;
    return std::make_unique<cluster_topology>(std::move(base), pool_size, std::move(seeds), failover_wait);
}

}  // namespace distlock::backends::redis_client
