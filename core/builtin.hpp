// Registers the backends compiled into this build. The definition is generated
// by CMake (one call per enabled backend: register_<name>_backend(r)).
#pragma once

#include "distlock/spi/backend.hpp"

namespace distlock::detail {
void register_builtin_backends(spi::registry& r);
}
