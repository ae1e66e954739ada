// distlock status: what the server shows of a lock (provider::inspect) or of an
// election's leadership (election::leader), as text or JSON.
#include <CLI/CLI.hpp>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

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

// A field's text, or "unknown (why)" from `unknown`.
template <class T, class Show>
std::string field_text(const std::optional<T>& v, const std::map<std::string, std::string>& unknown,
                       const std::string& field, Show show) {
    if (v) return show(*v);
    const auto it = unknown.find(field);
    return it == unknown.end() ? "unknown" : "unknown (" + printable(it->second) + ")";
}

std::string count_text(std::uint32_t n) { return std::to_string(n); }

// The grants of a read-write lock or a semaphore: one line each, indented.
void print_grants(const std::vector<grant_info>& grants, const std::map<std::string, std::string>& unknown,
                  const std::string& what, const std::string& prefix) {
    for (const auto& g : grants) {
        std::cout << "    " << what << ": "
                  << field_text(g.holder, unknown, prefix + ".holder",
                                [](const std::string& h) { return printable(h); })
                  << ", token "
                  << field_text(g.token, unknown, prefix + ".token", [](std::uint64_t t) { return std::to_string(t); })
                  << ", remaining "
                  << field_text(g.remaining, unknown, prefix + ".remaining",
                                [](std::chrono::milliseconds ms) { return std::to_string(ms.count()) + " ms"; })
                  << "\n";
    }
}

nlohmann::json grant_json(const grant_info& g) {
    return {{"holder", or_null(g.holder)},
            {"token", or_null(g.token)},
            {"remaining_ms", g.remaining ? nlohmann::json(g.remaining->count()) : nlohmann::json(nullptr)}};
}

nlohmann::json grants_json(const std::optional<std::vector<grant_info>>& grants) {
    if (!grants) return nullptr;
    auto list = nlohmann::json::array();
    for (const auto& g : *grants) list.push_back(grant_json(g));
    return list;
}

int show_status(const status_settings& s) {
    if (s.name.empty()) throw invalid_argument_error(errc::invalid_argument, "status", "--name is empty");
    const auto backend = s.source.resolve("status");
    auto locks = connect(backend);
    const auto info = s.election ? locks.election(s.name).leader() : locks.inspect(s.name);
    // The name's other primitives, where the backend has them.
    std::optional<read_write_info> rw;
    std::optional<semaphore_info> sem;
    if (!s.election && locks.caps().supports(feature::read_write)) rw = locks.inspect_read_write(s.name);
    if (!s.election && locks.caps().supports(feature::semaphore)) sem = locks.inspect_semaphore(s.name);
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
        if (!s.election) {
            j["read_write"] = rw ? nlohmann::json{{"write_held", or_null(rw->write_held)},
                                                  {"writer", rw->writer ? grant_json(*rw->writer) : nullptr},
                                                  {"readers", grants_json(rw->readers)},
                                                  {"writers_waiting", or_null(rw->writers_waiting)},
                                                  {"unknown", rw->unknown}}
                                 : nlohmann::json(nullptr);
            j["semaphore"] = sem ? nlohmann::json{{"size", or_null(sem->size)},
                                                  {"permits", grants_json(sem->permits)},
                                                  {"free", or_null(sem->free)},
                                                  {"unknown", sem->unknown}}
                                 : nlohmann::json(nullptr);
        }
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
    if (rw) {
        std::cout << "read-write lock:\n  write held: "
                  << field_text(rw->write_held, rw->unknown, "write_held", [](bool b) { return b ? "yes" : "no"; })
                  << "\n";
        if (rw->writer) print_grants({*rw->writer}, rw->unknown, "writer", "writer");
        std::cout << "  readers: "
                  << field_text(rw->readers, rw->unknown, "readers",
                                [](const std::vector<grant_info>& r) { return std::to_string(r.size()); })
                  << "\n";
        if (rw->readers) print_grants(*rw->readers, rw->unknown, "reader", "readers");
        std::cout << "  writers waiting: "
                  << field_text(rw->writers_waiting, rw->unknown, "writers_waiting", count_text) << "\n";
    }
    if (sem) {
        std::cout << "semaphore:\n  size: " << field_text(sem->size, sem->unknown, "size", count_text)
                  << "\n  permits taken: "
                  << field_text(sem->permits, sem->unknown, "permits",
                                [](const std::vector<grant_info>& p) { return std::to_string(p.size()); })
                  << "\n";
        if (sem->permits) print_grants(*sem->permits, sem->unknown, "permit", "permits");
        std::cout << "  free: " << field_text(sem->free, sem->unknown, "free", count_text) << "\n";
    }
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
                  "One JSON object: held, holder, token, remaining_ms, waiters (null when unknown), unknown; and "
                  "read_write, semaphore (null where the backend has no such primitive)");
    cmd->footer(
        "Reads once and takes nothing: the mutex NAME, and the read-write lock and the semaphore NAME where the\n"
        "backend has them. A field the backend cannot know is shown as unknown, with the reason.\n"
        "Exit status: 0 when shown (held or not); 64 bad arguments, 69 backend unavailable, 77 access denied.");
    cmd->callback([s, &action] { action = [s] { return show_status(*s); }; });
}

}  // namespace distlock::tool
