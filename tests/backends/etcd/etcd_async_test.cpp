// etcd:// release events of asynchronous waits against one member
// (DISTLOCK_TEST_ETCD_URL): the checks of tests/backends/wake_support.hpp. A
// subscribed handle is woken by another client's release of its lock and by
// nothing else, never after its subscription is gone; a thousand
// subscriptions share the provider's one watch stream; async_lock waiters on two providers
// hand the lock over on release events, not on the safety poll.
#include <catch2/catch.hpp>

#include "../wake_support.hpp"

namespace spi = distlock::spi;
namespace wake = distlock::test::wake;
using distlock::test::unique_name;

namespace distlock::backends::etcd {
void register_backend(spi::registry& r);
}

namespace {

std::string url() { return distlock::test::env("DISTLOCK_TEST_ETCD_URL"); }
// The feed wakes a waiter whose attempt came before its stream was up once
// (docs/backends/etcd.md).
[[maybe_unused]] const bool allowance = (wake::unvouched_wakes = 1) != 0;
std::shared_ptr<spi::backend> open() { return wake::open_backend(distlock::backends::etcd::register_backend, url()); }

}  // namespace

TEST_CASE("etcd: a release wakes a subscribed handle; other names and failed attempts do not", "[etcd][async]") {
    wake::woken_by_release_only(open, url());
}

TEST_CASE("etcd: each lock kind is woken by a release of its own lock", "[etcd][async]") {
    wake::each_kind_woken(open, url());
}

TEST_CASE("etcd: no wake-up after the subscription is destroyed", "[etcd][async]") {
    wake::none_after_unsubscribe(open, url());
}

TEST_CASE("etcd: a thousand subscriptions add no thread or connection per waiter", "[etcd][async]") {
    wake::thousand_share(open, url());
}

TEST_CASE("etcd: async_lock waiters are handed the lock on release events", "[etcd][async]") {
    auto a = distlock::connect(url());
    auto b = distlock::connect(url());
    SECTION("20 chained hand-offs, each before the waiter's first safety poll") {
        // All 20 on a quiet machine; a starved one may let a few rounds
        // pass 2 s. Without release events none comes before the poll.
        CHECK(wake::chained_handoffs(a, b, unique_name("etcd-handoff"), 20) >= 15);
    }
    SECTION("200 waiters on two providers") { wake::many_waiters(a, b, unique_name("etcd-herd"), 100); }
}
