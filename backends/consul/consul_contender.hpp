// consul:// internals: a grant coordinated the way Consul's Go api/semaphore.go
// coordinates its permits, for the recipes built on that pattern (the semaphore,
// consul_semaphore.cpp; the read-write lock, consul_rwlock.cpp):
//
//   - one session per acquisition (Behavior "delete"), and a contender key
//     <prefix><session> held by it (acquire=), so that the key disappears with
//     the session;
//   - one document key <prefix><doc> that says who holds what, written only by
//     check-and-set on its ModifyIndex;
//   - waiting = blocking listings of the prefix; a holder is alive while its
//     session holds a key under the prefix (the others prune it otherwise);
//   - the token = the ModifyIndex of the holder's own re-acquire of its
//     contender key after the admission; the monitor = blocking listings.
//
// A recipe supplies a policy (its decisions on the document: decide, holds,
// without); the contender (a session_handle, consul_session.hpp, as the mutex's
// grants are) does the sessions, the waiting, the token, the monitor and the
// release.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "consul_agent.hpp"
#include "consul_session.hpp"

namespace distlock::backends::consul {

// The document as a listing of the prefix shows it, with the sessions that are
// alive (that hold a key under the prefix).
struct document {
    bool exists = false;
    std::uint64_t modify_index = 0;  // 0 when absent: check-and-set then creates it
    std::uint64_t flags = 0;
    std::string value;
    std::set<std::string> live;
};

// What a recipe makes of the document for a contender.
struct step {
    enum class kind {
        held,    // the contender already holds (its admission was written)
        write,   // admit it: check-and-set `value` (on the document's ModifyIndex), then held
        record,  // check-and-set `value` (a mark such as a waiting writer), then wait
        wait,    // wait for the prefix to change
    };
    kind what = kind::wait;
    std::string value;
};

// A recipe's decisions on its document (the semaphore's, the read-write lock's).
class policy {
public:
    virtual ~policy() = default;
    // The next step of `me` (the document's flags are checked already). Throws
    // invalid_argument_error when the document cannot be used (another
    // primitive's value, a size conflict).
    virtual step decide(const document& d, const std::string& me) const = 0;
    // Whether `me` holds, as the document says once pruned of dead sessions.
    virtual bool holds(const document& d, const std::string& me) const = 0;
    // The document's value without `me` (and without dead sessions): nullopt when
    // `me` is not in it; "" when nobody is left (the document is then deleted).
    virtual std::optional<std::string> without(const document& d, const std::string& me) const = 0;
};

// Where a recipe keeps its keys: `prefix` ends with '/'; `doc` is the
// document's name under it; `flag` the flags of every key the recipe writes;
// `noun` what it is in messages ("semaphore"); `session_name` the start of its
// sessions' names.
struct layout {
    std::string prefix;
    std::string doc;
    std::uint64_t flag = 0;
    std::string noun;
    std::string session_name;

    std::string doc_key() const { return prefix + doc; }
};

class contender final : public session_handle {
public:
    contender(agent& a, const spi::lock_request& r, layout where, std::unique_ptr<const policy> p);
    ~contender() override { monitor_.stop(); }  // before the fields examine() reads go

private:
    std::optional<spi::grant> wait_and_acquire(spi::deadline until, spi::deadline created,
                                               const spi::loss_sink& lost) override;
    http::request monitor_request(std::uint64_t index) const override;
    std::optional<std::string> examine(const http::response& resp, std::uint64_t& next_index) override;
    bool give_back() override;
    document read_document(const listing& l) const;
    void refuse_foreign(const document& d) const;  // invalid_argument_error for another's flags
    bool contending(const listing& l) const;       // our session holds our contender key
    std::string contender_key() const { return where_.prefix + session_; }

    layout where_;
    std::string doc_key_;
    std::unique_ptr<const policy> policy_;
};

// A recipe's keys as one listing of its prefix shows them (the primitives'
// inspect): the document, and the contender key of each live session.
struct view {
    layout where;
    document doc;
    std::map<std::string, entry> contenders;  // session -> its key <prefix><session>
    // Why the document is not this recipe's (other flags); "" = it is, or is absent.
    std::string foreign() const;
    // The grant of `session` as its contender key shows it: the holder label (the
    // key's value, as api/semaphore.go keeps its Value there) and the token (its
    // ModifyIndex); what it cannot show is declared in `unknown` as
    // "<field>.holder", "<field>.token", "<field>.remaining".
    grant_info grant_of(const std::string& session, std::map<std::string, std::string>& unknown,
                        const std::string& field) const;
    // grant_of each of `sessions`; nullopt, with the reason under `field`, past
    // 1,000 (an inspect lists no more).
    std::optional<std::vector<grant_info>> grants_of(const std::set<std::string>& sessions,
                                                     std::map<std::string, std::string>& unknown,
                                                     const std::string& field) const;
};
view look(agent& a, layout where);

// A holder label as a key's value shows it, or why not (declared under `field`).
std::optional<std::string> label_in(const std::string& value, std::map<std::string, std::string>& unknown,
                                    const std::string& field);

// A handle of the recipe whose document is where.doc_key(): `make_policy(key)` makes its policy.
template <class MakePolicy>
std::unique_ptr<spi::lock_handle> make_contender(agent& a, const spi::lock_request& r, layout where,
                                                 MakePolicy make_policy) {
    std::unique_ptr<const policy> p = make_policy(where.doc_key());
    return std::make_unique<contender>(a, r, std::move(where), std::move(p));
}

}  // namespace distlock::backends::consul
