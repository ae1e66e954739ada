// consul:// — the semaphore, with the KV layout of Consul's Go api/semaphore.go
// (and so of `consul lock -n N <prefix>`), over the agent (consul_agent.hpp).
// One handle per permit; each permit lives on a session of its own, as each
// mutex grant does (consul_lock.cpp):
//
//   prefix     <URL prefix>/<encoded name>: a Go client with
//              SemaphorePrefix("<URL prefix>/<encoded name>", N) shares it
//   session    PUT /v1/session/create {Name, TTL = the lease, LockDelay,
//              Behavior "delete"} per acquisition (semaphore.go's own sessions
//              are "delete" too: invalidation removes the contender key)
//   contender  PUT <prefix>/<session>?acquire=<session>&flags=<semaphore flag>
//   .lock      <prefix>/.lock = {"Limit":N,"Holders":{"<session>":true,...}},
//              flags 0xe0f69a2baa414de0, written only by check-and-set on its
//              ModifyIndex (?cas=, 0 = create only if absent)
//   acquire    list the prefix (?recurse); prune the holders whose contender
//              key is no longer held by a session; Limit differing from ours
//              while live holders remain = invalid_argument_error naming both;
//              fewer holders than Limit: add our session by check-and-set (a
//              lost race lists again at once); else a blocking query on the
//              prefix (?index=) until it changes
//   token      after admission, the holder re-acquires its own contender key
//              (a write only it makes) and reads it back: that ModifyIndex
//   monitor    blocking queries on the prefix; our session no longer among the
//              (pruned) holders, or .lock gone = the permit is lost
//   release    remove our session from Holders by check-and-set (delete .lock
//              by check-and-set when it was the last holder, as `consul lock`'s
//              cleanup does), delete the contender key, destroy the session
#include <nlohmann/json.hpp>

#include <set>

#include "consul_lock.hpp"
#include "http_monitor.hpp"

namespace distlock::backends::consul {
namespace {

constexpr const char* kCoordinationKey = ".lock";  // api/semaphore.go DefaultSemaphoreKey
constexpr int kMaxRaces = 64;                      // check-and-set races in a row before giving up a deadline

// <prefix>/.lock as read from a listing of the prefix.
struct coordination {
    bool exists = false;
    std::uint64_t modify_index = 0;  // 0 when absent: check-and-set then creates it
    std::uint64_t flags = kSemaphoreFlag;
    std::string problem;  // why its value is not a semaphore's {Limit, Holders}; "" = it is
    long long limit = 0;
    std::set<std::string> holders;
};

coordination read_coordination(const listing& l, const std::string& key, std::uint32_t local_limit) {
    coordination c;
    c.limit = local_limit;  // an absent or empty .lock takes the caller's limit, as semaphore.go's
    auto it = std::find_if(l.entries.begin(), l.entries.end(), [&](const entry& e) { return e.key == key; });
    if (it == l.entries.end()) return c;
    c.exists = true;
    c.modify_index = it->modify_index;
    c.flags = it->flags;
    if (it->value.empty()) return c;
    json j = json::parse(it->value, nullptr, false);
    if (j.is_discarded() || !j.is_object()) {
        c.problem = "its value is not a JSON object";
        return c;
    }
    c.limit = 0;  // a missing Limit decodes as Go's zero value
    if (j.contains("Limit")) {
        if (!j["Limit"].is_number_integer()) {
            c.problem = "its Limit is not an integer";
            return c;
        }
        c.limit = j["Limit"].get<long long>();
    }
    if (j.contains("Holders") && !j["Holders"].is_null()) {
        if (!j["Holders"].is_object()) {
            c.problem = "its Holders is not an object";
            return c;
        }
        for (const auto& [holder, flag] : j["Holders"].items()) c.holders.insert(holder);  // a set: membership counts
    }
    return c;
}

// Drops the holders whose session holds no key under the prefix any more (its
// contender key was deleted with its session), as semaphore.go's pruneDeadHolders.
void prune(coordination& c, const listing& l) {
    std::set<std::string> live;
    for (const auto& e : l.entries)
        if (!e.session.empty()) live.insert(e.session);
    for (auto it = c.holders.begin(); it != c.holders.end();) it = live.count(*it) ? std::next(it) : c.holders.erase(it);
}

// What semaphore.go's encodeLock writes: Limit first, then Holders in key order.
std::string encode(long long limit, const std::set<std::string>& holders) {
    nlohmann::ordered_json holders_json = nlohmann::ordered_json::object();
    for (const auto& h : holders) holders_json[h] = true;
    nlohmann::ordered_json doc;
    doc["Limit"] = limit;
    doc["Holders"] = std::move(holders_json);
    return doc.dump();
}

class permit final : public session_handle {
public:
    permit(agent& a, const spi::lock_request& r);
    std::optional<spi::grant> acquire(spi::deadline until, const spi::loss_sink& lost) override;
    void release() override;
    const std::string& session() const override { return session_; }

private:
    std::optional<spi::grant> wait_and_acquire(spi::deadline until, spi::deadline created, const spi::loss_sink& lost);
    std::string contender_key() const { return prefix_ + session_; }
    void refuse_foreign(const coordination& c) const;
    void on_monitor(http::transfer_result r);
    void destroy_session() noexcept;

