// The lock contract against a hostile or careless neighbour: names stay in
// their namespace, a name means the same lock in every locale, a provider's
// descriptors do not leak into the programs it execs, a forked child never
// releases its parent's grants, and losing everything at once is safe even
// when the first on_lost tears the provider down. Proved against one backend
// URL per run.
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <clocale>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "child_process.hpp"
#include "distlock/distlock.hpp"
#include "distlock/spi/backend.hpp"
#include "distlock/testing.hpp"
#include "suite.hpp"
#include "support.hpp"

using namespace std::chrono_literals;
using distlock::test::backend_url;
using distlock::test::eventually;
using distlock::test::unique_name;

namespace {

using distlock::test::connect_under_test;

// ---- names and namespaces ------------------------------------------------------------

// Names a client library, an HTTP stack, a file system or a server might
// normalise, resolve or cut: dot segments, slashes, backslashes, their
// percent-encoded forms, NUL bytes, trailing dots. Those built on `x` would
// reach x (or its parent) if normalised; the others, the namespace's root.
std::vector<std::string> odd_names_around(const std::string& x) {
    const std::string nul(1, '\0');
    return {
        "./" + x,        "../" + x,      x + "/..",     x + "/.",   "a/../" + x, x + "/",        x + "//",    "//" + x,
        "/" + x,         x + ".",        x + "..",      x + "\\",   "\\" + x,    x + "\\..",     ".\\" + x,   nul + x,
        x + nul,         x + nul + "..", "%2e%2e/" + x, "%2E/" + x, x + "%2f..", x + "/%2e%2e",  "..%2f" + x, x + "/./",
        "./" + x + "/.", x + "/../" + x, x + "%00",     x + "?",    x + "#",     x + "?recurse",
    };
}
std::vector<std::string> odd_names_at_the_root() {
    const std::string nul(1, '\0');
    return {".",   "..", "...",      "/",    "//",    "./",  "../", "\\", "%2e%2e",   "%2E", "%2e",
            "%2F", nul,  ".." + nul, "./..", "../..", "/..", "?",   "#",  "?recurse", "*"};
}

// Whether a fresh connection can take `name` now (and gives it back).
bool free_now(const distlock::provider& p, const std::string& name) {
    auto m = p.mutex(name);
    const bool got = m.try_lock();
    if (got) m.unlock();
    return got;
}

}  // namespace

TEST_CASE("break_lock and inspect of names that a server or library may normalise leave other locks held",
          "[contract][namespace][needs:break_lock]") {
    // A holds x and its neighbours; B breaks and inspects every odd name, and
    // takes each of them (each is a lock of its own); C checks after each that
    // A's locks are still held. A name that leaves its namespace (Consul's "..",
    // which curl turned into DELETE /v1/kv/?recurse, the whole store) breaks
    // them: the name is in the failure's INFO.
    auto a = connect_under_test();
    auto b = connect_under_test();
    auto c = connect_under_test();
    const auto x = unique_name("ns");
    const std::vector<std::string> held_names = {x, x + "-sibling", "sub/" + x};
    std::vector<distlock::mutex> held;
    for (const auto& n : held_names) {
        held.push_back(a.mutex(n));
        REQUIRE(held.back().try_lock_for(10s));
    }
    std::vector<std::uint64_t> tokens;
    for (auto& m : held) tokens.push_back(m.token());

    auto exercise = [&](const std::string& odd, bool ours) {
        INFO("name " << distlock::test::printable(odd));
        distlock::lock_info info;
        CHECK_NOTHROW(info = b.inspect(odd));
        // A name of ours that nobody holds is not shown held (it is not x);
        // the root's names may be held by another run at this moment.
        if (ours && info.held) CHECK_FALSE(*info.held);
        CHECK_NOTHROW(distlock::testing::break_lock(b, odd));
        REQUIRE_FALSE(free_now(c, x));  // x is still A's (all three are checked at the end)
        auto m = b.mutex(odd);
        CHECK(m.try_lock_for(ours ? 5s : 20s));  // a lock of its own: x's holder does not block it
        m.unlock();
    };
    for (const auto& odd : odd_names_around(x)) exercise(odd, true);
    for (const auto& odd : odd_names_at_the_root()) exercise(odd, false);
    for (const auto& n : held_names) {
        INFO("held lock " << n);
        CHECK_FALSE(free_now(c, n));
    }
    // A's own view after all of it: nothing lost, same grants.
    std::this_thread::sleep_for(std::min<std::chrono::milliseconds>(a.default_lease() / 2, 1s));
    for (std::size_t i = 0; i < held.size(); ++i) {
        INFO("held lock " << held_names[i]);
        CHECK(held[i].held());
        CHECK(held[i].token() == tokens[i]);
    }
    for (auto& m : held) m.unlock();
    for (const auto& n : held_names) {
        const auto start = std::chrono::steady_clock::now();
        const bool free = free_now(c, n);
        if (!free) {  // why: still held on the server, or the try's reply came after its lease
            const auto took = std::chrono::steady_clock::now() - start;
            const auto info = c.inspect(n);
            FAIL_CHECK("released lock " << n << " is not free: try_lock took "
                                        << std::chrono::duration_cast<std::chrono::milliseconds>(took).count()
                                        << " ms; inspect says held "
                                        << (info.held ? (*info.held ? "yes" : "no") : "unknown") << ", token "
                                        << (info.token ? std::to_string(*info.token) : "-"));
        }
    }
}

