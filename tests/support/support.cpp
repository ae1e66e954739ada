#include "support.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "distlock/distlock.hpp"
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

std::string map_hosts(const std::string& url, const std::function<std::string(const std::string&)>& f) {
    const auto scheme_end = url.find("://");
    if (scheme_end == std::string::npos) return url;
    const auto start = scheme_end + 3;
    auto end = url.find_first_of("/?#", start);
    if (end == std::string::npos) end = url.size();
    const auto at = url.rfind('@', end);
    const auto hosts_start = at != std::string::npos && at >= start ? at + 1 : start;
    std::string out = url.substr(0, hosts_start);
    for (auto pos = hosts_start; pos < end;) {
        auto comma = std::min(url.find(',', pos), end);
        out += (pos == hosts_start ? "" : ",") + f(url.substr(pos, comma - pos));
        pos = comma + 1;
    }
    return out + url.substr(end);
}

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

lock_outcome lock_once(const std::string& url) {
    lock_outcome o;
    const auto start = std::chrono::steady_clock::now();
    try {
        auto p = distlock::connect(url);
        auto m = p.mutex(unique_name("lock-once"));
        if (!m.try_lock()) o.shown = "not acquired";
        else m.unlock();
    } catch (const distlock::error& e) {
        o.shown = std::string(e.what()) + " | " + e.native_message();
        o.code = e.code().value();
    }
    o.ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start).count();
    return o;
}

distlock::lock_options loss_recorder::options(distlock::lock_options base) {
    base.on_lost = [this](const distlock::lock_event& e) {
        std::lock_guard lk(mutex_);
        losses_.push_back(e);
    };
    base.on_error = [this](const distlock::lock_event& e, const distlock::error& err) {
        std::lock_guard lk(mutex_);
        errors_.emplace_back(e, err.code_value());
    };
    return base;
}

std::size_t loss_recorder::lost() const {
    std::lock_guard lk(mutex_);
    return losses_.size();
}

std::size_t loss_recorder::errors() const {
    std::lock_guard lk(mutex_);
    return errors_.size();
}

std::vector<distlock::lock_event> loss_recorder::losses() const {
    std::lock_guard lk(mutex_);
    return losses_;
}

std::vector<std::pair<distlock::lock_event, distlock::errc>> loss_recorder::error_events() const {
    std::lock_guard lk(mutex_);
    return errors_;
}

bool loss_recorder::wait_lost(std::size_t n, std::chrono::milliseconds limit) const {
    return eventually([&] { return lost() >= n; }, limit);
}

bool loss_recorder::wait_errors(std::size_t n, std::chrono::milliseconds limit) const {
    return eventually([&] { return errors() >= n; }, limit);
}

}  // namespace distlock::test
