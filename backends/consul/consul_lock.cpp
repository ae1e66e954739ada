// consul:// — the lock recipe of Consul's Go api/lock.go over the agent
// (consul_agent.hpp): a session per acquisition, acquire= on the key, blocking
// queries while waiting, the monitor of the held key, release and destroy.
#include "consul_lock.hpp"

#include <thread>

#include "consul_release_feed.hpp"
#include "consul_session.hpp"

namespace distlock::backends::consul {
namespace {

class handle final : public session_handle {
public:
    handle(agent& a, release_feed& f, const spi::lock_request& r);
    ~handle() override { monitor_.stop(); }  // before the fields examine() reads go

    // Asynchronous waits: the provider's one blocking listing of the prefix
    // (consul_release_feed.hpp); a failed attempt tells it whose session kept it out.
    std::unique_ptr<spi::wake_subscription> watch_releases(spi::wake_sink wake) override {
        std::shared_ptr<release_feed::watcher> w;
        auto sub = feed_.subscribe(key_, std::move(wake), w);
        watcher_ = w;
        return sub;
    }

private:
    std::optional<spi::grant> wait_and_acquire(spi::deadline until, spi::deadline created,
                                               const spi::loss_sink& lost) override;
    http::request monitor_request(std::uint64_t index) const override;
    std::optional<std::string> examine(const http::response& resp, std::uint64_t& next_index) override;
    bool give_back() override;
    std::string release_subject() const override { return "'" + request_.name + "'"; }

    // A failed attempt: the session that held the key, as the read of `index` showed it.
    void blocked(const entry& e) const {
        if (auto w = watcher_.lock()) feed_.blocked_by(w, e.session, e.index);
    }

