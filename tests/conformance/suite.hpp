// What the files of the conformance suite share (not installed).
#pragma once

namespace distlock::test {

// argv[1] of the suite's program when its multi-process cases run it again as
// their helper (distlock::testing::run_conformance dispatches on it).
inline constexpr const char* conformance_helper_flag = "--conformance-helper";

// The helper (helper.cpp): argv is what follows the flag. Its exit status.
int conformance_helper(int argc, char** argv);

}  // namespace distlock::test
