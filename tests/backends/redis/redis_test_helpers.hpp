// What the Redis-specific test programs share (tests/backends/redis/*_test.cpp
// and tests/backends/redlock/): the includes, the URL of the shared server of
// DISTLOCK_TEST_REDIS_URL, pub/sub and hash readers of a raw client, the
// Redisson owner-field pattern, a registry that captures the scheme factories
// and a MONITOR-based command counter.
#pragma once

#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <map>
#include <regex>
#include <thread>

#include "distlock/distlock.hpp"
#include "distlock/spi/backend.hpp"
#include "distlock/testing.hpp"
#include "redis_server.hpp"
#include "support.hpp"
#include "tcp_proxy.hpp"

namespace distlock::backends::redis {
void register_backend(spi::registry&);
}

using namespace std::chrono_literals;
using distlock::test::eventually;
using distlock::test::loss_recorder;
using distlock::test::raw_client;
using distlock::test::redis_server;
using distlock::test::unique_name;
using clk = std::chrono::steady_clock;

inline std::uint16_t shared_port() {
    auto u = distlock::spi::url::parse(distlock::test::env("DISTLOCK_TEST_REDIS_URL"));
    return u.hosts().at(0).port;
}

inline std::string shared_url(const std::string& params) {
    return "redis://127.0.0.1:" + std::to_string(shared_port()) + params;
}

template <class D>
long long ms(D d) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
}

// Reads one pub/sub message (channel, payload) from a SUBSCRIBEd raw client.
inline std::pair<std::string, std::string> next_message(raw_client& sub) {
    void* out = nullptr;
    REQUIRE(redisGetReply(sub.context(), &out) == REDIS_OK);
    distlock::test::reply r(static_cast<redisReply*>(out));
    REQUIRE(r->type == REDIS_REPLY_ARRAY);
    REQUIRE(r->elements == 3);
    return {std::string(r->element[1]->str, r->element[1]->len), std::string(r->element[2]->str, r->element[2]->len)};
}

class capture_registry final : public distlock::spi::registry {
public:
    void add(std::string scheme, distlock::spi::factory f) override { factories[scheme] = std::move(f); }
    std::map<std::string, distlock::spi::factory> factories;
};

// ---- read-write lock and semaphore (Redisson's RReadWriteLock / RPermitExpirableSemaphore) ------

// The fields of a hash as a map.
inline std::map<std::string, std::string> hash_of(raw_client& raw, const std::string& key) {
    auto all = raw.cmd({"HGETALL", key});
    std::map<std::string, std::string> out;
    REQUIRE(all->type == REDIS_REPLY_ARRAY);
    for (std::size_t i = 0; i + 1 < all->elements; i += 2)
        out[std::string(all->element[i]->str, all->element[i]->len)] =
            std::string(all->element[i + 1]->str, all->element[i + 1]->len);
    return out;
}

// The server's clock in ms (what permit expiries are scored by).
inline long long server_ms(raw_client& raw) {
    auto t = raw.cmd({"TIME"});
    REQUIRE(t->type == REDIS_REPLY_ARRAY);
    return std::stoll(std::string(t->element[0]->str, t->element[0]->len)) * 1000 +
           std::stoll(std::string(t->element[1]->str, t->element[1]->len)) / 1000;
}

inline const std::regex owner_field("[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}:[0-9]+");

// ---- inspect ---------------------------------------------------------------------------------------

// Counts the commands clients send to a server (not those its scripts run), by
// MONITOR: start it, do the work, then count() up to a marker sent after it.
class command_monitor {
public:
    explicit command_monitor(std::uint16_t port) : port_(port), mon_(port) {
        REQUIRE(mon_.string({"MONITOR"}) == "OK");
    }
    long long count() {
        const auto marker = "end-of-count-" + distlock::spi::random_token();
        raw_client other(port_);
        other.cmd({"ECHO", marker});
        long long n = 0;
        for (;;) {
            void* out = nullptr;
            REQUIRE(redisGetReply(mon_.context(), &out) == REDIS_OK);
            distlock::test::reply r(static_cast<redisReply*>(out));
            const std::string line(r->str, r->len);
            if (line.find(marker) != std::string::npos) return n;
            if (line.find(" lua] ") == std::string::npos) {
                UNSCOPED_INFO(line);
                ++n;  // sent by a client, not run by a script
            }
        }
    }

private:
    std::uint16_t port_;
    raw_client mon_;
};
