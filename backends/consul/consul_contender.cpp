// consul:// — the contender pattern of Consul's Go api/semaphore.go (see
// consul_contender.hpp): sessions, contender keys, check-and-set of the
// document, blocking listings, the token, the monitor and the release.
#include "consul_contender.hpp"

#include <algorithm>

namespace distlock::backends::consul {
namespace {
constexpr int kMaxRaces = 64;  // check-and-set races in a row before a passed deadline counts
}  // namespace

// Behavior "delete": the contender key goes with the session (destroyed, or expired).
contender::contender(agent& a, const spi::lock_request& r, layout where, std::unique_ptr<const policy> p)
    : session_handle(a, r, {where.noun, "delete", where.session_name}),
      where_(std::move(where)),
      doc_key_(where_.doc_key()),
      policy_(std::move(p)) {}

namespace {
document document_in(const listing& l, const std::string& doc_key) {
    document d;
    for (const auto& e : l.entries) {
        if (!e.session.empty()) d.live.insert(e.session);
        if (e.key == doc_key) {
            d.exists = true;
            d.modify_index = e.modify_index;
            d.flags = e.flags;
            d.value = e.value;
        }
    }
    return d;
}
}  // namespace

document contender::read_document(const listing& l) const { return document_in(l, doc_key_); }

view look(agent& a, layout where) {
    const listing l = a.list(where.prefix);
    view v{std::move(where), {}, {}};
    v.doc = document_in(l, v.where.doc_key());
    for (const auto& e : l.entries)
        if (!e.session.empty() && e.key == v.where.prefix + e.session) v.contenders.emplace(e.session, e);
    return v;
}

std::string view::foreign() const {
    if (!doc.exists || doc.flags == where.flag) return {};
    return "key " + where.doc_key() + " is not a " + where.noun + "'s (flags " + std::to_string(doc.flags) + ", a " +
           where.noun + "'s are " + std::to_string(where.flag) + ")";
}

std::optional<std::string> label_in(const std::string& value, std::map<std::string, std::string>& unknown,
                                    const std::string& field) {
    if (value.empty()) {
        unknown.try_emplace(field,
                            "the key's value is empty: a holder that stores no label (Consul's Go api and "
                            "`consul lock` without a Value, or a distlock that did not store it yet)");
        return std::nullopt;
    }
    return value;  // (the core declares a label it will not show: control characters, over 255 bytes)
}

std::optional<std::vector<grant_info>> view::grants_of(const std::set<std::string>& sessions,
                                                       std::map<std::string, std::string>& unknown,
                                                       const std::string& field) const {
    constexpr std::size_t max_listed = 1000;
    if (sessions.size() > max_listed) {
        unknown.emplace(field, std::to_string(sessions.size()) + " grants: more than " + std::to_string(max_listed) +
                                   " are not listed");
        return std::nullopt;
    }
    std::vector<grant_info> out;
    for (const auto& s : sessions) out.push_back(grant_of(s, unknown, field));
    return out;
}

grant_info view::grant_of(const std::string& session, std::map<std::string, std::string>& unknown,
                          const std::string& field) const {
    grant_info g;
    unknown.try_emplace(field + ".remaining",
                        "Consul does not show a session's time left (only its TTL), and it may keep a session up "
                        "to 2 x TTL after its last renewal");
    const auto it = contenders.find(session);
    if (it == contenders.end()) {  // pruned as dead by read_state/read_coordination: not reached
        unknown.try_emplace(field + ".holder", "the session holds no contender key");
        unknown.try_emplace(field + ".token", "the session holds no contender key");
        return g;
    }
    g.holder = label_in(it->second.value, unknown, field + ".holder");
    // distlock's token: the ModifyIndex of the holder's re-acquire of its key after its admission.
    g.token = it->second.modify_index;
    return g;
}

// A document with other flags (a `consul lock` mutex on the same prefix, other
// data): refused, never overwritten.
void contender::refuse_foreign(const document& d) const {
    if (d.exists && d.flags != where_.flag)
        throw_error(errc::invalid_argument, kBackend,
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
    query_pace pace(request_.retry_min, request_.retry_max);
    std::uint64_t index = 0;
    bool entered = false;  // our contender key is there, held by session_
    bool waited = false;   // the document made us wait for other holders before admitting us
    int races = 0;
    for (;;) {
        pace.rest(until);  // a round that made no progress waits first
        auto now = spi::clock::now();
        if (renew_if_due(now, renewed, renew_every))
            entered = false;  // the old contender key went with the old session
        if (!entered) {
            // The key's value is the holder label, as api/semaphore.go keeps its Value there.
            auto made = agent_.lock_op(contender_key(), "acquire", session_, where_.flag, request_.holder);
            if (!made) {  // our session is gone (expired while we waited, agent restarted)
                renewed = spi::clock::now();
                session_ = new_session();
                pace.stall();
                continue;
            }
            if (!*made)
                throw_error(errc::unavailable, kBackend, "failed to make the contender entry " + contender_key());
            entered = true;
            index = 0;
        }
        const auto wait = query_wait(index, until, now, renewed, renew_every);
        if (!wait) {
            if (now >= until) return std::nullopt;
            continue;  // time to renew
        }
        const auto asked = spi::clock::now();
        listing l = agent_.list(where_.prefix, index, *wait);
        index = pace.saw(l.index, query_pace::waited_out(asked, *wait));
        auto d = read_document(l);
        refuse_foreign(d);
        if (!contending(l)) {  // the contender key was deleted (with the session?): make it again
            entered = false;
            continue;
        }
        auto next = policy_->decide(d, session_);
        if (next.what == step::kind::wait || next.what == step::kind::record) waited = true;
        if (next.what == step::kind::wait) {
            if (spi::clock::now() >= until) return std::nullopt;
            continue;  // a blocking listing until the prefix changes
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
        auto again = agent_.lock_op(contender_key(), "acquire", session_, where_.flag, request_.holder);
        entry key = agent_.read(contender_key());
        pace.saw(key.index);
        if (!again || !*again || !key.exists || key.session != session_) {
            entered = false;  // the session went meanwhile: the next listing prunes it
            index = 0;
            continue;
        }
        // The monitor's first listing does not block: whatever happened to the
        // document since the admission is seen at once.
        start_monitor(agent_.list_request(where_.prefix, 0, 0ms), 0, lost);
        return spi::grant{key.modify_index, renewed, waited};
    }
}

// The monitor's blocking listing of the prefix: answered once its index passes `index`.
http::request contender::monitor_request(std::uint64_t index) const {
    return agent_.list_request(where_.prefix, index, kMaxBlockingWait);
}

// The document as the monitor's listing shows it: deleted, overwritten, or
// without our session among its holders.
std::optional<std::string> contender::examine(const http::response& resp, std::uint64_t& next_index) {
    listing l = agent::parse_list(resp, "monitor");
    auto lk = monitor_.lock();
    if (!monitor_.running(lk)) return std::nullopt;
    auto d = read_document(l);
    std::string lost;
    if (!d.exists) lost = "the " + where_.noun + "'s key " + doc_key_ + " was deleted";
    else if (d.flags != where_.flag) lost = "the " + where_.noun + "'s key " + doc_key_ + " was overwritten";
    else if (!policy_->holds(d, monitored_session_))
        lost = "this grant's session is no longer among the holders in " + doc_key_ +
               " (the session was invalidated or its contender key deleted)";
    next_index = std::max<std::uint64_t>(1, l.index);
    return lost;
}

// Our session out of the document (the last holder deletes it), then our
// contender key deleted; the session's destruction afterwards also removes
// that key (Behavior delete) when this failed.
bool contender::give_back() {
    bool held = false, first = true, gone = false;  // gone: our session is out of the document
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
    if (!gone)
        throw_error(errc::unavailable, kBackend, "could not update " + doc_key_ + " (too many concurrent writers)");
    agent_.remove(contender_key());
    return held;
}

}  // namespace distlock::backends::consul
