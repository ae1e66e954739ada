// file:// specifics: the fence counter kept in the lock file, the liveness
// check that finds a replaced lock file, and what a bad directory says.
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>

#include "distlock/distlock.hpp"
#include "distlock/testing.hpp"
#include "support.hpp"

using namespace std::chrono_literals;
using distlock::test::unique_name;
namespace fs = std::filesystem;

namespace {

// A fresh directory under the system's temp dir, removed at the end of the test.
struct temp_dir {
    fs::path path = fs::temp_directory_path() / unique_name("distlock-file-test");
    temp_dir() { fs::create_directories(path); }
    ~temp_dir() {
        std::error_code ec;
        fs::permissions(path, fs::perms::owner_all, fs::perm_options::add, ec);
        fs::remove_all(path, ec);
    }
    std::string url(const std::string& query = "") const { return "file://" + path.string() + query; }
};

}  // namespace

TEST_CASE("tokens keep increasing across providers: the counter lives in the lock file", "[file]") {
    temp_dir dir;
    const auto name = unique_name("counter");
    std::uint64_t last = 0;
    for (int i = 0; i < 3; ++i) {
        auto p = distlock::connect(dir.url());  // a new provider each time, as a restarted process
        auto m = p.mutex(name);
        m.lock();
        CHECK(m.token() > last);
        last = m.token();
        m.unlock();
    }
    CHECK(last > 0);
}

TEST_CASE("a lock file replaced while held is found by the check and reported lost", "[file]") {
    temp_dir dir;
    distlock::test::loss_recorder rec;  // before the providers: their callback threads call it until they end
    auto p = distlock::connect(dir.url("?check=50ms"));
    const auto name = unique_name("replaced");
    auto m = p.mutex(name, rec.options());
    m.lock();
    const auto token = m.token();
    distlock::testing::break_lock(p, name);  // a fresh file under the same path, keeping the counter
    REQUIRE(rec.wait_lost(1, 5s));
    CHECK_FALSE(m.held());
    const auto losses = rec.losses();
    CHECK(losses[0].token == token);
    CHECK(losses[0].reason.find("removed or replaced") != std::string::npos);
    auto other = distlock::connect(dir.url()).mutex(name);  // another provider: m still has its turn here
    REQUIRE(other.try_lock());
    CHECK(other.token() > token);  // the counter survived the replacement
    other.unlock();
    m.unlock();
    CHECK_FALSE(rec.wait_lost(2, 200ms));  // found at unlock too, but reported once
    CHECK(rec.errors() == 0);
}

TEST_CASE("file:// refuses what is not a usable directory, with a typed error", "[file]") {
    temp_dir dir;
    const auto plain = dir.path / "a-file";
    std::ofstream(plain) << "x";
    CHECK_THROWS_AS(distlock::connect("file://" + plain.string()), distlock::invalid_argument_error);
    CHECK_THROWS_AS(distlock::connect("file://" + (plain / "below").string()), distlock::invalid_argument_error);
    CHECK_THROWS_AS(distlock::connect(dir.url("?check=0ms")), distlock::invalid_argument_error);
    CHECK_THROWS_AS(distlock::connect("file:///"), distlock::invalid_argument_error);
    if (::geteuid() != 0) {  // root writes anywhere
        const auto locked = dir.path / "no-access";
        fs::create_directories(locked);
        fs::permissions(locked, fs::perms::owner_read | fs::perms::owner_exec);
        CHECK_THROWS_AS(distlock::connect("file://" + locked.string()), distlock::access_denied_error);
        fs::permissions(locked, fs::perms::owner_all);
    } else {
        WARN("running as root: the unwritable-directory case does not apply (root may write anywhere)");
    }
}