    agent& agent_;
    spi::lock_request request_;
    std::string prefix_;    // "<URL prefix>/<encoded name>/"
    std::string lock_key_;  // prefix_ + ".lock"
    std::string session_;
    std::uint64_t token_ = 0;

    std::string monitored_session_;  // under monitor_'s lock: the session whose permit is watched
    http::monitor monitor_;          // last: stopped before the fields its callbacks use go
};

permit::permit(agent& a, const spi::lock_request& r)
    : agent_(a),
      request_(r),
      prefix_(a.key_of(r.name) + "/"),
      lock_key_(prefix_ + kCoordinationKey),
      monitor_(a.events(), nullptr, [this](http::transfer_result t) { on_monitor(std::move(t)); }) {}

std::optional<spi::grant> permit::acquire(spi::deadline until, const spi::loss_sink& lost) {
    const auto created = spi::clock::now();
    session_ = agent_.create_session(request_.lease, request_.name, "delete", "distlock semaphore: ");
    std::optional<spi::grant> granted;
    try {
        granted = wait_and_acquire(until, created, lost);
    } catch (...) {
        destroy_session();  // Behavior delete: the contender key goes with it
        throw;
    }
    if (!granted) destroy_session();
    return granted;
}

// .lock with other flags (a `consul lock` mutex on the same prefix, other
// data) or a value that is not a semaphore's: refused, never overwritten.
void permit::refuse_foreign(const coordination& c) const {
    if (c.flags != kSemaphoreFlag)
        throw_error(errc::invalid_argument, kName,
                    "key " + lock_key_ + " exists and is not a semaphore's (flags " + std::to_string(c.flags) +
                        ", a semaphore's are " + std::to_string(kSemaphoreFlag) + ")");
    if (!c.problem.empty())
        throw_error(errc::invalid_argument, kName, "key " + lock_key_ + " is not a semaphore's: " + c.problem);
}

// `created`: when the session was asked for. The grant lives as long as the
// session, whose TTL runs from its last create or renew request at the latest.
std::optional<spi::grant> permit::wait_and_acquire(spi::deadline until, spi::deadline created, const spi::loss_sink& lost) {
    const ms renew_every = std::max<ms>(50ms, request_.renew_interval);
    auto renewed = created;
    std::uint64_t index = 0;
    bool contending = false;  // our contender key is there, held by session_
    int races = 0;
    for (;;) {
        auto now = spi::clock::now();
        if (now - renewed >= renew_every) {  // waiting longer than TTL/3: keep the session alive
            auto r = agent_.renew(session_);
            if (r.state == spi::keepalive_result::status::lost) {
                now = spi::clock::now();
                session_ = agent_.create_session(request_.lease, request_.name, "delete", "distlock semaphore: ");
                contending = false;  // the old contender key went with the old session
            } else if (r.state == spi::keepalive_result::status::failed) {
                throw_error(errc::unavailable, kName, r.message);
            }
            renewed = now;
            now = spi::clock::now();
        }
        if (!contending) {
            auto made = agent_.lock_op(contender_key(), "acquire", session_, kSemaphoreFlag);
            if (!made) {  // our session is gone (expired while we waited, agent restarted)
                renewed = spi::clock::now();
                session_ = agent_.create_session(request_.lease, request_.name, "delete", "distlock semaphore: ");
                continue;
            }
            if (!*made)
                throw_error(errc::unavailable, kName, "failed to make the contender entry " + contender_key());
            contending = true;
            index = 0;
        }
        ms wait = 0ms;
        if (index > 0) {
            wait = std::min({std::chrono::duration_cast<ms>(until - now), kMaxBlockingWait,
                             renew_every - std::chrono::duration_cast<ms>(now - renewed)});
            if (wait <= 0ms) {
                if (now >= until) return std::nullopt;
                continue;  // time to renew
            }
        }
        listing l = agent_.list(prefix_, index, wait);
        auto c = read_coordination(l, lock_key_, request_.permits);
        if (c.exists) refuse_foreign(c);
        const bool mine = std::any_of(l.entries.begin(), l.entries.end(), [&](const entry& e) {
            return e.key == contender_key() && e.session == session_;
        });
        if (!mine) {  // the contender key was deleted (with the session?): make it again
            contending = false;
            continue;
        }
        prune(c, l);
        if (!c.holders.count(session_)) {
            if (c.limit != static_cast<long long>(request_.permits) && !c.holders.empty())
                throw_error(errc::invalid_argument, kName,
                            "semaphore '" + request_.name + "' is held with " + std::to_string(c.limit) +
                                " permits (Limit of " + lock_key_ + "); this one has " +
                                std::to_string(request_.permits) + ": semaphore limit conflict (lock: " +
                                std::to_string(c.limit) + ", local: " + std::to_string(request_.permits) + ")");
            if (c.holders.size() >= request_.permits) {
                if (spi::clock::now() >= until) return std::nullopt;
                index = l.index < index ? 0 : l.index;  // an index going backwards restarts the query
                continue;
            }
            // A free permit: our session joins Holders (the prune is written with it;
            // with no live holder left, a Limit of another size is replaced by ours).
            c.holders.insert(session_);
            if (!agent_.cas_put(lock_key_, c.modify_index, kSemaphoreFlag, encode(request_.permits, c.holders))) {
                // Another contender wrote .lock first: list again at once.
                if (++races > kMaxRaces && spi::clock::now() >= until) return std::nullopt;
                index = 0;
                continue;
            }
        }
        // Admitted. The token: a write to our own contender key, after the admission.
        auto again = agent_.lock_op(contender_key(), "acquire", session_, kSemaphoreFlag);
        entry key = agent_.read(contender_key());
        if (!again || !*again || !key.exists || key.session != session_) {
            contending = false;  // the session went meanwhile: the next listing prunes it
            index = 0;
            continue;
        }
        token_ = key.modify_index;
        // The monitor's first listing does not block: whatever happened to .lock
        // since the admission is seen at once.
        auto rq = agent_.list_request(prefix_, 0, 0ms);
        auto lk = monitor_.lock();
        monitored_session_ = session_;
        monitor_.start(lk, std::move(rq), lost);
        return spi::grant{token_, renewed};
    }
}

// On the loop thread: the prefix changed, or the blocking query timed out/failed.
void permit::on_monitor(http::transfer_result r) {
    std::string lost;
    std::uint64_t next_index = 0;
    ms delay = 0ms;
    if (r.how == http::outcome::completed && (r.resp.status == 200 || r.resp.status == 404)) {
        try {
            listing l = agent::parse_list(r.resp, "monitor");
            auto lk = monitor_.lock();
            if (!monitor_.running(lk)) return;
            auto c = read_coordination(l, lock_key_, request_.permits);
            if (!c.exists) lost = "the semaphore's key " + lock_key_ + " was deleted";
            else if (c.flags != kSemaphoreFlag || !c.problem.empty())
                lost = "the semaphore's key " + lock_key_ + " was overwritten with other data";
            else {
                prune(c, l);
                if (!c.holders.count(monitored_session_))
                    lost = "this permit's session is no longer among the holders in " + lock_key_ +
                           " (the session was invalidated or its contender key deleted)";
            }
            next_index = std::max<std::uint64_t>(1, l.index);
        } catch (const std::exception&) {
            delay = 1s;
        }
    } else {
        delay = 1s;  // agent unreachable or refusing: the renewals decide about loss; look again soon
        agent_.client().rotate_endpoint(r.resp.endpoint);
    }
    if (!lost.empty()) {
        monitor_.lost(monitor_.lock(), lost);
        return;
    }
    monitor_.restart(agent_.list_request(prefix_, next_index, kMaxBlockingWait), delay);
}

void permit::destroy_session() noexcept {
    if (session_.empty()) return;
    try {
        agent_.destroy(session_);
    } catch (...) {
        // The TTL removes it (and, Behavior delete, the contender key).
    }
    session_.clear();
}

void permit::release() {
    monitor_.stop();
    if (session_.empty()) throw_error(errc::not_owner, kName, "permit of semaphore '" + request_.name + "' is not held");
    bool held = false, first = true, gone = false;  // gone: our session is out of Holders
    std::optional<error> failure;
    try {
        for (int attempt = 0; attempt < kMaxRaces && !gone; ++attempt) {
            listing l = agent_.list(prefix_);
            auto c = read_coordination(l, lock_key_, request_.permits);
            const bool listed = c.exists && c.flags == kSemaphoreFlag && c.problem.empty() && c.holders.count(session_);
            if (first) {
                // Ours only while our session still holds our contender key (else
                // the session was invalidated and others may have pruned us already).
                held = listed && std::any_of(l.entries.begin(), l.entries.end(), [&](const entry& e) {
                           return e.key == contender_key() && e.session == session_;
                       });
                first = false;
            }
            if (!listed) {
                gone = true;
                break;
            }
            prune(c, l);
            c.holders.erase(session_);
            // The last holder removes .lock, as `consul lock`'s cleanup (Destroy) does.
            gone = c.holders.empty() ? agent_.cas_delete(lock_key_, c.modify_index)
                                     : agent_.cas_put(lock_key_, c.modify_index, kSemaphoreFlag, encode(c.limit, c.holders));
        }
        if (!gone) throw_error(errc::unavailable, kName, "could not update " + lock_key_ + " (too many concurrent writers)");
        agent_.remove(contender_key());
    } catch (const error& e) {
        failure = e;
    }
    destroy_session();  // Behavior delete: also removes the contender key when the delete above failed
    token_ = 0;
    if (failure)
        throw_error(failure->code_value() == errc::unavailable ? errc::in_doubt : failure->code_value(), kName,
                    "release of a permit of '" + request_.name + "': " + failure->reason(), failure->native_code(),
                    failure->native_message());
    if (!held)
        throw_error(errc::not_owner, kName, "permit of semaphore '" + request_.name + "' was lost before its release");
}

}  // namespace

std::unique_ptr<spi::lock_handle> make_permit(agent& a, const spi::lock_request& r) {
    return std::make_unique<permit>(a, r);
}

}  // namespace distlock::backends::consul
