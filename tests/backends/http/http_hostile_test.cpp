// The HTTP layer against what it must not trust (issue 23): names and prefixes
// that a client library or server would normalise, header values that would
// inject headers, replies that never end, servers that trickle, peers that
// close, and the descriptors a child process would inherit. Each fake server
// is a distlock::test::scripted_server (through fake_http_server.hpp).
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>
#include <catch2/catch.hpp>

#include <clocale>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "distlock/error.hpp"
#include "fake_http_server.hpp"
#include "http/http_codec.hpp"
#include "http/http_json.hpp"
#include "http/http_multi.hpp"
#include "http/http_options.hpp"
#include "http/http_pool.hpp"
#include "http/http_transfer.hpp"
#include "support.hpp"

using namespace std::chrono_literals;
namespace http = distlock::backends::http;
using distlock::test::fake_http_server;
using distlock::test::fake_reply;
using distlock::test::fake_request;
using distlock::test::proxy_environment;
using distlock::test::scripted_server;
using clk = std::chrono::steady_clock;

namespace {

http::options opts(const std::string& address, std::chrono::milliseconds timeout = 3s) {
    http::options o;
    o.backend = "test";
    o.endpoints = {"http://" + address};
    o.connect_timeout = 1s;
    o.request_timeout = timeout;
    return o;
}

http::request get(const std::string& target, std::chrono::milliseconds timeout = 0ms) {
    http::request r;
    r.method = "GET";
    r.target = target;
    r.timeout = timeout;
    return r;
}

// Headers of a 200 reply whose body the handler then writes itself.
constexpr std::string_view kOpenEnded = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n";

// Writes `chunk` again and again until `budget` bytes are out or the peer goes.
void flood(int fd, const std::string& chunk, std::size_t budget) {
    for (std::size_t sent = 0; sent < budget; sent += chunk.size())
        if (!scripted_server::send_all(fd, chunk)) return;
}

}  // namespace

TEST_CASE("the names '.' and '..' are encoded whole; other dots are kept", "[http][names]") {
    CHECK(http::encode_name(".") == "%2E");
    CHECK(http::encode_name("..") == "%2E%2E");
    CHECK(http::encode_name("...") == "...");
    CHECK(http::encode_name("job.nightly") == "job.nightly");
    CHECK(http::encode_name("../x") == "..%2Fx");
    CHECK(http::encode_name("%2E%2E") == "%252E%252E");
    // Still injective on the lookalikes of a dot segment.
    std::set<std::string> seen;
    for (std::string n : {".", "..", "%2E", "%2E%2E", "%252E", ". ", "..."})
        CHECK(seen.insert(http::encode_name(n)).second);
    // As a URL path: curl_easy_escape keeps '.', so a dot segment could only come from the name.
    CHECK(http::escape_path("p/" + http::encode_name("..")) == "p/%252E%252E");
}

TEST_CASE("name mapping does not depend on the process locale", "[http][names]") {
    // glibc's isalnum() says yes to 0xE9 (e with acute) in a Latin-1 locale: the
    // name "\xE9" would then map to a key of its own byte there and to "%E9" in
    // the C locale. Build one (localedef, half a second) in a temporary directory.
    const auto dir = std::filesystem::temp_directory_path() / ("distlock-locale-" + distlock::spi::random_token());
    std::filesystem::create_directories(dir);
    const std::string made =
        "localedef -i fr_FR -f ISO-8859-1 " + (dir / "fr_FR.ISO-8859-1").string() + " >/dev/null 2>&1";
    const bool built = std::system(made.c_str()) == 0;
    ::setenv("LOCPATH", dir.c_str(), 1);
    const char* set = built ? std::setlocale(LC_ALL, "fr_FR.ISO-8859-1") : nullptr;
    std::string encoded;
    if (set != nullptr) encoded = http::encode_name("caf\xE9");
    std::setlocale(LC_ALL, "C");
    ::unsetenv("LOCPATH");
    std::filesystem::remove_all(dir);
    if (set == nullptr) {
        WARN("not applicable here: no Latin-1 locale could be built (localedef and its sources missing)");
        return;
    }
    CHECK(encoded == "caf%E9");
    CHECK(http::encode_name("caf\xE9") == "caf%E9");
}

TEST_CASE("a key prefix with an empty, '.' or '..' segment, or a control character, is refused", "[http][names]") {
    for (const std::string& bad : std::vector<std::string>{"..", ".", "a/..", "a/../b", "./a", "a//b", "/a", "a/", "",
                                                           std::string("a\0b", 3), "a\nb", "a\x7f"}) {
        INFO("prefix '" << bad << "'");
        try {
            http::check_prefix("test", bad);
            FAIL("accepted");
        } catch (const distlock::invalid_argument_error& e) {
            CHECK(std::string(e.what()).find("prefix") != std::string::npos);
        }
    }
    for (std::string good : {"distlock", "a/b", "a.b", "...", "a/.b/c.", "%2e%2e", "tenant-1/locks"})
        CHECK_NOTHROW(http::check_prefix("test", good));
}

