#include "support.hpp"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "distlock/spi/backend.hpp"

namespace distlock::test {

std::string unique_name(std::string_view base) { return std::string(base) + ":" + spi::random_token().substr(0, 12); }

std::string env(const char* name) {
    const char* v = std::getenv(name);
    return v ? std::string(v) : std::string{};
}

namespace {
std::string& url_slot() {
    static std::string url;
    return url;
}
}  // namespace

const std::string& backend_url() { return url_slot(); }
void set_backend_url(std::string url) { url_slot() = std::move(url); }

std::string exe_dir() { return std::filesystem::read_symlink("/proc/self/exe").parent_path().string(); }

}  // namespace distlock::test
