// distlock: hooks for users' own tests of how their code handles lock loss, and
// the conformance suite for backend authors.
#pragma once

#include <string_view>

#include "distlock/export.hpp"
#include "distlock/provider.hpp"

namespace distlock::testing {

// Removes the server-side state of lock `name` out of band, as an operator or a
// failure would (Redis: DEL of the key; SQL: the holder's connection killed or
// its row deleted; ZooKeeper: the lock node deleted; file: the lock file
// unlinked; ...). Holders then learn of the loss through on_lost / held().
// Throws unsupported_error where the backend cannot (see caps()).
DISTLOCK_API void break_lock(const provider& p, std::string_view name);

// The conformance suite, for a backend written outside distlock's tree: the
// lock contract (exclusion between threads, connections and processes; waiting
// and hand-off; only the owner releases; crash release; renewal; loss
// reporting; fencing; bad input; the standard-library face) run against one
// backend URL. It is not in libdistlock: link the CMake target
// distlock::conformance (find_package(distlock REQUIRED COMPONENTS conformance);
// installed when distlock was built with its tests), and call it from your own
// main() once your scheme is registered (register_backend()):
//
//     int main(int argc, char** argv) {
//         my_backend::register_scheme();   // every time, whatever the arguments
//         return distlock::testing::run_conformance(argc, argv);
//     }
//
// Arguments: `--backend URL` (or `--backend-env VAR`; several run the suite once
// per URL; none: the URLs in DISTLOCK_TEST_URLS), `--require-env VAR` (exit 77,
// "skipped", when VAR is unset), then Catch2's own (a case name or [tag] to run,
// --list-tests, -s, ...). Returns the exit status: 0 when every case that
// applies passed. A case that needs a feature your caps() declares unsupported
// is not run and is listed as NOT APPLICABLE with your reason. The
// multi-process cases run this same program again with --conformance-helper as
// its first argument: register the scheme before this call on every run.
DISTLOCK_API int run_conformance(int argc, char** argv);

}  // namespace distlock::testing
