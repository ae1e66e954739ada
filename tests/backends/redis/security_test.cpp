// Hostile-server and hostile-name tests of redis://, redis-sentinel://,
// redis-cluster:// and redlock:// (issue 23): credentials only where they
// belong, names that never reach another lock's keys, every call bounded by its
// deadline and every reply by a cap, no secret in any message, no SIGPIPE, no
// socket inherited across exec, and the Redis ACL rules of docs/backends/redis.md
// proven on a server that enforces them. The fake servers are
// distlock::test::scripted_server; the real ones are redis-server children
// (redis_server.hpp), except where a test names the shared cluster or sentinels.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <poll.h>
#include <atomic>
#include <catch2/catch.hpp>
#include <filesystem>
#include <map>
#include <mutex>
#include <thread>

#include "distlock/distlock.hpp"
#include "distlock/spi/url.hpp"
#include "distlock/testing.hpp"
#include "redis_server.hpp"
#include "support.hpp"
#include "tcp_proxy.hpp"

using namespace std::chrono_literals;
using distlock::test::raw_client;
using distlock::test::redis_server;
using distlock::test::scripted_server;
using distlock::test::unique_name;
using clk = std::chrono::steady_clock;

namespace {

template <class D>
long long ms(D d) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
}

bool read_exact(int fd, char* p, std::size_t n) {
    while (n > 0) {
        const ssize_t got = ::recv(fd, p, n, 0);
        if (got <= 0) return false;
        p += got;
        n -= static_cast<std::size_t>(got);
    }
    return true;
}

// One command as a client sends it (an array of bulk strings); nullopt at end
// of file or on anything else.
std::optional<std::vector<std::string>> read_command(int fd) {
    auto head = scripted_server::read_line(fd);
    if (!head || head->size() < 2 || (*head)[0] != '*') return std::nullopt;
    const int n = std::atoi(head->c_str() + 1);
    std::vector<std::string> args;
    for (int i = 0; i < n; ++i) {
        auto len_line = scripted_server::read_line(fd);
        if (!len_line || len_line->size() < 2 || (*len_line)[0] != '$') return std::nullopt;
        std::string arg(static_cast<std::size_t>(std::atoi(len_line->c_str() + 1)) + 2, '\0');
        if (!read_exact(fd, arg.data(), arg.size())) return std::nullopt;
        arg.resize(arg.size() - 2);
        args.push_back(std::move(arg));
    }
    return args;
}

std::string upper(std::string s) {
    for (auto& c : s)
        if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
    return s;
}

std::string bulk(const std::string& s) { return "$" + std::to_string(s.size()) + "\r\n" + s + "\r\n"; }

// A fake Redis: every command read is answered with what `answer` returns ("" =
// close the connection).
scripted_server::handler fake_redis(std::function<std::string(const std::vector<std::string>&)> answer) {
    return [answer = std::move(answer)](int fd) {
        while (auto cmd = read_command(fd)) {
            const auto reply = answer(*cmd);
            if (reply.empty() || !scripted_server::send_all(fd, reply)) break;
        }
        ::shutdown(fd, SHUT_RDWR);
    };
}

// A sentinel that records every command it is sent, answers AUTH with OK
// (NOAUTH to everything else until then when `require_auth`) and names the
// data node at `master_port` as the master of any name (none when 0).
struct fake_sentinel {
    std::mutex mutex;
    std::vector<std::vector<std::string>> seen;
    scripted_server server;

    fake_sentinel(std::uint16_t master_port, bool require_auth)
        : server([this, master_port, require_auth](int fd) {
              bool authed = false;
              fake_redis([&](const std::vector<std::string>& cmd) -> std::string {
                  {
                      std::lock_guard lk(mutex);
                      seen.push_back(cmd);
                  }
                  const auto name = upper(cmd.at(0));
                  if (name == "AUTH") {
                      authed = true;
                      return "+OK\r\n";
                  }
                  if (require_auth && !authed) return "-NOAUTH Authentication required.\r\n";
                  if (name == "PING") return "+PONG\r\n";
                  if (name == "SENTINEL" && master_port == 0) return "*-1\r\n";
                  if (name == "SENTINEL") return "*2\r\n" + bulk("127.0.0.1") + bulk(std::to_string(master_port));
                  return "-ERR unknown command\r\n";
              })(fd);
          }) {}

    std::vector<std::vector<std::string>> commands() {
        std::lock_guard lk(mutex);
        return seen;
    }
    // Whether any argument of any command sent contains `secret`.
    bool saw(const std::string& secret) {
        for (const auto& cmd : commands())
            for (const auto& a : cmd)
                if (a.find(secret) != std::string::npos) return true;
        return false;
    }
    std::vector<std::vector<std::string>> auths() {
        std::vector<std::vector<std::string>> out;
        for (auto& cmd : commands())
            if (upper(cmd.at(0)) == "AUTH") out.push_back(cmd);
        return out;
    }
};

// A fake data node that records every command it is sent: AUTH, SELECT and
// ASKING are answered OK, PING PONG, ROLE "master" (so that a client that
// reaches it would take it for the master), scripts (EVAL, EVALSHA) with
// `script_reply`, and what `extra` answers ("" = not its command) first;
// anything else is an error.
struct recording_node {
    using answer_fn = std::function<std::string(const std::vector<std::string>&)>;
    std::mutex mutex;
    std::vector<std::vector<std::string>> seen;
    std::string script_reply;
    answer_fn extra;
    scripted_server server;

    explicit recording_node(std::string script = "-ERR not a node of yours\r\n", answer_fn more = nullptr)
        : script_reply(std::move(script)),
          extra(std::move(more)),
          server(fake_redis([this](const std::vector<std::string>& cmd) {
              {
                  std::lock_guard lk(mutex);
                  seen.push_back(cmd);
              }
              if (extra) {
                  if (auto special = extra(cmd); !special.empty()) return special;
              }
              const auto name = upper(cmd.at(0));
              if (name == "AUTH" || name == "SELECT" || name == "ASKING") return std::string("+OK\r\n");
              if (name == "PING") return std::string("+PONG\r\n");
              if (name == "ROLE") return std::string("*3\r\n$6\r\nmaster\r\n:0\r\n*0\r\n");
              if (name == "EVAL" || name == "EVALSHA") return script_reply;
              return std::string("-ERR unknown command\r\n");
          })) {}

