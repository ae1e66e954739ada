// zk:// release events of asynchronous waits against the standalone server
// (DISTLOCK_TEST_ZK_URL): the checks of tests/backends/wake_support.hpp. A
// subscribed handle is woken by another client's release of its lock and by
// nothing else, never after its subscription is gone; a thousand
// subscriptions share the provider's session; async_lock waiters on two providers
// hand the lock over on release events, not on the safety poll.
#include <catch2/catch.hpp>

#include "../wake_support.hpp"

namespace spi = distlock::spi;
namespace wake = distlock::test::wake;
using distlock::test::unique_name;
using namespace std::chrono_literals;

namespace distlock::backends::zookeeper {
void register_backend(spi::registry& r);
}

namespace {

std::string url() { return distlock::test::env("DISTLOCK_TEST_ZK_URL"); }
std::shared_ptr<spi::backend> open() {
    return wake::open_backend(distlock::backends::zookeeper::register_backend, url());
}

}  // namespace

TEST_CASE("zk: a release wakes a subscribed handle; other names and failed attempts do not", "[zk][async]") {
    wake::woken_by_release_only(open, url());
}

TEST_CASE("zk: each lock kind is woken by a release of its own lock", "[zk][async]") {
    wake::each_kind_woken(open, url());
}

TEST_CASE("zk: no wake-up after the subscription is destroyed", "[zk][async]") {
    wake::none_after_unsubscribe(open, url());
}

TEST_CASE("zk: a thousand subscriptions add no thread or connection per waiter", "[zk][async]") {
    wake::thousand_share(open, url());
}

TEST_CASE("zk: async_lock waiters are handed the lock on release events", "[zk][async]") {
    auto a = distlock::connect(url());
    auto b = distlock::connect(url());
    SECTION("20 chained hand-offs, each before the waiter's first safety poll") {
        // All 20 on a quiet machine; a starved one may let a few rounds
        // pass 2 s. Without release events none comes before the poll.
        CHECK(wake::chained_handoffs(a, b, unique_name("zk-handoff"), 20) >= 15);
    }
    SECTION("200 waiters on two providers") { wake::many_waiters(a, b, unique_name("zk-herd"), 100); }
}
