// consul:// — what the session-per-acquisition handles share (consul_session.hpp).
#include "consul_session.hpp"

namespace distlock::backends::consul {

session_handle::session_handle(agent& a, const spi::lock_request& r, session_kind kind)
    : agent_(a),
      request_(r),
      kind_(std::move(kind)),
      monitor_(a.events(), nullptr, [this](http::transfer_result t) { on_monitor(std::move(t)); }) {}

std::string session_handle::new_session() {
    return agent_.create_session(request_.lease, request_.name, kind_.behavior, kind_.session_name.c_str());
}

std::optional<spi::grant> session_handle::acquire(spi::deadline until, const spi::loss_sink& lost) {
    const auto created = spi::clock::now();
    session_ = new_session();
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

bool session_handle::renew_if_due(spi::deadline& now, spi::deadline& renewed, ms renew_every) {
    if (now - renewed < renew_every) return false;  // waiting longer than TTL/3: keep the session alive
    bool replaced = false;
    auto r = agent_.renew(session_);
    if (r.state == spi::keepalive_result::status::lost) {
        now = spi::clock::now();
        session_ = new_session();
        replaced = true;
    } else if (r.state == spi::keepalive_result::status::failed) {
        throw_error(errc::unavailable, kBackend, r.message);
    }
    renewed = now;
    now = spi::clock::now();
    return replaced;
}

std::optional<ms> session_handle::query_wait(std::uint64_t index, spi::deadline until, spi::deadline now,
                                             spi::deadline renewed, ms renew_every) {
    if (index == 0) return 0ms;
    const ms wait = std::min({std::chrono::duration_cast<ms>(until - now), kMaxBlockingWait,
                              renew_every - std::chrono::duration_cast<ms>(now - renewed)});
    if (wait <= 0ms) return std::nullopt;
    return wait;
}

std::uint64_t query_pace::saw(std::uint64_t got, bool waited_out) {
    progress_ = got > last_ || waited_out;
    if (progress_) idle_ = spi::backoff(min_, max_);
    if (got == 0) return 0;              // no index: a query that does not block
    const bool backwards = got < last_;  // reset by the servers (a restore): start again
    last_ = got;
    return backwards ? 0 : got;
}

void query_pace::rest(spi::deadline until) {
    if (!progress_) idle_.sleep(until);
}

void session_handle::start_monitor(http::request rq, std::uint64_t index, const spi::loss_sink& lost) {
    auto lk = monitor_.lock();
    monitored_session_ = session_;
    monitored_index_ = index;
    monitor_.start(lk, std::move(rq), lost);
}

// On the loop thread: the watched keys changed, or the blocking query timed out/failed.
void session_handle::on_monitor(http::transfer_result r) {
    std::string lost;
    std::uint64_t next_index = 0;
    ms delay = 0ms;
    if (r.how == http::outcome::completed && (r.resp.status == 200 || r.resp.status == 404)) {
        try {
            auto verdict = examine(r.resp, next_index);
            if (!verdict) return;
            lost = std::move(*verdict);
            // Consul's rules, as query_pace: an index that went backwards (or is
            // missing) restarts at 0; an answer that moved nothing waits first,
            // unless the query waited its course (a blocking query's timeout).
            std::uint64_t asked;
            {
                auto lk = monitor_.lock();
                asked = monitored_index_;
                monitored_index_ = next_index < asked ? 0 : next_index;
                next_index = monitored_index_;
            }
            delay = monitor_.pace(next_index > asked, kMaxBlockingWait / 2);
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

void session_handle::destroy_session() noexcept {
    if (session_.empty()) return;
    try {
        agent_.destroy(session_);
    } catch (...) {
        // The TTL removes it (and, Behavior delete, a contender's key).
    }
    session_.clear();
}

std::string session_handle::release_subject() const { return kind_.noun + " '" + request_.name + "'"; }

void session_handle::release() {
    monitor_.stop();
    if (session_.empty()) throw_error(errc::not_owner, kBackend, kind_.noun + " '" + request_.name + "' is not held");
    bool held = false;
    std::optional<error> failure;
    try {
        held = give_back();
    } catch (const error& e) {
        failure = e;
    }
    destroy_session();  // also gives the grant back (its Behavior) when give_back failed
    // A transport failure leaves the outcome unknown; any other keeps its kind (a
    // token without the right to release, a server that is not Consul's API).
    if (failure)
        throw_error(failure->code_value() == errc::unavailable ? errc::in_doubt : failure->code_value(), kBackend,
                    "release of " + release_subject() + ": " + failure->reason(), failure->native_code(),
                    failure->native_message());
    if (!held)
        throw_error(errc::not_owner, kBackend, kind_.noun + " '" + request_.name + "' was lost before its release");
}

}  // namespace distlock::backends::consul
