// distlock schemes [--verbose] and distlock --version: what this build
// provides, and from where (docs/packaging.md).
#include <algorithm>
#include <cstdlib>
#include <ostream>
#include <sstream>

#include "common.hpp"
#include "distlock/distlock.hpp"

namespace distlock::tool {
namespace {

std::string joined(const std::vector<std::string>& v, const char* sep) {
    std::string out;
    for (const auto& s : v) out += (out.empty() ? "" : sep) + s;
    return out;
}

}  // namespace

std::string version_text() {
    std::ostringstream out;
    out << "distlock " << distlock::version() << " (SPI " << DISTLOCK_SPI_VERSION_MAJOR << "."
        << DISTLOCK_SPI_VERSION_MINOR << ")";
    const auto modules = distlock::backend_modules();
    if (modules.empty()) {
        out << "\nbackends: built in (no modules)";
        return out.str();
    }
    for (const auto& m : modules) {
        out << "\nmodule " << m.name << ": ";
        if (m.path.empty()) out << "not installed (package " << m.package << ")";
        else out << printable(m.path) << (m.loaded ? " (loaded, built with " + printable(m.version) + ")" : "");
    }
    return out.str();
}

int print_schemes(std::ostream& out) {
    for (const auto& s : distlock::schemes()) out << s << "\n";
    return 0;
}

int print_schemes_verbose(std::ostream& out) {
    const auto modules = distlock::backend_modules();
    auto path = distlock::module_path();
    for (auto& p : path) p = printable(p);
    out << "module path: " << (path.empty() ? std::string("(none)") : joined(path, ":"))
        << (std::getenv("DISTLOCK_MODULE_PATH") ? " (from DISTLOCK_MODULE_PATH)" : "") << "\n";
    std::vector<std::string> seen;
    for (const auto& m : modules) {
        for (const auto& s : m.schemes) {
            seen.push_back(s);
            out << s << "\tmodule " << m.file << ": ";
            if (m.path.empty()) out << "not installed (package " << m.package << ")";
            else out << printable(m.path) << (m.loaded ? " (loaded)" : "");
            out << "\n";
        }
    }
    for (const auto& s : distlock::schemes())
        if (std::find(seen.begin(), seen.end(), s) == seen.end()) out << s << "\tbuilt in\n";
    return 0;
}

}  // namespace distlock::tool
