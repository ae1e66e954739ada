// The renewal of held etcd locks (keepalive_batch): one keepalive per lease,
// then txns that check each held key still stands with its create revision,
// except the keys whose deletion the provider's live release stream will
// report (release_feed::vouches): at 100,000 held locks, 1,563 txns a period
// became none while the stream runs.
#include <algorithm>
#include <map>
#include <vector>

#include "etcd_gateway.hpp"
#include "etcd_lock.hpp"
#include "etcd_queue.hpp"
#include "http/http_codec.hpp"

namespace distlock::backends::etcd {
namespace {

using http::base64_encode;

const queue& held(spi::lock_handle* h) { return *static_cast<const queue*>(h); }

// One keepalive per session; a handle without one is lost.
std::vector<std::size_t> renew_sessions(gateway& g, std::span<spi::lock_handle* const> handles,
                                        std::span<spi::keepalive_result> results) {
    std::map<session*, spi::keepalive_result> by_session;
    for (auto* h : handles) {
        auto* s = held(h).current_session().get();
        if (s != nullptr && by_session.find(s) == by_session.end()) by_session.emplace(s, g.renew(*s));
    }
    std::vector<std::size_t> check;
    for (std::size_t i = 0; i < handles.size(); ++i) {
        auto* s = held(handles[i]).current_session().get();
        if (s == nullptr) {
            results[i] = spi::keepalive_result::lost("no session");
            continue;
        }
        results[i] = by_session[s];
        if (results[i].state == spi::keepalive_result::status::ok) check.push_back(i);
    }
    // Keys whose deletion the release stream will report are not read back.
    std::vector<release_feed::held_key> fed;
    std::vector<std::size_t> fed_at;
    for (auto i : check)
        if (held(handles[i]).on_release_feed()) {
            fed.emplace_back(&held(handles[i]).key(), held(handles[i]).revision());
            fed_at.push_back(i);
        }
    if (fed.empty()) return check;
    const auto vouched = g.releases().vouches(fed);
    std::vector<std::size_t> unvouched;
    for (std::size_t k = 0, f = 0; k < check.size(); ++k) {
        if (f < fed_at.size() && fed_at[f] == check[k]) {
            if (!vouched[f++]) unvouched.push_back(check[k]);
        } else {
            unvouched.push_back(check[k]);
        }
    }
    return unvouched;
}

// One txn that reads the keys of handles check[from, to).
void check_keys(gateway& g, std::span<spi::lock_handle* const> handles, std::span<spi::keepalive_result> results,
                const std::vector<std::size_t>& check, std::size_t from, std::size_t to) {
    json ops = json::array();
    for (auto k = from; k < to; ++k)
        ops.push_back(
            {{"request_range", {{"key", base64_encode(held(handles[check[k]]).key())}, {"keys_only", true}}}});
    try {
        auto* s = held(handles[check[from]]).current_session().get();
        auto reply = g.call("/v3/kv/txn", json{{"success", ops}}, g.renewal_timeout(*s));
        const auto& responses = list(reply, "responses");
        std::vector<release_feed::held_key> standing;  // on the release stream: not read again while it runs
        for (auto k = from; k < to; ++k) {
            const auto& h = held(handles[check[k]]);
            const auto& kvs = range_kvs(responses, k - from);
            if (kvs.empty() || as_i64(kvs[0], "create_revision") != h.revision())
                results[check[k]] = spi::keepalive_result::lost("lock key " + h.key() + " was deleted");
            else if (h.on_release_feed()) standing.emplace_back(&h.key(), h.revision());
        }
        if (!standing.empty()) g.releases().stood(standing, as_i64(field(reply, "header"), "revision"));
    } catch (const std::exception& e) {
        for (auto k = from; k < to; ++k) results[check[k]] = spi::keepalive_result::failed(e.what());
    }
}

}  // namespace

void keepalive_batch(gateway& g, std::span<spi::lock_handle* const> handles, std::span<spi::keepalive_result> results) {
    const auto check = renew_sessions(g, handles, results);
    for (std::size_t from = 0; from < check.size(); from += 64)
        check_keys(g, handles, results, check, from, std::min(check.size(), from + 64));
}

}  // namespace distlock::backends::etcd
