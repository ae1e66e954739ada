// Unit tests of the Redis client layer (backends/redis-client) that need no
// server: key_slot (Redis Cluster's hash slot of a key, topology.hpp), and the
// redirection an error reply asks for on an endpoint with follow_redirects
// (MOVED, ASK, the retry errors: redis_client.hpp's `redirect`), read by a
// connection from a scripted server.
#include <sys/socket.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <optional>
#include <string>

#include "redis-client/redis_client.hpp"
#include "redis-client/topology.hpp"
#include "tcp_proxy.hpp"

namespace rc = distlock::backends::redis_client;
using distlock::test::scripted_server;

namespace {

// A fake Redis that answers every command (an array of bulk strings without
// line breaks in them) with `reply`.
scripted_server::handler answer_with(std::string reply) {
    return [reply = std::move(reply)](int fd) {
        while (auto head = scripted_server::read_line(fd)) {
            if (head->size() < 2 || (*head)[0] != '*') break;
            const int args = std::atoi(head->c_str() + 1);
            for (int i = 0; i < 2 * args; ++i)  // "$<length>" and the argument
                if (!scripted_server::read_line(fd)) return;
            if (!scripted_server::send_all(fd, reply)) break;
        }
        ::shutdown(fd, SHUT_RDWR);
    };
}

rc::endpoint endpoint_of(const scripted_server& server, bool follow_redirects) {
    rc::endpoint ep;
    ep.host = "127.0.0.1";
    ep.port = static_cast<std::uint16_t>(server.port());
    ep.follow_redirects = follow_redirects;
    return ep;
}

// The redirect a command's reply `error` (a RESP error line) raises on an
// endpoint that follows redirects; nullopt when the reply is returned instead.
std::optional<rc::redirect> redirect_for(const std::string& error) {
    scripted_server server(answer_with(error));
    auto c = rc::connection::open(endpoint_of(server, true));
    try {
        auto r = c->command({"EVALSHA", "abc", "1", "{k}"});
        CHECK(rc::is_error(r.get()));
        return std::nullopt;
    } catch (const rc::redirect& r) {
        CHECK(c->broken());  // replies of a pipeline may still be pending: never reused
        CHECK(std::string(r.what()) == error.substr(1, error.size() - 3));
        return r;
    }
}

}  // namespace

// ---- key_slot -----------------------------------------------------------------------------------

TEST_CASE("key_slot is CRC16/XMODEM of the key modulo 16384, as Redis Cluster computes it",
          "[redis-client][cluster][slot]") {
    CHECK(rc::key_slot("123456789") == 0x31C3);  // the CRC16/XMODEM check value
    CHECK(rc::key_slot("foo") == 12182);         // CLUSTER KEYSLOT foo
    CHECK(rc::key_slot("bar") == 5061);
    CHECK(rc::key_slot("hello") == 866);
    CHECK(rc::key_slot("") == 0);
    for (const char* key : {"a", "distlock:{name}", "\xff\xfe binary", "a much longer key than the others"}) {
        CHECK(rc::key_slot(key) >= 0);
        CHECK(rc::key_slot(key) < 16384);
    }
}

TEST_CASE("key_slot hashes the first non-empty hash tag only", "[redis-client][cluster][slot]") {
    // Keys with one tag share its slot: a lock's key, fence and channel.
    CHECK(rc::key_slot("{user1000}.following") == rc::key_slot("user1000"));
    CHECK(rc::key_slot("{user1000}.followers") == rc::key_slot("user1000"));
    CHECK(rc::key_slot("distlock:{n}") == rc::key_slot("distlock:{n}:fence"));
    // The first '{' and the next '}': later tags do not count.
    CHECK(rc::key_slot("foo{bar}{zap}") == rc::key_slot("bar"));
    CHECK(rc::key_slot("foo{{bar}}zap") == rc::key_slot("{bar"));
    // An empty tag, or none closed: the whole key.
    CHECK(rc::key_slot("foo{}{bar}") == 8363);
    CHECK(rc::key_slot("foo{}{bar}") != rc::key_slot("bar"));
    CHECK(rc::key_slot("foo{bar") != rc::key_slot("bar"));
    CHECK(rc::key_slot("}bar{") != rc::key_slot("bar"));
}

// ---- redirect parsing ---------------------------------------------------------------------------

TEST_CASE("MOVED and ASK replies are read as a redirect: kind, slot, host and port", "[redis-client][redirect]") {
    auto moved = redirect_for("-MOVED 3999 127.0.0.1:6381\r\n");
    REQUIRE(moved);
    CHECK(moved->how() == rc::redirect::kind::moved);
    CHECK(moved->slot() == 3999);
    CHECK(moved->host() == "127.0.0.1");
    CHECK(moved->port() == 6381);

    auto ask = redirect_for("-ASK 16383 node-7.example:7000\r\n");
    REQUIRE(ask);
    CHECK(ask->how() == rc::redirect::kind::ask);
    CHECK(ask->slot() == 16383);
    CHECK(ask->host() == "node-7.example");
    CHECK(ask->port() == 7000);

    // An IPv6 address: the port follows the last ':'.
    auto v6 = redirect_for("-MOVED 0 ::1:7001\r\n");
    REQUIRE(v6);
    CHECK(v6->slot() == 0);
    CHECK(v6->host() == "::1");
    CHECK(v6->port() == 7001);
}

TEST_CASE("a MOVED without a host means the node asked (Redis 7's unknown endpoint)", "[redis-client][redirect]") {
    auto r = redirect_for("-MOVED 12182 :6380\r\n");
    REQUIRE(r);
    CHECK(r->how() == rc::redirect::kind::moved);
    CHECK(r->slot() == 12182);
    CHECK(r->host().empty());
    CHECK(r->port() == 6380);
}

TEST_CASE("READONLY, TRYAGAIN, CLUSTERDOWN, LOADING and MASTERDOWN ask to find the server again",
          "[redis-client][redirect]") {
    for (std::string error : {"READONLY You can't write against a read only replica.",
                              "TRYAGAIN Multiple keys request during rehashing of slot",
                              "CLUSTERDOWN The cluster is down", "LOADING Redis is loading the dataset in memory",
                              "MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'."}) {
        INFO(error);
        auto r = redirect_for("-" + error + "\r\n");
        REQUIRE(r);
        CHECK(r->how() == rc::redirect::kind::retry);
        CHECK(r->slot() == -1);
        CHECK(r->host().empty());
        CHECK(r->port() == 0);
    }
}

TEST_CASE("other errors are replies, and without follow_redirects a MOVED is one too", "[redis-client][redirect]") {
    for (std::string error : {"ERR unknown command", "NOSCRIPT No matching script", "MOVEDX 1 a:1", "ASKING"}) {
        INFO(error);
        CHECK_FALSE(redirect_for("-" + error + "\r\n"));
    }
    scripted_server server(answer_with("-MOVED 3999 127.0.0.1:6381\r\n"));
    auto c = rc::connection::open(endpoint_of(server, false));
    auto r = c->command({"GET", "k"});
    REQUIRE(rc::is_error(r.get()));
    CHECK(rc::reply_text(r.get()).find("MOVED 3999") != std::string::npos);
    CHECK_FALSE(c->broken());
}
