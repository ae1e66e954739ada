// Catch2 main for distlock test programs. Extra options, taken before Catch2's:
//   --require-env VAR   the program needs VAR (a server URL): unset = exit 77
//                       (skipped), or exit 1 when DISTLOCK_REQUIRE_ALL=1
//   --backend URL       the backend under test (conformance suite)
//   --backend-env VAR   the backend under test is the value of VAR
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstring>
#include <iostream>
#include <vector>

#include "support.hpp"

// Defined by programs that want to see the chosen URL before the run (the
// conformance suite lists its not-applicable cases there); weak default.
namespace distlock::test {
__attribute__((weak)) int before_run(const std::vector<test_case_info>&, std::vector<std::string>&) { return 0; }
}  // namespace distlock::test

int main(int argc, char** argv) {
    std::vector<char*> rest{argv[0]};
    std::string url;
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        if ((a == "--require-env" || a == "--backend" || a == "--backend-env") && i + 1 < argc) {
            std::string v = argv[++i];
            if (a == "--require-env" && distlock::test::env(v.c_str()).empty()) {
                bool strict = distlock::test::env("DISTLOCK_REQUIRE_ALL") == "1";
                std::cerr << v << " is not set: start the servers with integration/backends.sh up and source "
                          << "integration/.run/backends.env" << (strict ? " (required: failing)" : " (skipped)") << "\n";
                return strict ? 1 : 77;
            }
            if (a == "--backend") url = v;
            if (a == "--backend-env") url = distlock::test::env(v.c_str());
        } else {
            rest.push_back(argv[i]);
        }
    }
    distlock::test::set_backend_url(url);
    Catch::Session session;
    int rc = session.applyCommandLine(static_cast<int>(rest.size()), rest.data());
    if (rc != 0) return rc;
    std::vector<std::string> exclusions;
    std::vector<distlock::test::test_case_info> cases;
    for (const auto& tc : Catch::getAllTestCasesSorted(session.config()))
        cases.push_back({tc.getTestCaseInfo().name,
                         {tc.getTestCaseInfo().tags.begin(), tc.getTestCaseInfo().tags.end()}});
    if (int early = distlock::test::before_run(cases, exclusions); early != 0) return early;
    if (!exclusions.empty()) {
        auto& cfg = session.configData();
        // One filter: words separated by spaces are ANDed by Catch2.
        std::string spec;
        for (const auto& t : cfg.testsOrTags) spec += (spec.empty() ? "" : " ") + t;
        for (const auto& e : exclusions) spec += (spec.empty() ? "" : " ") + e;
        cfg.testsOrTags = {spec};
        session.useConfigData(cfg);
    }
    return session.run();
}
