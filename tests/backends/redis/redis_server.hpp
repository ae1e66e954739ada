// Test helpers for the redis backends: a dedicated redis-server child process
// that a test can stop, kill, pause and restart by PID, and a raw hiredis client
// to look at (and tamper with) what the backends store.
#pragma once

#include <hiredis/hiredis.h>
#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace distlock::test {

struct reply_free {
    void operator()(redisReply* r) const noexcept {
        if (r) freeReplyObject(r);
    }
};
using reply = std::unique_ptr<redisReply, reply_free>;

class redis_server {
public:
    // Starts redis-server on a free port in a fresh temp dir with these extra
    // config lines ("appendonly yes", "requirepass x", "user alice on >pw ~* &* +@all").
    // A line may name "{tls_port}": a second free port, read back by tls_port().
    // A port taken by another process between its choice and the server's bind
    // (tests run in parallel) is chosen again, a few times.
    explicit redis_server(std::vector<std::string> config = {});
    ~redis_server();
    redis_server(const redis_server&) = delete;
    redis_server& operator=(const redis_server&) = delete;

    std::uint16_t port() const noexcept { return port_; }
    std::uint16_t tls_port() const noexcept { return tls_port_; }
    std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
    pid_t pid() const noexcept { return pid_; }

    void start();   // (again) on the same port and dir; waits until it answers
    void stop();    // SIGTERM, wait
    void kill();    // SIGKILL, wait (no shutdown work: a crash)
    void pause();   // SIGSTOP: accepts connections, answers nothing
    void resume();  // SIGCONT

private:
    void write_config(const std::vector<std::string>& config);
    std::uint16_t port_ = 0;
    std::uint16_t tls_port_ = 0;
    std::string dir_;
    pid_t pid_ = -1;
    bool paused_ = false;
};

// A raw hiredis connection for looking at the server side.
class raw_client {
public:
    explicit raw_client(std::uint16_t port, const std::string& password = {}, int db = 0);
    ~raw_client();
    raw_client(const raw_client&) = delete;
    raw_client& operator=(const raw_client&) = delete;
    reply cmd(const std::vector<std::string>& args);
    long long integer(const std::vector<std::string>& args);
    std::string string(const std::vector<std::string>& args);  // "" for nil
    // Calls of one command since the last CONFIG RESETSTAT (INFO commandstats).
    long long calls(const std::string& command);
    redisContext* context() noexcept { return ctx_; }

private:
    redisContext* ctx_;
};

}  // namespace distlock::test