    release_feed& feed_;
    std::weak_ptr<release_feed::watcher> watcher_;  // of the asynchronous wait under way, if any
    std::string key_, target_;                      // the key, and its /v1/kv/ URL path
};

handle::handle(agent& a, release_feed& f, const spi::lock_request& r)
    : session_handle(a, r, {"lock", "", "distlock: "}),
      feed_(f),
      key_(a.key_of(r.name)),
      target_(agent::key_target(key_)) {}

// `created`: when the session was asked for. The grant lives as long as the
// session, whose TTL runs from its last create or renew request at the latest.
std::optional<spi::grant> handle::wait_and_acquire(spi::deadline until, spi::deadline created,
                                                   const spi::loss_sink& lost) {
    const ms renew_every = std::max<ms>(50ms, request_.renew_interval);
    auto renewed = created;
    query_pace pace(request_.retry_min, request_.retry_max);  // also the lock-delay's backoff
    std::uint64_t index = 0;
    bool waited = false;  // another session held the key, or its lock-delay ran, before we got it
    for (;;) {
        pace.rest(until);  // a round that made no progress waits first
        auto now = spi::clock::now();
        renew_if_due(now, renewed, renew_every);
        const auto wait = query_wait(index, until, now, renewed, renew_every);
        if (!wait) {
            if (now >= until) return std::nullopt;
            continue;  // time to renew
        }
        const auto asked = spi::clock::now();
        entry e = agent_.read(key_, index, *wait);
        index = pace.saw(e.index, query_pace::waited_out(asked, *wait));
        if (e.exists && e.flags != kLockFlag)
            throw_error(errc::invalid_argument, kBackend,
                        "key " + key_ + " exists and is not a lock (flags " + std::to_string(e.flags) + ")");
        if (e.exists && !e.session.empty() && e.session != session_) {
            waited = true;
            if (spi::clock::now() >= until) {
                blocked(e);
                return std::nullopt;
            }
            continue;  // wait for them
        }
        if (!e.exists || e.session.empty()) {
            // The key's value is the holder label, as api/lock.go writes its
            // LockOptions.Value and Consul's leader election pattern the leader's
            // information; api/lock.go reads only the flags and the session.
            auto acquired = agent_.lock_op(key_, "acquire", session_, kLockFlag, request_.holder);
            if (!acquired) {  // our session is gone (expired while we waited, agent restarted)
                renewed = spi::clock::now();
                session_ = new_session();
                index = 0;
                pace.stall();
                continue;
            }
            if (!*acquired) {
                waited = true;
                if (spi::clock::now() >= until) {
                    // Refused: another session took it first, or a lock-delay
                    // runs (no event ends that: the safety poll does).
                    if (entry again = agent_.read(key_); again.exists && !again.session.empty()) blocked(again);
                    return std::nullopt;
                }
                entry again = agent_.read(key_);
                index = pace.saw(again.index);
                if (again.exists && !again.session.empty()) continue;  // someone else got it: wait for them
                // Free but refused: a lock-delay is in effect. Sleep and retry.
                index = 0;
                pace.stall();
                continue;
            }
        }
        // Ours: the ModifyIndex of the acquire is the fencing token.
        entry mine = agent_.read(key_);
        pace.saw(mine.index);
        if (!mine.exists || mine.session != session_) {
            index = 0;  // lost at once (session invalidated meanwhile): start over
            continue;
        }
        start_monitor(monitor_request(mine.index), mine.index, lost);
        return spi::grant{mine.modify_index, renewed, waited};
    }
}

// The monitor's blocking query on the key: answered once its index passes `index`.
http::request handle::monitor_request(std::uint64_t index) const {
    const ms wait = kMaxBlockingWait;
    return agent::get(target_ + "?index=" + std::to_string(std::max<std::uint64_t>(1, index)) +
                          "&wait=" + std::to_string(wait.count()) + "ms",
                      wait + wait / 16 + agent_.client().opts().request_timeout);
}

// The key as the monitor's query shows it: deleted, or held by another session.
std::optional<std::string> handle::examine(const http::response& resp, std::uint64_t& next_index) {
    entry e = agent::parse_entry(resp, "monitor");
    auto lk = monitor_.lock();
    if (!monitor_.running(lk)) return std::nullopt;
    std::string lost;
    if (!e.exists) lost = "lock key " + key_ + " was deleted";
    else if (e.session != monitored_session_)
        lost = e.session.empty() ? "lock key " + key_ + " was released by the server (session invalidated)"
                                 : "lock key " + key_ + " is held by another session";
    next_index = e.index;
    return lost;
}

// release= on the key, with the holder label as its value still (as api/lock.go
// releases with its LockOptions.Value); destroying the session afterwards also
// releases it, Behavior release, when this failed.
bool handle::give_back() {
    return agent_.lock_op(key_, "release", session_, kLockFlag, request_.holder).value_or(false);
}

}  // namespace

lock_info inspect(agent& a, std::string_view name) {
    lock_info info;
    const entry e = a.read(a.key_of(name));
    info.held = e.exists && !e.session.empty();
    info.unknown.emplace("waiters",
                         "Consul keeps no queue: contenders wait in blocking queries, which the server "
                         "does not count");
    if (!*info.held) return info;
    if (e.value.empty())
        info.unknown.emplace("holder",
                             "the key's value is empty: a holder that stores no label (api/lock.go and "
                             "`consul lock` without a LockOptions.Value)");
    else info.holder = e.value;
    info.token = e.modify_index;  // distlock's token: the ModifyIndex of the holder's acquire
    info.unknown.emplace("remaining",
                         "Consul does not show a session's time left (only its TTL), and it may keep "
                         "a session up to 2 x TTL after its last renewal");
    return info;
}

std::unique_ptr<spi::lock_handle> make_lock(agent& a, release_feed& f, const spi::lock_request& r) {
    return std::make_unique<handle>(a, f, r);
}

// Renewals due together (mutexes' and permits' sessions alike) go out
// concurrently on the loop.
void keepalive_batch(agent& a, std::span<spi::lock_handle* const> handles, std::span<spi::keepalive_result> results) {
    if (handles.size() == 1) {
        results[0] = a.renew(static_cast<session_handle*>(handles[0])->session());
        return;
    }
    std::vector<http::request> batch;
    for (auto* h : handles) batch.push_back(a.renew_request(static_cast<session_handle*>(h)->session()));
    auto replies = a.events().run_all(batch);
    for (std::size_t i = 0; i < handles.size(); ++i) results[i] = agent::renew_result(replies[i]);
}

}  // namespace distlock::backends::consul
