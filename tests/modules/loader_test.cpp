// The module loader (core/modules.cpp) in a modules build: each case uses a
// module of its own, since a module refused once stays refused in the process.
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>

#include "distlock/distlock.hpp"
#include "distlock/spi/backend.hpp"
#include "support.hpp"

namespace fs = std::filesystem;

namespace {

std::optional<distlock::backend_module> module_named(const std::string& name) {
    for (auto& m : distlock::backend_modules())
        if (m.name == name) return m;
    return std::nullopt;
}

// DISTLOCK_MODULE_PATH set for the scope, then as it was.
struct module_path_set {
    std::optional<std::string> before;
    explicit module_path_set(const std::string& value) {
        if (const char* v = std::getenv("DISTLOCK_MODULE_PATH")) before = v;
        ::setenv("DISTLOCK_MODULE_PATH", value.c_str(), 1);
    }
    ~module_path_set() {
        if (before) ::setenv("DISTLOCK_MODULE_PATH", before->c_str(), 1);
        else ::unsetenv("DISTLOCK_MODULE_PATH");
    }
};

// A directory of its own, removed at the end, holding copies of built modules.
struct module_dir {
    fs::path dir = fs::temp_directory_path() / ("distlock-modules-" + distlock::spi::random_token().substr(0, 12));
    module_dir() {
        fs::create_directories(dir);
        fs::permissions(dir, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                                 fs::perms::others_read | fs::perms::others_exec);
    }
    ~module_dir() {
        std::error_code ec;
        fs::remove_all(dir, ec);
    }
    fs::path copy(const std::string& module, const fs::path& from = DISTLOCK_TEST_MODULE_DIR) {
        const auto name = "libdistlock-" + module + ".so";
        // A new file, as dpkg installs one: writing into the one a process
        // mapped would change its code under it.
        fs::remove(dir / name);
        fs::copy_file(from / name, dir / name);
        fs::permissions(dir / name, fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read |
                                        fs::perms::others_read);
        return dir / name;
    }
};

// What connect() throws for `url`, as (code, message); (-1, "") when it connects.
std::pair<int, std::string> connect_error(const std::string& url) {
    try {
        (void)distlock::connect(url);
        return {-1, ""};
    } catch (const distlock::error& e) {
        return {static_cast<int>(e.code_value()), e.what()};
    }
}

// connect(url) with DISTLOCK_MODULE_PATH=dir is unsupported_error saying
// `why`, without the URL's password, and leaves `module` unloaded.
void refused(const module_dir& d, const std::string& url, const std::string& module, const std::string& why) {
    module_path_set env(d.dir.string());
    const auto [code, what] = connect_error(url);
    INFO(what);
    CHECK(code == static_cast<int>(distlock::errc::unsupported));
    CHECK(what.find(why) != std::string::npos);
    CHECK(what.find("secret-pw") == std::string::npos);
    CHECK_FALSE(module_named(module)->loaded);
}

}  // namespace

TEST_CASE("this build's modules lie beside libdistlock, and one loads on the first connect to its scheme",
          "[modules]") {
    const auto path = distlock::module_path();
    REQUIRE(path.size() == 1);
    CHECK(fs::equivalent(path.front(), DISTLOCK_TEST_MODULE_DIR));
    const auto before = module_named("redis");
    REQUIRE(before);
    CHECK(before->file == "libdistlock-redis.so");
    CHECK(before->package == "libdistlock0-redis");
    CHECK(fs::equivalent(before->path, fs::path(DISTLOCK_TEST_MODULE_DIR) / "libdistlock-redis.so"));
    CHECK_FALSE(before->loaded);
    const auto schemes = distlock::schemes();
    for (const char* s : {"memory", "file", "redis", "rediss", "postgres", "zk", "etcd"})
        CHECK(std::find(schemes.begin(), schemes.end(), s) != schemes.end());
    // Nothing listens on port 1: the module is loaded, its backend cannot connect.
    const auto [code, what] = connect_error("redis://127.0.0.1:1/?connect_timeout=200ms");
    INFO(what);
    CHECK(code == static_cast<int>(distlock::errc::unavailable));
    const auto after = module_named("redis");
    REQUIRE(after);
    CHECK(after->loaded);
    CHECK(after->version == distlock::version());
    // Its schemes are the module's own: registering one again is refused.
    CHECK_THROWS_AS(distlock::register_backend("rediss", [](distlock::spi::url&) { return nullptr; }),
                    distlock::invalid_argument_error);
    CHECK_THROWS_AS(distlock::register_backend("etcd", [](distlock::spi::url&) { return nullptr; }),
                    distlock::invalid_argument_error);  // not loaded yet, still this build's
}

