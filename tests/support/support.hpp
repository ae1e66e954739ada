// Test support shared by the unit, conformance and backend test programs.
#pragma once

#include <chrono>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace distlock::test {

struct test_case_info {
    std::string name;
    std::vector<std::string> tags;
};

// The shared Catch2 main: the options of session.cpp, then Catch2's; the exit status.
int run_session(int argc, char** argv);

// Hook run by the shared Catch2 main after option parsing: may add exclusions
// ("~[tag]") to the run; non-zero = exit with it. Weak default does nothing.
int before_run(const std::vector<test_case_info>& cases, std::vector<std::string>& exclusions);

// True in programs that test one backend URL at a time (the conformance suite):
// they then also take their URLs from DISTLOCK_TEST_URLS. Weak default: false.
bool takes_backend_urls();

// A lock name unique to this test run: "<base>:<random hex>".
std::string unique_name(std::string_view base);

// The value of an environment variable, or "" when unset.
std::string env(const char* name);

// The backend URL under test (set by the conformance main from --backend).
const std::string& backend_url();
void set_backend_url(std::string url);

// `url` with each `host:port` of its authority (the comma-separated list after
// any user info) replaced by what `f` returns for it, e.g. a proxy's address;
// the scheme, user info, path and query stay as they were.
std::string map_hosts(const std::string& url, const std::function<std::string(const std::string& host_port)>& f);

// Directory of the running executable (to find helper programs beside it).
std::string exe_dir();

// Runs `shell_command` with /bin/sh and returns its exit status (-1 when it did
// not exit normally) and all it wrote to stdout (stderr is not captured).
struct command_result {
    int status;
    std::string out;
};
command_result run_command(const std::string& shell_command);
// `text` without trailing newlines and spaces.
std::string trim_end(std::string text);

// Polls `cond` every 10 ms until true or `limit` passes; returns the last value.
template <class F>
bool eventually(F&& cond, std::chrono::milliseconds limit) {
    auto until = std::chrono::steady_clock::now() + limit;
    for (;;) {
        if (cond()) return true;
        if (std::chrono::steady_clock::now() >= until) return cond();
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
}

// Runs the bodies of a test's threads: an exception (a server that stopped
// answering under load, say) is recorded instead of ending the program, and the
// test checks `all()` after joining them.
class thread_errors {
public:
    template <class F>
    void run(F&& body) noexcept {
        try {
            body();
        } catch (const std::exception& e) {
            add(e.what());
        } catch (...) {
            add("an exception that is not a std::exception");
        }
    }
    // Every message, one per line; "" when no thread threw.
    std::string all() const {
        std::lock_guard lk(mutex_);
        return text_;
    }

private:
    void add(const std::string& what) noexcept {
        try {
            std::lock_guard lk(mutex_);
            text_ += what + "\n";
        } catch (...) {
        }
    }
    mutable std::mutex mutex_;
    std::string text_;
};

}  // namespace distlock::test
