// The conformance suite on mkdir:// as a module: nothing is registered here,
// the library loads libdistlock-mkdir.so from DISTLOCK_MODULE_PATH by the
// URL's scheme (in every process of the suite's multi-process cases too).
#include <distlock/testing.hpp>

int main(int argc, char** argv) { return distlock::testing::run_conformance(argc, argv); }
