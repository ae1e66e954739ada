// file:// specifics: the fence counter kept in the lock file, the liveness
// check that finds a replaced lock file, what a bad directory says, and what
// file:// refuses to open in its directory (planted links, FIFOs, other users'
// files), the modes it makes, and its name mapping.
#include <fcntl.h>
#include <locale.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cctype>
#include <clocale>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <iostream>
#include <iterator>
#include <memory>
#include <thread>

#include "distlock/distlock.hpp"
#include "distlock/spi/backend.hpp"
#include "distlock/testing.hpp"
#include "support.hpp"

using namespace std::chrono_literals;
using distlock::test::unique_name;
namespace fs = std::filesystem;

namespace {

// A fresh directory under the system's temp dir, removed at the end of the test.
struct temp_dir {
    fs::path path = fs::temp_directory_path() / unique_name("distlock-file-test");
    // 0700: a lock directory that others could write is refused.
    temp_dir() {
        fs::create_directories(path);
        fs::permissions(path, fs::perms::owner_all, fs::perm_options::replace);
    }
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
    // A NUL (%00) would cut the path short: the directory before it would be used.
    CHECK_THROWS_AS(distlock::connect(dir.url("/cut%00/below")), distlock::invalid_argument_error);
    CHECK_FALSE(fs::exists(dir.path / "cut"));
    // A path the system cannot take is the URL's fault, not the file system's.
    CHECK_THROWS_AS(distlock::connect(dir.url("/" + std::string(300, 'x'))), distlock::invalid_argument_error);
    CHECK_THROWS_AS(distlock::connect(dir.url("/" + std::string(5000, 'x'))), distlock::invalid_argument_error);
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

// ---------------------------------------------------------------------------
// What file:// refuses in its directory (docs/backends/embedded.md, "What
// file:// refuses"): every case below failed before the lock directory was held
// open and every file vetted.

namespace {

std::string read_text(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

unsigned mode_of(const fs::path& p) {
    struct stat st {};
    REQUIRE(::lstat(p.c_str(), &st) == 0);
    return st.st_mode & 07777;
}

// A lock directory `locks` below a temp dir, with a victim file beside it that
// nothing may ever write (what a planted link points at).
struct planted {
    temp_dir base;
    fs::path locks = base.path / "locks";
    fs::path victim = base.path / "victim";
    planted() {
        fs::create_directories(locks);
        fs::permissions(locks, fs::perms::owner_all, fs::perm_options::replace);
        std::ofstream(victim) << "victim\n";
    }
    std::string url(const std::string& query = "") const { return "file://" + locks.string() + query; }
};

// Runs `f`, which must throw access_denied_error whose message names `path`
// and says `why`.
template <class F>
void require_denied(F&& f, const fs::path& path, const std::string& why) {
    try {
        f();
        FAIL("not refused: " << path.string());
    } catch (const distlock::access_denied_error& e) {
        const std::string what = e.what();
        INFO(what);
        CHECK(what.find(path.string()) != std::string::npos);
        CHECK(what.find(why) != std::string::npos);
    }
}

// The users the other-owner cases chown to (they need root): nobody, and a
// group the effective user is not in.
bool is_root() { return ::geteuid() == 0; }
constexpr uid_t nobody_uid = 65534;
constexpr gid_t nobody_gid = 65534;  // nogroup: root is not in it (checked in before_run)

void chown_to(const fs::path& p, uid_t uid, gid_t gid) { REQUIRE(::lchown(p.c_str(), uid, gid) == 0); }

}  // namespace

// Cases tagged [other-user] need root, to chown files and directories to
// nobody: not applicable (and not run, so never counted as passed) otherwise.
int distlock::test::before_run(const std::vector<test_case_info>& cases, std::vector<std::string>& exclusions) {
    std::vector<gid_t> groups(static_cast<std::size_t>(std::max(0, ::getgroups(0, nullptr))));
    groups.resize(static_cast<std::size_t>(std::max(0, ::getgroups(static_cast<int>(groups.size()), groups.data()))));
    const bool in_nogroup =
        ::getegid() == nobody_gid || std::find(groups.begin(), groups.end(), nobody_gid) != groups.end();
    if (is_root() && !in_nogroup) return 0;
    exclusions.push_back("~[other-user]");
    for (const auto& c : cases)
        if (std::find(c.tags.begin(), c.tags.end(), "other-user") != c.tags.end())
            std::cout << "NOT APPLICABLE: " << c.name
                      << (is_root() ? " (root is in group 65534)" : " (needs root to chown files to nobody)") << "\n";
    return 0;
}

TEST_CASE("a planted symlink is refused for every file of a name, and its target is never written", "[file][refuse]") {
    planted d;
    auto p = distlock::connect(d.url());
    const auto dangling = d.base.path / "made-through-a-link";
    struct file_case {
        std::string suffix;
        std::function<void(const std::string& name)> take;
    };
    const std::vector<file_case> cases = {
        {".lock", [&](const std::string& n) { (void)p.mutex(n).try_lock(); }},
        {".rw", [&](const std::string& n) { (void)p.shared_mutex(n).try_lock_shared(); }},
        {".rw-turn", [&](const std::string& n) { (void)p.shared_mutex(n).try_lock(); }},
        {".sem", [&](const std::string& n) { (void)p.semaphore(n, 2).try_acquire(); }},
        {".sem-0", [&](const std::string& n) { (void)p.semaphore(n, 2).try_acquire(); }},
    };
    for (const auto& c : cases) {
        for (const auto& target : {d.victim, dangling}) {
            DYNAMIC_SECTION(c.suffix << " -> " << target.filename().string()) {
                const auto name = "n" + std::to_string(&c - cases.data());
                const auto link = d.locks / (name + c.suffix);
                fs::create_symlink(target, link);
                require_denied([&] { c.take(name); }, link, "symbolic link");
                CHECK(read_text(d.victim) == "victim\n");
                CHECK_FALSE(fs::exists(dangling));  // O_CREAT through a dangling link made it
                CHECK(fs::is_symlink(link));
            }
        }
    }
    SECTION("inspect and break_lock refuse it too") {
        const auto link = d.locks / "seen.lock";
        fs::create_symlink(d.victim, link);
        require_denied([&] { (void)p.inspect("seen"); }, link, "symbolic link");
        require_denied([&] { distlock::testing::break_lock(p, "seen"); }, link, "symbolic link");
        CHECK(fs::is_symlink(link));  // break_lock renamed a fresh file over it
        CHECK(read_text(d.victim) == "victim\n");
    }
}

TEST_CASE("a FIFO planted as a lock file is refused at once, never opened", "[file][refuse]") {
    planted d;
    auto p = distlock::connect(d.url());
    const auto fifo = d.locks / "pipe.lock";
    REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
    // break_lock opened it for reading, which blocks until a writer comes: run
    // it on a thread, and if it hangs, be the writer that lets it go.
    auto done = std::async(std::launch::async, [&]() -> std::string {
        try {
            distlock::testing::break_lock(p, "pipe");
            return "not refused";
        } catch (const distlock::access_denied_error& e) {
            return e.what();
        } catch (const std::exception& e) {
            return std::string("another error: ") + e.what();
        }
    });
    if (done.wait_for(5s) != std::future_status::ready) {
        FAIL_CHECK("break_lock hung on a FIFO");
        int unblock = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
        if (unblock >= 0) ::close(unblock);
    }
    const auto what = done.get();
    INFO(what);
    CHECK(what.find(fifo.string() + " is a FIFO") != std::string::npos);
    require_denied([&] { (void)p.mutex("pipe").try_lock(); }, fifo, "FIFO");
    const auto slot = d.locks / "pipe.sem-0";
    REQUIRE(::mkfifo(slot.c_str(), 0600) == 0);
    require_denied([&] { (void)p.semaphore("pipe", 1).try_acquire(); }, slot, "FIFO");
}

TEST_CASE("a semaphore's stored size bounds no loop: a huge one is answered at once", "[file][refuse]") {
    planted d;
    auto p = distlock::connect(d.url());
    std::ofstream(d.locks / "big.sem") << "4000000000 7\n";  // as a hostile group member could write it
    fs::permissions(d.locks / "big.sem", fs::perms::owner_read | fs::perms::owner_write, fs::perm_options::replace);
    auto done = std::make_shared<std::promise<std::string>>();
    auto answer = done->get_future();
    std::thread([&p, done] {  // one open() per stored slot took hours: bounded by a timeout
        std::string result;   // set once nothing of p is in use any more
        try {
            bool got = false;
            {
                auto sem = p.semaphore("big", 1);
                got = sem.try_acquire();
            }
            distlock::testing::break_lock(p, "big");
            result = got ? "acquired" : "not acquired";
        } catch (const std::exception& e) {
            result = std::string("error: ") + e.what();
        }
        done->set_value(result);
    })
        .detach();
    if (answer.wait_for(10s) != std::future_status::ready) {
        std::cerr << "FAILED: a semaphore with a stored size of 4000000000 still runs after 10 s\n";
        std::_Exit(1);  // the thread cannot be stopped: end the program, failed
    }
    CHECK(answer.get() == "acquired");
}

TEST_CASE("a hard link to another file is refused, and that file is never written", "[file][refuse]") {
    planted d;
    auto p = distlock::connect(d.url());
    const auto link = d.locks / "linked.lock";
    fs::create_hard_link(d.victim, link);
    require_denied([&] { (void)p.mutex("linked").try_lock(); }, link, "hard link");
    CHECK(read_text(d.victim) == "victim\n");
}

TEST_CASE("a directory, a socket or a device in place of a lock file is refused", "[file][refuse]") {
    planted d;
    auto p = distlock::connect(d.url());
    fs::create_directory(d.locks / "dir.lock");
    require_denied([&] { (void)p.mutex("dir").try_lock(); }, d.locks / "dir.lock", "directory");
    const auto sock = d.locks / "sock.lock";
    int s = ::socket(AF_UNIX, SOCK_STREAM, 0);
    REQUIRE(s >= 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    REQUIRE(sock.string().size() < sizeof addr.sun_path);
    std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", sock.c_str());
    REQUIRE(::bind(s, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
    ::close(s);
    require_denied([&] { (void)p.mutex("sock").try_lock(); }, sock, "socket");
    const auto dev = d.locks / "dev.lock";
    if (::mknod(dev.c_str(), S_IFCHR | 0600, ::makedev(1, 3)) == 0) {  // /dev/null's numbers
        require_denied([&] { (void)p.mutex("dev").try_lock(); }, dev, "device");
    } else {
        WARN("mknod is not permitted here: the device case is not applicable");
    }
}

TEST_CASE("a lock file of another user is refused, even for root", "[file][refuse][other-user]") {
    planted d;
    auto p = distlock::connect(d.url());
    const auto theirs = d.locks / "theirs.lock";
    std::ofstream(theirs) << "5\n";
    chown_to(theirs, nobody_uid, nobody_gid);
    require_denied([&] { (void)p.mutex("theirs").try_lock(); }, theirs, "owned by uid 65534");
    CHECK(read_text(theirs) == "5\n");
}

TEST_CASE("a lock directory of another user is refused, even for root", "[file][refuse][other-user]") {
    planted d;
    chown_to(d.locks, nobody_uid, nobody_gid);
    require_denied([&] { (void)distlock::connect(d.url()); }, d.locks, "owned by uid 65534");
}

TEST_CASE("a lock directory that others can write is refused", "[file][refuse]") {
    planted d;
    for (auto mode : {0777u, 01777u, 0770u, 0720u, 0702u}) {
        DYNAMIC_SECTION("mode " << std::oct << mode) {
            REQUIRE(::chmod(d.locks.c_str(), mode) == 0);
            require_denied([&] { (void)distlock::connect(d.url()); }, d.locks, "writable by");
        }
    }
    SECTION("a symbolic link in place of the directory") {
        const auto link = d.base.path / "link-to-locks";
        fs::create_directory_symlink(d.locks, link);
        require_denied([&] { (void)distlock::connect("file://" + link.string()); }, link, "symbolic link");
    }
}

TEST_CASE("file:// makes its directories 0700 and its files 0600, whatever the umask", "[file][mode]") {
    temp_dir base;
    fs::permissions(base.path, fs::perms::owner_all, fs::perm_options::replace);
    const auto old_mask = ::umask(0);  // the most permissive umask: modes come from distlock alone
    auto p = distlock::connect("file://" + (base.path / "made" / "locks").string());
    ::umask(old_mask);
    CHECK(mode_of(base.path / "made") == 0700);
    CHECK(mode_of(base.path / "made" / "locks") == 0700);
    auto m = p.mutex("m");
    REQUIRE(m.try_lock());
    m.unlock();
    auto rw = p.shared_mutex("m");
    REQUIRE(rw.try_lock());
    rw.unlock();
    auto sem = p.semaphore("m", 1);
    REQUIRE(sem.try_acquire());
    sem.release();
    for (const auto* f : {"m.lock", "m.rw", "m.rw-turn", "m.sem", "m.sem-0"}) {
        INFO(f);
        CHECK(mode_of(base.path / "made" / "locks" / f) == 0600);
    }
    SECTION("a lock file an older distlock made 0644 is closed to others") {
        const auto legacy = base.path / "made" / "locks" / "legacy.lock";
        std::ofstream(legacy) << "7\n";
        fs::permissions(legacy, fs::perms(0644), fs::perm_options::replace);
        auto l = p.mutex("legacy");
        REQUIRE(l.try_lock());
        CHECK(l.token() == 8);
        l.unlock();
        CHECK(mode_of(legacy) == 0600);
    }
}

TEST_CASE("mode=0660 shares the directory with its group: 02770 directories, 0660 files", "[file][mode]") {
    temp_dir base;
    fs::permissions(base.path, fs::perms::owner_all, fs::perm_options::replace);
    const auto dir = base.path / "shared";
    const auto old_mask = ::umask(077);  // the strictest umask: modes come from distlock alone
    auto p = distlock::connect("file://" + dir.string() + "?mode=0660");
    ::umask(old_mask);
    CHECK(mode_of(dir) == 02770);
    auto m = p.mutex("g");
    REQUIRE(m.try_lock());
    m.unlock();
    CHECK(mode_of(dir / "g.lock") == 0660);
    SECTION("the same directory without mode= is refused: its group can write it") {
        require_denied([&] { (void)distlock::connect("file://" + dir.string()); }, dir, "writable by");
    }
    SECTION("mode=0660 needs the setgid bit, so that every file gets the directory's group") {
        REQUIRE(::chmod(dir.c_str(), 0770) == 0);
        require_denied([&] { (void)distlock::connect("file://" + dir.string() + "?mode=0660"); }, dir, "setgid");
    }
    SECTION("and refuses a directory that others can write") {
        REQUIRE(::chmod(dir.c_str(), 02777) == 0);
        require_denied([&] { (void)distlock::connect("file://" + dir.string() + "?mode=0660"); }, dir, "writable by");
    }
}

TEST_CASE("mode= takes 0600 or 0660 only", "[file][mode]") {
    temp_dir dir;
    int fresh = 0;  // a new directory each time: 0660 wants a setgid one, and makes it
    for (const auto* good : {"0600", "600", "0660", "660"}) {
        INFO(good);
        const auto url = "file://" + (dir.path / std::to_string(++fresh)).string() + "?mode=" + good;
        CHECK_NOTHROW(distlock::connect(url));
    }
    for (const auto* bad : {"0644", "0666", "0777", "0700", "0640", "0000", "01660", "02660", "06600", "0o660", "abc",
                            "", "0600x", "-600", " 600", "99999999999999999999"}) {
        INFO(bad);
        const auto url = "file://" + (dir.path / std::to_string(++fresh)).string() + "?mode=" + bad;
        CHECK_THROWS_AS(distlock::connect(url), distlock::invalid_argument_error);
    }
}

TEST_CASE("mode=0660 accepts a group member's directory and files, and only those", "[file][mode][other-user]") {
    planted d;
    // The directory of another user (nobody) in our group, setgid, closed to others.
    chown_to(d.locks, nobody_uid, ::getegid());
    REQUIRE(::chmod(d.locks.c_str(), 02770) == 0);
    const auto url = d.url("?mode=0660");
    require_denied([&] { (void)distlock::connect(d.url()); }, d.locks, "owned by uid 65534");
    auto p = distlock::connect(url);
    const auto member = d.locks / "member.lock";
    std::ofstream(member) << "3\n";
    chown_to(member, nobody_uid, ::getegid());
    REQUIRE(::chmod(member.c_str(), 0660) == 0);
    auto m = p.mutex("member");
    REQUIRE(m.try_lock());
    CHECK(m.token() == 4);
    m.unlock();
    SECTION("a file of another group is refused") {
        chown_to(member, nobody_uid, nobody_gid);
        require_denied([&] { (void)p.mutex("member").try_lock(); }, member, "owned by uid 65534");
    }
    SECTION("a file that others can open is refused (any of them could flock it for ever)") {
        REQUIRE(::chmod(member.c_str(), 0664) == 0);
        require_denied([&] { (void)p.mutex("member").try_lock(); }, member, "owned by uid 65534");
    }
    SECTION("a directory of a group this user is not in is refused") {
        chown_to(d.locks, nobody_uid, nobody_gid);
        REQUIRE(::chmod(d.locks.c_str(), 02770) == 0);
        require_denied([&] { (void)distlock::connect(url); }, d.locks, "group 65534");
    }
}

TEST_CASE("a directory swapped after connect does not move the locks", "[file][refuse]") {
    planted d;
    auto p = distlock::connect(d.url());
    const auto moved = d.base.path / "moved";
    const auto elsewhere = d.base.path / "elsewhere";
    fs::create_directory(elsewhere);
    fs::rename(d.locks, moved);
    fs::create_directory_symlink(elsewhere, d.locks);  // what a writer of the parent could do
    auto m = p.mutex("swap");
    REQUIRE(m.try_lock());
    m.unlock();
    distlock::testing::break_lock(p, "swap");
    CHECK(fs::exists(moved / "swap.lock"));
    CHECK(fs::is_empty(elsewhere));
    SECTION("and no name leaves the directory") {
        for (const auto* name : {"..", ".", "../x", "/etc/passwd", "a/../../b", "..%2F"}) {
            auto n = p.mutex(name);
            REQUIRE(n.try_lock());
            n.unlock();
            distlock::testing::break_lock(p, name);
        }
        std::size_t beside = 0;
        for (const auto& e : fs::directory_iterator(d.base.path)) beside += e.path().filename() != "victim";
        CHECK(beside == 3);  // moved, elsewhere, the link: nothing else beside the directory
        CHECK(fs::is_empty(elsewhere));
    }
}

TEST_CASE("a literal name sha256-<hex> and the long name hashed to it are two locks", "[file][names]") {
    planted d;
    const std::string long_name(200, 'a');  // encoded over 180 bytes: hashed
    const auto literal = "sha256-" + distlock::spi::sha256_hex(long_name);
    auto a = distlock::connect(d.url());
    auto b = distlock::connect(d.url());
    auto held = a.mutex(long_name);
    REQUIRE(held.try_lock());
    auto other = b.mutex(literal);
    CHECK(other.try_lock());
    if (other.held()) other.unlock();
    held.unlock();
    CHECK(fs::exists(d.locks / (literal + ".lock")));                    // the hashed name's file, as before
    CHECK(fs::exists(d.locks / ("%73" + literal.substr(1) + ".lock")));  // the literal one's, escaped
}

namespace {

// Every byte's image in a file name, from the files it made: the expected map is
// [A-Za-z0-9_-] kept, '.' kept unless first, everything else %XX.
void check_byte_map(distlock::provider& p, const fs::path& dir) {
    for (int c = 1; c < 256; ++c) {
        const std::string name = std::string("x") + static_cast<char>(c);
        auto m = p.mutex(name);
        REQUIRE(m.try_lock());
        m.unlock();
        const bool kept = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
                          c == '-' || c == '.';
        char hex[4];
        std::snprintf(hex, sizeof hex, "%%%02X", c);
        const auto expected = "x" + (kept ? std::string(1, static_cast<char>(c)) : std::string(hex)) + ".lock";
        INFO("byte " << c);
        CHECK(fs::exists(dir / expected));
    }
}

// A Latin-1 locale (where isalnum(0xE9) is true), made with localedef in `dir`
// when the system has none installed: its name, or "" when none can be had.
std::string latin1_locale(const fs::path& dir) {
    for (const auto* name : {"en_US.ISO-8859-1", "de_DE.ISO-8859-1", "fr_FR.ISO-8859-1", "en_US.iso88591"})
        if (auto loc = ::newlocale(LC_CTYPE_MASK, name, nullptr); loc != nullptr) {
            ::freelocale(loc);
            return name;
        }
    const auto cmd = "localedef -i en_US -f ISO-8859-1 '" + (dir / "en_US.ISO-8859-1").string() + "' >/dev/null 2>&1";
    if (distlock::test::run_command(cmd).status != 0) return "";
    ::setenv("LOCPATH", dir.c_str(), 1);
    return "en_US.ISO-8859-1";
}

}  // namespace

TEST_CASE("names map byte for byte whatever the process locale", "[file][names]") {
    planted d;
    // LOCPATH is a list separated by ':', which unique names hold: this one has none.
    const auto locales = fs::temp_directory_path() / ("distlock-latin1-" + std::to_string(::getpid()));
    fs::create_directories(locales);
    struct restore {  // the C locale again, whatever happens
        fs::path dir;
        ~restore() {
            std::setlocale(LC_CTYPE, "C");
            ::unsetenv("LOCPATH");
            std::error_code ec;
            fs::remove_all(dir, ec);
        }
    } restore_locale{locales};
    const auto latin1 = latin1_locale(locales);
    if (latin1.empty() || std::setlocale(LC_CTYPE, latin1.c_str()) == nullptr || !std::isalnum(0xE9)) {
        WARN("no Latin-1 locale could be had: the map is checked in the C locale only");
        std::setlocale(LC_CTYPE, "C");
    }
    auto p = distlock::connect(d.url());
    check_byte_map(p, d.locks);  // in Latin-1, 0xE9 is a letter: it must still be %E9
}

TEST_CASE("a label planted in a lock file never reaches inspect() or leader() raw", "[file][text]") {
    temp_dir dir;
    auto holder_side = distlock::connect(dir.url("?holder=honest"));
    auto reader = distlock::connect(dir.url());
    const std::string name = "planted";  // its file is planted.lock (the directory is this test's own)
    auto m = holder_side.mutex(name);
    REQUIRE(m.try_lock());
    REQUIRE(reader.inspect(name).holder == std::optional<std::string>("honest"));
    // Another user of the directory (or anyone who can write the file) rewrites
    // the label while the lock is held: the flock stays, the text is theirs.
    const auto plant = [&](const std::string& label) {
        std::ofstream(dir.path / (name + ".lock"), std::ios::binary | std::ios::trunc) << "7 " << label << "\n";
    };
    for (const auto& label : {std::string("evil\x1b]0;pwned\a\x1b[2J"), std::string(300, 'x')}) {
        plant(label);
        distlock::election_options eo;
        eo.id = "reader";
        for (const auto& info : {reader.inspect(name), reader.election(name, eo).leader()}) {
            CHECK(info.held == std::optional<bool>(true));
            CHECK(info.token == std::optional<std::uint64_t>(7));
            CHECK_FALSE(info.holder.has_value());
            REQUIRE(info.unknown.count("holder") == 1);
            CHECK(info.unknown.at("holder").find("control characters") != std::string::npos);
        }
    }
    m.unlock();
}

TEST_CASE("inspect_semaphore bounds what a planted meta file says; inspect_read_write counts readers from /proc/locks",
          "[file][inspect]") {
    temp_dir dir;
    auto p = distlock::connect(dir.url());
    const std::string name = "counted";  // its files are counted.* (the directory is this test's own)
    auto rw_a = distlock::connect(dir.url()).shared_mutex(name);
    auto rw_b = distlock::connect(dir.url()).shared_mutex(name);
    REQUIRE(rw_a.try_lock_shared());
    REQUIRE(rw_b.try_lock_shared());
    auto info = p.inspect_read_write(name);
    CHECK(info.write_held == std::optional<bool>(false));
    REQUIRE(info.readers.has_value());
    CHECK(info.readers->size() == 2u);
    rw_a.unlock_shared();
    CHECK(p.inspect_read_write(name).readers->size() == 1u);
    rw_b.unlock_shared();
    CHECK(p.inspect_read_write(name).readers->empty());

    auto sem = p.semaphore(name, 2);
    REQUIRE(sem.try_acquire());
    auto s = p.inspect_semaphore(name);
    CHECK(s.size == std::optional<std::uint32_t>(2));
    CHECK(s.free == std::optional<std::uint32_t>(1));
    sem.release();
    // Anyone who can write the directory can make the meta file say anything:
    // a size no distlock writes is not believed, and no slot past the bound is looked at.
    std::ofstream(dir.path / (name + ".sem"), std::ios::binary | std::ios::trunc) << "4000000000 9\n";
    s = p.inspect_semaphore(name);
    CHECK_FALSE(s.size.has_value());
    REQUIRE(s.unknown.count("size") == 1);
    CHECK(s.unknown.at("size").find("4000000000") != std::string::npos);
    REQUIRE(s.permits.has_value());
    CHECK(s.permits->empty());
}
