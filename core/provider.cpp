#include "distlock/provider.hpp"

#include <algorithm>
#include <map>

#include "builtin.hpp"
#include "distlock/testing.hpp"
#include "distlock/version.hpp"
#include "mutex_impl.hpp"

namespace distlock {
namespace {

class registry_impl final : public spi::registry {
public:
    void add(std::string scheme, spi::factory f) override {
        if (!factories_.emplace(std::move(scheme), std::move(f)).second)
            throw_error(errc::invalid_argument, "", "a backend scheme was registered twice");
    }
    const spi::factory* find(const std::string& scheme) const {
        auto it = factories_.find(scheme);
        return it == factories_.end() ? nullptr : &it->second;
    }
    std::vector<std::string> names() const {
        std::vector<std::string> out;
        for (const auto& [k, v] : factories_) out.push_back(k);
        return out;
    }

private:
    std::map<std::string, spi::factory> factories_;
};

const registry_impl& builtin_registry() {
    static const registry_impl instance = [] {
        registry_impl r;
        detail::register_builtin_backends(r);
        return r;
    }();
    return instance;
}

}  // namespace

provider connect(std::string_view text) {
    auto u = spi::url::parse(text);
    const auto* factory = builtin_registry().find(u.scheme());
    if (factory == nullptr) {
        std::string known;
        for (const auto& s : builtin_registry().names()) known += (known.empty() ? "" : ", ") + s;
        throw_error(errc::invalid_argument, "",
                    "unknown URL scheme '" + u.scheme() + "://' (this build has: " + known + ")");
    }
    auto lease = u.take_duration("lease");
    if (lease && lease->count() <= 0) throw_error(errc::invalid_argument, "", "lease must be positive");
    auto backend = (*factory)(u);
    u.expect_all_taken();
    auto default_lease = lease ? *lease : backend->default_lease();
    return provider(std::make_shared<detail::provider_state>(std::move(backend), u.scheme(), u.redacted(), default_lease));
}

std::vector<std::string> schemes() { return builtin_registry().names(); }

std::string_view version() noexcept { return DISTLOCK_VERSION_STRING; }

provider::provider(std::shared_ptr<detail::provider_state> state) noexcept : state_(std::move(state)) {}

distlock::mutex provider::mutex(std::string_view name, lock_options options) const {
    auto& backend = state_->backend();
    if (name.empty()) throw_error(errc::invalid_argument, std::string(backend.name()), "lock name is empty");
    if (name.size() > max_name_length)
        throw_error(errc::invalid_argument, std::string(backend.name()),
                    "lock name is " + std::to_string(name.size()) + " bytes; at most " +
                        std::to_string(max_name_length) + " are allowed");
    if (options.lease.count() < 0) throw_error(errc::invalid_argument, std::string(backend.name()), "negative lease");
    if (options.retry_min.count() < 0 || options.retry_max < options.retry_min)
        throw_error(errc::invalid_argument, std::string(backend.name()), "retry_min/retry_max out of order");
    spi::lock_request request;
    request.name = std::string(name);
    request.lease = options.lease.count() > 0 ? options.lease : state_->default_lease();
    request.auto_renew = options.auto_renew;
    request.renew_interval = std::max(std::chrono::milliseconds{1}, request.lease / 3);  // the lease/3 rule, here only
    request.retry_min = options.retry_min;
    request.retry_max = options.retry_max;
    auto handle = backend.make_lock(request);
    return distlock::mutex(
        std::make_unique<detail::mutex_impl>(state_, std::move(request), std::move(options), std::move(handle)));
}

const std::string& provider::scheme() const noexcept { return state_->scheme(); }
const std::string& provider::url() const noexcept { return state_->url(); }
const capabilities& provider::caps() const noexcept { return state_->backend().caps(); }
std::chrono::milliseconds provider::default_lease() const noexcept { return state_->default_lease(); }
std::optional<std::chrono::nanoseconds> provider::round_trip() const { return state_->backend().round_trip(); }

namespace testing {
void break_lock(const provider& p, std::string_view name) { p.state()->backend().break_lock(name); }
}  // namespace testing

}  // namespace distlock
