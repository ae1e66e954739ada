// consul:// — the lock recipe of Consul's Go api/lock.go over the agent
// (consul_agent.hpp): a session per acquisition, acquire= on the key, blocking
// queries while waiting, the monitor of the held key, release and destroy.
#include "consul_lock.hpp"

#include <thread>

#include "http_monitor.hpp"

namespace distlock::backends::consul {
namespace {

class handle final : public session_handle {
public:
    handle(agent& a, const spi::lock_request& r);
    std::optional<spi::grant> acquire(spi::deadline until, const spi::loss_sink& lost) override;
    void release() override;
    const std::string& session() const override { return session_; }

private:
    std::optional<spi::grant> wait_and_acquire(spi::deadline until, spi::deadline created, const spi::loss_sink& lost);
    http::request monitor_request(std::uint64_t index) const;
    void on_monitor(http::transfer_result r);
    void destroy_session() noexcept;

    agent& agent_;
    spi::lock_request request_;
    std::string key_, target_;  // the key, and its /v1/kv/ URL path
    std::string session_;
    std::uint64_t token_ = 0;

    std::string monitored_session_;  // under monitor_'s lock: the session that holds the key
    http::monitor monitor_;          // last: stopped before the fields its callbacks use go
};

handle::handle(agent& a, const spi::lock_request& r)
    : agent_(a),
      request_(r),
      key_(a.key_of(r.name)),
      target_(agent::key_target(key_)),
      monitor_(a.events(), nullptr, [this](http::transfer_result t) { on_monitor(std::move(t)); }) {}

std::optional<spi::grant> handle::acquire(spi::deadline until, const spi::loss_sink& lost) {
    const auto created = spi::clock::now();
    session_ = agent_.create_session(request_.lease, request_.name);
    std::optional<spi::grant> granted;
    try {
        granted = wait_and_acquire(until, created, lost);
    } catch (...) {
        destroy_session();
        throw;
    }
    if (!granted) destroy_session();
    return granted;
}

// `created`: when the session was asked for. The grant lives as long as the
// session, whose TTL runs from its last create or renew request at the latest.
std::optional<spi::grant> handle::wait_and_acquire(spi::deadline until, spi::deadline created, const spi::loss_sink& lost) {
    const ms renew_every = std::max<ms>(50ms, request_.renew_interval);
    auto renewed = created;
    spi::backoff lock_delay_wait(request_.retry_min, request_.retry_max);
    std::uint64_t index = 0;
    for (;;) {
        auto now = spi::clock::now();
        if (now - renewed >= renew_every) {  // waiting longer than TTL/3: keep the session alive
            auto r = agent_.renew(session_);
            if (r.state == spi::keepalive_result::status::lost) {
                now = spi::clock::now();
                session_ = agent_.create_session(request_.lease, request_.name);
            } else if (r.state == spi::keepalive_result::status::failed) {
                throw_error(errc::unavailable, kName, r.message);
            }
            renewed = now;
            now = spi::clock::now();
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
        entry e = agent_.read(key_, index, wait);
        if (e.exists && e.flags != kLockFlag)
            throw_error(errc::invalid_argument, kName,
                        "key " + key_ + " exists and is not a lock (flags " + std::to_string(e.flags) + ")");
        if (e.exists && !e.session.empty() && e.session != session_) {
            if (spi::clock::now() >= until) return std::nullopt;
            index = e.index < index ? 0 : e.index;  // an index going backwards restarts the query
            continue;
        }
        if (!e.exists || e.session.empty()) {
            auto acquired = agent_.lock_op(key_, "acquire", session_);
            if (!acquired) {  // our session is gone (expired while we waited, agent restarted)
                renewed = spi::clock::now();
                session_ = agent_.create_session(request_.lease, request_.name);
                index = 0;
                continue;
            }
            if (!*acquired) {
                if (spi::clock::now() >= until) return std::nullopt;
                entry again = agent_.read(key_);
                if (again.exists && !again.session.empty()) {
                    index = again.index;  // someone else got it: wait for them
                    continue;
                }
                // Free but refused: a lock-delay is in effect. Sleep and retry.
                if (!lock_delay_wait.sleep(until)) return std::nullopt;
                index = 0;
                continue;
            }
        }
        // Ours: the ModifyIndex of the acquire is the fencing token.
        entry mine = agent_.read(key_);
        if (!mine.exists || mine.session != session_) {
            index = 0;  // lost at once (session invalidated meanwhile): start over
            continue;
        }
        token_ = mine.modify_index;
        auto rq = monitor_request(mine.index);
        auto lk = monitor_.lock();
        monitored_session_ = session_;
        monitor_.start(lk, std::move(rq), lost);
        return spi::grant{token_, renewed};
    }
}

// The monitor's blocking query on the key: answered once its index passes `index`.
http::request handle::monitor_request(std::uint64_t index) const {
    const ms wait = kMaxBlockingWait;
    return agent::get(target_ + "?index=" + std::to_string(std::max<std::uint64_t>(1, index)) + "&wait=" +
                            std::to_string(wait.count()) + "ms",
                        wait + wait / 16 + agent_.client().opts().request_timeout);
}

// On the loop thread: the key changed, or the blocking query timed out/failed.
void handle::on_monitor(http::transfer_result r) {
    std::string lost;
    std::uint64_t next_index = 0;
    ms delay = 0ms;
    if (r.how == http::outcome::completed && (r.resp.status == 200 || r.resp.status == 404)) {
        try {
            entry e = agent::parse_entry(r.resp, "monitor");
            auto lk = monitor_.lock();
            if (!monitor_.running(lk)) return;
            if (!e.exists) lost = "lock key " + key_ + " was deleted";
            else if (e.session != monitored_session_)
                lost = e.session.empty() ? "lock key " + key_ + " was released by the server (session invalidated)"
                                         : "lock key " + key_ + " is held by another session";
            next_index = e.index;
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
    monitor_.restart(monitor_request(next_index), delay);
}

void handle::destroy_session() noexcept {
    if (session_.empty()) return;
    try {
        agent_.destroy(session_);
    } catch (...) {
        // The TTL removes it.
    }
    session_.clear();
}

void handle::release() {
    monitor_.stop();
    if (session_.empty()) throw_error(errc::not_owner, kName, "lock '" + request_.name + "' is not held");
    bool released = false;
    std::optional<error> failure;
    try {
        released = agent_.lock_op(key_, "release", session_).value_or(false);
    } catch (const error& e) {
        failure = e;
    }
    destroy_session();  // also releases the key (Behavior release) when the release above failed
    token_ = 0;
    // A transport failure leaves the outcome unknown; any other keeps its kind (a
    // token without the right to release, a server that is not Consul's API).
    if (failure)
        throw_error(failure->code_value() == errc::unavailable ? errc::in_doubt : failure->code_value(), kName,
                    "release of '" + request_.name + "': " + failure->reason(), failure->native_code(),
                    failure->native_message());
    if (!released)
        throw_error(errc::not_owner, kName, "lock '" + request_.name + "' was lost before its release");
}

}  // namespace

std::unique_ptr<spi::lock_handle> make_lock(agent& a, const spi::lock_request& r) {
    return std::make_unique<handle>(a, r);
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
