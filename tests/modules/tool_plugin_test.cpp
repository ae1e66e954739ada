// The distlock tool's plugins (tools/optimistic_stock.cpp, docs/packaging.md):
// flash-sale --strategy optimistic over postgres:// loads
// distlock-tool-postgres.so from <the tool's directory>/../lib/distlock/tools,
// and refuses what is missing there, or is no plugin, or is the plugin of
// another database (whose settings it would misread). Each case runs a copy
// of the tool in a prefix of its own: <dir>/bin/distlock, with
// <dir>/lib/libdistlock.so.0 the built one (whose modules it finds beside
// that file's real path).
#include <catch2/catch.hpp>
#include <filesystem>
#include <string>

#include "distlock/spi/backend.hpp"
#include "support.hpp"

namespace fs = std::filesystem;

namespace {

constexpr const char* password = "tool-plugin-secret";

struct tool_prefix {
    fs::path dir = fs::temp_directory_path() / ("distlock-tool-" + distlock::spi::random_token().substr(0, 12));
    tool_prefix() {
        fs::create_directories(dir / "bin");
        fs::create_directories(dir / "lib");
        fs::copy_file(DISTLOCK_CLI, dir / "bin" / "distlock");
        fs::create_symlink(fs::canonical(DISTLOCK_TEST_LIBDISTLOCK), dir / "lib" / "libdistlock.so.0");
    }
    ~tool_prefix() {
        std::error_code ec;
        fs::remove_all(dir, ec);
    }
    // Puts `from` where the tool looks for its postgres plugin.
    void plugin(const fs::path& from) {
        fs::create_directories(dir / "lib" / "distlock" / "tools");
        fs::copy_file(from, dir / "lib" / "distlock" / "tools" / "distlock-tool-postgres.so");
    }
    // An optimistic sale over a postgres:// URL that no server answers (port 1).
    distlock::test::command_result sale() const {
        return distlock::test::run_command(
            (dir / "bin" / "distlock").string() + " flash-sale --strategy optimistic -p 1 -c 1 -r 1 -s 1 --quiet" +
            " --backend 'postgres://u:" + password + "@127.0.0.1:1/db?connect_timeout=2s' 2>&1");
    }
};

const fs::path tool_plugins = DISTLOCK_TEST_TOOL_PLUGIN_DIR;

}  // namespace

TEST_CASE("flash-sale's optimistic update without its plugin names the package to install", "[modules][tool]") {
    tool_prefix p;
    const auto r = p.sale();
    INFO(r.out);
    CHECK(r.status == 1);
    CHECK(r.out.find("distlock-tool-postgres.so, which is not installed") != std::string::npos);
    CHECK(r.out.find("install the package distlock-tools-postgres") != std::string::npos);
    CHECK(r.out.find(password) == std::string::npos);
}

TEST_CASE("the tool refuses a plugin file that is another database's plugin, or no plugin", "[modules][tool]") {
    SECTION("the mysql plugin under the postgres plugin's name: refused before it reads any settings") {
        tool_prefix p;
        p.plugin(tool_plugins / "distlock-tool-mysql.so");
        const auto r = p.sale();
        INFO(r.out);
        CHECK(r.status == 1);
        CHECK(r.out.find("is not the plugin for postgres:// of this distlock tool's version") != std::string::npos);
        CHECK(r.out.find(password) == std::string::npos);
    }
    SECTION("a shared library without the entry point") {
        tool_prefix p;
        p.plugin(DISTLOCK_TEST_NOT_A_MODULE);
        const auto r = p.sale();
        INFO(r.out);
        CHECK(r.status == 1);
        CHECK(r.out.find("is not a plugin of the distlock tool: it has no distlock_tool_stock_database()") !=
              std::string::npos);
    }
}

TEST_CASE("the tool's own postgres plugin is loaded: the sale gets as far as the database", "[modules][tool]") {
    tool_prefix p;
    p.plugin(tool_plugins / "distlock-tool-postgres.so");
    const auto r = p.sale();
    INFO(r.out);
    CHECK(r.status == 69);  // unavailable: nothing listens on port 1 (docs/cli.md)
    CHECK(r.out.find("not installed") == std::string::npos);
    CHECK(r.out.find("plugin") == std::string::npos);
    CHECK(r.out.find("127.0.0.1") != std::string::npos);
    CHECK(r.out.find(password) == std::string::npos);
}
