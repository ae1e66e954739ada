// distlock: the command-line tool (flash-sale, bench, run, schemes).
#include <CLI/CLI.hpp>
#include <iostream>

#include "common.hpp"
#include "distlock/distlock.hpp"
#include "tool.hpp"

int main(int argc, char** argv) {
    CLI::App app{"distlock " DISTLOCK_VERSION_STRING ": one lock interface over many coordination backends"};
    app.require_subcommand(1);
    std::function<int()> action;
    distlock::tool::add_flash_sale(app, action);
    distlock::tool::add_bench(app, action);
    distlock::tool::add_run(app, action);
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
