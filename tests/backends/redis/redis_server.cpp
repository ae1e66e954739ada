#include "redis_server.hpp"

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <thread>

#include "distlock/spi/backend.hpp"
#include "tcp_proxy.hpp"

namespace distlock::test {

redis_server::redis_server(std::vector<std::string> config) {
    dir_ = (std::filesystem::temp_directory_path() / ("distlock-redis-test-" + spi::random_token().substr(0, 10)))
               .string();
    std::filesystem::create_directories(dir_);
    for (int attempt = 1;; ++attempt) {
        write_config(config);
        try {
            start();
            return;
        } catch (const std::runtime_error&) {
            std::ifstream log(dir_ + "/redis.log");
            const std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
            if (attempt == 5 || text.find("Address already in use") == std::string::npos) throw;
        }
    }
}

void redis_server::write_config(const std::vector<std::string>& config) {
    port_ = free_port();
    do {
        tls_port_ = free_port();
    } while (tls_port_ == port_);
    std::ofstream conf(dir_ + "/redis.conf");
    conf << "port " << port_ << "\nbind 127.0.0.1\ndir " << dir_ << "\nlogfile " << dir_
         << "/redis.log\nsave \"\"\ndatabases 16\n";
    bool aof = false;
    for (auto line : config) {
        if (const auto at = line.find("{tls_port}"); at != std::string::npos)
            line.replace(at, 10, std::to_string(tls_port_));
        conf << line << "\n";
        if (line.rfind("appendonly yes", 0) == 0) aof = true;
    }
    if (!aof) conf << "appendonly no\n";
}

redis_server::~redis_server() {
    try {
        if (paused_) resume();
        kill();
    } catch (...) {}
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
}

void redis_server::start() {
    if (pid_ > 0) return;
    pid_ = ::fork();
    if (pid_ < 0) throw std::runtime_error("fork failed");
    if (pid_ == 0) {
        // Dies with the test program (even when it crashes), and keeps none of its pipes open.
        ::prctl(PR_SET_PDEATHSIG, SIGKILL);
        int null = ::open("/dev/null", O_RDWR);
        if (null >= 0) {
            ::dup2(null, 0);
            ::dup2(null, 1);
            ::dup2(null, 2);
        }
        std::string conf = dir_ + "/redis.conf";
        ::execlp("redis-server", "redis-server", conf.c_str(), static_cast<char*>(nullptr));
        ::_exit(127);
    }
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    for (;;) {
        timeval tv{0, 200000};
        redisContext* c = redisConnectWithTimeout("127.0.0.1", port_, tv);
        bool up = false;
        if (c != nullptr && c->err == 0) {
            auto* r = static_cast<redisReply*>(redisCommand(c, "PING"));
            // PONG, or NOAUTH when a password is required: either way it serves.
            up = r != nullptr && (r->type == REDIS_REPLY_STATUS ||
                                  (r->type == REDIS_REPLY_ERROR && std::string(r->str).rfind("LOADING", 0) != 0));
            if (r) freeReplyObject(r);
        }
        if (c) redisFree(c);
        if (up) return;
        int status = 0;
        if (::waitpid(pid_, &status, WNOHANG) == pid_) {
            pid_ = -1;
            throw std::runtime_error("redis-server exited at start; see " + dir_ + "/redis.log");
        }
        if (std::chrono::steady_clock::now() > until) throw std::runtime_error("redis-server did not answer in 10 s");
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
}

void redis_server::stop() {
    if (pid_ <= 0) return;
    if (paused_) resume();
    ::kill(pid_, SIGTERM);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
}

void redis_server::kill() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
    paused_ = false;
}

void redis_server::pause() {
    if (pid_ > 0 && ::kill(pid_, SIGSTOP) == 0) paused_ = true;
}

void redis_server::resume() {
    if (pid_ > 0 && ::kill(pid_, SIGCONT) == 0) paused_ = false;
}

raw_client::raw_client(std::uint16_t port, const std::string& password, int db) {
    timeval tv{2, 0};
    ctx_ = redisConnectWithTimeout("127.0.0.1", port, tv);
    if (ctx_ == nullptr || ctx_->err != 0) throw std::runtime_error("raw client: cannot connect");
    redisSetTimeout(ctx_, tv);
    if (!password.empty()) cmd({"AUTH", password});
    if (db != 0) cmd({"SELECT", std::to_string(db)});
}

raw_client::~raw_client() {
    if (ctx_) redisFree(ctx_);
}

reply raw_client::cmd(const std::vector<std::string>& args) {
    std::vector<const char*> argv;
    std::vector<std::size_t> lens;
    for (const auto& a : args) {
        argv.push_back(a.data());
        lens.push_back(a.size());
    }
    auto* r = static_cast<redisReply*>(redisCommandArgv(ctx_, static_cast<int>(args.size()), argv.data(), lens.data()));
    if (r == nullptr) throw std::runtime_error(std::string("raw client: ") + ctx_->errstr);
    return reply(r);
}

long long raw_client::integer(const std::vector<std::string>& args) {
    auto r = cmd(args);
    if (r->type != REDIS_REPLY_INTEGER) throw std::runtime_error("raw client: not an integer reply to " + args[0]);
    return r->integer;
}

std::string raw_client::string(const std::vector<std::string>& args) {
    auto r = cmd(args);
    if (r->type == REDIS_REPLY_NIL) return {};
    if (r->type == REDIS_REPLY_ERROR) throw std::runtime_error("raw client: " + std::string(r->str, r->len));
    return std::string(r->str, r->len);
}

long long raw_client::calls(const std::string& command) {
    auto info = string({"INFO", "commandstats"});
    auto at = info.find("cmdstat_" + command + ":calls=");
    if (at == std::string::npos) return 0;
    return std::stoll(info.substr(at + command.size() + 15));
}

}  // namespace distlock::test
