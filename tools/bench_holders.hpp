// distlock bench --async: the holders of the names the waiters wait for. Where
// the backend excludes processes they are another process (so that the
// waiters wait on the server, and the holders' threads, connections and memory
// stay out of the measured process's figures); else (memory://) they are
// mutexes of the measuring process's own provider.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "distlock/distlock.hpp"

namespace distlock::tool {

// Two pipes between a holder process and the measuring one, made before both
// are forked: "held" (holder -> measurer) and "go" (measurer -> holder).
struct holder_channel {
    int held[2] = {-1, -1};
    int go[2] = {-1, -1};
    holder_channel();  // throws std::runtime_error when pipe() fails
    ~holder_channel();
    holder_channel(const holder_channel&) = delete;
    holder_channel& operator=(const holder_channel&) = delete;
};

// The holder process: takes each of `names` (failing after `bound`; 32 threads
// at once), says so, waits for the word to release them all, releases them
// (32 at once) and returns.
void hold_in_process(const std::string& url, const std::vector<std::string>& names, holder_channel& ch,
                     std::chrono::seconds bound);

// The measuring side: once this returns, every name is held; release() lets
// them all go. With a channel it waits for the holder process; without one it
// takes the names with `locks` itself (into mutexes it keeps).
class holders {
public:
    holders(const provider& locks, const std::vector<std::string>& names, holder_channel* ch,
            std::chrono::seconds bound);
    void release();
    bool in_another_process() const noexcept { return ch_ != nullptr; }

private:
    holder_channel* ch_;
    std::vector<distlock::mutex> own_;
};

// Runs work(i) for each of `n` indices on up to 32 threads; throws the first
// failure once all have ended.
void for_each_parallel(std::size_t n, const std::function<void(std::size_t)>& work);

// Whether `url`'s backend excludes processes (asked in a child process: the
// caller starts no thread before it forks).
bool excludes_processes(const std::string& url);

}  // namespace distlock::tool
