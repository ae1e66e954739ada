// Run by security_test.cpp ("a write to a server that closed never raises
// SIGPIPE"): a program that leaves SIGPIPE at its default disposition (death),
// as a library user who never heard of it does, and writes a large pipeline
// through the Redis client layer to a server that closes the connection while
// the write is under way. Prints "typed error: ..." and exits 0 when the write
// fails with a distlock error; killed by SIGPIPE otherwise. With
// "tls <port> <ca> <password>", the same through a TLS connection (over_tls).
//
// How the server makes the write fail the way that raises SIGPIPE: it sends its
// FIN first (the client's socket goes to CLOSE_WAIT), leaves what the client
// sends unread with a small receive buffer (the client's write blocks), then
// closes with data unread, which answers with a reset: the kernel then fails
// the client's next write with EPIPE, and without MSG_NOSIGNAL raises SIGPIPE.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <iostream>
#include <string>
#include <thread>

#include "distlock/error.hpp"
#include "redis_client.hpp"

namespace rc = distlock::backends::redis_client;

// A 16 MB pipeline on `c`, whose server is gone: 0 and "typed error: ..." when
// it fails with a distlock or connection error (a SIGPIPE kills us first otherwise).
int write_into_closed(rc::connection& c) {
    try {
        const std::string value(64 * 1024, 'v');
        for (int i = 0; i < 256; ++i) c.append({"SET", "k" + std::to_string(i), value});
        c.flush();
        (void)c.read_reply();
        std::cout << "the write and read succeeded: the test is broken\n";
        return 1;
    } catch (const rc::connection_failure& e) {
        std::cout << "typed error: " << e.what() << "\n";
    } catch (const distlock::error& e) {
        std::cout << "typed error: " << e.what() << "\n";
    }
    return 0;
}

// "tls <port> <ca file> <password>": the same over TLS (OpenSSL's own socket
// BIO writes with write(), which raises SIGPIPE): a TLS connection to a real
// redis-server, which a second connection kills (CLIENT KILL) before the write.
int over_tls(char** argv) {
    rc::tls_options o;
    o.enabled = true;
    o.ca_file = argv[3];
    rc::endpoint ep;
    ep.port = static_cast<std::uint16_t>(std::stoi(argv[2]));
    ep.password = argv[4];
    ep.command_timeout = std::chrono::milliseconds(3000);
    ep.tls = rc::tls_context::make(o, "redis");
    auto victim = rc::connection::open(ep);
    auto id = victim->command({"CLIENT", "ID"});
    auto killer = rc::connection::open(ep);
    (void)killer->command({"CLIENT", "KILL", "ID", std::to_string(rc::as_integer(id.get()))});
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    return write_into_closed(*victim);
}

int main(int argc, char** argv) {
    ::signal(SIGPIPE, SIG_DFL);
    if (argc == 5 && std::string(argv[1]) == "tls") return over_tls(argv);
    int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int small = 4096;
    ::setsockopt(listener, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (::bind(listener, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(listener, 4) != 0 ||
        ::getsockname(listener, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
        std::cout << "cannot listen\n";
        return 2;
    }
    std::thread server([listener] {
        int c = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
        ::shutdown(c, SHUT_WR);                                       // FIN: the client's side is now in CLOSE_WAIT
        std::this_thread::sleep_for(std::chrono::milliseconds(300));  // its write fills the window
        ::close(c);                                                   // data unread: a reset
    });
    rc::endpoint ep;
    ep.port = ntohs(a.sin_port);
    ep.command_timeout = std::chrono::milliseconds(3000);
    int status = 1;
    try {
        status = write_into_closed(*rc::connection::open(ep));
    } catch (const distlock::error& e) {
        std::cout << "typed error: " << e.what() << "\n";
        status = 0;
    }
    server.join();
    ::close(listener);
    return status;
}