TEST_CASE("the request path is sent as built: curl removes no dot segment", "[http][names]") {
    fake_http_server server([](const fake_request&, int) { return fake_reply{200, "[]"}; });
    http::client c(opts(server.address()));
    c.send(get("/v1/kv/p/../x/./y?recurse"));
    REQUIRE(server.requests().size() == 1);
    CHECK(server.requests()[0].target == "/v1/kv/p/../x/./y?recurse");
}

TEST_CASE("a header value with a control character is refused before anything is sent, without showing it",
          "[http][headers]") {
    std::atomic<int> connections{0};
    scripted_server server([&](int) { ++connections; });
    for (int b = 0; b < 0x20; ++b) {
        std::string token = "s3cr3t" + std::string(1, static_cast<char>(b)) + "X-Injected: 1";
        auto o = opts(server.address());
        o.headers = {"X-Consul-Token: " + token};
        INFO("byte " << b);
        try {
            http::client c(o);
            c.send(get("/v1/status/leader"));
            FAIL("sent");
        } catch (const distlock::invalid_argument_error& e) {
            const std::string what = e.what();
            CHECK(what.find("X-Consul-Token") != std::string::npos);
            CHECK(what.find("s3cr3t") == std::string::npos);
            CHECK(what.find("Injected") == std::string::npos);
        }
    }
    auto o = opts(server.address());
    o.headers = {"X-Consul-Token: s3cr3t\x7f"};
    CHECK_THROWS_AS(http::client(o), distlock::invalid_argument_error);
    // A header set later (etcd's token after authentication) is checked too.
    http::client c(opts(server.address()));
    CHECK_THROWS_AS(c.set_header("Authorization", "tok\r\nX-Injected: 1"), distlock::invalid_argument_error);
    CHECK(connections.load() == 0);
}

TEST_CASE("an endless body is cut off at the reply cap and fails as unavailable, at once", "[http][caps]") {
    // Bounded so that a client without a cap (the code before) times out instead
    // of eating the machine's memory.
    fake_http_server server([](const fake_request&, int fd) -> std::optional<fake_reply> {
        if (scripted_server::send_all(fd, kOpenEnded)) flood(fd, std::string(64 * 1024, 'x'), std::size_t{64} << 20);
        return std::nullopt;
    });
    auto o = opts(server.address(), 10s);
    o.max_reply_bytes = 1 << 20;
    http::client c(o);
    auto t0 = clk::now();
    try {
        c.send(get("/v1/kv/x"));
        FAIL("an endless body completed");
    } catch (const distlock::unavailable_error& e) {
        CHECK(std::string(e.what()).find("cut off") != std::string::npos);
    }
    CHECK(clk::now() - t0 < 3s);
    CHECK(http::options{}.max_reply_bytes == http::default_max_reply_bytes);
}

TEST_CASE("a stream's line that never ends is cut off at the cap; complete lines before it are delivered",
          "[http][caps]") {
    fake_http_server server([](const fake_request&, int fd) -> std::optional<fake_reply> {
        if (scripted_server::send_all(fd, std::string(kOpenEnded) + "{\"first\":1}\n"))
            flood(fd, std::string(64 * 1024, 'y'), std::size_t{64} << 20);
        return std::nullopt;
    });
    auto o = opts(server.address(), 10s);
    o.max_reply_bytes = 1 << 20;
    http::client c(o);
    std::vector<std::string> lines;
    auto t0 = clk::now();
    auto res = c.stream_lines(get("/v3/watch", 10s), [&](std::string_view l) {
        lines.emplace_back(l);
        return true;
    });
    CHECK(res.how == http::outcome::failed);
    CHECK(res.error.find("cut off") != std::string::npos);
    CHECK(lines == std::vector<std::string>{"{\"first\":1}"});
    CHECK(clk::now() - t0 < 3s);
}

TEST_CASE("endless headers are cut off at the cap", "[http][caps]") {
    fake_http_server server([](const fake_request&, int fd) -> std::optional<fake_reply> {
        if (scripted_server::send_all(fd, "HTTP/1.1 200 OK\r\n"))
            flood(fd, "X-Filler: " + std::string(1000, 'z') + "\r\n", std::size_t{64} << 20);
        return std::nullopt;
    });
    auto o = opts(server.address(), 10s);
    o.max_reply_bytes = 256 * 1024;
    http::client c(o);
    auto t0 = clk::now();
    CHECK_THROWS_AS(c.send(get("/v1/kv/x")), distlock::unavailable_error);
    CHECK(clk::now() - t0 < 3s);
}