TEST_CASE("a scheme whose module is not installed is unsupported_error naming its package", "[modules]") {
    module_dir empty;
    module_path_set env(empty.dir.string());
    const auto [code, what] = connect_error("etcd://127.0.0.1:1");
    INFO(what);
    CHECK(code == static_cast<int>(distlock::errc::unsupported));
    CHECK(what.find("libdistlock-etcd.so") != std::string::npos);
    CHECK(what.find("install the package libdistlock0-etcd") != std::string::npos);
    CHECK(what.find(empty.dir.string()) != std::string::npos);  // where it looked
    const auto schemes = distlock::schemes();
    CHECK(std::find(schemes.begin(), schemes.end(), "etcd") == schemes.end());  // not offered
    CHECK(std::find(schemes.begin(), schemes.end(), "memory") != schemes.end());
    const auto m = module_named("etcd");
    REQUIRE(m);
    CHECK(m->path.empty());
    // Not remembered: once installed there, it loads.
    empty.copy("etcd");
    const auto [code2, what2] = connect_error("etcd://127.0.0.1:1/?connect_timeout=200ms");
    INFO(what2);
    CHECK(code2 != static_cast<int>(distlock::errc::unsupported));
    CHECK(module_named("etcd")->loaded);
}

TEST_CASE("DISTLOCK_MODULE_PATH takes absolute directories only", "[modules]") {
    module_path_set env("modules:/usr/lib");
    CHECK_THROWS_AS((void)distlock::module_path(), distlock::invalid_argument_error);
    const auto [code, what] = connect_error("consul://127.0.0.1:1");
    INFO(what);
    CHECK(code == static_cast<int>(distlock::errc::invalid_argument));
    CHECK(what.find("DISTLOCK_MODULE_PATH") != std::string::npos);
}

TEST_CASE("a module file or directory that others may write is not loaded", "[modules][hostile]") {
    SECTION("a module file writable by others") {
        module_dir d;
        const auto file = d.copy("zookeeper");
        fs::permissions(file, fs::perms::others_write, fs::perm_options::add);
        refused(d, "zk://127.0.0.1:1/distlock", "zookeeper", "the file is writable by its group or others");
    }
    SECTION("a directory writable by others") {
        module_dir d;
        d.copy("consul");
        if (::geteuid() == 0) {  // writable by a group of others (nogroup), not by all
            REQUIRE(::chown(d.dir.c_str(), 0, 65534) == 0);
            fs::permissions(d.dir, fs::perms::group_write, fs::perm_options::add);
        } else {
            fs::permissions(d.dir, fs::perms::others_write, fs::perm_options::add);
        }
        refused(d, "consul://127.0.0.1:1", "consul", "the directory is writable by its group or others");
    }
}

TEST_CASE("ownership: another user's module is refused, one its owner's own group may write is loaded",
          "[modules][hostile]") {
    if (::geteuid() != 0) {
        WARN("not applicable: giving files to other users and groups needs root (the tests do not run as root)");
        return;
    }
    SECTION("a module file of another user") {
        module_dir d;
        const auto file = d.copy("redlock");
        REQUIRE(::chown(file.c_str(), 65534, 65534) == 0);
        refused(d, "redlock://127.0.0.1:1,127.0.0.1:2,127.0.0.1:3", "redlock", "belongs to another user (uid 65534)");
    }
    SECTION("writable by its owner's own group, root's (no other member here): a umask of 002") {
        module_dir d;
        const auto file = d.copy("postgres");
        REQUIRE(::chown(file.c_str(), 0, 0) == 0);
        REQUIRE(::chown(d.dir.c_str(), 0, 0) == 0);
        fs::permissions(file, fs::perms::group_write, fs::perm_options::add);
        fs::permissions(d.dir, fs::perms::group_write, fs::perm_options::add);
        module_path_set env(d.dir.string());
        const auto [code, what] = connect_error("postgres://u:secret-pw@127.0.0.1:1/db");
        INFO(what);
        CHECK(code == static_cast<int>(distlock::errc::unavailable));  // loaded; nothing listens there
        CHECK(module_named("postgres")->loaded);
    }
}

TEST_CASE("a file in a module's place that is no module is refused, and stays refused", "[modules][hostile]") {
    module_dir d;
    // A shared library without the entry point, under the name of the MySQL module.
    fs::copy_file(DISTLOCK_TEST_NOT_A_MODULE, d.dir / "libdistlock-mysql.so");
    fs::permissions(d.dir / "libdistlock-mysql.so",
                    fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read | fs::perms::others_read);
    refused(d, "mysql://u:secret-pw@127.0.0.1:1/db", "mysql", "is not a distlock backend module");
    // The real one in the path now: this process does not try again.
    d.copy("mysql");
    refused(d, "mysql://u:secret-pw@127.0.0.1:1/db", "mysql", "is not a distlock backend module");
}

TEST_CASE("a URL scheme that is no scheme never names a file in another directory", "[modules][hostile]") {
    // A module planted in a subdirectory of the module path, and one beside it:
    // schemes with '/' or ".." do not reach them.
    module_dir d;
    fs::create_directories(d.dir / "libdistlock-x");
    fs::copy_file(fs::path(DISTLOCK_TEST_MODULE_DIR) / "libdistlock-redis.so", d.dir / "libdistlock-x" / "y.so");
    module_path_set env(d.dir.string());
    for (const char* url : {"x/y://h", "../x://h", "x..y://h"}) {
        const auto [code, what] = connect_error(url);
        INFO(url << ": " << what);
        CHECK(code == static_cast<int>(distlock::errc::invalid_argument));
        CHECK(what.find("unknown URL scheme") != std::string::npos);
    }
}
