// distlock status: what the server shows of a lock (provider::inspect) or of an
// election's leadership (election::leader), as text or JSON.
#include <CLI/CLI.hpp>
#include <iostream>
#include <nlohmann/json.hpp>

#include "common.hpp"
#include "distlock/distlock.hpp"
#include "tool.hpp"

namespace distlock::tool {
namespace {

struct status_settings {
    backend_choice source;  // --backend, --backend-file or the environment
    std::string name;
    bool json = false, election = false;
};

template <class T>
nlohmann::json or_null(const std::optional<T>& v) {
    return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
}

int show_status(const status_settings& s) {
    if (s.name.empty()) throw invalid_argument_error(errc::invalid_argument, "status", "--name is empty");
    const auto backend = s.source.resolve("status");
    auto locks = connect(backend);
    const auto info = s.election ? locks.election(s.name).leader() : locks.inspect(s.name);
    if (s.json) {
        nlohmann::json j{
            {"backend", redact(backend)},
            {"name", info.name},
            {"kind", s.election ? "election" : "mutex"},
            {"held", or_null(info.held)},
            {"holder", or_null(info.holder)},
            {"token", or_null(info.token)},
            {"remaining_ms", info.remaining ? nlohmann::json(info.remaining->count()) : nlohmann::json(nullptr)},
            {"waiters", or_null(info.waiters)},
            {"unknown", info.unknown}};
        // Labels are bytes; a holder that is not UTF-8 is replaced, never a failure.
        std::cout << j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
        return 0;
    }
    // The name, the holder's label and the reasons may come from the server or
    // another tenant: shown escaped, so that none of them can drive the terminal
    // or forge a line.
    auto line = [&](const char* field, const std::string& value) {
        std::cout << field << ": " << value;
        if (auto it = info.unknown.find(field); it != info.unknown.end())
            std::cout << " (" << printable(it->second) << ")";
        std::cout << "\n";
    };
    const std::string unknown = "unknown";
    std::cout << (s.election ? "election" : "lock") << ": " << printable(info.name) << "\n";
    line("held", info.held ? (*info.held ? "yes" : "no") : unknown);
    const bool held = info.held.value_or(true);
    if (held) {
        line("holder", info.holder ? printable(*info.holder) : unknown);
        line("token", info.token ? std::to_string(*info.token) : unknown);
        line("remaining", info.remaining ? std::to_string(info.remaining->count()) + " ms" : unknown);
    }
    line("waiters", info.waiters ? std::to_string(*info.waiters) : unknown);
    return 0;
}

}  // namespace

void add_status(CLI::App& app, std::function<int()>& action) {
    auto s = std::make_shared<status_settings>();
    auto* cmd =
        app.add_subcommand("status", "Show who holds a lock (or leads an election), its token, lease and waiters");
    add_backend_options(cmd, s->source, "Lock backend URL (default: $DISTLOCK_BACKEND)");
    cmd->add_option("--name", s->name, "Lock (or election) name")->required();
    cmd->add_flag("--election", s->election, "The leadership of the election NAME instead of the mutex NAME");
    cmd->add_flag("--json", s->json,
                  "One JSON object: held, holder, token, remaining_ms, waiters (null when unknown), unknown");
    cmd->footer(
        "Reads once and takes nothing. A field the backend cannot know is shown as unknown, with the reason.\n"
        "Exit status: 0 when shown (held or not); 64 bad arguments, 69 backend unavailable, 77 access denied.");
    cmd->callback([s, &action] { action = [s] { return show_status(*s); }; });
}

}  // namespace distlock::tool
