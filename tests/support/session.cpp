// The Catch2 session of distlock test programs (their main() is main.cpp; the
// conformance suite's is distlock::testing::run_conformance). Extra options,
// taken before Catch2's:
//   --require-env VAR   the program needs VAR (a server URL): unset = exit 77
//                       (skipped), or exit 1 when DISTLOCK_REQUIRE_ALL=1
//   --backend URL       the backend under test (conformance suite)
//   --backend-env VAR   the backend under test is the value of VAR
// Several --backend options, or none with DISTLOCK_TEST_URLS set (URLs separated
// by whitespace), run the whole program once per URL (a child process each) and
// fail when any run fails.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <iostream>
#include <sstream>
#include <vector>

#include "distlock/spi/url.hpp"
#include "support.hpp"

// Defined by programs that want to see the chosen URL before the run (the
// conformance suite lists its not-applicable cases there); weak default.
namespace distlock::test {
__attribute__((weak)) bool takes_backend_urls() { return false; }
__attribute__((weak)) int before_run(const std::vector<test_case_info>&, std::vector<std::string>&) { return 0; }
}  // namespace distlock::test

namespace {

// Runs this program once per URL; returns 0 only when every run passed.
int run_per_url(const std::vector<std::string>& urls, const std::vector<char*>& rest) {
    int failed = 0;
    for (const auto& url : urls) {
        std::vector<std::string> args{"/proc/self/exe", "--backend", url};
        for (std::size_t i = 1; i < rest.size(); ++i) args.emplace_back(rest[i]);
        std::vector<char*> argv;
        for (auto& a : args) argv.push_back(a.data());
        argv.push_back(nullptr);
        std::cout.flush();
        pid_t pid = ::fork();
        if (pid == 0) {
            ::execv("/proc/self/exe", argv.data());
            ::_exit(127);
        }
        int status = 0;
        ::waitpid(pid, &status, 0);
        bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
        std::cout << (ok ? "PASSED " : "FAILED ") << distlock::spi::redact_url(url)
                  << "\n";  // CI logs are read by many
        failed += ok ? 0 : 1;
    }
    std::cout << urls.size() - static_cast<std::size_t>(failed) << " backend URL(s) passed, " << failed << " failed\n";
    return failed == 0 ? 0 : 1;
}

}  // namespace

int distlock::test::run_session(int argc, char** argv) {
    std::vector<char*> rest{argv[0]};
    std::vector<std::string> urls;
    std::string url;
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        if ((a == "--require-env" || a == "--backend" || a == "--backend-env") && i + 1 < argc) {
            std::string v = argv[++i];
            if (a == "--require-env" && distlock::test::env(v.c_str()).empty()) {
                bool strict = distlock::test::env("DISTLOCK_REQUIRE_ALL") == "1";
                std::cerr << v << " is not set: start the servers with integration/backends.sh up and source "
                          << "integration/.run/backends.env" << (strict ? " (required: failing)" : " (skipped)")
                          << "\n";
                return strict ? 1 : 77;
            }
            if (a == "--backend") urls.push_back(v);
            if (a == "--backend-env") urls.push_back(distlock::test::env(v.c_str()));
        } else {
            rest.push_back(argv[i]);
        }
    }
    if (urls.empty() && distlock::test::takes_backend_urls()) {
        std::istringstream list(distlock::test::env("DISTLOCK_TEST_URLS"));
        for (std::string u; list >> u;) urls.push_back(u);
        if (urls.size() == 1) url = urls[0];
        else if (urls.size() > 1) return run_per_url(urls, rest);
    } else if (urls.size() == 1) {
        url = urls[0];
    } else if (urls.size() > 1) {
        return run_per_url(urls, rest);
    }
    distlock::test::set_backend_url(url);
    Catch::Session session;
    int rc = session.applyCommandLine(static_cast<int>(rest.size()), rest.data());
    if (rc != 0) return rc;
    std::vector<std::string> exclusions;
    std::vector<distlock::test::test_case_info> cases;
    for (const auto& tc : Catch::getAllTestCasesSorted(session.config()))
        cases.push_back(
            {tc.getTestCaseInfo().name, {tc.getTestCaseInfo().tags.begin(), tc.getTestCaseInfo().tags.end()}});
    if (int early = distlock::test::before_run(cases, exclusions); early != 0) return early;
    if (!exclusions.empty()) {
        auto& cfg = session.configData();
        // One filter: words separated by spaces are ANDed by Catch2, and a comma
        // separates alternatives, so the exclusions go into each alternative
        // ("[a],[b]" -> "[a] ~[x],[b] ~[x]"): a case that does not apply stays
        // out whatever the user asked for. (A comma inside a test's name is
        // split too; Catch2 would have split it the same way.)
        std::string user;
        for (const auto& t : cfg.testsOrTags) user += (user.empty() ? "" : " ") + t;
        std::string excluded;
        for (const auto& e : exclusions) excluded += " " + e;
        std::string spec;
        std::size_t from = 0;
        do {
            const auto comma = user.find(',', from);
            const auto alternative = user.substr(from, comma == std::string::npos ? std::string::npos : comma - from);
            spec += (spec.empty() ? "" : ",") + alternative + excluded;
            from = comma == std::string::npos ? std::string::npos : comma + 1;
        } while (from != std::string::npos);
        cfg.testsOrTags = {spec};
        session.useConfigData(cfg);
    }
    return session.run();
}
