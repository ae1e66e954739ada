#include "support.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
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

command_result run_command(const std::string& shell_command) {
    std::FILE* p = ::popen(shell_command.c_str(), "r");
    if (p == nullptr) return {-1, {}};
    command_result r{-1, {}};
    std::array<char, 4096> buf{};
    while (std::size_t n = std::fread(buf.data(), 1, buf.size(), p)) r.out.append(buf.data(), n);
    const int st = ::pclose(p);
    if (st != -1 && WIFEXITED(st)) r.status = WEXITSTATUS(st);
    return r;
}

std::string trim_end(std::string text) {
    while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
    return text;
}

}  // namespace distlock::test
