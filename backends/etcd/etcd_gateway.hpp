// etcd's v3 JSON gateway as the lock recipe (etcd_lock.cpp) uses it: POSTs of
// JSON bodies (KV range, txn and deleterange; lease grant, keepalive and
// revoke; watch requests), error replies as distlock errors, authentication
// (a token renewed once when it expires), and the sessions: one lease per TTL
// shared by a provider's locks, renewed by the core scheduler through the
// recipe, with the keys whose deletion failed deleted before each renewal.
#pragma once

#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "distlock/error.hpp"
#include "distlock/spi/backend.hpp"
#include "http/http_multi.hpp"
#include "http/http_options.hpp"
#include "http/http_pool.hpp"
#include "http/http_transfer.hpp"

namespace distlock::backends::etcd {

using json = nlohmann::json;

inline constexpr const char* kBackend = "etcd";

// The gateway's JSON: 64-bit integers as strings (0 when absent or malformed),
// bytes as base64 ("" when absent).
std::int64_t as_i64(const json& j, const char* key);
std::string b64d(const json& j, const char* key);
// Readers of a reply that never throw and never read out of bounds, whatever
// the server sent (nlohmann's value() throws on a wrong type, and its const
// operator[] is undefined for a missing key or index): j[key] or null;
// j[i] or null; j[key] when it is an array, else an empty one (a reference,
// never a copy: copies recurse); whether j[key] is true; j[key] when it is a
// string, else "".
const json& field(const json& j, const char* key);
const json& item(const json& j, std::size_t i);
const json& list(const json& j, const char* key);
bool flag(const json& j, const char* key);
std::string text(const json& j, const char* key);
// An error reply's error (a string, or the {"message": ...} object of a watch
// stream's error), in at most 300 bytes: never dump() of what the server sent.
std::string error_text(const json& error);
// The kvs of the range response at `i` of a txn's responses ([] when absent).
const json& range_kvs(const json& responses, std::size_t i);
// A watch stream's message: the gateway wraps it in "result" (older ones did not).
const json& message_result(const json& msg);
// etcd's longest lease (MaxLeaseTTL: 9,000,000,000 s, about 285 years). A
// reply's TTL past it is not etcd's, and would overflow chrono arithmetic.
inline constexpr std::int64_t kMaxLeaseSeconds = 9'000'000'000;
// A reply's TTL in seconds, clamped to [0, kMaxLeaseSeconds].
std::chrono::seconds lease_seconds(std::int64_t ttl);
// The revision after `revision` (saturating: a reply may say INT64_MAX).
std::int64_t after(std::int64_t revision);
// The end of the range of every key starting with p.
std::string prefix_end(std::string p);
std::string lease_hex(std::int64_t id);

// A gRPC status of the gateway's error reply that a caller may handle (NOT_FOUND:
// a lease gone; FAILED_PRECONDITION). One that no caller handles leaves as what
// it is: an unavailable_error.
struct grpc_error : unavailable_error {
    int code;
    grpc_error(int c, const std::string& m) : unavailable_error(errc::unavailable, kBackend, m, c, m), code(c) {}
};

struct settings {
    std::string prefix = "/distlock";
    std::chrono::milliseconds default_ttl{std::chrono::seconds(60)};
    std::string user, password;
};

// A lease shared by the locks of one provider that use the same TTL.
struct session {
    std::int64_t id = 0;
    std::chrono::seconds ttl{0};
    // Held while orphan keys are deleted (renew), and by a mutex's acquire while
    // it drops the orphan entries of the key it is about to create: a mutex's key
    // (<dir><lease hex>, value = the holder label) is the same for every
    // acquisition of its name on this lease, so an orphan of an earlier one must
    // never be deleted once a later one may have made the key again.
    std::mutex cleaning;
    std::mutex mutex;  // guards the fields below
    // Keys of ours whose deletion failed (key, value of that acquisition): deleted
    // before the next renewal, only while they still hold that value.
    std::vector<std::pair<std::string, std::string>> orphans;
    spi::clock::time_point renewed;  // last grant or successful keepalive
    std::atomic<bool> dead{false};   // the server said the lease is gone
};

class release_feed;

class gateway {
public:
    // Authenticates when settings name a user.
    gateway(http::options o, settings s);
    // Revokes the leases of the sessions still alive.
    ~gateway();
    gateway(const gateway&) = delete;
    gateway& operator=(const gateway&) = delete;

    const settings& config() const { return settings_; }
    http::client& client() { return client_; }
    http::loop& events() { return loop_; }
    // The one watch stream that wakes asynchronous waiters (etcd_release_feed.hpp).
    release_feed& releases() { return *releases_; }

    // POSTs a JSON body and returns the JSON reply. Throws grpc_error for an
    // error reply the caller may want to handle, distlock errors otherwise.
    json call(const std::string& path, const json& body,
              std::chrono::milliseconds timeout = std::chrono::milliseconds{0});

    // A watch of `key` (of every key in [key, range_end) when range_end is
    // given) from revision `from` (0 = now), streamed for `timeout`; `no_put`
    // leaves out the PUT events (deletions only).
    static http::request watch(const std::string& key, std::int64_t from, std::chrono::milliseconds timeout,
                               const std::string& range_end = {}, bool no_put = false);

    // The lease for `lease` (rounded up to whole seconds), fresh enough that a
    // key put now outlives the first renewal: renewed when TTL/3 has passed.
    //
    // `shared` = false: a lease of its own (a lock without auto-renewal must not
    // be kept alive by the renewals of the provider's other locks).
    std::shared_ptr<session> session_for(std::chrono::milliseconds lease, bool shared = true);
    void revoke(session& s) noexcept;
    // Deletes the session's orphan keys, then keeps its lease alive. Never throws.
    spi::keepalive_result renew(session& s) noexcept;
    // A renewal that waits longer than a third of the TTL on a hung member would
    // cost the lease: give up sooner and let the next request try another member.
    std::chrono::milliseconds renewal_timeout(const session& s) const;
    // Requests sent so far by call() and keepalives (tests count round trips).
    std::uint64_t requests() const noexcept { return requests_.load(); }
    // A key of ours whose deletion failed: deleted before the next renewal.
    void add_orphan(session& s, const std::string& key, const std::string& value);
    // Drops the orphan entries of `key` (its next acquisition deletes a stale
    // key itself), after any deletion of orphans under way has finished.
    void forget_orphan(session& s, const std::string& key);

private:
    [[noreturn]] void throw_not_gateway(const std::string& path, const http::response& resp);
    [[noreturn]] void throw_grpc(const std::string& path, int code, const std::string& message,
                                 const std::string& endpoint);
    void delete_orphans(session& s);
    spi::keepalive_result keepalive(session& s);
    std::shared_ptr<session> grant(std::int64_t ttl);
    void authenticate();

    http::client client_;
    settings settings_;
    http::loop loop_{client_};                                   // after client_: stopped before it
    std::mutex grant_mutex_;                                     // one grant at a time
    std::mutex mutex_;                                           // guards sessions_
    std::map<std::int64_t, std::shared_ptr<session>> sessions_;  // TTL seconds -> lease
    std::atomic<std::uint64_t> requests_{0};
    std::unique_ptr<release_feed> releases_;  // after loop_: stopped before it
};

}  // namespace distlock::backends::etcd
