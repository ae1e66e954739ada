// consul:// release events of asynchronous waits against the Consul HTTP API
// emulator (DISTLOCK_TEST_CONSUL_EMULATOR_URL): the checks of
// tests/backends/wake_support.hpp for the mutex, whose waiters share the
// provider's one blocking listing of the prefix. A subscribed handle is woken
// by another client's release of its lock and by nothing else, never after
// its subscription is gone; a thousand subscriptions add no thread or
// connection per waiter; async_lock waiters on two providers hand the lock
// over on release events, not on the safety poll. The semaphore and the
// read-write lock are polled (no subscription).
#include <catch2/catch.hpp>

#include "../wake_support.hpp"

namespace spi = distlock::spi;
namespace wake = distlock::test::wake;
using distlock::test::unique_name;

namespace distlock::backends::consul {
void register_backend(spi::registry& r);
}

namespace {

std::string url() { return distlock::test::env("DISTLOCK_TEST_CONSUL_EMULATOR_URL"); }
std::shared_ptr<spi::backend> open() { return wake::open_backend(distlock::backends::consul::register_backend, url()); }

}  // namespace

TEST_CASE("consul: a release wakes a subscribed handle; other names and failed attempts do not", "[consul][async]") {
    wake::woken_by_release_only(open, url());
}

TEST_CASE("consul: no wake-up after the subscription is destroyed", "[consul][async]") {
    wake::none_after_unsubscribe(open, url());
}

TEST_CASE("consul: a thousand subscriptions add no thread or connection per waiter", "[consul][async]") {
    wake::thousand_share(open, url());
}

TEST_CASE("consul: async_lock waiters are handed the lock on release events", "[consul][async]") {
    auto a = distlock::connect(url());
    auto b = distlock::connect(url());
    SECTION("20 chained hand-offs, each before the waiter's first safety poll") {
        // All 20 on a quiet machine; a starved one may let a few rounds
        // pass 2 s. Without release events none comes before the poll.
        CHECK(wake::chained_handoffs(a, b, unique_name("consul-handoff"), 20) >= 15);
    }
    SECTION("200 waiters on two providers") { wake::many_waiters(a, b, unique_name("consul-herd"), 100); }
}

TEST_CASE("consul: the semaphore and the read-write lock are polled", "[consul][async]") {
    auto b = open();
    for (auto kind : {spi::lock_kind::permit, spi::lock_kind::read, spi::lock_kind::write}) {
        auto h =
            b->make_lock(wake::request(unique_name("consul-polled"), kind, kind == spi::lock_kind::permit ? 2 : 0));
        CHECK_FALSE(h->watch_releases(spi::wake_sink{}));
    }
}
