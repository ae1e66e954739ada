// redis:// internals: the engine of the read-write lock (rw_lock.cpp) and the
// semaphore (semaphore.cpp), in the layouts of Redisson's RReadWriteLock and
// RPermitExpirableSemaphore, so that a Java service using Redisson on the same
// object name shares them. `object` is the Redisson object name
// (strategy::object_name); its other keys follow Redisson's rules: suffix `s` ->
// `{object}:s` (or `object:s` when the name already has a `{`), prefix `p` ->
// `p:{object}` (or `p:object`). The engine (shared_lock.cpp) runs every such
// handle's acquire loop, release and batch renewal; each recipe gives its keys
// and its Lua. Never included outside backends/redis/.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "context.hpp"
#include "strategy.hpp"

namespace distlock::backends::redis {

// Server time in ms: leases and expiries are judged by the server's clock only.
inline constexpr const char* now_lua = R"lua(
local function now_ms()
  local t = redis.call('time')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
)lua";

// ---- Redisson's key names -----------------------------------------------------------

inline bool braced(const std::string& object) { return object.find('{') != std::string::npos; }
inline std::string suffix_name(const std::string& object, const std::string& s) {
    return braced(object) ? object + ":" + s : "{" + object + "}:" + s;
}
inline std::string prefix_name(const std::string& p, const std::string& object) {
    return braced(object) ? p + ":" + object : p + ":{" + object + "}";
}

// What one acquire script said: the grant (value = token), or to wait at most
// `value` ms (-1: no bound known), or that the request is refused.
enum class outcome { granted, busy, wrong_size, not_a_semaphore };

// A handle of a read-write lock or a semaphore: the acquire loop, the release
// and the renewal of a grant, over the scripts its recipe runs.
class handle_base : public shared_handle {
public:
    // `key`: the object's main key (every key of the object shares its hash slot).
    handle_base(context& ctx, const spi::lock_request& r, std::string key, std::string channel)
        : ctx_(ctx),
          request_(r),
          key_(std::move(key)),
          channel_(std::move(channel)),
          lease_ms_(std::to_string(r.lease.count())) {}

    std::optional<spi::grant> acquire(spi::deadline until, const spi::loss_sink&) override;
    void release() override;
    // Every message on the object's channel wakes the wait. Its one-attempt
    // acquire() calls are one acquisition (one owner or permit id; a writer
    // stays registered among the write waiters), given up when it ends.
    std::unique_ptr<spi::wake_subscription> watch_releases(spi::wake_sink wake) override;

    bool holding() const noexcept { return holding_; }
    const std::string& lease_ms() const noexcept { return lease_ms_; }
    const std::string& name() const noexcept { return request_.name; }

    // The renewal (renew_shared): this grant's keys and arguments in its kind's
    // batch script, and what a renewal that found it gone reports.
    virtual void renewal_item(std::vector<std::string_view>& keys, std::vector<std::string_view>& args) const = 0;
    virtual std::string lost_reason() const = 0;

protected:
    // A new owner / permit id for this acquisition.
    virtual void begin() = 0;
    // One acquire script; `waiting`: the caller will wait if it fails.
    virtual reply_ptr attempt(connection& c, bool waiting) = 0;
    virtual outcome read_outcome(long long status) const noexcept {
        return status == 1 ? outcome::granted : outcome::busy;
    }
    virtual reply_ptr run_release(connection& c) = 0;
    virtual bool released(long long reply) const noexcept { return reply >= 0; }
    // Leaves what a failed acquisition left (a waiting writer's entry).
    virtual void leave(connection&) {}

    context& ctx_;
    spi::lock_request request_;
    std::string key_, channel_, lease_ms_;

private:
    class async_wait;
    std::pair<outcome, long long> run_attempt(spi::deadline until, bool waiting);
    void give_up() noexcept;

    bool holding_ = false;
    // An asynchronous wait under way: `begun` once its first attempt began the
    // acquisition, `granted` once a grant ended it (nothing to give up).
    struct async_state {
        bool on = false, begun = false, granted = false;
    };
    async_state async_;
};

// The batch renewal scripts of read grants and write grants (rw_lock.cpp) and
// of permits (semaphore.cpp): topology::run_items' reply form, one 1 (renewed)
// or 0 (gone) per grant.
const script& read_renew_script();
const script& write_renew_script();
const script& permit_renew_script();

// The semaphore's keys that break_lock removes besides the object itself.
std::string permit_timeouts_key(const std::string& semaphore);

// What the layouts of Redisson's read-write lock and semaphore do not keep
// per grant (inspect declares it).
inline constexpr const char* no_grant_label =
    "Redisson's layout keeps no holder label per read grant or permit, only an owner id";
inline constexpr const char* no_grant_token =
    "the fencing counter is advanced at each grant; the layout keeps no token per grant";
// The grants' lease left, from their PTTLs (a list of integers, -1 for a key
// without expiry), into `out`; the reason under `field` when one has none.
void grants_from_pttls(const redisReply* list, std::vector<grant_info>& out,
                       std::map<std::string, std::string>& unknown, const std::string& prefix);

}  // namespace distlock::backends::redis
