// The etcd semaphore's driver over the queue engine (etcd_queue.hpp), on the
// principles of the other recipes (etcd has none for a semaphore): a permit is
// granted when its key is among the first `permits` by create revision; the
// size is kept in a key, and another size is refused while any permit key
// stands. A waiter right behind the holders watches the range for any
// deletion; one further back watches the waiter just ahead of it.
#include <string>

#include "distlock/error.hpp"
#include "etcd_lock.hpp"
#include "etcd_queue.hpp"
#include "http/http_codec.hpp"

namespace distlock::backends::etcd {
namespace {

using namespace std::chrono_literals;
using http::base64_encode;

// A compare that holds while no key starts with `p`.
json none_under(const std::string& p) {
    json compare = created_at(p, 0);
    compare.update(prefix_range(p));
    return compare;
}

// A compare that holds while the size key `key` says `permits`.
json size_is(const std::string& key, const std::string& permits) {
    return json{
        {"key", base64_encode(key)}, {"target", "VALUE"}, {"result", "EQUAL"}, {"value", base64_encode(permits)}};
}

class permit_handle final : public queue {
public:
    permit_handle(gateway& g, const spi::lock_request& r) : queue(g, r) {}

private:
    // Ours among the first `permits`.
    bool granted_at_once(const json& first) const override {
        for (const auto& kv : first)
            if (as_i64(kv, "create_revision") == revision()) return true;
        return false;
    }
    std::size_t first_in_line() const override { return request().permits; }
    // Every key ahead of ours: the wait counts them.
    void narrow_ahead(json& range) const override { range["sort_order"] = "ASCEND"; }
    place place_of(const json& ahead) const override;
    void guard(json& compare, json& failure) const override;
    bool guard_failed(const json& responses, int round) override;
    bool counts_at_release() const override { return true; }
    void released(const json& responses) noexcept override;

    void settle_size(const json& size_kvs);
    void take_over_size(const std::string& theirs);
    void forget_size() noexcept;
};

// Our turn while fewer keys than permits are ahead. A waiter right behind the
// holders (as many keys ahead as permits) watches the range for any deletion;
// one further back watches the waiter just ahead of it for its deletion or for
// the put that waiter makes when granted (queue::mark_granted), after which it
// may be first in line.
queue::place permit_handle::place_of(const json& ahead) const {
    if (ahead.size() < std::size_t{request().permits}) return {true, {}, false, false};
    const bool whole_range = ahead.size() == request().permits;
    return {false, b64d(ahead[ahead.size() - 1], "key"), whole_range, !whole_range};
}

// Our size must be the one the semaphore is held with: the failure branch
// reads the size key third.
void permit_handle::guard(json& compare, json& failure) const {
    compare.push_back(size_is(where().size_key, std::to_string(request().permits)));
    failure.push_back({{"request_range", {{"key", base64_encode(where().size_key)}}}});
}

// No key of ours: the size key is missing or says another size.
bool permit_handle::guard_failed(const json& responses, int round) {
    if (responses.size() < 3) return false;
    // A lease of its own (no auto-renewal) has no key: give it back.
    if (!request().auto_renew) gate().revoke(lease());
    settle_size(range_kvs(responses, 2));
    if (round < 8) return true;
    throw_error(errc::unavailable, kBackend, "semaphore '" + request().name + "': its size key keeps changing");
}

// The last permit key is gone with ours: forget the size.
void permit_handle::released(const json& responses) noexcept {
    if (responses.size() >= 2 && as_i64(field(item(responses, 1), "response_range"), "count") == 0) forget_size();
}

// The semaphore's size key is missing or holds another size than ours: create
// it, or take it over when no permit key (holder or waiter) is left; refuses
// our size while keys of another size stand.
void permit_handle::settle_size(const json& size_kvs) {
    const auto mine = std::to_string(request().permits);
    const auto size = base64_encode(where().size_key);
    if (size_kvs.empty()) {
        gate().call(
            "/v3/kv/txn",
            json{{"compare", json::array({created_at(where().size_key, 0)})},
                 {"success", json::array({{{"request_put", {{"key", size}, {"value", base64_encode(mine)}}}}})}});
        return;
    }
    const auto theirs = b64d(size_kvs[0], "value");
    if (theirs != mine) take_over_size(theirs);  // else changed meanwhile
}

// The size key says `theirs`: put ours when no permit key is left; refuses
// ours while a key of that size stands.
void permit_handle::take_over_size(const std::string& theirs) {
    const auto mine = std::to_string(request().permits);
    const auto size = base64_encode(where().size_key);
    auto reply = gate().call(
        "/v3/kv/txn",
        json{{"compare", json::array({size_is(where().size_key, theirs), none_under(where().blockers)})},
             {"success", json::array({{{"request_put", {{"key", size}, {"value", base64_encode(mine)}}}}})},
             {"failure",
              json::array({{{"request_range", {{"key", size}}}}, {{"request_range", count_of(where().blockers)}}})}});
    if (flag(reply, "succeeded")) return;
    const auto& responses = list(reply, "responses");
    if (responses.size() < 2) return;
    const auto& now = range_kvs(responses, 0);
    const auto holders = as_i64(field(item(responses, 1), "response_range"), "count");
    if (!now.empty() && b64d(now[0], "value") == theirs && holders > 0) {
        std::string shown = theirs.size() > 20 ? theirs.substr(0, 20) + "..." : theirs;
        throw_error(errc::invalid_argument, kBackend,
                    "semaphore '" + request().name + "' is held with " + shown + " permits; this one asks for " + mine);
    }
}

// The last permit key of a semaphore is gone: delete its size key, unless a
// key came meanwhile (best effort: a size key left behind is taken over by the
// next client of another size, settle_size()).
void permit_handle::forget_size() noexcept {
    try {
        gate().call(
            "/v3/kv/txn",
            json{{"compare", json::array({none_under(where().blockers),
                                          size_is(where().size_key, std::to_string(request().permits))})},
                 {"success", json::array({{{"request_delete_range", {{"key", base64_encode(where().size_key)}}}}})}},
            2000ms);
    } catch (...) {}
}

}  // namespace

std::unique_ptr<spi::lock_handle> make_semaphore(gateway& g, const spi::lock_request& r) {
    return std::make_unique<permit_handle>(g, r);
}

}  // namespace distlock::backends::etcd
