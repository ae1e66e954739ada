// memory:// specifics: lock spaces, and losses reported by break_lock through
// the holder's loss sink (no polling).
#include <catch2/catch.hpp>

#include "distlock/distlock.hpp"
#include "distlock/testing.hpp"
#include "support.hpp"

using namespace std::chrono_literals;
using distlock::test::unique_name;

TEST_CASE("providers of one space share its locks; other spaces do not see them", "[memory]") {
    auto a = distlock::connect("memory://space-a");
    auto a2 = distlock::connect("memory://space-a");
    auto b = distlock::connect("memory://space-b");
    const auto name = unique_name("space");
    auto held = a.mutex(name);
    held.lock();
    auto same_space = a2.mutex(name);
    CHECK_FALSE(same_space.try_lock());
    auto other_space = b.mutex(name);
    CHECK(other_space.try_lock());
    other_space.unlock();
    held.unlock();
    CHECK(same_space.try_lock());
    CHECK(same_space.token() == 2);  // the space's fence counter went on
    same_space.unlock();
}

TEST_CASE("break_lock reports the loss to the holder through its sink, once", "[memory]") {
    distlock::test::loss_recorder rec;  // before the providers: their callback threads call it until they end
    auto p = distlock::connect("memory://breaks");
    const auto name = unique_name("broken");
    auto m = p.mutex(name, rec.options());
    m.lock();
    const auto token = m.token();
    distlock::testing::break_lock(p, name);
    CHECK_FALSE(m.held());  // at once: the sink records the loss on the breaking thread
    REQUIRE(rec.wait_lost(1, 2s));
    const auto losses = rec.losses();
    CHECK(losses[0].token == token);
    CHECK(losses[0].reason.find("break_lock") != std::string::npos);
    auto other = distlock::connect("memory://breaks").mutex(name);  // another provider: m still has its turn here
    CHECK(other.try_lock());  // free again, with a higher token
    CHECK(other.token() > token);
    other.unlock();
    m.unlock();  // finds the grant gone: not reported again
    CHECK_FALSE(rec.wait_lost(2, 200ms));
    CHECK(rec.errors() == 0);
}

TEST_CASE("memory:// takes at most a space name", "[memory]") {
    CHECK_THROWS_AS(distlock::connect("memory://a,b"), distlock::invalid_argument_error);
    CHECK_THROWS_AS(distlock::connect("memory://space/path"), distlock::invalid_argument_error);
    auto p = distlock::connect("memory://");
    CHECK_FALSE(p.caps().supports(distlock::feature::cross_process));
    CHECK(p.caps().why_not(distlock::feature::cross_process).find("in-process") != std::string::npos);
}
