// The Redis client layer (redis_client.hpp): the dedicated pub/sub connection
// of a provider, with a reader thread of its own. Waiters subscribe to a
// channel and wait for a message on it, or listen to it: a callback per message
// (asynchronous waiters). Used by redis:// to wake its waiters.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "redis_client.hpp"

namespace distlock::backends::redis_client {

// The dedicated pub/sub connection of a provider.
class subscriber {
public:
    explicit subscriber(endpoint ep);
    // Connects where `locate(after_failure)` says each time (a Sentinel's
    // current master, the cluster node of a slot); `after_failure`: the last
    // connection failed or dropped. An endpoint with `sharded` makes it use
    // SSUBSCRIBE (Redis Cluster's sharded pub/sub).
    subscriber(std::function<endpoint(bool after_failure)> locate, bool sharded, std::string backend_name);
    ~subscriber();
    subscriber(const subscriber&) = delete;
    subscriber& operator=(const subscriber&) = delete;

    enum class wake { message, timeout, broken };

    class subscription {
    public:
        subscription(subscriber& s, std::string channel) : sub_(s), channel_(std::move(channel)) {}
        ~subscription() { sub_.release(channel_); }
        subscription(const subscription&) = delete;
        subscription& operator=(const subscription&) = delete;
        // Messages received on the channel since it was subscribed.
        std::uint64_t messages() const { return sub_.messages(channel_); }
        // Payloads of the messages after the first `seen` (at most the last 32;
        // `complete` is false when older ones were dropped); moves `seen` on.
        std::vector<std::string> payloads_since(std::uint64_t& seen, bool& complete) const {
            return sub_.payloads_since(channel_, seen, complete);
        }
        // Waits until a message beyond `seen` arrives, `until` passes, or the
        // pub/sub connection is down (then the caller must fall back to backoff).
        wake wait(std::uint64_t seen, deadline until) { return sub_.wait(channel_, seen, until); }
        bool confirmed() const { return sub_.confirmed(channel_); }

    private:
        subscriber& sub_;
        std::string channel_;
    };

    // Subscribes and waits (until `confirm_until` at most) for the server's
    // confirmation, so that a message published after this returns is seen.
    std::unique_ptr<subscription> subscribe(const std::string& channel, deadline confirm_until);

    // What a listener is called with: a message's payload, or nullopt when the
    // channel was subscribed again after the connection broke (messages may
    // have been missed meanwhile). Called by the reader thread under the
    // subscriber's lock: it must be quick and must not call the subscriber.
    using on_message = std::function<void(std::optional<std::string_view> payload)>;

    // A subscription whose messages go to a callback until it is destroyed (its
    // destructor returns after any call under way, and none comes after).
    class listener {
    public:
        listener(subscriber& s, std::string channel, std::uint64_t id)
            : sub_(s), channel_(std::move(channel)), id_(id) {}
        ~listener() { sub_.unlisten(channel_, id_); }
        listener(const listener&) = delete;
        listener& operator=(const listener&) = delete;
        bool confirmed() const { return sub_.confirmed(channel_); }

    private:
        subscriber& sub_;
        std::string channel_;
        std::uint64_t id_;
    };

    // Subscribes as subscribe() does (sharing the channel with every other
    // subscription and listener of it), and calls `f` for each message from now on.
    std::unique_ptr<listener> listen(const std::string& channel, on_message f, deadline confirm_until);
    // Channels subscribed now (or being subscribed), and listeners registered.
    std::size_t channel_count();
    std::size_t listener_count();

    // A subscription that is still confirmed (a recent waiter's, kept for a
    // second after its last user left), or null: no server traffic either way.
    std::unique_ptr<subscription> reuse(const std::string& channel);

    // How long an unused subscription is kept before UNSUBSCRIBE, and how many.
    static constexpr std::chrono::milliseconds linger{1000};
    static constexpr std::size_t max_lingering = 256;

private:
    struct channel_state {
        int refs = 0;            // live subscriptions
        int pending = 0;         // SUBSCRIBE sent, confirmation not yet read
        bool wanted = false;     // the last command sent for it was SUBSCRIBE
        bool confirmed = false;  // the server confirmed the last SUBSCRIBE
        std::uint64_t messages = 0;
        std::deque<std::string> recent;                 // payloads of the last messages (at most 32)
        clock::time_point idle_since{};                 // refs == 0 but still subscribed (lingering)
        std::map<std::uint64_t, on_message> listeners;  // each also counts in refs
        bool broke = false;  // the connection broke since the last confirmation: tell the listeners
    };
    channel_state& subscribe_locked(std::unique_lock<std::mutex>& lk, const std::string& channel,
                                    deadline confirm_until);
    void unlisten(const std::string& channel, std::uint64_t id);
    void sweep_locked(bool all_expired_only);  // mutex_ held: UNSUBSCRIBE lingering channels
    std::vector<std::string> payloads_since(const std::string& channel, std::uint64_t& seen, bool& complete);
    void release(const std::string& channel);
    std::uint64_t messages(const std::string& channel);
    bool confirmed(const std::string& channel);
    wake wait(const std::string& channel, std::uint64_t seen, deadline until);
    void send_locked(const std::vector<std::string_view>& args);  // mutex_ held
    void run();
    void on_reply(redisReply* r);                         // mutex_ held
    void drop_connection_locked(const std::string& why);  // mutex_ held

    std::function<endpoint(bool)> locate_;
    std::string subscribe_, unsubscribe_;  // SUBSCRIBE / SSUBSCRIBE and their opposites
    std::string backend_name_;
    std::mutex mutex_;
    std::condition_variable cv_;
    std::map<std::string, channel_state, std::less<>> channels_;
    // Read by the reader thread, written by any (send_now: SUBSCRIBE, UNSUBSCRIBE),
    // always under mutex_ (over TLS both go through one SSL session). fd_ too.
    std::unique_ptr<connection> conn_;
    int fd_ = -1;
    std::chrono::milliseconds send_timeout_{0};  // the connection's command timeout
    std::uint64_t breaks_ = 0;                   // bumped whenever the connection drops
    bool up_ = false;
    bool stop_ = false;
    std::uint64_t next_listener_ = 0;
    int wake_pipe_[2] = {-1, -1};
    std::thread thread_;
};

}  // namespace distlock::backends::redis_client
