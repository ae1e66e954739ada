// distlock: the command-line tool. Its subcommands are listed in tool.hpp.
#include <fcntl.h>
#include <signal.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <iostream>

#include "common.hpp"
#include "distlock/distlock.hpp"
#include "process_tree.hpp"
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
void add_backend_options(CLI::App* cmd, backend_choice& b, const std::string& url_help) {
    auto* url = cmd->add_option("--backend", b.url, url_help)->each([&b](const std::string&) { b.url_given = true; });
    if (!b.fallback.empty()) url->default_str(b.fallback);
    cmd->add_option("--backend-file", b.file,
                    "A file holding the backend URL, which stays out of ps and the environment (default: "
                    "$DISTLOCK_BACKEND_FILE). It must be yours or root's, not writable by group or others, and not "
                    "readable by others when the URL holds a password or a secret parameter")
        ->each([&b](const std::string&) { b.file_given = true; });
}
std::vector<std::string>& args_after_dashes() {
    static std::vector<std::string> args;
    return args;
}
}  // namespace distlock::tool

int main(int argc, char** argv) {
    // Started with 0, 1 or 2 closed, the first descriptors opened (a backend's
    // socket, run's pipes) would take their place and receive what is meant
    // for stdout and stderr: /dev/null holds them instead.
    for (int fd = 0; fd <= 2; ++fd)
        if (::fcntl(fd, F_GETFD) < 0 && errno == EBADF && ::open("/dev/null", O_RDWR) < 0) return 71;  // EX_OSERR
    distlock::tool::note_inherited_signals();  // what the command of run and elect inherits
    // A closed stdout or stderr (a reader that went away) fails the write
    // instead of killing the tool, which may be holding a lock.
    ::signal(SIGPIPE, SIG_IGN);
    // Every message that may repeat an argument shows it redacted (a URL with a
    // password), and escaped: errors quote servers' replies.
    const std::vector<std::string> all_args(argv + 1, argv + argc);
    auto shown = [&all_args](const std::string& message, bool keep_newlines = false) {
        return distlock::tool::printable(distlock::tool::redact_message(message, all_args), keep_newlines);
    };
    // "--" ends the options: what follows is run's command, never parsed.
    for (int i = 1; i < argc; ++i) {
        if (std::string_view(argv[i]) != "--") continue;
        distlock::tool::args_after_dashes().assign(argv + i + 1, argv + argc);
        argc = i;
        break;
    }
    CLI::App app{"distlock " DISTLOCK_VERSION_STRING ": one lock interface over many coordination backends"};
    app.set_version_flag(
        "--version", [] { return distlock::tool::version_text(); },
        "Print the version, the SPI's and the backend modules, and exit");
    app.require_subcommand(1);
    app.failure_message([&shown](const CLI::App* a, const CLI::Error& e) {
        // CLI11 lists unexpected arguments last first ("5 --timeout"): in the order given instead.
        if (dynamic_cast<const CLI::ExtrasError*>(&e) != nullptr) {
            std::string extras;
            for (const auto& arg : a->remaining(true)) extras += (extras.empty() ? "" : " ") + arg;
            if (!extras.empty())
                return shown("The following argument" + std::string(a->remaining_size(true) > 1 ? "s were" : " was") +
                                 " not expected: " + extras + "\nRun with --help for more information.\n",
                             true);
        }
        return shown(CLI::FailureMessage::simple(a, e), true);
    });
    std::function<int()> action;
    for (auto add : distlock::tool::subcommands) add(app, action);
    auto* schemes = app.add_subcommand("schemes", "List the backend URL schemes of this build");
    static bool verbose = false;
    schemes->add_flag("--verbose,-v", verbose,
                      "Say where each scheme comes from (built in, or the backend module that provides it, where it "
                      "is and whether it is installed) and where modules are looked for");
    schemes->callback([&action] {
        action = [] {
            return verbose ? distlock::tool::print_schemes_verbose(std::cout)
                           : distlock::tool::print_schemes(std::cout);
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
    // What follows "--" is a command for run and elect only; elsewhere (hold
    // -- CMD, etcdctl's habit) it would be dropped without a word.
    if (!distlock::tool::args_after_dashes().empty()) {
        const auto chosen = app.get_subcommands();
        const std::string sub = chosen.empty() ? std::string() : chosen.front()->get_name();
        if (sub != "run" && sub != "elect") {
            std::cerr << "distlock " << sub << ": unexpected arguments after '--'"
                      << (sub == "hold" ? " (hold runs no command: distlock run --name NAME -- CMD runs one while "
                                          "holding the lock)"
                                        : "")
                      << "\n";
            return 64;
        }
    }
    try {
        return action ? action() : 0;
    } catch (const distlock::tool::workers_failed& e) {
        std::cerr << "distlock: " << shown(e.what()) << "\n";  // each worker printed its reason
        return e.status();
    } catch (const std::exception& e) {
        std::cerr << "distlock: " << shown(e.what()) << "\n";
        const int status = distlock::tool::exit_status(e);
        if (status == 69 && distlock::tool::connection_refused(e))
            std::cerr << "distlock: nothing accepts connections there now: is the server up? check the URL's host "
                         "and port\n";
        return status;
    }
}
