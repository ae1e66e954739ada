// The Redis client layer (topology.hpp): the master a majority of the listed
// sentinels names (redis-sentinel://), all asked at once, its ROLE checked.
#include <algorithm>
#include <charconv>
#include <condition_variable>

#include "topology.hpp"

namespace distlock::backends::redis_client {

namespace {

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

}  // namespace

std::unique_ptr<topology> make_sentinel_topology(endpoint base, std::size_t pool_size, sentinel_settings s,
                                                 std::chrono::milliseconds failover_wait) {
    base.follow_redirects = true;
    return std::make_unique<sentinel_topology>(std::move(base), pool_size, std::move(s), failover_wait);
}

}  // namespace distlock::backends::redis_client