TEST_CASE("a server that trickles a byte a second cannot hold a call past its deadline", "[http][deadline]") {
    // Not new: the layer's whole-transfer timeout (CURLOPT_TIMEOUT_MS), proved here.
    fake_http_server server([](const fake_request&, int fd) -> std::optional<fake_reply> {
        scripted_server::trickle(fd, "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n" + std::string(100, 'a'), 1s);
        return std::nullopt;
    });
    http::client c(opts(server.address(), 1500ms));
    auto t0 = clk::now();
    CHECK_THROWS_AS(c.send(get("/v1/kv/x")), distlock::unavailable_error);
    auto took = clk::now() - t0;
    CHECK(took >= 1400ms);
    CHECK(took < 3s);

    // A stream's body trickled the same way ends at the stream's own timeout.
    fake_http_server streaming([](const fake_request&, int fd) -> std::optional<fake_reply> {
        if (scripted_server::send_all(fd, kOpenEnded)) scripted_server::trickle(fd, std::string(100, 'b'), 1s);
        return std::nullopt;
    });
    http::client s(opts(streaming.address(), 5s));
    t0 = clk::now();
    auto res = s.stream_lines(get("/v3/watch", 1500ms), [](std::string_view) { return true; });
    CHECK(res.how == http::outcome::timed_out);
    CHECK(clk::now() - t0 < 3s);
}

TEST_CASE("connections to the server are close-on-exec, and so is every descriptor the layer opens", "[http][fd]") {
    fake_http_server server([](const fake_request&, int) { return fake_reply{200, "\"leader\""}; });
    std::set<int> before;  // without the listing's own descriptor, whose number is free again after it
    for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd"))
        if (std::error_code ec;
            std::filesystem::read_symlink(entry.path(), ec).string().find("/fd") == std::string::npos)
            before.insert(std::stoi(entry.path().filename().string()));
    http::client c(opts(server.address()));
    c.send(get("/v1/status/leader"));  // the connection stays in the pool, open
    // libcurl < 8.8 opens its multi handles' wake-up socketpair without the flag:
    // the layer sets it (new_multi).
    for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
        const int fd = std::stoi(entry.path().filename().string());
        const int flags = ::fcntl(fd, F_GETFD);
        std::error_code ec;
        const auto what = std::filesystem::read_symlink(entry.path(), ec).string();
        if (before.count(fd) != 0 || flags < 0 || what.find("/fd") != std::string::npos) continue;
        INFO("new fd " << fd << " " << what);
        CHECK((flags & FD_CLOEXEC) != 0);
    }
    const int port = std::stoi(server.address().substr(server.address().rfind(':') + 1));
    int found = 0;
    for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
        const int fd = std::stoi(entry.path().filename().string());
        sockaddr_in peer{};
        socklen_t len = sizeof peer;
        if (::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &len) != 0 || peer.sin_family != AF_INET) continue;
        if (ntohs(peer.sin_port) != port) continue;
        ++found;
        INFO("fd " << fd);
        CHECK((::fcntl(fd, F_GETFD) & FD_CLOEXEC) != 0);
    }
    CHECK(found == 1);
}

TEST_CASE("a write to a peer that closed raises no SIGPIPE", "[http][sigpipe]") {
    // Verified, not assumed: curl writes with MSG_NOSIGNAL (TLS too, through its
    // own BIO). A peer that resets the connection as soon as the request starts,
    // while an 8 MiB body is being written; SIGPIPE is blocked in this thread, so
    // that one raised here would stay pending (a blocked signal is never
    // discarded, even when its action is to ignore it).
    const int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in at{};
    at.sin_family = AF_INET;
    at.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof at;
    REQUIRE(::bind(listener, reinterpret_cast<sockaddr*>(&at), sizeof at) == 0);
    REQUIRE(::listen(listener, 8) == 0);
    REQUIRE(::getsockname(listener, reinterpret_cast<sockaddr*>(&at), &len) == 0);
    std::thread resetter([listener] {
        for (int i = 0; i < 3; ++i) {
            const int c = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
            if (c < 0) return;
            char buf[256];
            (void)::recv(c, buf, sizeof buf, 0);  // the request has begun
            linger hard{1, 0};
            ::setsockopt(c, SOL_SOCKET, SO_LINGER, &hard, sizeof hard);
            ::close(c);  // RST
        }
    });
    sigset_t pipe_set, old;
    sigemptyset(&pipe_set);
    sigaddset(&pipe_set, SIGPIPE);
    REQUIRE(::pthread_sigmask(SIG_BLOCK, &pipe_set, &old) == 0);
    {
        http::client c(opts("127.0.0.1:" + std::to_string(ntohs(at.sin_port))));
        for (int i = 0; i < 3; ++i) {
            http::request put;
            put.method = "PUT";
            put.target = "/v1/kv/x";
            put.body = std::string(std::size_t{8} << 20, 'p');  // far more than the socket buffers
            CHECK_THROWS_AS(c.send(put), distlock::unavailable_error);
        }
    }
    resetter.join();
    ::close(listener);
    sigset_t pending;
    sigemptyset(&pending);
    ::sigpending(&pending);
    const bool raised = sigismember(&pending, SIGPIPE) == 1;
    if (raised) {
        const timespec none{0, 0};
        ::sigtimedwait(&pipe_set, nullptr, &none);
    }
    ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
    CHECK_FALSE(raised);
}

