// memory:// specifics: lock spaces, and losses reported by break_lock through
// the holder's loss sink (no polling).
#include <algorithm>
#include <catch2/catch.hpp>

#include "distlock/distlock.hpp"
#include "distlock/testing.hpp"
#include "memory_backend.hpp"
#include "support.hpp"
#include "wake_support.hpp"

using namespace std::chrono_literals;
using distlock::test::unique_name;
namespace memory = distlock::backends::memory;

namespace {
// A space name of its own (a URL host: no ':').
std::string unique_space(const std::string& base) {
    auto name = unique_name(base);
    std::replace(name.begin(), name.end(), ':', '-');
    return name;
}
}  // namespace

TEST_CASE("providers of one space share its locks; other spaces do not see them", "[memory]") {
    auto a = distlock::connect("memory://space-a");
    auto a2 = distlock::connect("memory://space-a");
    auto b = distlock::connect("memory://space-b");
    const auto name = unique_name("space");
    auto held = a.mutex(name);
    held.lock();
    const auto first = held.token();
    auto same_space = a2.mutex(name);
    CHECK_FALSE(same_space.try_lock());
    auto other_space = b.mutex(name);
    CHECK(other_space.try_lock());
    other_space.unlock();
    held.unlock();
    CHECK(same_space.try_lock());
    CHECK(same_space.token() > first);  // the space's fence counter went on
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
    CHECK(other.try_lock());                                        // free again, with a higher token
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

TEST_CASE("memory:// keeps nothing for a name that nobody holds or waits for", "[memory][growth]") {
    const auto space = unique_space("growth");
    auto p = distlock::connect("memory://" + space);
    // Per-request names, as a service fed with outside ids would lock.
    for (int i = 0; i < 100'000; ++i) {
        auto m = p.mutex("request-" + std::to_string(i));
        m.lock();
        m.unlock();
    }
    for (int i = 0; i < 1'000; ++i) {
        auto rw = p.shared_mutex("rw-" + std::to_string(i));
        rw.lock_shared();
        rw.unlock_shared();
        rw.lock();
        rw.unlock();
        auto sem = p.semaphore("sem-" + std::to_string(i), 2);
        sem.acquire();
        sem.release();
    }
    CHECK(memory::slot_count(space) == 0);
    auto held = p.mutex("held");
    held.lock();
    CHECK(memory::slot_count(space) == 1);
    held.unlock();
    CHECK(memory::slot_count(space) == 0);
}

TEST_CASE("memory:// tokens keep increasing per name when its slot or its space was freed", "[memory][growth]") {
    const auto space = unique_space("tokens");
    const auto spaces_before = memory::space_count();
    std::uint64_t last = 0, last_read = 0;  // each primitive of a name is a lock of its own
    for (int round = 0; round < 3; ++round) {
        {
            auto p = distlock::connect("memory://" + space);  // the space made again each round
            CHECK(memory::space_count() == spaces_before + 1);
            for (int i = 0; i < 3; ++i) {
                auto m = p.mutex("again");
                m.lock();
                CHECK(m.token() > last);
                last = m.token();
                m.unlock();
                CHECK(memory::slot_count(space) == 0);
                auto rw = p.shared_mutex("again");
                rw.lock_shared();
                CHECK(rw.shared_token() > last_read);
                last_read = rw.shared_token();
                rw.unlock_shared();
            }
        }
        CHECK(memory::space_count() == spaces_before);  // the last provider of the space is gone
    }
}

TEST_CASE("an asynchronous writer holds back later readers for its whole wait, and no longer once it ends",
          "[memory][async][rw][policy]") {
    const auto space = unique_space("place");
    auto a = distlock::connect("memory://" + space), b = distlock::connect("memory://" + space),
         c = distlock::connect("memory://" + space);
    distlock::test::wake::async_writer_keeps_its_place(a, b, c, "name");
    CHECK(memory::slot_count(space) == 0);  // the place went with the waits
}
