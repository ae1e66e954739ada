// Before the run: connect to the backend under test, and turn each feature the
// backend declares unsupported into an exclusion of the cases tagged
// [needs:<feature>], listing each such case as NOT APPLICABLE with the reason.
// Not-applicable cases are never run, so they are never counted as passed.
#include <iostream>
#include <map>

#include "distlock/distlock.hpp"
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
        std::cerr << "conformance suite: cannot connect to " << url << ": " << e.what() << "\n";
        return 1;
    }
    std::cout << "conformance suite for " << p->url() << " (backend " << p->scheme() << ")\n";
    std::map<std::string, std::vector<std::string>> why;  // case -> reasons
    for (const auto& [feat, reason] : p->caps().unsupported) {
        std::string tag = "needs:" + std::string(to_string(feat));
        exclusions.push_back("~[" + tag + "]");
        for (const auto& tc : cases)
            for (const auto& t : tc.tags)
                if (t == tag) why[tc.name].push_back(std::string(to_string(feat)) + ": " + reason);
    }
    for (const auto& [name, reasons] : why) {
        std::cout << "  NOT APPLICABLE: " << name << "\n";
        for (const auto& r : reasons) std::cout << "      (" << r << ")\n";
    }
    std::cout << "  " << why.size() << " case(s) not applicable to " << p->scheme() << "\n";
    return 0;
}

}  // namespace distlock::test