    std::string address() const { return server.address(); }
    std::uint16_t port() const { return static_cast<std::uint16_t>(server.port()); }
    bool saw(const std::string& text) {
        std::lock_guard lk(mutex);
        for (const auto& cmd : seen)
            for (const auto& a : cmd)
                if (a.find(text) != std::string::npos) return true;
        return false;
    }
};

// Redis Cluster's hash slot of a key (CRC16/XMODEM of its hash tag, mod 16384).
int slot_of(std::string_view key) {
    if (auto open = key.find('{'); open != std::string_view::npos)
        if (auto close = key.find('}', open + 1); close != std::string_view::npos && close > open + 1)
            key = key.substr(open + 1, close - open - 1);
    unsigned crc = 0;
    for (unsigned char byte : key) {
        crc ^= byte << 8;
        for (int bit = 0; bit < 8; ++bit)
            crc = (crc & 0x8000) != 0 ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff;
    }
    return static_cast<int>(crc & 16383);
}

// A fake Redis Cluster node (the seed of a URL): CLUSTER SLOTS says every slot
// is served by `slots_owner` (itself when 0), CLUSTER NODES lists itself, the
// owner and `also_listed` (nodes that serve no slot yet, as an importing node
// during a migration); scripts are answered with `script_reply` (a MOVED or an
// ASK elsewhere; "{slot}" in it becomes the slot of the script's first key). With `slots_once`, CLUSTER SLOTS fails after its first
// answer (the map a client learned from a MOVED then stays).
struct fake_cluster_node {
    std::atomic<int> slots_asked{0};
    recording_node node;

    explicit fake_cluster_node(std::string script_reply, std::vector<std::uint16_t> also_listed = {},
                               std::uint16_t slots_owner = 0, bool slots_once = false)
        : node(std::move(script_reply), [this, also_listed, slots_owner,
                                         slots_once](const std::vector<std::string>& cmd) {
              if ((upper(cmd.at(0)) == "EVALSHA" || upper(cmd.at(0)) == "EVAL") && cmd.size() > 3) {
                  auto reply = node.script_reply;
                  if (auto at = reply.find("{slot}"); at != std::string::npos)
                      reply.replace(at, 6, std::to_string(slot_of(cmd[3])));
                  return reply;
              }
              if (upper(cmd.at(0)) != "CLUSTER" || cmd.size() < 2) return std::string();
              const auto self = node.port();
              const auto owner = slots_owner != 0 ? slots_owner : self;
              const auto id = [](std::uint16_t port) { return std::string(34, 'a') + std::to_string(100000 + port); };
              if (upper(cmd[1]) == "SLOTS" && slots_once && ++slots_asked > 1) return std::string("-ERR busy\r\n");
              if (upper(cmd[1]) == "SLOTS")
                  return "*1\r\n*3\r\n:0\r\n:16383\r\n*3\r\n" + bulk("127.0.0.1") + ":" + std::to_string(owner) +
                         "\r\n" + bulk(id(owner));
              if (upper(cmd[1]) == "NODES") {
                  std::string text = id(self) + " 127.0.0.1:" + std::to_string(self) + "@" +
                                     std::to_string(self + 10000) + " myself,master - 0 0 1 connected" +
                                     (owner == self ? " 0-16383" : "") + "\n";
                  std::vector<std::uint16_t> others = also_listed;
                  if (owner != self) others.push_back(owner);
                  for (auto port : others)
                      text += id(port) + " 127.0.0.1:" + std::to_string(port) + "@" + std::to_string(port + 10000) +
                              " master - 0 0 2 connected" + (port == owner ? " 0-16383" : "") + "\n";
                  return bulk(text);
              }
              return std::string("-ERR unknown subcommand\r\n");
          }) {}

    std::string address() const { return node.address(); }
};

// A fake single Redis whose every script is answered `script_reply`, and
// which confirms SUBSCRIBE (so that a waiter waits on it): counts the scripts.
struct scripted_redis {
    std::atomic<long> scripts{0};
    std::string script_reply;
    scripted_server server;

    explicit scripted_redis(std::string reply)
        : script_reply(std::move(reply)), server(fake_redis([this](const std::vector<std::string>& cmd) -> std::string {
              const auto name = upper(cmd.at(0));
              if (name == "PING") return "+PONG\r\n";
              if (name == "AUTH" || name == "SELECT") return "+OK\r\n";
              if (name == "EVAL" || name == "EVALSHA") {
                  ++scripts;
                  return script_reply;
              }
              if (name == "SUBSCRIBE" || name == "UNSUBSCRIBE") {
                  std::string out;
                  for (std::size_t i = 1; i < cmd.size(); ++i)
                      out +=
                          "*3\r\n" + bulk(name == "SUBSCRIBE" ? "subscribe" : "unsubscribe") + bulk(cmd[i]) + ":1\r\n";
                  return out;
              }
              return "-ERR unknown command\r\n";
          })) {}

    std::string address() const { return server.address(); }
};

// Three redis-server children of one configuration: redlock:// wants three
// independent masters.
struct trio {
    redis_server a, b, c;
    explicit trio(const std::vector<std::string>& config = {}) : a(config), b(config), c(config) {}
    std::string hosts() const { return a.address() + "," + b.address() + "," + c.address(); }
};

// The error message (what(), and the server's text it carries) of connecting and
// taking one lock at `url`; "" when it worked.
std::string failure_of(const std::string& url) {
    try {
        auto p = distlock::connect(url);
        auto m = p.mutex(unique_name("probe"));
        if (!m.try_lock()) return "not acquired";
        m.unlock();
    } catch (const distlock::error& e) {
        return std::string(e.what()) + " | " + e.native_message();
    }
    return "";
}

// Whether each socket of this process connected to 127.0.0.1:`port` is close-on-exec.
std::vector<bool> cloexec_of_sockets_to(std::uint16_t port) {
    std::vector<bool> out;
    for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
        const int fd = std::atoi(entry.path().filename().c_str());
        struct stat st {};
        if (::fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
        sockaddr_in peer{};
        socklen_t len = sizeof peer;
        if (::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &len) != 0 || peer.sin_family != AF_INET) continue;
        sockaddr_in self{};
        len = sizeof self;
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&self), &len);
        if (ntohs(peer.sin_port) != port || ntohs(self.sin_port) == port) continue;  // not a client of `port`
        out.push_back((::fcntl(fd, F_GETFD) & FD_CLOEXEC) != 0);
    }
    return out;
}

