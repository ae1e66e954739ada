// zk://...?log=: the ZooKeeper C client's own log, against the standalone
// server (DISTLOCK_TEST_ZK_URL). The C client has one process-wide level and a
// log callback per handle; distlock shows a handle's lines only when its own
// provider asked (log=), on stderr, and never a line of another provider's
// sessions. What the process writes to stderr is captured (fd 2 redirected to a
// file) and read back.
#include <fcntl.h>
#include <unistd.h>
#include <zookeeper/zookeeper.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <string>

#include "distlock/distlock.hpp"
#include "distlock/testing.hpp"
#include "support.hpp"
#include "zk_support.hpp"

using namespace std::chrono_literals;
using distlock::test::unique_name;

namespace {

std::string url() { return distlock::test::env("DISTLOCK_TEST_ZK_URL"); }
// The test server and base path with these parameters only.
std::string url_with(const std::string& params) {
    return "zk://" + zk_test::hosts_of(url()) + zk_test::base_of(url()) + "?" + params;
}

// Everything the process writes to its stderr (fd 2) while it lives.
class stderr_capture {
public:
    stderr_capture() {
        char path[] = "/tmp/distlock-zk-stderr-XXXXXX";
        fd_ = ::mkstemp(path);
        REQUIRE(fd_ >= 0);
        ::unlink(path);
        std::fflush(stderr);
        saved_ = ::dup(2);
        REQUIRE(saved_ >= 0);
        REQUIRE(::dup2(fd_, 2) == 2);
    }
    ~stderr_capture() {
        std::fflush(stderr);
        ::dup2(saved_, 2);
        ::close(saved_);
        ::close(fd_);
    }
    std::string text() const {
        std::fflush(stderr);
        std::string out;
        char buf[4096];
        for (off_t at = 0;;) {
            auto n = ::pread(fd_, buf, sizeof buf, at);
            if (n <= 0) break;
            out.append(buf, static_cast<std::size_t>(n));
            at += n;
        }
        return out;
    }

private:
    int fd_ = -1, saved_ = -1;
};

void lock_cycle(distlock::provider& p, const std::string& name) {
    auto m = p.mutex(name);
    REQUIRE(m.try_lock());
    m.unlock();
}

bool contains(const std::string& text, const std::string& what) { return text.find(what) != std::string::npos; }

}  // namespace

// Each provider is told apart by its requested session timeout (in the C
// client's "Initiating client connection, ... sessionTimeout=N" line) and by
// its lock names (in its debug lines "Sending request ... for path [...]").
TEST_CASE("log= is a provider's own: no other provider's session prints, and log=off silences no other",
          "[zookeeper][log]") {
    stderr_capture capture;
    const auto loud_name = unique_name("log-loud");
    const auto quiet_name = unique_name("log-quiet");
    const auto off_name = unique_name("log-off");
    {
        auto before = distlock::connect(url_with("session_timeout=3100ms"));
        auto loud = distlock::connect(url_with("session_timeout=2000ms&log=debug"));
        // Connected while the C client's level is at debug for `loud`.
        auto quiet = distlock::connect(url_with("session_timeout=3300ms"));
        auto off = distlock::connect(url_with("session_timeout=3500ms&log=off"));
        lock_cycle(before, quiet_name + "-b");
        lock_cycle(quiet, quiet_name);
        lock_cycle(off, off_name);
        distlock::testing::break_lock(quiet, quiet_name);  // on a separate session of its own
        // After `off` connected, `loud` still logs.
        lock_cycle(loud, loud_name);
    }
    const auto text = capture.text();
    INFO(text.size() << " bytes on stderr");
    CHECK(contains(text, "sessionTimeout=2000"));  // what `loud` asked for
    CHECK(contains(text, "[" + zk_test::base_of(url()) + "/" + loud_name));
    for (const auto* timeout : {"sessionTimeout=3100", "sessionTimeout=3300", "sessionTimeout=3500"}) {
        INFO(timeout);
        CHECK_FALSE(contains(text, timeout));
    }
    for (const auto& name : {quiet_name, off_name}) {
        INFO(name);
        CHECK_FALSE(contains(text, name));
    }
}

// A guard: without log=, nothing reaches stderr, even when the application
// raised the C client's process-wide level itself (its own handles' business).
TEST_CASE("without log=, a provider writes nothing to stderr, whatever the C client's level", "[zookeeper][log]") {
    stderr_capture capture;
    const auto name = unique_name("log-none");
    {
        auto p = distlock::connect(url());
        zoo_set_debug_level(ZOO_LOG_LEVEL_DEBUG);  // as an application using the C client may
        lock_cycle(p, name);
        CHECK(p.inspect(name).held == std::optional<bool>(false));
        distlock::testing::break_lock(p, name);
    }
    zoo_set_debug_level(static_cast<ZooLogLevel>(0));
    CHECK(capture.text().empty());
}

// A guard: the lines log= shows never hold the URL's password (the C client
// logs neither the digest nor the session password).
TEST_CASE("log=debug never shows the URL's credentials", "[zookeeper][log]") {
    stderr_capture capture;
    const auto name = unique_name("log-secret");
    {
        auto p = distlock::connect("zk://dl-log:log-secret-pw@" + zk_test::hosts_of(url()) + zk_test::base_of(url()) +
                                   "?session_timeout=2s&log=debug");
        lock_cycle(p, name);
    }
    const auto text = capture.text();
    CHECK(contains(text, name));  // it did log
    CHECK_FALSE(contains(text, "log-secret-pw"));
}
