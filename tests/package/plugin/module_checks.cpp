// Checks of the module loader against the installed library, from a program
// that registers nothing itself (DISTLOCK_MODULE_PATH: this build's modules):
//   module_checks next-spi BASE   mkdirnext:// is refused: unsupported_error
//                                 naming the module's SPI and the library's
//   module_checks loads BASE      mkdir:// is loaded by its scheme, and listed
// Exit status 0 when the check holds, 1 (with the reason) when not.
#include <distlock/distlock.hpp>
#include <iostream>
#include <string>

int main(int argc, char** argv) {
    if (argc != 3) {
        std::cerr << "usage: module_checks next-spi|loads BASE\n";
        return 2;
    }
    const std::string mode = argv[1], base = argv[2];
    if (mode == "next-spi") {
        try {
            (void)distlock::connect("mkdirnext://" + base);
            std::cerr << "a module built against SPI " << DISTLOCK_SPI_VERSION_MAJOR + 1 << ".0 was loaded\n";
            return 1;
        } catch (const distlock::unsupported_error& e) {
            const std::string what = e.what();
            const auto theirs = std::to_string(DISTLOCK_SPI_VERSION_MAJOR + 1) + ".0";
            const auto ours =
                std::to_string(DISTLOCK_SPI_VERSION_MAJOR) + "." + std::to_string(DISTLOCK_SPI_VERSION_MINOR);
            if (what.find("SPI " + theirs) == std::string::npos || what.find("SPI " + ours) == std::string::npos) {
                std::cerr << "the refusal does not name both versions: " << what << "\n";
                return 1;
            }
            for (const auto& m : distlock::backend_modules())
                if (m.name == "mkdirnext" && m.loaded) {
                    std::cerr << "the refused module is listed as loaded\n";
                    return 1;
                }
            std::cout << "refused: " << what << "\n";
            return 0;
        }
    }
    if (mode == "loads") {
        auto p = distlock::connect("mkdir://" + base);
        auto m = p.mutex("module-check");
        if (!m.try_lock()) {
            std::cerr << "mkdir:// did not grant a free lock\n";
            return 1;
        }
        m.unlock();
        for (const auto& b : distlock::backend_modules())
            if (b.name == "mkdir" && b.loaded && b.file == "libdistlock-mkdir.so") {
                std::cout << "loaded from " << b.path << "\n";
                return 0;
            }
        std::cerr << "backend_modules() does not list mkdir as loaded\n";
        return 1;
    }
    std::cerr << "unknown mode " << mode << "\n";
    return 2;
}