// A relay to a real server whose replies, once `trickle` is set, go out one
// byte per `gap`: a server that keeps every read of the client busy and never
// finishes a reply within its timeout.
struct trickling_relay {
    std::atomic<bool> trickle{false};
    std::chrono::milliseconds gap;
    scripted_server server;

    trickling_relay(std::uint16_t target, std::chrono::milliseconds g)
        : gap(g), server([this, target](int client) {
              int up = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
              sockaddr_in a{};
              a.sin_family = AF_INET;
              a.sin_port = htons(target);
              a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
              if (::connect(up, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
                  ::close(up);
                  return;
              }
              char buf[65536];
              for (;;) {
                  pollfd fds[2] = {{client, POLLIN, 0}, {up, POLLIN, 0}};
                  if (::poll(fds, 2, -1) < 0) break;
                  if (fds[0].revents != 0) {
                      const ssize_t n = ::recv(client, buf, sizeof buf, 0);
                      if (n <= 0 || !scripted_server::send_all(up, std::string_view(buf, static_cast<std::size_t>(n))))
                          break;
                  }
                  if (fds[1].revents != 0) {
                      const ssize_t n = ::recv(up, buf, sizeof buf, 0);
                      if (n <= 0) break;
                      const std::string_view data(buf, static_cast<std::size_t>(n));
                      if (!(trickle ? scripted_server::trickle(client, data, gap)
                                    : scripted_server::send_all(client, data)))
                          break;
                  }
              }
              ::close(up);
              ::shutdown(client, SHUT_RDWR);
          }) {}
};

}  // namespace

// ---- credentials only where they belong ---------------------------------------------------

TEST_CASE("sentinels get the sentinel credentials only, never the data nodes' password", "[redis-sentinel][auth]") {
    const std::string data_pw = "data-pw-5f0c2e", sentinel_pw = "sentinel-pw-91ab";
    redis_server data({"requirepass " + data_pw});
    const std::string master = "/mymaster?lease=5s";

    SECTION("no sentinel credentials: no AUTH at the sentinel, the data nodes still get theirs") {
        fake_sentinel s(data.port(), false);
        auto p = distlock::connect("redis-sentinel://:" + data_pw + "@" + s.server.address() + master);
        auto m = p.mutex(unique_name("sentinel-auth"));
        REQUIRE(m.try_lock());
        m.unlock();
        CHECK(s.auths().empty());
        CHECK_FALSE(s.saw(data_pw));
        CHECK_FALSE(s.commands().empty());  // it was asked
    }
    SECTION("sentinel_password= (and sentinel_user=) are what the sentinel gets") {
        fake_sentinel s(data.port(), true);
        auto p = distlock::connect("redis-sentinel://:" + data_pw + "@" + s.server.address() + master +
                                   "&sentinel_password=" + sentinel_pw);
        auto m = p.mutex(unique_name("sentinel-auth"));
        REQUIRE(m.try_lock());
        m.unlock();
        REQUIRE_FALSE(s.auths().empty());
        for (const auto& a : s.auths()) CHECK(a == std::vector<std::string>{"AUTH", sentinel_pw});
        CHECK_FALSE(s.saw(data_pw));

        fake_sentinel t(data.port(), true);
        (void)distlock::connect("redis-sentinel://" + data_pw + "@" + t.server.address() + master +
                                "&sentinel_user=watcher&sentinel_password=" + sentinel_pw);
        REQUIRE_FALSE(t.auths().empty());
        for (const auto& a : t.auths()) CHECK(a == std::vector<std::string>{"AUTH", "watcher", sentinel_pw});
        CHECK_FALSE(t.saw(data_pw));
    }
    SECTION("sentinel_credentials=data sends the URL's password to the sentinels too, when asked") {
        fake_sentinel s(data.port(), true);
        (void)distlock::connect("redis-sentinel://:" + data_pw + "@" + s.server.address() + master +
                                "&sentinel_credentials=data");
        REQUIRE_FALSE(s.auths().empty());
        CHECK(s.auths().front() == std::vector<std::string>{"AUTH", data_pw});
    }
    SECTION("a sentinel that wants a password it was not given: access denied, saying where it goes") {
        fake_sentinel s(data.port(), true);
        const auto url = "redis-sentinel://:" + data_pw + "@" + s.server.address() + master;
        CHECK_THROWS_AS(distlock::connect(url), distlock::access_denied_error);
        const auto shown = failure_of(url);
        CHECK(shown.find("sentinel_password") != std::string::npos);
        CHECK(shown.find(data_pw) == std::string::npos);
        CHECK_FALSE(s.saw(data_pw));
    }
    SECTION("contradictory or unknown sentinel parameters are bad arguments") {
        fake_sentinel s(data.port(), false);
        const auto base = "redis-sentinel://:" + data_pw + "@" + s.server.address() + master;
        CHECK_THROWS_AS(distlock::connect(base + "&sentinel_user=watcher"), distlock::invalid_argument_error);
        CHECK_THROWS_AS(distlock::connect(base + "&sentinel_credentials=data&sentinel_password=x"),
                        distlock::invalid_argument_error);
        CHECK_THROWS_AS(distlock::connect(base + "&sentinel_credentials=both"), distlock::invalid_argument_error);
        CHECK_FALSE(s.saw(data_pw));
    }
}