// ---- locales -------------------------------------------------------------------------

TEST_CASE("a name is the same lock whatever the process locale",
          "[contract][locale][needs:cross_process][needs:locale]") {
    // This process runs in the "C" locale; the helper sets each locale this
    // machine has for bytes >= 0x80 (Latin-1, made with localedef, where 0xE9 is
    // a letter and 0xC9 its upper case; C.UTF-8). A name mapped with
    // std::isalnum or std::tolower would be another key there.
    REQUIRE(std::string(std::setlocale(LC_ALL, nullptr)) == "C");
    const auto& locales = distlock::test::test_locales();
    REQUIRE_FALSE(locales.empty());  // else the case is not applicable (plan.cpp)
    auto a = connect_under_test();
    const auto base = unique_name("locale");
    const std::string e_latin1 = base + "\xe9t\xe9", E_latin1 = base + "\xc9T\xc9";
    const std::string e_utf8 = base + "\xc3\xa9t\xc3\xa9", sharp = base + "\xdf\xb5\xff";
    std::vector<distlock::mutex> held;
    for (const auto* n : {&e_latin1, &e_utf8, &sharp}) {
        held.push_back(a.mutex(*n));
        REQUIRE(held.back().try_lock_for(10s));
    }
    for (const auto& loc : locales) {
        INFO("helper locale " << loc.name);
        std::vector<std::pair<std::string, std::string>> env;
        if (!loc.locpath.empty()) env.emplace_back("LOCPATH", loc.locpath);
        auto helper = std::make_unique<distlock::test::child_process>(
            std::vector<std::string>{"/proc/self/exe", distlock::test::conformance_helper_flag, "try-in-locale",
                                     backend_url(), loc.name, e_latin1, E_latin1, e_utf8, sharp},
            distlock::test::child_options{.env = env});
        // Held here: busy there. Not held here (upper case): free there.
        CHECK(helper->read_line(60s) == "busy");
        CHECK(helper->read_line(60s) == "free");
        CHECK(helper->read_line(60s) == "busy");
        CHECK(helper->read_line(60s) == "busy");
        CHECK(helper->wait_exit() == 0);
    }
    for (auto& m : held) m.unlock();
    // And the other way round: what the helper takes in its locale, this
    // process cannot take in "C" (the helper holds until its input closes).
    const auto& loc = locales.front();
    std::vector<std::pair<std::string, std::string>> env;
    if (!loc.locpath.empty()) env.emplace_back("LOCPATH", loc.locpath);
    distlock::test::child_process holder({"/proc/self/exe", distlock::test::conformance_helper_flag, "hold-in-locale",
                                          backend_url(), loc.name, e_latin1},
                                         distlock::test::child_options{.env = env, .stdin_pipe = true});
    REQUIRE(holder.read_line(60s) == "locked");
    CHECK_FALSE(a.mutex(e_latin1).try_lock());
    CHECK(free_now(a, E_latin1));
    holder.close_input();
    CHECK(holder.wait_exit() == 0);
    auto again = a.mutex(e_latin1);
    CHECK(again.try_lock_for(10s));
    again.unlock();
}

// ---- descriptors ---------------------------------------------------------------------

namespace {

// The process's descriptors: number -> what it is ("socket:[123]", a path...).
std::map<int, std::string> descriptors() {
    std::map<int, std::string> out;
    for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
        std::error_code ec;
        const auto target = std::filesystem::read_symlink(entry.path(), ec);
        if (ec) continue;  // the directory iterator's own descriptor, gone already
        out.emplace(std::stoi(entry.path().filename().string()), target.string());
    }
    return out;
}

}  // namespace

