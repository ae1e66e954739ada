// redis:// asynchronous waits: the wake-up subscription of a lock handle
// (lock_handle::watch_releases), a listener on the lock's channel of the
// provider's pub/sub connection (redis-client/subscriber.hpp), shared with every
// other waiter and listener: no connection or thread per waiter.
#include "context.hpp"

namespace distlock::backends::redis {

namespace {

class channel_wake final : public spi::wake_subscription {
public:
    explicit channel_wake(std::unique_ptr<redis_client::subscriber::listener> l) : listener_(std::move(l)) {}

private:
    std::unique_ptr<redis_client::subscriber::listener> listener_;
};

}  // namespace

std::unique_ptr<spi::wake_subscription> watch_channel(context& ctx, const std::string& channel, spi::wake_sink wake,
                                                      std::function<bool(std::string_view)> wakes) {
    // Confirmed before the first attempt (a release published after it is not
    // missed), waiting a command timeout at most: unconfirmed, the core's own
    // timer still retries.
    const auto confirm_until = spi::clock::now() + ctx.where().command_timeout;
    auto on_message = [wake = std::move(wake), wakes = std::move(wakes)](std::optional<std::string_view> payload) {
        if (!payload || !wakes || wakes(*payload)) wake();  // nullopt: resubscribed, messages may have been missed
    };
    return std::make_unique<channel_wake>(ctx.sub(channel).listen(channel, std::move(on_message), confirm_until));
}

}  // namespace distlock::backends::redis
