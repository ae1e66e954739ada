// redis:// read-write lock and semaphore: the engine both recipes run on
// (shared_lock.hpp): the acquire loop (subscribe, try, wait for a message or the
// holder's lease), the release, and the batch renewal of every due grant, one
// pipelined round trip per kind. The recipes are rw_lock.cpp and semaphore.cpp.
#include "shared_lock.hpp"

#include <thread>

namespace distlock::backends::redis {

using namespace redis_client;

class handle_base::async_wait final : public spi::wake_subscription {
public:
    async_wait(handle_base& h, std::unique_ptr<spi::wake_subscription> sub) : handle_(h), sub_(std::move(sub)) {}
    ~async_wait() override {
        sub_.reset();
        const auto was = std::exchange(handle_.async_, async_state{});
        if (was.begun && !was.granted) handle_.give_up();
    }

private:
    handle_base& handle_;
    std::unique_ptr<spi::wake_subscription> sub_;
};

std::unique_ptr<spi::wake_subscription> handle_base::watch_releases(spi::wake_sink wake) {
    auto sub = watch_channel(ctx_, channel_, std::move(wake), nullptr);
    async_ = async_state{true, false, false};
    return std::make_unique<async_wait>(*this, std::move(sub));
}

std::optional<spi::grant> handle_base::acquire(deadline until, const spi::loss_sink&) {
    // One attempt of an asynchronous wait: part of the wait's one acquisition.
    const bool async = async_.on && until <= clock::now();
    if (!async || !std::exchange(async_.begun, true)) begin();
    bool granted = false;
    struct give_up_guard {  // on every way out but a grant (an asynchronous wait gives up at its end)
        handle_base* self;
        bool* granted;
        bool keep;
        ~give_up_guard() {
            if (!*granted && !keep) self->give_up();
        }
    } guard{this, &granted, async};
    std::unique_ptr<subscriber::subscription> sub;
    if (until > clock::now()) sub = ctx_.reuse_subscription(channel_);
    retry_pacer pacer(request_);
    for (bool first = true;; first = false) {
        const std::uint64_t seen = sub ? sub->messages() : 0;
        const auto sent = clock::now();  // the lease runs from when the server ran the script
        auto [what, value] = run_attempt(until, async || until > clock::now());
        if (what == outcome::granted) {
            granted = true;
            if (async) async_.granted = true;
            return spi::grant{static_cast<std::uint64_t>(value), sent, !first};
        }
        if (what == outcome::wrong_size)
            throw_error(errc::invalid_argument, kBackend,
                        "semaphore '" + request_.name + "' has " + std::to_string(value) +
                            " permits on the server; this one asks for " + std::to_string(request_.permits));
        if (what == outcome::not_a_semaphore)
            throw_error(errc::invalid_argument, kBackend,
                        "the key of semaphore '" + request_.name + "' holds something else than a permit count");
        auto now = clock::now();
        if (now >= until) return std::nullopt;
        if (!sub) {
            // Subscribe first, then retry: a release published after the
            // subscription is confirmed cannot be missed.
            sub = ctx_.sub(channel_).subscribe(channel_, std::min(until, now + ctx_.where().command_timeout));
            continue;
        }
        // value: the holder's PTTL (-1 no expiry, -2 the key just went).
        const deadline bound = pacer.wait_after(value, until);
        // Any message on the channel (a release, a reclaim, a writer giving
        // up) is worth a retry; else the end of the holder's lease.
        const auto woke = sub->wait(seen, bound);
        if (woke == subscriber::wake::message) pacer.heard();
        if (woke == subscriber::wake::broken)
            std::this_thread::sleep_for(pacer.backoff(bound));  // no pub/sub connection: back off
    }
}

void handle_base::release() {
    if (!holding_) throw_error(errc::not_owner, kBackend, "lock '" + request_.name + "' is not held");
    holding_ = false;
    run_release_script(
        ctx_, key_, request_.name, [&](connection& c) { return run_release(c); },
        [&](long long reply) { return released(reply); });
}

std::pair<outcome, long long> handle_base::run_attempt(deadline until, bool waiting) {
    auto [status, value] = run_acquire_script(
        ctx_, key_, request_.name, until, [&](connection& c) { return attempt(c, waiting); },
        [&](connection& c) { run_release(c); });
    auto what = read_outcome(status);
    if (what == outcome::granted) holding_ = true;
    return {what, value};
}

void handle_base::give_up() noexcept {
    try {
        ctx_.connections().run(key_, [&](connection& c) {
            leave(c);
            return 0;
        });
    } catch (...) {}
}

void grants_from_pttls(const redisReply* list, std::vector<grant_info>& out,
                       std::map<std::string, std::string>& unknown, const std::string& prefix) {
    if (list == nullptr || list->type != REDIS_REPLY_ARRAY) return;
    for (std::size_t i = 0; i < list->elements; ++i) {
        grant_info g;
        const long long pttl = redis_client::as_integer(list->element[i]);
        if (pttl >= 0) g.remaining = redis_client::server_duration(pttl);
        else unknown.try_emplace(prefix + ".remaining", "a grant's key has no expiry (set by another client)");
        out.push_back(std::move(g));
    }
    if (!out.empty()) {
        unknown.try_emplace(prefix + ".holder", no_grant_label);
        unknown.try_emplace(prefix + ".token", no_grant_token);
    }
}

std::vector<std::string> shared_keys(const std::string& rwlock, const std::string& semaphore) {
    return {rwlock, semaphore, permit_timeouts_key(semaphore)};
}

void renew_shared(context& ctx, std::span<shared_handle* const> handles, std::span<spi::keepalive_result*> results) {
    constexpr std::size_t per_call = 256;
    using renewal = shared_handle::renewal;
    for (auto kind : {renewal::read, renewal::write, renewal::permit}) {
        std::vector<std::size_t> index;
        std::vector<std::string_view> keys, args;
        for (std::size_t i = 0; i < handles.size(); ++i) {
            if (handles[i]->renewal_kind() != kind) continue;
            auto* h = static_cast<handle_base*>(handles[i]);
            if (!h->holding()) {
                *results[i] = spi::keepalive_result::lost("not held");
                continue;
            }
            h->renewal_item(keys, args);
            index.push_back(i);
        }
        if (index.empty()) continue;
        const script& s = kind == renewal::read    ? read_renew_script()
                          : kind == renewal::write ? write_renew_script()
                                                   : permit_renew_script();
        const std::size_t keys_per = kind == renewal::read ? 2 : 1;
        const auto& confirm = ctx.confirmation();
        auto replies =
            ctx.connections().run_items(s, keys, args, keys_per, 2, per_call, confirm.min_replicas, confirm.timeout);
        for (std::size_t j = 0; j < index.size(); ++j) {
            const auto slot = index[j];
            if (!replies[j].ok) *results[slot] = spi::keepalive_result::failed(replies[j].error);
            else if (replies[j].value == 1) *results[slot] = spi::keepalive_result::ok();
            else *results[slot] = spi::keepalive_result::lost(static_cast<handle_base*>(handles[slot])->lost_reason());
        }
    }
}

}  // namespace distlock::backends::redis
