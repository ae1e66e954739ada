// memory:// internals that its own tests look at (not part of the public API).
#pragma once

#include <cstddef>
#include <string_view>

namespace distlock::backends::memory {

// The slots (one per name and primitive in use) of lock space `space` now; 0
// when no provider has that space.
std::size_t slot_count(std::string_view space);
// The lock spaces some provider (or lock) still uses.
std::size_t space_count();

}  // namespace distlock::backends::memory
