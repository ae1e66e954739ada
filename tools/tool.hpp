// Subcommands of the distlock tool. Each registers itself on the CLI11 app and,
// when chosen, sets `action` to the function main() runs.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>

namespace distlock::tool {
void add_flash_sale(CLI::App& app, std::function<int()>& action);
void add_bench(CLI::App& app, std::function<int()>& action);
void add_run(CLI::App& app, std::function<int()>& action);
}  // namespace distlock::tool
