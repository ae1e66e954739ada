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

#include "distlock/error.hpp"
#include "distlock/options.hpp"

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

// What one connect + try_lock + unlock on `url` came to: for the tests of
// refused connections (TLS handshakes), which check the error, how long it
// took and that no secret shows.
struct lock_outcome {
    std::string shown;  // what() and the native message; "" = it worked
    int code = 0;       // the errc, 0 = it worked
    long long ms = 0;   // how long, connect included
};
lock_outcome lock_once(const std::string& url);

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
        } catch (...) {}
    }
    mutable std::mutex mutex_;
    std::string text_;
};

// Records what a lock's callbacks report (on_lost, on_error) for a test to
// check. The callbacks run on the provider's callback thread, a little after
// held() turns false: wait for them with wait_lost / wait_errors.
class loss_recorder {
public:
    // `base` with on_lost and on_error recording here (one recorder may serve
    // several mutexes).
    distlock::lock_options options(distlock::lock_options base = {});
    std::size_t lost() const;
    std::size_t errors() const;
    // Every on_lost event so far, in order.
    std::vector<distlock::lock_event> losses() const;
    // Every on_error so far: the event and the error's code.
    std::vector<std::pair<distlock::lock_event, distlock::errc>> error_events() const;
    // Until at least `n` were reported, or `limit` passed; true when they were.
    bool wait_lost(std::size_t n, std::chrono::milliseconds limit) const;
    bool wait_errors(std::size_t n, std::chrono::milliseconds limit) const;

private:
    mutable std::mutex mutex_;
    std::vector<distlock::lock_event> losses_;
    std::vector<std::pair<distlock::lock_event, distlock::errc>> errors_;
};

}  // namespace distlock::test
