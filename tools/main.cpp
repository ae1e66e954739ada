// distlock: the command-line tool (flash-sale, bench, run, schemes).
#include <CLI/CLI.hpp>
#include <iostream>

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
    CLI11_PARSE(app, argc, argv);
    try {
        return action ? action() : 0;
    } catch (const distlock::error& e) {
        std::cerr << "distlock: " << e.what() << "\n";
        switch (e.code_value()) {
            case distlock::errc::invalid_argument: return 64;  // EX_USAGE
            case distlock::errc::unavailable: return 69;       // EX_UNAVAILABLE
            case distlock::errc::access_denied: return 77;     // EX_NOPERM
            default: return 1;
        }
    } catch (const std::exception& e) {
        std::cerr << "distlock: " << e.what() << "\n";
        return 1;
    }
}
