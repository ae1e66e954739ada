// The conformance suite against the mkdir:// backend: the scheme is registered
// first (on every run: the suite's multi-process cases run this program again).
#include <distlock/testing.hpp>

#include "mkdir_backend.hpp"

int main(int argc, char** argv) {
    mkdir_lock::register_scheme();
    return distlock::testing::run_conformance(argc, argv);
}
