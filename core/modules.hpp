// Backend modules (DISTLOCK_BACKEND_MODULES=ON): the schemes of this build's
// modules, and the loader that opens a module on the first connect() to one
// of its schemes (include/distlock/spi/module.hpp, docs/packaging.md).
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "distlock/provider.hpp"
#include "distlock/spi/backend.hpp"

namespace distlock::detail {

// A module of this build, as CMake's generated table lists it.
struct module_entry {
    std::string name;                  // "redis": libdistlock-redis.so
    std::string package;               // the Debian package that installs it
    std::vector<std::string> schemes;  // what its registration adds, exactly
};

// The modules of this build (generated with the built-in registration): empty
// in an all-in-one build.
std::vector<module_entry> build_modules();

// The module of this build that provides `scheme`, if any.
const module_entry* module_of_scheme(const std::string& scheme);

using scheme_list = std::vector<std::pair<std::string, spi::factory>>;

// Loads the module that provides `scheme`: this build's, or else a module
// named libdistlock-<scheme>.so in the module path. Its schemes go to `add`
// at once, once the module passed every check: `add` takes all of them or
// throws (a scheme known already) and takes none. False when no module provides the
// scheme (none of this build, no file of that name); throws unsupported_error
// when one should but cannot be loaded (not installed, built against another
// SPI, a file others may write, ...). Loads each module at most once; a
// module refused once is refused again without a second try.
bool load_module_for(const std::string& scheme, const std::function<void(scheme_list)>& add);

// The schemes of this build's modules whose file is in the module path (not loaded).
std::vector<std::string> installed_module_schemes();

}  // namespace distlock::detail