TEST_CASE("the data password goes only to a master a majority of the sentinels names (and master_hosts= allows)",
          "[redis-sentinel][auth][vouch]") {
    const std::string data_pw = "data-pw-77d1e0";
    redis_server data({"requirepass " + data_pw});
    recording_node impostor;  // the attacker's "master"
    const auto dead = [] { return "127.0.0.1:" + std::to_string(distlock::test::free_port()); };
    auto url = [&](const std::vector<std::string>& sentinels, const std::string& extra = "") {
        std::string hosts;
        for (const auto& h : sentinels) hosts += (hosts.empty() ? "" : ",") + h;
        return "redis-sentinel://:" + data_pw + "@" + hosts + "/mymaster?lease=5s&timeout=500ms&connect_timeout=300ms" +
               extra;
    };
    auto works = [](const std::string& u) {
        auto p = distlock::connect(u);
        auto m = p.mutex(unique_name("vouch"));
        const bool got = m.try_lock();
        if (got) m.unlock();
        return got;
    };

    SECTION("one hostile sentinel of three, asked first: the others' master is used, the impostor never reached") {
        fake_sentinel hostile(impostor.port(), false), a(data.port(), false), b(data.port(), false);
        CHECK(works(url({hostile.server.address(), a.server.address(), b.server.address()})));
        CHECK(impostor.server.accepted() == 0);
        CHECK_FALSE(impostor.saw(data_pw));
    }
    SECTION("a hostile sentinel without a majority beside it: unavailable, nothing sent to the impostor") {
        fake_sentinel hostile(impostor.port(), false), none(0, false), honest(data.port(), false);
        for (const auto& u : {url({hostile.server.address(), dead(), dead()}),
                              url({hostile.server.address(), none.server.address(), dead()}),
                              url({hostile.server.address(), honest.server.address()})}) {
            INFO("url: " << distlock::spi::redact_url(u));
            try {
                (void)distlock::connect(u);
                FAIL("connected");
            } catch (const distlock::unavailable_error& e) {
                CHECK(std::string(e.what()).find("majority") != std::string::npos);
                CHECK(std::string(e.what()).find(data_pw) == std::string::npos);
            }
        }
        CHECK(impostor.server.accepted() == 0);
        CHECK_FALSE(impostor.saw(data_pw));
    }
    SECTION("master_hosts=: a master outside it is refused even when a majority names it") {
        fake_sentinel h1(impostor.port(), false), h2(impostor.port(), false), a(data.port(), false),
            b(data.port(), false);
        const auto hostile_majority = url({h1.server.address(), h2.server.address(), a.server.address()});
        CHECK_THROWS_AS(distlock::connect(hostile_majority + "&master_hosts=" + data.address()),
                        distlock::access_denied_error);
        CHECK_THROWS_AS(distlock::connect(hostile_majority + "&master_hosts=10.0.0.0/8,redis-a.internal"),
                        distlock::access_denied_error);
        CHECK(impostor.server.accepted() == 0);
        // Inside it, the majority's master works: by address, by CIDR, by name.
        CHECK(works(url({a.server.address(), b.server.address()}, "&master_hosts=" + data.address())));
        CHECK(works(
            url({h1.server.address(), a.server.address(), b.server.address()}, "&master_hosts=10.1.2.3,127.0.0.0/8")));
        CHECK(works(url({a.server.address(), b.server.address(), h1.server.address()}, "&master_hosts=::1,127.0.0.1")));
        CHECK(impostor.server.accepted() == 0);
    }
    SECTION("bad master_hosts= values are bad arguments") {
        fake_sentinel a(data.port(), false);
        for (const std::string bad : {"", "10.0.0.0/33", "10.0.0.0/", "bad host", "[::1", "1.2.3.4:0", "1.2.3.4:99999",
                                      "a,,b", "::1/129", "-x.example"}) {
            INFO("master_hosts=" << bad);
            CHECK_THROWS_AS(distlock::connect(url({a.server.address()}, "&master_hosts=" + bad)),
                            distlock::invalid_argument_error);
        }
        // A sentinel listed twice would vote twice.
        CHECK_THROWS_AS(distlock::connect(url({a.server.address(), a.server.address()})),
                        distlock::invalid_argument_error);
        // redis:// has no other node to bound.
        CHECK_THROWS_AS(distlock::connect("redis://:" + data_pw + "@" + data.address() + "?master_hosts=127.0.0.1"),
                        distlock::invalid_argument_error);
    }
}

TEST_CASE("the data password goes only to the cluster's own nodes: MOVED and ASK elsewhere are refused",
          "[redis-cluster][auth][vouch]") {
    const std::string pw = "cluster-pw-3c9a1b";
    const std::string params = "?lease=5s&timeout=500ms&connect_timeout=300ms";
    auto url = [&](const std::string& seed, const std::string& extra = "") {
        return "redis-cluster://:" + pw + "@" + seed + params + extra;
    };
    recording_node outsider;
    for (const std::string kind : {"MOVED", "ASK"}) {
        DYNAMIC_SECTION(kind << " to a node the cluster does not list: access denied, the node never reached") {
            fake_cluster_node seed("-" + kind + " {slot} " + outsider.address() + "\r\n", {}, 0, true);
            auto p = distlock::connect(url(seed.address()));
            auto m = p.mutex(unique_name("redirect"));
            std::optional<distlock::errc> code;
            std::string what;
            try {
                (void)m.try_lock();
            } catch (const distlock::error& e) {
                code = e.code_value();
                what = e.what();
            }
            CHECK(code == distlock::errc::access_denied);
            CHECK(what.find(outsider.address()) != std::string::npos);
            CHECK(what.find(pw) == std::string::npos);
            CHECK(outsider.server.accepted() == 0);
            CHECK_FALSE(outsider.saw(pw));
        }
    }
    SECTION("ASK to a node CLUSTER NODES lists (an importing node that serves no slot yet) is followed") {
        recording_node importing("*2\r\n:1\r\n:7\r\n");
        fake_cluster_node seed("-ASK {slot} " + importing.address() + "\r\n", {importing.port()});
        auto p = distlock::connect(url(seed.address()));
        auto m = p.mutex(unique_name("importing"));
        CHECK(m.try_lock());
        CHECK(importing.saw("ASKING"));
    }
    SECTION("master_hosts=: a node the cluster lists but the list does not is refused") {
        recording_node other;  // serves every slot, says the seed
        fake_cluster_node seed("-ERR not me\r\n", {}, other.port());
        CHECK_THROWS_AS(distlock::connect(url(seed.address(), "&master_hosts=" + seed.address())),
                        distlock::access_denied_error);
        CHECK(other.server.accepted() == 0);
        // The seeds themselves are the URL's: always allowed.
        fake_cluster_node alone("*2\r\n:1\r\n:9\r\n");
        auto p = distlock::connect(url(alone.address(), "&master_hosts=10.0.0.0/8"));
        CHECK(p.mutex(unique_name("seed")).try_lock());
    }
}

