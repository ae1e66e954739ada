// Shared pieces of the distlock tool: processes that report back to the parent,
// latency statistics, progress lines.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <vector>

namespace distlock::tool {

// Forks `n` children; child i runs work(i) and its returned bytes reach the
// parent. While they run, the parent calls tick() about every second (progress).
// Throws std::runtime_error when a child fails (its exit status in the message).
// Call before this process starts any thread.
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

}  // namespace distlock::tool
