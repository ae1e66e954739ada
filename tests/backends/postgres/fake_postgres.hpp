// A fake PostgreSQL server for tests of what the client does with a hostile
// server (on distlock::test::scripted_server): it speaks enough of the
// PostgreSQL protocol (no to SSL and GSS encryption, AuthenticationOk to any
// startup, ReadyForQuery) for libpq to connect, then answers the first
// statement with a row description and 1 MiB data rows, without end, as fast as
// the client reads them. While it sends, it samples the process's resident
// size (/proc/self/statm: client and server share the process), so that a test
// can tell how much the client kept of what it read. Or it answers the startup
// or the first statement with an error of a long message, or the startup with
// an error of a 512 MiB message, sent as fast as the client reads it.
#pragma once

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <fstream>
#include <optional>
#include <string>
#include <string_view>

#include "tcp_proxy.hpp"

namespace fake_postgres {

using distlock::test::scripted_server;

inline std::string be(std::uint32_t v, int bytes) {
    std::string out;
    for (int i = bytes - 1; i >= 0; --i) out += static_cast<char>((v >> (8 * i)) & 0xff);
    return out;
}

// A backend message: type, length (itself included), body.
inline std::string message(char type, std::string_view body) {
    return type + be(static_cast<std::uint32_t>(body.size() + 4), 4) + std::string(body);
}

using distlock::test::read_exact;

inline std::uint32_t read_be32(const std::string& s, std::size_t at) {
    std::uint32_t v = 0;
    for (std::size_t i = 0; i < 4; ++i) v = (v << 8) | static_cast<unsigned char>(s[at + i]);
    return v;
}

// Reads a client's opening: SSLRequest and GSSENCRequest are refused ('N'),
// then the StartupMessage. False when the client went away or sent nonsense.
// Every byte read is added to `seen` when given.
inline bool read_startup(int fd, std::string* seen = nullptr) {
    std::string head, body;
    for (;;) {
        if (!read_exact(fd, head, 8)) return false;
        if (seen) *seen += head;
        const auto len = read_be32(head, 0), code = read_be32(head, 4);
        if (len < 8 || len > 10000) return false;
        if (code == 80877103 || code == 80877104) {
            if (!scripted_server::send_all(fd, "N")) return false;
            continue;
        }
        if (!read_exact(fd, body, len - 8)) return false;
        if (seen) *seen += body;
        return true;
    }
}

// The process's resident size, in bytes.
inline std::int64_t resident_bytes() {
    std::ifstream statm("/proc/self/statm");
    std::int64_t size = 0, resident = 0;
    statm >> size >> resident;
    return resident * ::sysconf(_SC_PAGESIZE);
}

// An ErrorResponse (SQLSTATE XX000) whose message is `text`.
inline std::string error(const std::string& text) {
    return message('E', std::string("SERROR\0"
                                    "CXX000\0"
                                    "M",
                                    15) +
                            text + std::string("\0\0", 2));
}

enum class answer {
    endless_rows,           // the first statement: 1 MiB data rows without end
    long_error,             // the first statement: an error of a 1 MiB message
    startup_error,          // the startup: an error of a 20,000-byte message
    endless_startup_error,  // the startup: an error whose text goes on (512 MiB)
    many_rows,              // the first statement: a whole result of many rows (server::rows)
};

// The result of many_rows: `rows` rows of `columns` cells, each `cell` (NULL
// when nullopt).
struct rows_spec {
    std::size_t rows = 1;
    int columns = 1;
    std::optional<std::string> cell = "1";
};

class server {
public:
    // At most `limit` bytes of an endless answer are sent (a bound for the test
    // itself, should the client take them all); then the connection is held
    // open, silent.
    explicit server(answer what, std::int64_t limit = std::int64_t{256} << 20)
        : what_(what), limit_(limit), srv_([this](int fd) { serve(fd); }) {}
    explicit server(rows_spec rows)
        : what_(answer::many_rows), limit_(0), rows_(std::move(rows)), srv_([this](int fd) { serve(fd); }) {}
    int port() const { return srv_.port(); }
    // Bytes of an endless answer sent so far (all connections).
    std::int64_t sent() const { return sent_.load(); }
    // The most the process's resident size grew, from just before an endless
    // answer to any point while it was sent.
    std::int64_t peak_growth() const { return peak_.load(); }

private:
    void serve(int fd) {
        if (!read_startup(fd)) return;
        if (what_ == answer::startup_error) return (void)scripted_server::send_all(fd, error(std::string(20000, 'y')));
        // After AuthenticationOk, an error said to be 512 MiB long, sent as it goes.
        if (what_ == answer::endless_startup_error)
            return stream(fd,
                          message('R', be(0, 4)) + 'E' + be(512u << 20, 4) +
                              std::string("SFATAL\0"
                                          "M",
                                          8),
                          std::string(1 << 20, 'y'));
        const std::string hello = message('R', be(0, 4)) +  // AuthenticationOk
                                  message('S', std::string("server_version\0"
                                                           "15.0\0",
                                                           20)) +
                                  message('S', std::string("client_encoding\0"
                                                           "UTF8\0",
                                                           21)) +
                                  message('S', std::string("standard_conforming_strings\0"
                                                           "on\0",
                                                           31)) +
                                  message('S', std::string("integer_datetimes\0"
                                                           "on\0",
                                                           21)) +
                                  message('K', be(4242, 4) + be(7, 4)) +  // BackendKeyData
                                  message('Z', "I");                      // ReadyForQuery
        if (!scripted_server::send_all(fd, hello)) return;
        char any[4096];
        if (::recv(fd, any, sizeof any, 0) <= 0) return;  // the first statement (some of it)
        if (what_ == answer::long_error) {
            if (scripted_server::send_all(fd, error(std::string(1 << 20, 'y')) + message('Z', "I"))) hold(fd);
            return;
        }
        // ParseComplete, BindComplete (libpq takes either for what it sent),
        // bytea columns, then DataRows: 1 MiB each without end, or rows_.
        const std::string field =
            std::string("x\0", 2) + be(0, 4) + be(0, 2) + be(17, 4) + be(0xffff, 2) + be(0xffffffff, 4) + be(0, 2);
        const auto described = [&](int columns) {
            std::string fields;
            for (int c = 0; c < columns; ++c) fields += field;
            return message('1', "") + message('2', "") +
                   message('T', be(static_cast<std::uint32_t>(columns), 2) + fields);
        };
        if (what_ == answer::many_rows) {
            std::string cells;
            for (int c = 0; c < rows_.columns; ++c)
                cells += rows_.cell ? be(static_cast<std::uint32_t>(rows_.cell->size()), 4) + *rows_.cell
                                    : be(0xffffffff, 4);
            const std::string row = message('D', be(static_cast<std::uint32_t>(rows_.columns), 2) + cells);
            std::string reply = described(rows_.columns);
            for (std::size_t r = 0; r < rows_.rows; ++r) reply += row;
            reply += message('C', std::string("SELECT ") + std::to_string(rows_.rows) + '\0') + message('Z', "I");
            if (scripted_server::send_all(fd, reply)) hold(fd);
            return;
        }
        const std::string cell(1 << 20, 'x');
        stream(fd, described(1), message('D', be(1, 2) + be(static_cast<std::uint32_t>(cell.size()), 4) + cell));
    }

    // `first`, then `each` again and again up to the limit, sampling the
    // resident size before each; then silent until the client goes.
    void stream(int fd, const std::string& first, const std::string& each) {
        const auto base = resident_bytes();
        if (!scripted_server::send_all(fd, first)) return;
        while (sent_.load() < limit_) {
            const auto growth = resident_bytes() - base;
            if (growth > peak_.load()) peak_.store(growth);
            if (!scripted_server::send_all(fd, each)) return;
            sent_ += static_cast<std::int64_t>(each.size());
        }
        hold(fd);
    }

    static void hold(int fd) {
        char any[4096];
        while (::recv(fd, any, sizeof any, 0) > 0) {}
    }

    answer what_;
    std::int64_t limit_;
    rows_spec rows_;
    std::atomic<std::int64_t> sent_{0}, peak_{0};
    scripted_server srv_;
};

}  // namespace fake_postgres