// ---- names stay in their namespace -------------------------------------------------------

TEST_CASE("strategy=reentrant refuses a name that is another lock's auxiliary key", "[redis][reentrant][names]") {
    redis_server server;
    auto p = distlock::connect("redis://" + server.address() + "?strategy=reentrant&lease=5s");
    const std::string victim = unique_name("victim");
    for (const std::string& name : {"distlock_holder:{" + victim + "}", "redisson_lock_token:{" + victim + "}",
                                    "{" + victim + "}", "{" + victim + "}:timeout", "{" + victim + "}:rwlock_fence",
                                    "{" + victim + "}:semaphore_fence", "{" + victim + "}:rwlock_write_waiters",
                                    "{" + victim + "}:abc:1:rwlock_timeout:1", "distlock:{" + victim + "}"}) {
        INFO("name: " << name);
        CHECK_THROWS_AS(p.mutex(name).try_lock(), distlock::invalid_argument_error);
        CHECK_THROWS_AS(p.shared_mutex(name).try_lock(), distlock::invalid_argument_error);
        CHECK_THROWS_AS(p.semaphore(name, 2).try_acquire(), distlock::invalid_argument_error);
        CHECK_THROWS_AS(p.inspect(name), distlock::invalid_argument_error);
        CHECK_THROWS_AS(distlock::testing::break_lock(p, name), distlock::invalid_argument_error);
    }
    // Hash tags and braces elsewhere stay usable (Redisson's own names).
    for (const std::string& name : {"{" + victim + "}:job", victim + "}x", "x{" + victim, "{a}{" + victim + "}"}) {
        INFO("name: " << name);
        auto m = p.mutex(name);
        CHECK(m.try_lock());
        m.unlock();
    }
}

TEST_CASE("strategy=plain: no name reaches a key of another name", "[redis][names]") {
    // Every key of name N is <prefix>{N} and a suffix without '}': a hostile
    // name that tries to spell another name's keys never touches them.
    redis_server server;
    raw_client raw(server.port());
    auto p = distlock::connect("redis://" + server.address() + "?lease=30s");
    const std::string v = "victim";
    auto m = p.mutex(v);
    auto rw = p.shared_mutex(v);
    auto sem = p.semaphore(v, 2);
    REQUIRE(m.try_lock());
    REQUIRE(rw.try_lock_shared());
    REQUIRE(sem.try_acquire());
    auto snapshot = [&] {
        std::map<std::string, std::string> out;
        auto keys = raw.cmd({"KEYS", "*"});
        for (std::size_t i = 0; i < keys->elements; ++i) {
            const std::string k(keys->element[i]->str, keys->element[i]->len);
            out[k] = raw.string({"DUMP", k});
        }
        return out;
    };
    const auto before = snapshot();
    REQUIRE(before.size() >= 6);
    for (const std::string& name :
         {v + "}:fence", v + "}:holder", v + "}:queue", v + "}:waiters", v + "}", v + "}:rwlock", v + "}:semaphore",
          v + "}:rwlock:timeout", "{" + v, v + "}:released"}) {
        INFO("name: " << name);
        auto hm = p.mutex(name);
        CHECK(hm.try_lock());
        hm.unlock();
        auto hrw = p.shared_mutex(name);
        CHECK(hrw.try_lock());
        hrw.unlock();
        auto hs = p.semaphore(name, 1);
        CHECK(hs.try_acquire());
        hs.release();
        distlock::testing::break_lock(p, name);
    }
    const auto after = snapshot();
    for (const auto& [key, dump] : before) {
        INFO("key: " << key);
        REQUIRE(after.count(key) == 1);
        CHECK(after.at(key) == dump);
    }
    CHECK(m.held());
}

// ---- bounded against a broken or hostile server -------------------------------------------

TEST_CASE("a server that trickles a reply a byte at a time cannot hold a call past its timeout", "[redis][deadline]") {
    SECTION("connect: the PING's reply") {
        scripted_server trickler([](int fd) {
            while (auto cmd = read_command(fd))
                if (!scripted_server::trickle(fd, "+PONG-PONG-PONG-PONG\r\n", 150ms)) break;
        });
        const auto t0 = clk::now();
        CHECK_THROWS_AS(distlock::connect("redis://" + trickler.address() + "?timeout=500ms&connect_timeout=500ms"),
                        distlock::unavailable_error);
        CHECK(ms(clk::now() - t0) < 1500);  // the whole reply would take 3.3 s
    }
    SECTION("acquire and release through a relay that starts trickling") {
        redis_server server;
        trickling_relay relay(server.port(), 200ms);
        std::mutex errors_mutex;  // before the provider: its callback thread reports into it
        std::vector<distlock::errc> errors;
        distlock::lock_options options;
        options.on_error = [&](const distlock::lock_event&, const distlock::error& e) {
            std::lock_guard lk(errors_mutex);
            errors.push_back(e.code_value());
        };
        auto p = distlock::connect("redis://" + relay.server.address() + "?timeout=500ms&lease=30s");
        auto held = p.mutex(unique_name("trickle"), options);
        REQUIRE(held.try_lock());
        relay.trickle = true;
        // The release script's reply (":1\r\n") would take 0.8 s; the call ends at
        // 0.5 s, in doubt (the script may have run).
        auto t0 = clk::now();
        held.unlock();
        CHECK(ms(clk::now() - t0) < 700);
        CHECK(distlock::test::eventually(
            [&] {
                std::lock_guard lk(errors_mutex);
                return !errors.empty();
            },
            2000ms));
        {
            std::lock_guard lk(errors_mutex);
            REQUIRE_FALSE(errors.empty());
            CHECK(errors.front() == distlock::errc::in_doubt);
        }
        // The acquire script's reply (about 30 bytes) would take 6 s: unavailable
        // after the timeout (and the undo attempt's, bounded the same way).
        auto m = p.mutex(unique_name("trickle"));
        t0 = clk::now();
        CHECK_THROWS_AS((void)m.try_lock(), distlock::unavailable_error);
        CHECK(ms(clk::now() - t0) < 2000);
    }
}

