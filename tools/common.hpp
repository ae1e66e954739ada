// Shared pieces of the distlock tool: processes that report back to the parent,
// latency statistics, progress lines.
#pragma once

#include <chrono>
#include <exception>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

namespace distlock::tool {

// The documented exit status of a failure: 64 bad arguments, 69 backend
// unavailable, 77 access denied, 1 anything else.
int exit_status(const std::exception& e) noexcept;

// Worker processes failed; `status` is the exit status the tool ends with (the
// first failed worker's, each mapped by exit_status()), each worker having
// printed its own reason, one line each.
class workers_failed : public std::runtime_error {
public:
    workers_failed(int status, const std::string& what) : std::runtime_error(what), status_(status) {}
    int status() const noexcept { return status_; }

private:
    int status_;
};

// Forks `n` children; child i runs work(i) and its returned bytes reach the
// parent. While they run, the parent calls tick() about every second (progress).
// A child that throws prints "distlock: worker i: <what>" as one line and exits
// with exit_status(); then this throws workers_failed. Call before this process
// starts any thread.
std::vector<std::string> run_in_processes(int n, const std::function<std::string(int)>& work,
                                          const std::function<void()>& tick);

// Percentile (0..100) of unsorted samples; 0 for none.
double percentile(std::vector<double> samples, double p);

// Little helpers to pass numbers through the byte blobs above.
void put_doubles(std::string& out, const std::vector<double>& v);
std::vector<double> get_doubles(const std::string& in, std::size_t& pos);
void put_u64(std::string& out, unsigned long long v);
unsigned long long get_u64(const std::string& in, std::size_t& pos);

// The URL with any password or token replaced by "***", for printing.
std::string redact(const std::string& url);

// Throws invalid_argument_error, with the backend's reason, when `processes` > 1
// processes of `command` cannot exclude each other through `url` (memory://).
// Asks the backend in a child process: this one starts no thread before fork.
void require_cross_process(const std::string& url, int processes, const char* command);

double ms_since(std::chrono::steady_clock::time_point t0);

// The default file:// backend of the tool's subcommands: the directory `leaf`
// under $XDG_RUNTIME_DIR/distlock, else /run/lock/distlock (root), else
// ~/.local/state/distlock, never under /tmp, whose cleaners delete files.
std::string default_file_backend(const std::string& leaf);

}  // namespace distlock::tool
