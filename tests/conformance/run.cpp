// distlock::testing::run_conformance: the suite's entry point, called by the
// in-tree runner (main.cpp) and by backend authors' own programs, which link
// the installed distlock::conformance.
#include <string_view>

#include "distlock/testing.hpp"
#include "suite.hpp"
#include "support.hpp"

int distlock::testing::run_conformance(int argc, char** argv) {
    if (argc >= 2 && std::string_view(argv[1]) == test::conformance_helper_flag)
        return test::conformance_helper(argc - 2, argv + 2);
    return test::run_session(argc, argv);
}