TEST_CASE("replies are capped before they are allocated: a huge array, bulk string or endless line fails typed",
          "[redis][caps]") {
    std::atomic<std::size_t> sent{0};
    auto answering_ping_with = [&](std::string head, bool stream) {
        return [&sent, head, stream](int fd) {
            if (!read_command(fd) || !scripted_server::send_all(fd, head)) return;
            sent += head.size();
            const std::string chunk(1 << 20, 'a');
            while (stream && sent < (std::size_t{600} << 20) && scripted_server::send_all(fd, chunk))
                sent += chunk.size();
        };
    };
    struct hostile {
        const char* what;
        std::string head;
        bool stream;
        const char* says;
    };
    for (const auto& h : {hostile{"a multi-bulk of 2^31 - 1 elements", "*2147483647\r\n", false, "2147483647 elements"},
                          hostile{"arrays nested to allocate 8 MB per 11 bytes", "*1048576\r\n*1048576\r\n*1048576\r\n",
                                  false, "larger than"},
                          hostile{"a 512 MB bulk string", "$536870912\r\n", true, "536870912 bytes"},
                          hostile{"a status line that never ends", "+", true, "does not end"},
                          hostile{"an array header that never ends", "*1", true, "does not end"}}) {
        DYNAMIC_SECTION(h.what) {
            sent = 0;
            scripted_server server(answering_ping_with(h.head, h.stream));
            const auto t0 = clk::now();
            std::string message;
            try {
                (void)distlock::connect("redis://" + server.address() + "?timeout=5s");
            } catch (const distlock::unavailable_error& e) {
                message = e.what();
            }
            INFO("message: " << message);
            CHECK(message.find(h.says) != std::string::npos);
            CHECK(ms(clk::now() - t0) < 3000);
            CHECK(sent.load() < (std::size_t{100} << 20));  // read at most the cap (64 MiB) and socket buffers
        }
    }
}

TEST_CASE("a pub/sub reply past the caps drops that connection only: the waiter falls back, nothing else breaks",
          "[redis][caps]") {
    // A server where the lock is always held (the acquire script's reply: not
    // acquired, 5 s left) and whose reply to SUBSCRIBE announces 2^31 - 1 elements.
    std::atomic<int> subscribes{0};
    scripted_server server(fake_redis([&](const std::vector<std::string>& cmd) -> std::string {
        const auto name = upper(cmd.at(0));
        if (name == "PING") return "+PONG\r\n";
        if (name == "EVALSHA" || name == "EVAL") return "*2\r\n:0\r\n:5000\r\n";
        if (name == "SUBSCRIBE") {
            ++subscribes;
            return "*2147483647\r\n";
        }
        return "-ERR unknown command\r\n";
    }));
    auto p = distlock::connect("redis://" + server.address() + "?timeout=500ms");
    auto m = p.mutex(unique_name("caps-sub"));
    const auto t0 = clk::now();
    CHECK_FALSE(m.try_lock_for(1500ms));
    CHECK(ms(clk::now() - t0) < 3000);
    CHECK(subscribes.load() >= 1);
    CHECK_FALSE(m.try_lock());  // the command connection still works
}

TEST_CASE("a server that says 'the key just went' for ever does not make a waiter spin", "[redis][spin]") {
    // Each try's reply: not acquired, PTTL -2 (the key went between the SET and
    // the PTTL). A real server says so at most once in a row.
    scripted_redis server("*2\r\n:0\r\n:-2\r\n");
    // The mutex loops of both strategies (plain queues, reentrant does not)
    // and the read-write lock's and semaphore's loop.
    for (const auto& [params, what] : std::vector<std::pair<std::string, std::string>>{
             {"", "mutex"}, {"strategy=reentrant&", "mutex"}, {"", "shared_mutex"}, {"", "semaphore"}}) {
        auto p = distlock::connect("redis://" + server.address() + "?" + params + "lease=5s&timeout=500ms");
        {
            INFO(params << what);
            server.scripts = 0;
            const auto name = unique_name("spin");
            const auto t0 = clk::now();
            bool got = true;
            if (what == "mutex") got = p.mutex(name).try_lock_for(1s);
            else if (what == "shared_mutex") got = p.shared_mutex(name).try_lock_for(1s);
            else got = p.semaphore(name, 1).try_acquire_for(1s);
            CHECK_FALSE(got);
            CHECK(ms(clk::now() - t0) >= 900);
            CHECK(ms(clk::now() - t0) < 2500);
            CHECK(server.scripts.load() < 60);  // thousands before: one try per round trip
        }
    }
}

