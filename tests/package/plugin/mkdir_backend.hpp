// An example of a distlock backend that lives outside distlock's tree, built
// against the installed package: mkdir://<base directory>[?check=<duration>].
#pragma once

namespace mkdir_lock {

// Registers the scheme "mkdir" with distlock::register_backend(). Call it once,
// before the first distlock::connect("mkdir://...").
void register_scheme();

}  // namespace mkdir_lock
