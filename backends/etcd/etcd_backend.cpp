// etcd://h1:2379,h2:2379[/prefix][?ttl=...] — the etcd v3 lock recipes
// (etcd_lock.hpp: the mutex, the algorithm of Go's clientv3/concurrency.Mutex,
// compatible with etcdctl lock; the read-write lock, the layout of Go's
// recipe.RWMutex; a semaphore on the same principles) over etcd's JSON gateway
// (etcd_gateway.hpp). This file is the backend the core sees and the scheme's
// registration.
#include <chrono>
#include <memory>
#include <optional>
#include <utility>

#include "distlock/error.hpp"
#include "distlock/spi/backend.hpp"
#include "etcd_gateway.hpp"
#include "etcd_lock.hpp"
#include "http/http_codec.hpp"

namespace distlock::backends::etcd {
namespace {

using namespace std::chrono_literals;
using http::base64_encode;

class backend final : public spi::backend {
public:
    backend(http::options o, settings s) : gateway_(std::move(o), std::move(s)) {
        caps_.implements = {feature::read_write, feature::semaphore, feature::permit_limit, feature::inspect,
                            feature::inspect_primitives};
        caps_.crash_release_bound = 1500ms;  // lease expiry is checked every 500 ms, TTLs are whole seconds
        // Fail at once when no member answers (and check the credentials).
        (void)round_trip();
    }

    std::string_view name() const noexcept override { return kBackend; }
    const capabilities& caps() const noexcept override { return caps_; }
    std::chrono::milliseconds default_lease() const override { return gateway_.config().default_ttl; }
    std::unique_ptr<spi::lock_handle> make_lock(const spi::lock_request& r) override {
        return etcd::make_lock(gateway_, r);
    }

    std::optional<std::chrono::nanoseconds> round_trip() override {
        auto t0 = spi::clock::now();
        gateway_.call("/v3/kv/range", json{{"key", base64_encode(gateway_.config().prefix)}, {"count_only", true}});
        return spi::clock::now() - t0;
    }

    // What an etcd lock cycle cannot do without: the two writes, each fsynced
    // by the members, of a put of a key under an existing lease and its
    // delete, as any client makes them (the floor of `distlock bench`). On a
    // key beside the prefix (`<prefix>.bench-floor/...`), where no lock or
    // release stream of this library looks.
    std::optional<std::chrono::nanoseconds> native_cycle() override {
        const auto s = gateway_.session_for(gateway_.config().default_ttl);
        const auto key = base64_encode(gateway_.config().prefix + ".bench-floor/" + spi::random_token());
        auto t0 = spi::clock::now();
        gateway_.call("/v3/kv/put",
                      json{{"key", key}, {"value", base64_encode("floor")}, {"lease", std::to_string(s->id)}});
        gateway_.call("/v3/kv/deleterange", json{{"key", key}});
        return spi::clock::now() - t0;
    }

    void keepalive_batch(std::span<spi::lock_handle* const> handles,
                         std::span<spi::keepalive_result> results) override {
        etcd::keepalive_batch(gateway_, handles, results);
    }
    // No feature::election is claimed: the mutex's layout is Go's
    // concurrency.Election's (etcd_lock.hpp), so a leader is the mutex's holder.
    lock_info inspect(std::string_view name, spi::lock_kind) override { return etcd::inspect(gateway_, name); }
    read_write_info inspect_read_write(std::string_view name) override {
        return etcd::inspect_read_write(gateway_, name);
    }
    semaphore_info inspect_semaphore(std::string_view name) override { return etcd::inspect_semaphore(gateway_, name); }
    void break_lock(std::string_view name) override { etcd::break_lock(gateway_, name); }

private:
    gateway gateway_;  // the gateway's client, loop and sessions (their leases revoked when it goes)
    capabilities caps_;
};

}  // namespace

void register_backend(spi::registry& r) {
    r.add("etcd", [](spi::url& u) -> std::shared_ptr<spi::backend> {
        settings s;
        if (!u.path().empty() && u.path() != "/") {
            s.prefix = u.path();
            while (s.prefix.size() > 1 && s.prefix.back() == '/') s.prefix.pop_back();
            // etcd keys are bytes and nothing on the way normalises them, but a
            // prefix follows one rule on both HTTP backends (and etcd's RBAC
            // ranges and tools read it as a path).
            http::check_prefix(kBackend, std::string_view(s.prefix).substr(1));
        }
        if (auto ttl = u.take_duration("ttl")) {
            if (ttl->count() <= 0) throw_error(errc::invalid_argument, kBackend, "ttl must be positive");
            s.default_ttl = *ttl;
        }
        s.user = u.user();
        s.password = u.password();
        // etcd's authenticate request carries both as JSON (protobuf) strings,
        // which must be UTF-8; the message never shows them.
        if (!http::valid_utf8(s.user))
            throw_error(errc::invalid_argument, kBackend, "the user name is not valid UTF-8");
        if (!http::valid_utf8(s.password))
            throw_error(errc::invalid_argument, kBackend,
                        "the password is not valid UTF-8 (etcd accepts UTF-8 passwords only)");
        auto o = http::options_from_url(u, kBackend, 2379);
        u.expect_all_taken();  // before anything is sent
        return std::make_shared<backend>(std::move(o), std::move(s));
    });
}

}  // namespace distlock::backends::etcd