TEST_CASE("durations from a server or a publisher never overflow the clock: PTTL, pub/sub, inspect",
          "[redis][redlock][overflow]") {
    // Under -fsanitize=undefined an overflow in chrono arithmetic aborts the
    // program (build-redis-asan); elsewhere it made nonsense deadlines.
    SECTION("an acquire reply with a PTTL of 2^63-1 ms") {
        scripted_redis server("*2\r\n:0\r\n:9223372036854775807\r\n");
        for (const std::string params : {"", "strategy=reentrant&"}) {
            auto p = distlock::connect("redis://" + server.address() + "?" + params + "lease=5s&timeout=500ms");
            const auto t0 = clk::now();
            CHECK_FALSE(p.mutex(unique_name("pttl")).try_lock_for(300ms));
            CHECK_FALSE(p.shared_mutex(unique_name("pttl")).try_lock_for(300ms));
            CHECK(ms(clk::now() - t0) < 2000);
        }
    }
    SECTION("a PUBLISH on a lock's channel with a lease of 2^63-1 or -2^63 ms") {
        redis_server server;
        raw_client raw(server.port());
        auto p = distlock::connect("redis://" + server.address() + "?lease=5s");
        const auto name = unique_name("publish");
        auto holder = p.mutex(name);
        REQUIRE(holder.try_lock());
        auto q = distlock::connect("redis://" + server.address() + "?lease=5s");
        std::atomic<bool> got{true};
        std::atomic<long long> took{0};
        std::thread waiter([&] {
            const auto t0 = clk::now();
            got = q.mutex(name).try_lock_for(1500ms);
            took = ms(clk::now() - t0);
        });
        const std::string channel = "distlock:{" + name + "}:released";
        REQUIRE(distlock::test::eventually(
            [&] {
                return raw.cmd({"PUBSUB", "NUMSUB", channel})->element[1]->integer > 0;
            },
            2000ms));
        for (const std::string msg : {"t x 9223372036854775807", "h x 9223372036854775807", "t x -9223372036854775808",
                                      "h x 99999999999999999999"}) {
            raw.cmd({"PUBLISH", channel, msg});
            std::this_thread::sleep_for(50ms);
        }
        waiter.join();
        CHECK_FALSE(got.load());
        CHECK(took.load() >= 1400);
        CHECK(took.load() < 3000);
        holder.unlock();
    }
    SECTION("inspect: a PTTL of 2^63-1 ms is shown as at most 10^12 ms (redis and redlock)") {
        scripted_redis plain("*5\r\n:1\r\n:9223372036854775807\r\n:0\r\n$1\r\nx\r\n$1\r\n7\r\n");
        auto p = distlock::connect("redis://" + plain.address() + "?timeout=500ms");
        auto info = p.inspect(unique_name("inspect"));
        REQUIRE(info.remaining);
        CHECK(info.remaining->count() <= 1'000'000'000'000LL);
        (void)(clk::now() + *info.remaining);  // fits the clock

        std::vector<std::unique_ptr<scripted_redis>> nodes;
        std::string hosts;
        for (int i = 0; i < 3; ++i) {
            nodes.push_back(std::make_unique<scripted_redis>("*4\r\n:1\r\n:9223372036854775807\r\n" +
                                                             bulk(std::string(40, 'f')) + bulk("x")));
            hosts += (hosts.empty() ? "" : ",") + nodes.back()->address();
        }
        auto r = distlock::connect("redlock://" + hosts + "?timeout=500ms");
        auto rinfo = r.inspect(unique_name("inspect"));
        REQUIRE(rinfo.remaining);
        CHECK(rinfo.remaining->count() <= 1'000'000'000'000LL);
    }
}

// ---- no secret in any message --------------------------------------------------------------

TEST_CASE("a password without ':' (redis://PASSWORD@host) authenticates on every scheme and never shows",
          "[redis][redlock][auth][secrets]") {
    const std::string pw = "lettuce-style-pw-93d1";
    trio servers({"requirepass " + pw});
    const auto& server = servers.a;
    CHECK(failure_of("redis://" + pw + "@" + server.address()) == "");
    CHECK(failure_of("redis://" + pw + "@" + server.address() + "?strategy=reentrant") == "");
    CHECK(failure_of("redlock://" + pw + "@" + servers.hosts()) == "");
    // A wrong one is refused, and shown nowhere.
    const auto wrong = failure_of("redis://wrong-pw-77e0aa@" + server.address());
    CHECK(wrong.find("access denied") != std::string::npos);
    CHECK(wrong.find("wrong-pw-77e0aa") == std::string::npos);
    const auto wrong_redlock = failure_of("redlock://wrong-pw-77e0aa@" + servers.hosts());
    CHECK(wrong_redlock != "");
    CHECK(wrong_redlock.find("wrong-pw-77e0aa") == std::string::npos);
    // The shared deployments, written the same way.
    const auto cluster = distlock::test::env("DISTLOCK_TEST_REDIS_CLUSTER_URL");
    if (!cluster.empty()) {
        const auto u = distlock::spi::url::parse(cluster);
        CHECK(failure_of("redis-cluster://" + u.password() + cluster.substr(cluster.find('@'))) == "");
    }
    const auto sentinel = distlock::test::env("DISTLOCK_TEST_REDIS_SENTINEL_URL");
    if (!sentinel.empty()) {
        const auto u = distlock::spi::url::parse(sentinel);
        CHECK(failure_of("redis-sentinel://" + u.password() + sentinel.substr(sentinel.find('@'))) == "");
    }
}

TEST_CASE("an AUTH refusal or any error reply that repeats the password never puts it in a message",
          "[redis][auth][secrets]") {
    const std::string pw = "echoed-secret-4b7f";
    SECTION("a real redis-server with no password set") {
        trio servers;
        const auto& server = servers.a;
        for (const auto& url :
             {"redis://:" + pw + "@" + server.address(), "redis://" + pw + "@" + server.address(),
              "redis://alice:" + pw + "@" + server.address(), "redlock://:" + pw + "@" + servers.hosts()}) {
            INFO("url: " << distlock::spi::redact_url(url));
            const auto shown = failure_of(url);
            CHECK(shown != "");
            CHECK(shown.find(pw) == std::string::npos);
        }
        CHECK_THROWS_AS(distlock::connect("redis://:" + pw + "@" + server.address()), distlock::access_denied_error);
    }
    SECTION("a server that repeats the password in its AUTH error and in a later error") {
        scripted_server echo(fake_redis([&](const std::vector<std::string>& cmd) -> std::string {
            if (upper(cmd.at(0)) == "AUTH") return "-ERR invalid password '" + cmd.back() + "'\r\n";
            return "-ERR no such thing\r\n";
        }));
        CHECK_THROWS_AS(distlock::connect("redis://:" + pw + "@" + echo.address()), distlock::access_denied_error);
        CHECK(failure_of("redis://:" + pw + "@" + echo.address()).find(pw) == std::string::npos);
        CHECK(failure_of("redis://" + pw + "@" + echo.address()).find(pw) == std::string::npos);
        scripted_server later(fake_redis([&](const std::vector<std::string>& cmd) -> std::string {
            if (upper(cmd.at(0)) == "AUTH") return "+OK\r\n";
            return "-ERR the password " + pw + " is not allowed to " + cmd.at(0) + "\r\n";
        }));
        const auto shown = failure_of("redis://:" + pw + "@" + later.address());
        CHECK(shown != "");
        CHECK(shown.find(pw) == std::string::npos);
    }
}

// ---- no SIGPIPE, nothing inherited across exec ---------------------------------------------

TEST_CASE("a write to a server that closed never raises SIGPIPE: a typed error instead", "[redis][sigpipe]") {
    // In a program of its own: SIGPIPE at its default disposition (death).
    const auto helper = distlock::test::exe_dir() + "/distlock-redis-sigpipe-helper";
    const auto r = distlock::test::run_command(helper);
    INFO("helper printed: " << r.out);
    CHECK(r.status == 0);
    CHECK(r.out.find("typed error:") != std::string::npos);
}