TEST_CASE("a provider's descriptors are close-on-exec", "[contract][cloexec][needs:cross_process]") {
    // A program a holder execs (distlock run's command) must not inherit the
    // holder's connections or lock files: it could keep a session, a flock and
    // so the lock alive after the holder died, or speak on the connection.
    // Every descriptor that appeared since before connect() (sockets, lock
    // files, a client library's pipes), once the provider has taken a lock,
    // waited for one and renewed, has FD_CLOEXEC.
    const auto before = descriptors();
    {
        auto a = connect_under_test();
        auto b = connect_under_test();
        const auto name = unique_name("cloexec");
        auto m = a.mutex(name);
        REQUIRE(m.try_lock_for(10s));
        auto other = b.mutex(name);
        CHECK_FALSE(other.try_lock_for(300ms));  // a waiter: watches, subscriptions, blocking queries
        (void)a.inspect(name);
        std::this_thread::sleep_for(std::min<std::chrono::milliseconds>(a.default_lease() / 3, 1s));  // a renewal
        std::string inherited;
        int seen = 0;
        for (const auto& [fd, what] : descriptors()) {
            auto old = before.find(fd);
            if (old != before.end() && old->second == what) continue;
            const int flags = ::fcntl(fd, F_GETFD);
            if (flags < 0) continue;  // closed meanwhile
            ++seen;
            if ((flags & FD_CLOEXEC) == 0) inherited += std::to_string(fd) + " " + what + "\n";
        }
        INFO(seen << " new descriptor(s); without FD_CLOEXEC:\n" << inherited);
        CHECK(inherited.empty());
        m.unlock();
    }
}

// ---- fork ----------------------------------------------------------------------------

