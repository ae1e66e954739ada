// consul:// — the contender pattern of Consul's Go api/semaphore.go (see
// consul_contender.hpp): sessions, contender keys, check-and-set of the
// document, blocking listings, the token, the monitor and the release.
#include "consul_contender.hpp"

#include <algorithm>

namespace distlock::backends::consul {
namespace {
constexpr int kMaxRaces = 64;  // check-and-set races in a row before a passed deadline counts
}  // namespace

contender::contender(agent& a, const spi::lock_request& r, layout where, std::unique_ptr<const policy> p)
    : agent_(a),
      request_(r),
      where_(std::move(where)),
      doc_key_(where_.prefix + where_.doc),
      policy_(std::move(p)),
      monitor_(a.events(), nullptr, [this](http::transfer_result t) { on_monitor(std::move(t)); }) {}

std::string contender::new_session() {
    return agent_.create_session(request_.lease, request_.name, "delete", where_.session_name.c_str());
}

std::optional<spi::grant> contender::acquire(spi::deadline until, const spi::loss_sink& lost) {
    const auto created = spi::clock::now();
    session_ = new_session();
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

document contender::read_document(const listing& l) const {
    document d;
    for (const auto& e : l.entries) {
        if (!e.session.empty()) d.live.insert(e.session);
        if (e.key == doc_key_) {
            d.exists = true;
            d.modify_index = e.modify_index;
            d.flags = e.flags;
            d.value = e.value;
        }
    }
    return d;
}

// A document with other flags (a `consul lock` mutex on the same prefix, other
// data): refused, never overwritten.
void contender::refuse_foreign(const document& d) const {
    if (d.exists && d.flags != where_.flag)
        throw_error(errc::invalid_argument, kName,
                    "key " + doc_key_ + " exists and is not a " + where_.noun + "'s (flags " + std::to_string(d.flags) +
                        ", a " + where_.noun + "'s are " + std::to_string(where_.flag) + ")");
}

bool contender::contending(const listing& l) const {
    const auto key = contender_key();
    return std::any_of(l.entries.begin(), l.entries.end(),
                       [&](const entry& e) { return e.key == key && e.session == session_; });
}

// `created`: when the session was asked for. The grant lives as long as the
// session, whose TTL runs from its last create or renew request at the latest.
std::optional<spi::grant> contender::wait_and_acquire(spi::deadline until, spi::deadline created,
                                                      const spi::loss_sink& lost) {
    const ms renew_every = std::max<ms>(50ms, request_.renew_interval);
    auto renewed = created;
    std::uint64_t index = 0;
    bool entered = false;  // our contender key is there, held by session_
    int races = 0;
    for (;;) {
        auto now = spi::clock::now();
        if (now - renewed >= renew_every) {  // waiting longer than TTL/3: keep the session alive
            auto r = agent_.renew(session_);
            if (r.state == spi::keepalive_result::status::lost) {
                now = spi::clock::now();
                session_ = new_session();
                entered = false;  // the old contender key went with the old session
            } else if (r.state == spi::keepalive_result::status::failed) {
                throw_error(errc::unavailable, kName, r.message);
            }
            renewed = now;
            now = spi::clock::now();
        }
        if (!entered) {
            auto made = agent_.lock_op(contender_key(), "acquire", session_, where_.flag);
            if (!made) {  // our session is gone (expired while we waited, agent restarted)
                renewed = spi::clock::now();
                session_ = new_session();
                continue;
            }
            if (!*made) throw_error(errc::unavailable, kName, "failed to make the contender entry " + contender_key());
            entered = true;
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
        listing l = agent_.list(where_.prefix, index, wait);
        auto d = read_document(l);
        refuse_foreign(d);
        if (!contending(l)) {  // the contender key was deleted (with the session?): make it again
            entered = false;
            continue;
        }
        auto next = policy_->decide(d, session_);
        if (next.what == step::kind::wait) {
            if (spi::clock::now() >= until) return std::nullopt;
            index = l.index < index ? 0 : l.index;  // an index going backwards restarts the query
            continue;
        }
        if (next.what == step::kind::record && spi::clock::now() >= until)
            return std::nullopt;  // no time to wait: no mark to leave behind
        if (next.what != step::kind::held) {
            if (!agent_.cas_put(doc_key_, d.modify_index, where_.flag, std::move(next.value))) {
                // Another contender wrote the document first: list again at once.
                if (++races > kMaxRaces && spi::clock::now() >= until) return std::nullopt;
                index = 0;
                continue;
            }
            if (next.what == step::kind::record) {
                index = 0;  // our mark is written: the next listing shows it (and decides to wait)
                continue;
            }
        }
        // Admitted. The token: a write to our own contender key, after the admission.
        auto again = agent_.lock_op(contender_key(), "acquire", session_, where_.flag);
        entry key = agent_.read(contender_key());
        if (!again || !*again || !key.exists || key.session != session_) {
            entered = false;  // the session went meanwhile: the next listing prunes it
            index = 0;
            continue;
        }
        // The monitor's first listing does not block: whatever happened to the
        // document since the admission is seen at once.
        auto rq = agent_.list_request(where_.prefix, 0, 0ms);
        auto lk = monitor_.lock();
        monitored_session_ = session_;
        monitor_.start(lk, std::move(rq), lost);
        return spi::grant{key.modify_index, renewed};
    }
}

// On the loop thread: the prefix changed, or the blocking query timed out/failed.
void contender::on_monitor(http::transfer_result r) {
    std::string lost;
    std::uint64_t next_index = 0;
    ms delay = 0ms;
    if (r.how == http::outcome::completed && (r.resp.status == 200 || r.resp.status == 404)) {
        try {
            listing l = agent::parse_list(r.resp, "monitor");
            auto lk = monitor_.lock();
            if (!monitor_.running(lk)) return;
            auto d = read_document(l);
            if (!d.exists) lost = "the " + where_.noun + "'s key " + doc_key_ + " was deleted";
            else if (d.flags != where_.flag) lost = "the " + where_.noun + "'s key " + doc_key_ + " was overwritten";
            else if (!policy_->holds(d, monitored_session_))
                lost = "this grant's session is no longer among the holders in " + doc_key_ +
                       " (the session was invalidated or its contender key deleted)";
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
    monitor_.restart(agent_.list_request(where_.prefix, next_index, kMaxBlockingWait), delay);
}

void contender::destroy_session() noexcept {
    if (session_.empty()) return;
    try {
        agent_.destroy(session_);
    } catch (...) {
        // The TTL removes it (and, Behavior delete, the contender key).
    }
    session_.clear();
}

void contender::release() {
    monitor_.stop();
    if (session_.empty()) throw_error(errc::not_owner, kName, where_.noun + " '" + request_.name + "' is not held");
    bool held = false, first = true, gone = false;  // gone: our session is out of the document
    std::optional<error> failure;
    try {
        for (int attempt = 0; attempt < kMaxRaces && !gone; ++attempt) {
            listing l = agent_.list(where_.prefix);
            auto d = read_document(l);
            const bool ours = d.exists && d.flags == where_.flag;
            if (first) {
                // Ours only while our session still holds our contender key (else
                // the session was invalidated and others may have pruned us already).
                held = ours && contending(l) && policy_->holds(d, session_);
                first = false;
            }
            auto rest = ours ? policy_->without(d, session_) : std::nullopt;
            if (!rest) {
                gone = true;
                break;
            }
            // The last holder removes the document, as `consul lock`'s cleanup (Destroy) does.
            gone = rest->empty() ? agent_.cas_delete(doc_key_, d.modify_index)
                                 : agent_.cas_put(doc_key_, d.modify_index, where_.flag, std::move(*rest));
        }
        if (!gone) throw_error(errc::unavailable, kName, "could not update " + doc_key_ + " (too many concurrent writers)");
        agent_.remove(contender_key());
    } catch (const error& e) {
        failure = e;
    }
    destroy_session();  // Behavior delete: also removes the contender key when the delete above failed
    if (failure)
        throw_error(failure->code_value() == errc::unavailable ? errc::in_doubt : failure->code_value(), kName,
                    "release of " + where_.noun + " '" + request_.name + "': " + failure->reason(),
                    failure->native_code(), failure->native_message());
    if (!held) throw_error(errc::not_owner, kName, where_.noun + " '" + request_.name + "' was lost before its release");
}

}  // namespace distlock::backends::consul
