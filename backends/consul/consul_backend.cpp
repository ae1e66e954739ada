// consul://host:8500[/prefix][?token=...&ttl=...&lock_delay=...&behavior=...]
// — the behaviour of Consul's official Go lock recipe (api/lock.go):
//
//   session   one per acquisition: PUT /v1/session/create {Name, TTL, LockDelay,
//             Behavior}; renewed every TTL/3 (the core's renewal thread while
//             held, the waiting thread while waiting); destroyed after the release
//   acquire   GET the key (a key without the lock flags is someone else's data:
//             refused), then PUT /v1/kv/<key>?flags=<lock flag>&acquire=<session>
//             with the holder label as the value (api/lock.go's LockOptions.Value;
//             the leader's information of Consul's leader election pattern)
//   wait      blocking queries (?index=<X-Consul-Index>&wait=...) until the key's
//             Session is empty; an acquire refused on a free key = lock-delay:
//             sleep and retry
//   monitor   blocking queries on the held key on the provider's HTTP loop
//             thread; Session no longer ours (or the key gone) = lock lost
//   release   PUT ...?flags=<lock flag>&release=<session>, then destroy the session
//   token     the key's ModifyIndex after the acquire (global, strictly increasing)
//   ACL       token= is sent as X-Consul-Token on every request
//
// provider::semaphore has the layout of Go's api/semaphore.go (consul_semaphore.cpp);
// provider::shared_mutex is distlock's own on the same pattern (consul_rwlock.cpp:
// Consul has no read-write recipe).
//
// Files: consul_agent.hpp (the agent's HTTP API), consul_lock.cpp (the mutex),
// consul_contender.hpp/.cpp (the pattern of api/semaphore.go: contender keys,
// a document written by check-and-set), consul_semaphore.cpp (the semaphore),
// consul_rwlock.cpp (the read-write lock), this file (the spi::backend, the URL,
// the registration).
#include "consul_agent.hpp"
#include "consul_lock.hpp"
#include "consul_release_feed.hpp"

namespace distlock::backends::consul {
namespace {

class backend final : public spi::backend {
public:
    backend(http::options o, settings s) : agent_(std::move(o), std::move(s)) {
        // The server may wait up to 2 x TTL before invalidating a dead holder's
        // session (the suite adds one lease), then the lock-delay runs.
        const auto& c = agent_.config();
        caps_.implements = {feature::read_write, feature::semaphore, feature::permit_limit, feature::inspect,
                            feature::inspect_primitives};
        caps_.crash_release_bound = c.default_ttl + c.lock_delay.value_or(15s) + 1s;
    }

    std::string_view name() const noexcept override { return kBackend; }
    const capabilities& caps() const noexcept override { return caps_; }
    ms default_lease() const override { return agent_.config().default_ttl; }
    std::unique_ptr<spi::lock_handle> make_lock(const spi::lock_request& r) override {
        switch (r.kind) {
            case spi::lock_kind::exclusive:
            case spi::lock_kind::leader:  // an election is the mutex: its key is Consul's election pattern
                return consul::make_lock(agent_, releases_, r);
            case spi::lock_kind::permit: return consul::make_permit(agent_, r);
            case spi::lock_kind::read:
            case spi::lock_kind::write: return consul::make_rwlock(agent_, r);
        }
        throw_error(errc::unsupported, kBackend, "unknown lock kind");
    }

    std::optional<std::chrono::nanoseconds> round_trip() override {
        auto t0 = spi::clock::now();
        agent::check(agent_.client().send(agent::get("/v1/status/leader")), "status/leader", {200});
        return spi::clock::now() - t0;
    }

    void keepalive_batch(std::span<spi::lock_handle* const> handles,
                         std::span<spi::keepalive_result> results) override {
        consul::keepalive_batch(agent_, handles, results);
    }

    // One GET of the mutex's key (an election's too: no feature::election).
    lock_info inspect(std::string_view name, spi::lock_kind) override { return consul::inspect(agent_, name); }
    read_write_info inspect_read_write(std::string_view name) override {
        return consul::inspect_read_write(agent_, name);
    }
    semaphore_info inspect_semaphore(std::string_view name) override { return consul::inspect_semaphore(agent_, name); }

    // The mutex's key and everything under the semaphore's and the read-write
    // lock's prefixes (documents and contender keys), as an operator's
    // `consul kv delete` would.
    void break_lock(std::string_view name) override {
        const auto key = agent_.key_of(name);
        agent::check(agent_.client().send(agent::del(agent::key_target(key))), "break_lock", {200});
        for (const char* under : {"/", "~rw/"})
            agent::check(agent_.client().send(agent::del(agent::key_target(key + under) + "?recurse")), "break_lock",
                         {200});
    }

private:
    agent agent_;
    release_feed releases_{agent_};  // after agent_: stopped before its loop
    capabilities caps_;
};

}  // namespace

void register_backend(spi::registry& r) {
    r.add("consul", [](spi::url& u) -> std::shared_ptr<spi::backend> {
        settings s;
        if (!u.path().empty()) {
            std::string p = u.path();
            while (!p.empty() && p.front() == '/') p.erase(0, 1);
            while (!p.empty() && p.back() == '/') p.pop_back();
            if (!p.empty()) {
                http::check_prefix(kBackend, p);
                s.prefix = p;
            }
        }
        if (auto ttl = u.take_duration("ttl")) {
            if (ttl->count() <= 0) throw_error(errc::invalid_argument, kBackend, "ttl must be positive");
            s.default_ttl = *ttl;
        }
        if (auto d = u.take_duration("lock_delay")) s.lock_delay = *d;
        if (auto b = u.take("behavior")) {
            if (*b != "release" && *b != "delete")
                throw_error(errc::invalid_argument, kBackend, "behavior must be release or delete");
            s.behavior = *b;
        }
        auto token = u.take("token");
        auto o = http::options_from_url(u, kBackend, 8500);
        if (token && !token->empty()) o.headers.push_back("X-Consul-Token: " + *token);
        u.expect_all_taken();  // before anything is sent
        return std::make_shared<backend>(std::move(o), std::move(s));
    });
}

}  // namespace distlock::backends::consul
