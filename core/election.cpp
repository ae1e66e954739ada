// provider::election, provider::inspect and the holder label.
#include "distlock/election.hpp"

#include <algorithm>
#include <cstdio>
#include <optional>
#include <utility>

#include <unistd.h>

#include "boundary.hpp"
#include "mutex_impl.hpp"
#include "text.hpp"

namespace distlock::detail {
namespace {

constexpr std::size_t max_label_bytes = 255;

// What inspect() read back from the server, fit to hand on. Anyone who can
// write the holder record wrote that text (text.hpp): a label that no holder
// could have set (checked_label) is not shown at all, and the backend's
// reasons, which may quote the server, are made printable.
// A recorded label that no distlock holder could have set: dropped, with the
// reason under `field` (a first one kept).
template <class Info>
void drop_bad_label(std::optional<std::string>& holder, Info& info, const std::string& field) {
    if (holder && (holder->size() > max_label_bytes || has_control_byte(*holder))) {
        holder.reset();
        info.unknown.try_emplace(field, "the recorded label has control characters or is over 255 bytes");
    }
}

void make_printable(lock_info& info) {
    drop_bad_label(info.holder, info, "holder");
    for (auto& [field, why] : info.unknown) why = printable(why);
}

void make_printable(read_write_info& info) {
    if (info.writer) drop_bad_label(info.writer->holder, info, "writer.holder");
    if (info.readers)
        for (auto& r : *info.readers) drop_bad_label(r.holder, info, "readers.holder");
    for (auto& [field, why] : info.unknown) why = printable(why);
}

void make_printable(semaphore_info& info) {
    if (info.permits)
        for (auto& p : *info.permits) drop_bad_label(p.holder, info, "permits.holder");
    for (auto& [field, why] : info.unknown) why = printable(why);
}

// One inspect of `name` through `read` (the backend's call): the provider of
// this process, the name checked, the primitive supported where `needs` names
// one (else unsupported_error with the reason); the name filled in and the
// backend's text made printable.
template <class Read>
auto inspected(provider_state& provider, std::string_view name, std::optional<std::pair<feature, const char*>> needs,
               Read read) {
    provider.check_process();
    const std::string who(provider.backend().name());
    check_name(name, who);
    if (needs && !provider.caps().supports(needs->first))
        throw_error(
            errc::unsupported, who,
            std::string(needs->second) + " are not supported: " + std::string(provider.caps().why_not(needs->first)));
    auto info = read(provider.backend());
    info.name = std::string(name);
    make_printable(info);
    return info;
}

}  // namespace

std::string checked_label(std::string_view label, std::string_view backend, std::string_view what) {
    const std::string who(backend);
    if (label.empty() || label.size() > max_label_bytes)
        throw_error(errc::invalid_argument, who,
                    std::string(what) + " is " + std::to_string(label.size()) + " bytes; it must be 1 to 255");
    if (has_control_byte(label))
        throw_error(errc::invalid_argument, who, std::string(what) + " has a control character");
    return std::string(label);
}

std::string default_holder() {
    char host[256] = {};
    if (::gethostname(host, sizeof host - 1) != 0 || host[0] == '\0') std::snprintf(host, sizeof host, "localhost");
    return std::string(host) + ":" + std::to_string(::getpid());
}

spi::lock_kind leader_kind(const provider_state& provider) {
    return provider.caps().supports(feature::election) ? spi::lock_kind::leader : spi::lock_kind::exclusive;
}

lock_info inspect(provider_state& provider, std::string_view name, spi::lock_kind kind) {
    return inspected(provider, name, std::nullopt, [&](spi::backend& b) { return b.inspect(name, kind); });
}

read_write_info inspect_read_write(provider_state& provider, std::string_view name) {
    return inspected(provider, name, std::pair{feature::read_write, "read-write locks"},
                     [&](spi::backend& b) { return b.inspect_read_write(name); });
}

semaphore_info inspect_semaphore(provider_state& provider, std::string_view name) {
    return inspected(provider, name, std::pair{feature::semaphore, "semaphores"},
                     [&](spi::backend& b) { return b.inspect_semaphore(name); });
}

}  // namespace distlock::detail

namespace distlock {
namespace {
detail::mutex_impl& live(const std::unique_ptr<detail::mutex_impl>& impl) {
    if (!impl) throw_error(errc::invalid_argument, "", "use of a moved-from distlock::election");
    return *impl;
}
}  // namespace

election::election(std::unique_ptr<detail::mutex_impl> impl, std::string id) noexcept
    : impl_(std::move(impl)), id_(std::move(id)) {}
election::election(election&&) noexcept = default;
election& election::operator=(election&&) noexcept = default;
election::~election() = default;  // the mutex_impl releases a term it holds

void election::campaign() {
    auto& impl = live(impl_);
    detail::guarded(impl.provider().backend().name(), impl.provider().secrets(), "campaign", [&] {
        impl.provider().check_process();  // before the mutex's state lock (process.hpp)
        if (!impl.owned_by_this_thread()) (void)impl.lock_until(spi::deadline::max());
    });
}

bool election::campaign(std::chrono::milliseconds timeout) {
    auto& impl = live(impl_);
    return detail::guarded(impl.provider().backend().name(), impl.provider().secrets(), "campaign", [&] {
        impl.provider().check_process();  // before the mutex's state lock (process.hpp)
        if (impl.owned_by_this_thread()) return true;
        return impl.lock_until(spi::clock::now() + std::max(timeout, std::chrono::milliseconds{0}));
    });
}

void election::async_campaign_steady(std::chrono::steady_clock::time_point deadline, acquire_handler handler,
                                     std::stop_token stop) {
    auto& impl = live(impl_);
    detail::guarded(impl.provider().backend().name(), impl.provider().secrets(), "async_campaign", [&] {
        impl.provider().check_process();
        if (impl.leading()) impl.complete(std::move(handler), nullptr, true);
        else impl.async_lock_until(deadline, std::move(handler), std::move(stop));
    });
}

void election::async_resign(release_handler handler) {
    auto& impl = live(impl_);
    detail::guarded(impl.provider().backend().name(), impl.provider().secrets(), "async_resign",
                    [&] { impl.async_unlock(std::move(handler)); });
}

void election::resign() noexcept {
    if (impl_) impl_->unlock();
}

bool election::is_leader() const noexcept { return impl_ && impl_->held(); }
std::uint64_t election::term() const noexcept { return impl_ ? impl_->token() : 0; }
const std::string& election::name() const noexcept {
    static const std::string empty;
    return impl_ ? impl_->name() : empty;
}

lock_info election::leader() const {
    auto& impl = live(impl_);
    auto& provider = impl.provider();
    return detail::guarded(provider.backend().name(), provider.secrets(), "leader",
                           [&] { return detail::inspect(provider, impl.name(), detail::leader_kind(provider)); });
}

}  // namespace distlock
