#include "distlock/provider.hpp"

#include <algorithm>
#include <map>
#include <mutex>
#include <optional>
#include <set>

#include "boundary.hpp"
#include "builtin.hpp"
#include "distlock/spi/tls.hpp"
#include "distlock/testing.hpp"
#include "distlock/version.hpp"
#include "modules.hpp"
#include "mutex_impl.hpp"

namespace distlock {
namespace {

// Schemes are compared in lower case (spi::url::parse lowers the URL's):
// RFC 3986's form, lowercase only.
bool well_formed_scheme(const std::string& s) {
    auto lower = [](char c) { return c >= 'a' && c <= 'z'; };
    auto digit = [](char c) { return c >= '0' && c <= '9'; };
    if (s.empty() || s.size() > 32 || !lower(s[0])) return false;
    return std::all_of(s.begin(), s.end(),
                       [&](char c) { return lower(c) || digit(c) || c == '+' || c == '-' || c == '.'; });
}

// Every scheme of the process: the built-in backends, then what
// register_backend() adds, from any thread.
class registry_impl final : public spi::registry {
public:
    registry_impl() { detail::register_builtin_backends(*this); }

    void add(std::string scheme, spi::factory f) override {
        if (const auto* m = detail::module_of_scheme(scheme))
            throw_error(errc::invalid_argument, "",
                        "the URL scheme '" + scheme + "' is already registered (by this build's backend module " +
                            "libdistlock-" + m->name + ".so)");
        detail::scheme_list one;
        one.emplace_back(std::move(scheme), std::move(f));
        add_loaded(std::move(one));
    }
    // Adds all the schemes, or none (and throws) when one is malformed, has
    // no factory or is known already: what a backend module registers, once
    // detail::load_module_for checked it, or one scheme of add().
    void add_loaded(detail::scheme_list schemes) {
        std::lock_guard lk(mutex_);
        std::set<std::string> seen;
        for (const auto& [scheme, f] : schemes) {
            if (!well_formed_scheme(scheme))
                throw_error(errc::invalid_argument, "",
                            "'" + scheme +
                                "' is not a URL scheme distlock can register (a lowercase letter, then "
                                "lowercase letters, digits, '+', '-' or '.'; at most 32 characters)");
            if (!f) throw_error(errc::invalid_argument, "", "the factory of scheme '" + scheme + "' is empty");
            if (factories_.contains(scheme) || !seen.insert(scheme).second)
                throw_error(errc::invalid_argument, "", "the URL scheme '" + scheme + "' is already registered");
        }
        for (auto& [scheme, f] : schemes) factories_.emplace(std::move(scheme), std::move(f));
    }
    // A copy: connect() calls it without holding the registry's mutex.
    std::optional<spi::factory> find(const std::string& scheme) const {
        std::lock_guard lk(mutex_);
        auto it = factories_.find(scheme);
        if (it == factories_.end()) return std::nullopt;
        return it->second;
    }
    // The registered schemes and those of the installed modules not yet loaded, sorted.
    std::vector<std::string> names() const {
        auto out = detail::installed_module_schemes();
        {
            std::lock_guard lk(mutex_);
            for (const auto& [k, v] : factories_) out.push_back(k);
        }
        std::sort(out.begin(), out.end());
        out.erase(std::unique(out.begin(), out.end()), out.end());
        return out;
    }
    // The factory of `scheme`, its module loaded first if it has one.
    std::optional<spi::factory> find_or_load(const std::string& scheme) {
        if (auto f = find(scheme)) return f;
        detail::load_module_for(scheme, [this](detail::scheme_list schemes) { add_loaded(std::move(schemes)); });
        return find(scheme);
    }

private:
    mutable std::mutex mutex_;
    std::map<std::string, spi::factory> factories_;
};

registry_impl& the_registry() {
    static registry_impl instance;
    return instance;
}

}  // namespace

void register_backend(std::string scheme, spi::factory factory) {
    the_registry().add(std::move(scheme), std::move(factory));
}

provider connect(std::string_view text) { return connect(text, provider_options{}); }

namespace {
// What connect() makes, inside the net of detail::guarded.
std::shared_ptr<detail::provider_state> connect_state(std::string_view text, provider_options options) {
    auto u = spi::url::parse(text);
    const auto factory = the_registry().find_or_load(u.scheme());
    if (!factory) {
        std::string known;
        for (const auto& s : the_registry().names()) known += (known.empty() ? "" : ", ") + s;
        throw_error(errc::invalid_argument, "",
                    "unknown URL scheme '" + u.scheme() + "://' (this build has: " + known + ")");
    }
    auto lease = u.take_duration("lease");
    if (lease && lease->count() <= 0) throw_error(errc::invalid_argument, "", "lease must be positive");
    const auto holder_param = u.take("holder");
    if (options.holder.empty()) options.holder = holder_param ? *holder_param : detail::default_holder();
    options.holder = detail::checked_label(options.holder, u.scheme(), "holder");
    const bool insecure = spi::tls_insecure_requested(u);  // before the backend takes it
    auto backend =
        detail::guarded(u.scheme(), u.secrets(), "connecting to " + u.redacted(), [&] { return (*factory)(u); });
    if (!backend)
        throw_error(errc::invalid_argument, "", "the factory of scheme '" + u.scheme() + "' returned no backend");
    u.expect_all_taken();
    auto default_lease = lease ? *lease : backend->default_lease();
    auto state = std::make_shared<detail::provider_state>(std::move(backend), u.scheme(), u.redacted(), default_lease,
                                                          std::move(options), u.secrets());
    if (insecure) state->log(log_level::warning, "", spi::tls_insecure_warning);
    state->log(log_level::info, "", "connected to " + u.redacted());
    return state;
}
}  // namespace

provider connect(std::string_view text, provider_options options) {
    return provider(detail::guarded("", {}, "connect", [&] { return connect_state(text, std::move(options)); }));
}

std::vector<std::string> schemes() { return the_registry().names(); }

std::string_view version() noexcept { return DISTLOCK_VERSION_STRING; }

provider::provider(std::shared_ptr<detail::provider_state> state) noexcept : state_(std::move(state)) {}

distlock::mutex provider::mutex(std::string_view name, lock_options options) const {
    return detail::guarded(state_->backend().name(), state_->secrets(), "mutex()", [&] {
        return distlock::mutex(detail::make_mutex_impl(state_, name, std::move(options), spi::lock_kind::exclusive, 0));
    });
}

distlock::election provider::election(std::string_view name, election_options options) const {
    return detail::guarded(state_->backend().name(), state_->secrets(), "election()", [&] {
        std::string id =
            options.id.empty() ? state_->holder() : detail::checked_label(options.id, state_->scheme(), "id");
        lock_options lock;
        lock.lease = options.lease;
        lock.on_lost = std::move(options.on_lost);
        lock.on_error = std::move(options.on_error);
        auto impl = detail::make_mutex_impl(state_, name, std::move(lock), spi::lock_kind::leader, 0, id);
        return distlock::election(std::move(impl), std::move(id));
    });
}

lock_info provider::inspect(std::string_view name) const {
    return detail::guarded(state_->backend().name(), state_->secrets(), "inspect",
                           [&] { return detail::inspect(*state_, name, spi::lock_kind::exclusive); });
}

read_write_info provider::inspect_read_write(std::string_view name) const {
    return detail::guarded(state_->backend().name(), state_->secrets(), "inspect_read_write",
                           [&] { return detail::inspect_read_write(*state_, name); });
}

semaphore_info provider::inspect_semaphore(std::string_view name) const {
    return detail::guarded(state_->backend().name(), state_->secrets(), "inspect_semaphore",
                           [&] { return detail::inspect_semaphore(*state_, name); });
}

const std::string& provider::holder() const noexcept { return state_->holder(); }

const std::string& provider::scheme() const noexcept { return state_->scheme(); }
const std::string& provider::url() const noexcept { return state_->url(); }
const capabilities& provider::caps() const noexcept { return state_->caps(); }
std::chrono::milliseconds provider::default_lease() const noexcept { return state_->default_lease(); }
std::optional<std::chrono::nanoseconds> provider::round_trip() const {
    return detail::guarded(state_->backend().name(), state_->secrets(), "round_trip", [&] {
        state_->check_process();
        return state_->backend().round_trip();
    });
}
std::optional<std::chrono::nanoseconds> provider::native_cycle() const {
    return detail::guarded(state_->backend().name(), state_->secrets(), "native_cycle", [&] {
        state_->check_process();
        return state_->backend().native_cycle();
    });
}

namespace detail {
provider_state::~provider_state() {
    if (forked()) abandon(backend_);
}

void provider_state::check_process() const {
    if (forked())
        throw_error(errc::invalid_argument, std::string(backend_->name()),
                    "this provider was connected by the parent of this forked process: its connections are the "
                    "parent's (connect() again in the child)");
}

capabilities effective_caps(const capabilities& declared) {
    capabilities caps = declared;
    for (auto f : {feature::read_write, feature::semaphore, feature::permit_limit, feature::election, feature::inspect,
                   feature::inspect_primitives})
        if (!caps.implements.contains(f))
            caps.unsupported.emplace(f, "the backend does not claim it (capabilities::implements)");
    return caps;
}
}  // namespace detail

namespace testing {
void break_lock(const provider& p, std::string_view name) {
    auto& state = *detail::provider_access::state(p);
    detail::guarded(state.backend().name(), state.secrets(), "break_lock", [&] {
        state.check_process();
        detail::check_name(name, std::string(state.backend().name()));
        state.backend().break_lock(name);
    });
}
}  // namespace testing

}  // namespace distlock
