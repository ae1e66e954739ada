// Before the run: connect to the backend under test, and turn each feature the
// backend declares unsupported into an exclusion of the cases tagged
// [needs:<feature>], listing each such case as NOT APPLICABLE with the reason;
// the same for what the test machine lacks ([needs:locale]: a locale other
// than "C"). Not-applicable cases are never run, so they are never counted as
// passed.
#include <iostream>
#include <map>

#include "distlock/distlock.hpp"
#include "distlock/spi/url.hpp"
#include "suite.hpp"
#include "support.hpp"

namespace distlock::test {

bool takes_backend_urls() { return true; }

int before_run(const std::vector<test_case_info>& cases, std::vector<std::string>& exclusions) {
    const auto& url = backend_url();
    if (url.empty()) {
        std::cerr << "conformance suite: give the backend with --backend URL or --backend-env VAR\n";
        return 2;
    }
    std::optional<provider> p;
    try {
        p = connect(url);
    } catch (const std::exception& e) {
        std::cerr << "conformance suite: cannot connect to " << distlock::spi::redact_url(url) << ": " << e.what()
                  << "\n";
        return 1;
    }
    std::cout << "conformance suite for " << p->url() << " (backend " << p->scheme() << ")\n";
    std::map<std::string, std::vector<std::string>> why;  // case -> reasons
    auto exclude = [&](const std::string& need, const std::string& reason) {
        const std::string tag = "needs:" + need;
        exclusions.push_back("~[" + tag + "]");
        for (const auto& tc : cases)
            for (const auto& t : tc.tags)
                if (t == tag) why[tc.name].push_back(need + ": " + reason);
    };
    for (const auto& [feat, reason] : p->caps().unsupported) exclude(std::string(to_string(feat)), reason);
    if (test_locales().empty())
        exclude("locale",
                "this machine has no locale but C for bytes >= 0x80 (no C.UTF-8, and no localedef with "
                "/usr/share/i18n to make a Latin-1 one)");
    for (const auto& [name, reasons] : why) {
        std::cout << "  NOT APPLICABLE: " << name << "\n";
        for (const auto& r : reasons) std::cout << "      (" << r << ")\n";
    }
    std::cout << "  " << why.size() << " case(s) not applicable to " << p->scheme() << "\n";
    return 0;
}

}  // namespace distlock::test