TEST_CASE("the proxy environment is ignored: every request goes to the server itself, none to a proxy",
          "[http][proxy]") {
    // http_proxy, https_proxy and ALL_PROXY name a fake proxy that would answer
    // in the server's place (and read the Consul token and the etcd password
    // on the way): libcurl obeys them unless CURLOPT_PROXY says otherwise, for
    // 127.0.0.1 too.
    fake_http_server proxy([](const fake_request&, int) { return fake_reply{200, "from the proxy\n"}; });
    fake_http_server server([](const fake_request&, int) { return fake_reply{200, "from the server\n"}; });
    proxy_environment env("http://" + proxy.address());
    {
        auto o = opts(server.address());
        o.headers = {"X-Consul-Token: s3cr3t"};
        http::client c(o);
        CHECK(c.send(get("/v1/kv/x")).body == "from the server\n");
        std::vector<std::string> lines;
        c.stream_lines(get("/v3/watch"), [&](std::string_view l) {
            lines.emplace_back(l);
            return true;
        });
        CHECK(lines == std::vector<std::string>{"from the server"});
        http::loop l(c);  // the loop's transfers (monitors, batches) are prepared the same way
        auto batch = l.run_all({get("/v1/kv/a"), get("/v1/kv/b")});
        REQUIRE(batch.size() == 2);
        for (const auto& r : batch) CHECK(r.resp.body == "from the server\n");
    }
    CHECK(server.requests().size() == 4);
    for (const auto& rq : proxy.requests()) CHECK(("the proxy got " + rq.method + " " + rq.target).empty());
}

TEST_CASE("only http and https are spoken, and a redirect is not followed", "[http][proxy]") {
    // An endpoint of another scheme is never fetched (libcurl would read a
    // file:// URL, or speak any protocol it was built with).
    const auto file = std::filesystem::temp_directory_path() / ("distlock-scheme-" + distlock::spi::random_token());
    { std::ofstream(file) << "local file content"; }
    http::options o = opts("unused");
    o.endpoints = {"file://" + file.string() + "#"};
    http::client c(o);
    try {
        auto r = c.send(get(""));
        FAIL("fetched: " << r.body);
    } catch (const distlock::invalid_argument_error& e) {
        CHECK(std::string(e.what()).find("not supported or disabled") != std::string::npos);
    }
    std::filesystem::remove(file);
    // A redirect is the reply, not an order (a guard: the layer never turned
    // CURLOPT_FOLLOWLOCATION on; it is now off explicitly).
    fake_http_server elsewhere([](const fake_request&, int) { return fake_reply{200, "elsewhere"}; });
    fake_http_server server([&](const fake_request&, int) {
        return fake_reply{307, "", {"Location: http://" + elsewhere.address() + "/v1/kv/x"}};
    });
    http::client r(opts(server.address()));
    CHECK(r.send(get("/v1/kv/x")).status == 307);
    CHECK(elsewhere.requests().empty());
}

TEST_CASE("a reply nested deeper than 64 levels is refused before it is parsed; brackets in strings do not count",
          "[http][json]") {
    const auto nested = [](int depth, const std::string& inner = "") {
        return std::string(static_cast<std::size_t>(depth), '[') + inner +
               std::string(static_cast<std::size_t>(depth), ']');
    };
    CHECK(http::json_depth_within(nested(64), 64));
    CHECK_FALSE(http::json_depth_within(nested(65), 64));
    CHECK(http::json_depth_within("{\"a\":\"[[[[[[[[[[{{{{{{{{\\\"[[[[\"}", 2));
    CHECK_FALSE(http::json_depth_within("{\"a\\\\\":[[]]}", 2));  // an escaped backslash ends before the quote
    CHECK(http::parse_reply(nested(64)).is_array());
    CHECK(http::parse_reply("{\"error\":" + nested(1000000) + "}").is_discarded());
    CHECK(http::parse_reply("{\"a\":1").is_discarded());
    CHECK(http::parse_reply("\xff").is_discarded());
}
