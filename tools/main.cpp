// distlock: the command-line tool (flash-sale, bench, run, hold, elect, status, schemes).
#include <CLI/CLI.hpp>
#include <iostream>

#include "common.hpp"
#include "distlock/distlock.hpp"
#include "tool.hpp"

namespace distlock::tool {
CLI::Validator duration_in_seconds() {
    return CLI::Validator(
        [](std::string& value) -> std::string {
            try {
                value = std::to_string(static_cast<double>(distlock::parse_duration(value).count()) / 1000.0);
                return {};
            } catch (const distlock::error&) {
                return "'" + value + "' is not a duration (e.g. 500ms, 10s, 1m30s, or bare seconds: 2.5)";
            }
        },
        "DURATION");
}
std::vector<std::string>& args_after_dashes() {
    static std::vector<std::string> args;
    return args;
}
}  // namespace distlock::tool

int main(int argc, char** argv) {
    // "--" ends the options: what follows is run's command, never parsed.
    for (int i = 1; i < argc; ++i) {
        if (std::string_view(argv[i]) != "--") continue;
        distlock::tool::args_after_dashes().assign(argv + i + 1, argv + argc);
        argc = i;
        break;
    }
    CLI::App app{"distlock " DISTLOCK_VERSION_STRING ": one lock interface over many coordination backends"};
    app.set_version_flag("--version", std::string("distlock ") + std::string(distlock::version()));
    app.require_subcommand(1);
    std::function<int()> action;
    distlock::tool::add_flash_sale(app, action);
    distlock::tool::add_bench(app, action);
    distlock::tool::add_run(app, action);
    distlock::tool::add_hold(app, action);
    distlock::tool::add_elect(app, action);
    distlock::tool::add_status(app, action);
    app.add_subcommand("schemes", "List the backend URL schemes of this build")->callback([&action] {
        action = [] {
            for (const auto& s : distlock::schemes()) std::cout << s << "\n";
            return 0;
        };
    });
    try {
        app.parse(argc, argv);
    } catch (const CLI::Success& e) {  // --help, --help-all
        return app.exit(e);
    } catch (const CLI::ParseError& e) {  // a missing, unknown or malformed argument
        app.exit(e);                      // prints the parser's message
        return 64;                        // EX_USAGE, whatever the parser's own code
    }
    try {
        return action ? action() : 0;
    } catch (const distlock::tool::workers_failed& e) {
        std::cerr << "distlock: " << e.what() << "\n";  // each worker printed its reason
        return e.status();
    } catch (const std::exception& e) {
        std::cerr << "distlock: " << e.what() << "\n";
        return distlock::tool::exit_status(e);
    }
}