namespace {

// Set in a forked child of the case below: its exit skips LeakSanitizer's
// check, which would report what the parent's threads (absent in the child)
// still referenced as leaks.
std::atomic<bool> forked_child{false};

// Forks; in the child runs `child` and exits with what it returns, by
// std::exit (atexit handlers, static destructors: the exit of a real program).
// The parent gets the child's exit status, or nullopt when it did not end
// within `limit` (then killed).
std::optional<int> in_forked_child(const std::function<int()>& child, std::chrono::milliseconds limit) {
    std::cout.flush();
    std::cerr.flush();
    std::fflush(nullptr);
    const pid_t pid = ::fork();
    if (pid < 0) FAIL("fork failed");
    if (pid == 0) {
        forked_child = true;
        int status = 0;
        try {
            status = child();
        } catch (const std::exception& e) {
            std::fprintf(stderr, "forked child: %s\n", e.what());
            status = 64;
        }
        std::exit(status);
    }
    int status = 0;
    const auto until = std::chrono::steady_clock::now() + limit;
    while (::waitpid(pid, &status, WNOHANG) == 0) {
        if (std::chrono::steady_clock::now() >= until) {
            ::kill(pid, SIGKILL);
            ::waitpid(pid, &status, 0);
            return std::nullopt;
        }
        std::this_thread::sleep_for(10ms);
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace

// LeakSanitizer's hooks (weak: a program that links the suite and defines its
// own keeps them). A forked child's exit is not checked (above); and glibc's
// setlocale() keeps the LOCPATH it parsed for ever, which the locale helper
// uses (tests/conformance/helper.cpp).
extern "C" __attribute__((weak)) int __lsan_is_turned_off() { return forked_child.load() ? 1 : 0; }
extern "C" __attribute__((weak)) const char* __lsan_default_suppressions() { return "leak:__argz_add_sep\n"; }

TEST_CASE("a forked child's unlock, destructors and exit leave its parent's lock held",
          "[contract][fork][needs:cross_process]") {
    // The child shares the parent's connections, sessions and lock files: an
    // unlock or a destructor there (a release through the shared connection, a
    // flock(LOCK_UN) on the shared file, a session closed) would free the lock
    // the parent still holds. C, a third connection, checks it stayed held: the
    // mutex, and where the backend has them a read lock and a semaphore's
    // only permit.
    auto c = connect_under_test();
    const bool rw = c.caps().supports(distlock::feature::read_write);
    const bool sem = c.caps().supports(distlock::feature::semaphore);
    const auto name = unique_name("fork");
    enum variant { unlock_and_destroy, exit_only };
    for (auto v : {unlock_and_destroy, exit_only}) {
        INFO((v == unlock_and_destroy ? "the child unlocks, destroys the locks and the provider, exits"
                                      : "the child exits at once"));
        std::optional<distlock::provider> a = connect_under_test();
        std::optional<distlock::mutex> m = a->mutex(name);
        REQUIRE(m->try_lock_for(10s));
        const auto token = m->token();
        std::optional<distlock::shared_mutex> reader;
        std::optional<distlock::semaphore> permits;
        if (rw) {
            reader.emplace(a->shared_mutex(name + "-rw"));
            REQUIRE(reader->try_lock_shared_for(10s));
        }
        if (sem) {
            permits.emplace(a->semaphore(name + "-sem", 1));
            REQUIRE(permits->try_acquire_for(10s));
        }
        // The child's exit status: a bit for each thing that went wrong there.
        const auto status = in_forked_child(
            [&] {
                if (v != unlock_and_destroy) return 0;
                int wrong = m->held() || (reader && reader->held_shared()) || (permits && permits->held() != 0)
                                ? 1
                                : 0;  // held there: the grants are the parent's
                m->unlock();
                m.reset();
                if (reader) reader->unlock_shared();
                if (permits) permits->release();
                reader.reset();
                permits.reset();
                try {
                    (void)a->mutex(name + "-child");
                    wrong |= 2;  // the parent's provider (its connections) usable there
                } catch (const distlock::invalid_argument_error&) {}
                a.reset();
                return wrong;
            },
            20s);
        REQUIRE(status.has_value());  // it ended (else it hung, killed after 20 s)
        INFO("child's exit status " << *status << " (1: held there, 2: the parent's provider usable there)");
        CHECK(*status == 0);
        CHECK(m->held());
        CHECK(m->token() == token);
        CHECK_FALSE(free_now(c, name));  // still the parent's
        if (reader) {
            CHECK(reader->held_shared());
            auto writer = c.shared_mutex(name + "-rw");
            CHECK_FALSE(writer.try_lock());  // the parent still reads
        }
        if (permits) {
            CHECK(permits->held() == 1);
            auto other = c.semaphore(name + "-sem", 1);
            CHECK_FALSE(other.try_acquire());  // the parent still has the only permit
        }
        m->unlock();
        if (reader) reader->unlock_shared();
        if (permits) permits->release();
        auto after = c.mutex(name);
        CHECK(after.try_lock_for(10s));
        after.unlock();
    }
}

// ---- losing everything at once ------------------------------------------------------------

TEST_CASE("an on_lost that destroys every mutex and the provider while other losses are queued is safe",
          "[contract][loss][lifetime][needs:loss_detection][needs:break_lock]") {
    // Every lock of one provider is broken; the first on_lost to run waits until
    // every loss was found (so the others' callbacks are queued behind it), then
    // destroys every mutex and the last copy of the provider. The queued
    // callbacks must not touch what was destroyed (AddressSanitizer says so on
    // the code before), and no on_lost of a destroyed mutex runs.
    struct counter final : distlock::observer {
        std::atomic<int> losses{0};
        void lost(const distlock::loss_event&) override { ++losses; }
    };
    constexpr int n = 6;
    auto seen = std::make_shared<counter>();
    distlock::provider_options options;
    options.observer = seen;
    struct world {
        std::optional<distlock::provider> p;
        std::vector<distlock::mutex> locks;
    };
    auto* w = new world;
    w->p.emplace(distlock::connect(backend_url(), options));
    const auto bound = std::max<std::chrono::milliseconds>(5s, 2 * w->p->default_lease());
    std::atomic<world*> alive{w};
    std::atomic<int> user_calls{0};
    std::atomic<bool> destroyed{false};
    distlock::lock_options o;
    o.on_lost = [&](const distlock::lock_event&) {
        ++user_calls;
        world* mine = alive.exchange(nullptr);
        if (mine == nullptr) return;
        (void)eventually(
            [&] {
                for (auto& m : mine->locks)
                    if (m.held()) return false;
                return true;
            },
            bound);
        delete mine;
        destroyed = true;
    };
    std::vector<std::string> names;
    for (int i = 0; i < n; ++i) {
        names.push_back(unique_name("lose-all-" + std::to_string(i)));
        w->locks.push_back(w->p->mutex(names.back(), o));
        REQUIRE(w->locks.back().try_lock_for(10s));
    }
    auto breaker = connect_under_test();
    for (const auto& name : names) distlock::testing::break_lock(breaker, name);
    REQUIRE(eventually([&] { return destroyed.load(); }, 2 * bound));
    CHECK(eventually([&] { return seen->losses.load() == n; }, bound));
    std::this_thread::sleep_for(200ms);  // the provider's last steps, on its callback thread
    CHECK(user_calls.load() == 1);
    for (const auto& name : names) {
        auto m = breaker.mutex(name);
        CHECK(m.try_lock_for(bound));
        m.unlock();
    }
}
