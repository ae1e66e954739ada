// Subcommands of the distlock tool. Each registers itself on the CLI11 app and,
// when chosen, sets `action` to the function main() runs.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>

namespace distlock::tool {
// For an option that holds seconds (a double): accepts every duration form of
// parse_duration ("10s", "500ms", "1m30s", bare seconds "2.5") and passes on
// the seconds it means.
CLI::Validator duration_in_seconds();

// What followed the first "--" of the command line (main() keeps it from the
// argument parser): run's command.
std::vector<std::string>& args_after_dashes();

struct backend_choice;
// --backend URL and --backend-file PATH, filling `b` (see backend_choice);
// the default shown is b.fallback.
void add_backend_options(CLI::App* cmd, backend_choice& b, const std::string& url_help);

using add_subcommand = void (*)(CLI::App& app, std::function<int()>& action);
void add_flash_sale(CLI::App& app, std::function<int()>& action);
void add_bench(CLI::App& app, std::function<int()>& action);
void add_run(CLI::App& app, std::function<int()>& action);
void add_hold(CLI::App& app, std::function<int()>& action);
void add_elect(CLI::App& app, std::function<int()>& action);
void add_status(CLI::App& app, std::function<int()>& action);
// Every subcommand, in the order --help lists them: main() adds each (then
// `schemes`, written inline). A new subcommand is a file of its own, a line
// above and one here (docs/contributing.md).
inline constexpr add_subcommand subcommands[] = {add_flash_sale, add_bench, add_run, add_hold, add_elect, add_status};
}  // namespace distlock::tool
