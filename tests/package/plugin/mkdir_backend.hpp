// An example of a distlock backend that lives outside distlock's tree, built
// against the installed package: mkdir://<base directory>[?check=<duration>].
#pragma once

#include <string>

namespace distlock::spi {
class registry;
}

namespace mkdir_lock {

// Registers the scheme "mkdir" with distlock::register_backend(). Call it once,
// before the first distlock::connect("mkdir://...").
void register_scheme();

// Adds the scheme `scheme` (mkdir:// by default) to `r`: what the module
// form's entry point does (mkdir_module.cpp).
void register_into(distlock::spi::registry& r, const std::string& scheme = "mkdir");

}  // namespace mkdir_lock
