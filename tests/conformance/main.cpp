// distlock-conformance: the suite against one URL of the backends built into
// libdistlock (see run_conformance in include/distlock/testing.hpp).
#include "distlock/testing.hpp"

int main(int argc, char** argv) { return distlock::testing::run_conformance(argc, argv); }