TEST_CASE("every connection is close-on-exec: commands, pub/sub, redlock, sentinel's data nodes, cluster",
          "[redis][redlock][cloexec]") {
    trio servers;
    const auto& server = servers.a;
    {
        auto a = distlock::connect("redis://" + server.address() + "?lease=5s");
        auto b = distlock::connect("redis://" + server.address() + "?lease=5s");
        const auto name = unique_name("cloexec");
        auto held = a.mutex(name);
        REQUIRE(held.try_lock());
        auto waiter = b.mutex(name);
        CHECK_FALSE(waiter.try_lock_for(300ms));  // subscribes: the pub/sub connection
        const auto flags = cloexec_of_sockets_to(server.port());
        CHECK(flags.size() >= 3);  // a's and b's command connections, b's subscriber
        for (bool f : flags) CHECK(f);
        held.unlock();
    }
    {
        auto r = distlock::connect("redlock://" + servers.hosts() + "?lease=5s");
        auto m = r.mutex(unique_name("cloexec"));
        REQUIRE(m.try_lock());
        for (const auto* node : {&servers.a, &servers.b, &servers.c}) {
            const auto flags = cloexec_of_sockets_to(node->port());
            CHECK_FALSE(flags.empty());
            for (bool f : flags) CHECK(f);
        }
        m.unlock();
    }
    {
        fake_sentinel s(server.port(), false);
        auto p = distlock::connect("redis-sentinel://" + s.server.address() + "/mymaster?lease=5s");
        auto m = p.mutex(unique_name("cloexec"));
        REQUIRE(m.try_lock());
        const auto flags = cloexec_of_sockets_to(server.port());
        CHECK_FALSE(flags.empty());
        for (bool f : flags) CHECK(f);
        m.unlock();
    }
    const auto cluster = distlock::test::env("DISTLOCK_TEST_REDIS_CLUSTER_URL");
    if (!cluster.empty()) {
        auto p = distlock::connect(cluster);
        auto m = p.mutex(unique_name("cloexec"));
        REQUIRE(m.try_lock());
        std::size_t seen = 0;
        const auto u = distlock::spi::url::parse(cluster);
        for (const auto& h : u.hosts())
            for (bool f : cloexec_of_sockets_to(h.port)) {
                ++seen;
                CHECK(f);
            }
        CHECK(seen > 0);
        m.unlock();
    }
}

// ---- the ACL rules of docs/backends/redis.md -----------------------------------------------

namespace {
// The commands distlock sends (outside and inside its scripts), as
// docs/backends/redis.md lists them for a Redis ACL user.
const std::string acl_commands =
    "-@all +ping +evalsha +eval +subscribe +unsubscribe +del +wait +select "
    "+decrby +exists +get +hdel +hexists +hget +hincrby +hkeys +hlen +hmget +hset +incr +incrby +lpop +lrem "
    "+pexpire +pttl +publish +rpush +set +time +type +zadd +zcard +zcount +zrange +zrangebyscore +zrem "
    "+zremrangebyscore +zscore";

// A whole cycle on `url`: mutex with a waiter woken by the release, inspect,
// read-write lock, semaphore, renewals, break_lock.
void full_cycle(const std::string& url, const std::string& name) {
    auto a = distlock::connect(url);
    auto b = distlock::connect(url);
    auto m = a.mutex(name);
    REQUIRE(m.try_lock());
    CHECK(a.inspect(name).held);
    std::atomic<bool> got{false};
    std::thread waiter([&] {
        auto w = b.mutex(name);
        got = w.try_lock_for(5s);
        if (got) w.unlock();
    });
    std::this_thread::sleep_for(1200ms);  // past a renewal (lease 1 s)
    CHECK(m.held());
    m.unlock();
    waiter.join();
    CHECK(got);
    auto rw = a.shared_mutex(name);
    REQUIRE(rw.try_lock_shared());
    rw.unlock_shared();
    REQUIRE(rw.try_lock());
    rw.unlock();
    auto sem = a.semaphore(name, 2);
    REQUIRE(sem.try_acquire());
    sem.release();
    distlock::testing::break_lock(a, name);
}
}  // namespace

TEST_CASE("a Redis ACL user confined by the documented rules runs the whole lock cycle", "[redis][redlock][acl]") {
    // strategy=plain and redlock: keys ~distlock:*, channels of the prefix.
    // strategy=reentrant, names under app:, the documented patterns for them.
    trio servers(
        {"user plain on >plain-pw resetkeys ~distlock:* resetchannels &distlock:* &redisson_rwlock:distlock:* "
         "&redisson_sc:distlock:* " +
             acl_commands,
         "user app on >app-pw resetkeys ~app:* ~{app:* ~redisson_lock_token:{app:* ~distlock_holder:{app:* "
         "resetchannels &redisson_lock__channel:{app:* &redisson_rwlock:{app:* &redisson_sc:{app:* " +
             acl_commands,
         "user narrow on >narrow-pw resetkeys ~distlock:* resetchannels &distlock:* " + acl_commands + " -hset"});
    const auto& server = servers.a;
    const auto at = "@" + server.address();
    full_cycle("redis://plain:plain-pw" + at + "?lease=1s", unique_name("acl"));
    full_cycle("redis://app:app-pw" + at + "?strategy=reentrant&lease=1s", unique_name("app:acl"));
    {
        auto r = distlock::connect("redlock://plain:plain-pw@" + servers.hosts() + "?lease=1s");
        auto m = r.mutex(unique_name("acl"));
        REQUIRE(m.try_lock());
        m.unlock();
    }
    // The rules are what confines: outside its keys the user is refused, and a
    // command the scripts need, taken away, breaks the cycle with access denied.
    raw_client raw(server.port());
    CHECK(std::string(raw.cmd({"AUTH", "plain", "plain-pw"})->str) == "OK");
    auto outside = raw.cmd({"SET", "other:key", "1"});
    REQUIRE(outside->type == REDIS_REPLY_ERROR);
    CHECK(std::string(outside->str).rfind("NOPERM", 0) == 0);
    auto narrow = distlock::connect("redis://narrow:narrow-pw" + at);
    CHECK_THROWS_AS(narrow.mutex(unique_name("acl")).try_lock(), distlock::access_denied_error);
}
