// mkdir:// as a backend module (include/distlock/spi/module.hpp): built as
// libdistlock-mkdir.so, it is found by its scheme in DISTLOCK_MODULE_PATH and
// opened on the first connect("mkdir://...") of a program that never
// registered it. Built with MKDIR_MODULE_NEXT_SPI, it is libdistlock-mkdirnext.so
// and says it was built against the next SPI major version: the loader must
// refuse it, naming both versions.
#include <distlock/spi/module.hpp>

#include "mkdir_backend.hpp"

#ifndef MKDIR_MODULE_NEXT_SPI
DISTLOCK_DEFINE_MODULE("mkdir", [](distlock::spi::registry& r) { mkdir_lock::register_into(r); })
#else
// What DISTLOCK_DEFINE_MODULE writes, with headers one SPI major version ahead.
extern "C" __attribute__((visibility("default"))) const distlock::spi::module_info* distlock_module_entry() {
    static const distlock::spi::module_info info{
        distlock::spi::module_magic,
        DISTLOCK_SPI_VERSION_MAJOR + 1,
        0,
        "mkdirnext",
        DISTLOCK_VERSION_STRING,
        [](distlock::spi::registry& r) { mkdir_lock::register_into(r, "mkdirnext"); }};
    return &info;
}
#endif
