// A backend as a loadable module: a shared library that libdistlock opens on
// the first connect() to one of its schemes (docs/backend-authoring.md,
// "Modules").
//
// A module defines its entry point with DISTLOCK_DEFINE_MODULE in one source
// file, links libdistlock (and its own client libraries), and is named
// libdistlock-<name>.so. libdistlock looks for it in the module directory (the
// installed one, <libdir>/distlock/modules, beside libdistlock itself, or
// those of DISTLOCK_MODULE_PATH): the modules of distlock's own backends by
// the schemes its build lists, any other as libdistlock-<scheme>.so for a
// scheme nothing else provides. Before it registers anything, the loader reads
// the module's module_info and refuses (unsupported_error, naming both
// versions) a module built against another SPI major version, or a later
// minor one, than the library's (docs/versioning.md).
#pragma once

#include <cstdint>

#include "distlock/spi/backend.hpp"
#include "distlock/version.hpp"

namespace distlock::spi {

// "DLM1": a module_info of this layout follows.
inline constexpr std::uint32_t module_magic = 0x444c4d31;

// What a module's entry point returns. Its first three members keep their
// place and meaning in every SPI version: the loader reads them before
// anything else.
struct module_info {
    std::uint32_t magic;                     // module_magic
    std::uint32_t spi_major;                 // DISTLOCK_SPI_VERSION_MAJOR the module was built with
    std::uint32_t spi_minor;                 // DISTLOCK_SPI_VERSION_MINOR the module was built with
    const char* name;                        // its name: "redis" for libdistlock-redis.so
    const char* version;                     // DISTLOCK_VERSION_STRING of the headers it was built with
    void (*register_backends)(registry& r);  // adds its schemes (registry::add), nothing else
};

}  // namespace distlock::spi

// The entry point's name, as the loader looks it up (dlsym).
#define DISTLOCK_MODULE_ENTRY_SYMBOL "distlock_module_entry"

// Defines the module's entry point: NAME a string literal (the module's name),
// REGISTER a function void(distlock::spi::registry&) that adds its schemes.
#define DISTLOCK_DEFINE_MODULE(NAME, REGISTER)                                                                      \
    extern "C" __attribute__((visibility("default"))) const ::distlock::spi::module_info* distlock_module_entry() { \
        static const ::distlock::spi::module_info info{::distlock::spi::module_magic, DISTLOCK_SPI_VERSION_MAJOR,   \
                                                       DISTLOCK_SPI_VERSION_MINOR,    NAME,                         \
                                                       DISTLOCK_VERSION_STRING,       REGISTER};                    \
        return &info;                                                                                               \
    }
