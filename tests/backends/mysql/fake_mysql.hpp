// A fake MySQL server for tests of what the client does with a slow or hostile
// server (on distlock::test::scripted_server): it speaks enough of the MySQL
// client/server protocol (a HandshakeV10 greeting, OK to any login, OK packets
// and one-row text result sets to queries) for Connector/C++ to connect and run
// distlock's start, and can trickle one reply, a byte at a time, to defeat the
// client library's per-syscall read timeouts, or answer a query with a request
// for a file of the client's (LOAD DATA LOCAL INFILE), as a rogue server does.
#pragma once

#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tcp_proxy.hpp"

namespace fake_mysql {

using namespace std::chrono_literals;
using distlock::test::scripted_server;

inline std::string le(std::uint64_t v, int bytes) {
    std::string out;
    for (int i = 0; i < bytes; ++i) out += static_cast<char>((v >> (8 * i)) & 0xff);
    return out;
}

inline std::string lenenc_int(std::uint64_t v) {
    if (v < 251) return std::string(1, static_cast<char>(v));
    if (v < 65536) return "\xfc" + le(v, 2);
    if (v < 16777216) return "\xfd" + le(v, 3);
    return "\xfe" + le(v, 8);
}

inline std::string lenenc_str(std::string_view s) { return lenenc_int(s.size()) + std::string(s); }

inline std::string packet(std::uint8_t seq, std::string_view payload) {
    return le(payload.size(), 3) + static_cast<char>(seq) + std::string(payload);
}

constexpr std::uint32_t caps = 0x1 /* LONG_PASSWORD */ | 0x4 /* LONG_FLAG */ | 0x8 /* CONNECT_WITH_DB */ |
                               0x200 /* PROTOCOL_41 */ | 0x2000 /* TRANSACTIONS */ | 0x8000 /* SECURE_CONNECTION */ |
                               0x10000 /* MULTI_STATEMENTS */ | 0x20000 /* MULTI_RESULTS */ | 0x80000 /* PLUGIN_AUTH */;

// HandshakeV10, as a MariaDB 10.11 server sends it (mysql_native_password).
inline std::string greeting() {
    std::string p;
    p += '\x0a';
    p += std::string("5.5.5-10.11.0-MariaDB-fake") + '\0';
    p += le(42, 4);   // connection id
    p += "abcdefgh";  // auth-plugin-data part 1
    p += '\0';
    p += le(caps & 0xffff, 2);
    p += '\x2d';         // utf8mb4_general_ci
    p += le(0x0002, 2);  // status: autocommit
    p += le(caps >> 16, 2);
    p += static_cast<char>(21);               // auth-plugin-data length
    p += std::string(10, '\0');               // reserved
    p += std::string("ijklmnopqrst") + '\0';  // auth-plugin-data part 2
    p += std::string("mysql_native_password") + '\0';
    return packet(0, p);
}

// An OK packet; `info` pads it (a human-readable message the client keeps).
inline std::string ok(std::uint8_t seq, std::string_view info = {}, std::uint16_t status = 0x0002) {
    return packet(seq, std::string("\x00\x00\x00", 3) + le(status, 2) + le(0, 2) + std::string(info));
}

constexpr std::uint16_t more_results = 0x0008;  // SERVER_MORE_RESULTS_EXISTS: another statement's result follows

inline std::string eof(std::uint8_t seq, std::uint16_t status = 0x0002) {
    return packet(seq, "\xfe" + le(0, 2) + le(status, 2));
}

// A result set of `rows` rows of `columns` text cells, each `cell`.
inline std::string rows_of(std::uint8_t& seq, int columns, std::size_t rows, const std::string& cell,
                           std::uint16_t status) {
    std::string out = packet(seq++, lenenc_int(static_cast<std::uint64_t>(columns)));
    for (int c = 0; c < columns; ++c) {
        std::string def = lenenc_str("def") + lenenc_str("") + lenenc_str("") + lenenc_str("") +
                          lenenc_str("c" + std::to_string(c)) + lenenc_str("") + lenenc_int(0x0c) + le(63, 2) +
                          le(20, 4) + '\xfd' /* VAR_STRING */ + le(0, 2) + '\0' + std::string(2, '\0');
        out += packet(seq++, def);
    }
    out += eof(seq++);
    std::string row;
    for (int c = 0; c < columns; ++c) row += lenenc_str(cell);
    for (std::size_t r = 0; r < rows; ++r) out += packet(seq++, row);  // the sequence id wraps, as it does
    out += eof(seq++, status);
    return out;
}

// The select list's columns, counted by top-level commas (enough for distlock's
// statements); SHOW ... VARIABLES (Connector/C++'s own) has two.
inline int select_columns(std::string_view q) {
    if (q.rfind("SHOW", 0) == 0) return 2;
    int depth = 0, n = 1;
    for (std::size_t i = 0; i < q.size(); ++i) {
        if (q.compare(i, 6, " FROM ") == 0 && depth == 0) break;
        if (q[i] == '(') ++depth;
        if (q[i] == ')') --depth;
        if (q[i] == ',' && depth == 0) ++n;
    }
    return n;
}

using distlock::test::read_exact;

// A packet's payload; `seq` gets its sequence id.
inline std::optional<std::string> read_packet(int fd, std::uint8_t* seq = nullptr) {
    std::string head, body;
    if (!read_exact(fd, head, 4)) return std::nullopt;
    const std::size_t len = static_cast<unsigned char>(head[0]) | (static_cast<unsigned char>(head[1]) << 8) |
                            (static_cast<std::size_t>(static_cast<unsigned char>(head[2])) << 16);
    if (seq) *seq = static_cast<std::uint8_t>(head[3]);
    if (!read_exact(fd, body, len)) return std::nullopt;
    return body;
}

constexpr std::uint32_t client_local_files = 0x80;  // CLIENT_LOCAL_FILES: the client may send files

// What to do besides answering: trickle, a byte every `gap` (300 ms: well
// within the client's per-read timeouts of at least 1 s), the greeting or the
// reply to the first query that contains `slow_query` (an OK padded to
// `reply_bytes` with its info: a minute in all); answer a statement that
// contains `odd_query` with `odd_rows` rows of `odd_cell`; answer the first
// statement that contains `infile_query` with a LOCAL INFILE request (0xFB)
// for the file `infile_name`.
struct script {
    bool slow_greeting = false;
    std::string slow_query;
    std::size_t reply_bytes = 200;
    std::chrono::milliseconds gap{300};
    std::string odd_query;
    std::size_t odd_rows = 1;
    std::string odd_cell = "1";
    std::string infile_query;
    std::string infile_name;
};

class server {
public:
    explicit server(script s) : script_(std::move(s)), srv_([this](int fd) { serve(fd); }) {}
    int port() const { return srv_.port(); }
    // Replies trickled so far (started).
    int trickled() const { return trickled_.load(); }
    // The capabilities the last client to log in asked for.
    std::uint32_t client_caps() const { return caps_.load(); }
    // Whether a LOCAL INFILE request was sent; what the client sent back for
    // it: the payloads of its packets, up to the empty one that ends a file.
    bool infile_asked() const { return infile_asked_.load(); }
    std::string infile_reply() const {
        std::lock_guard<std::mutex> hold(mutex_);
        return infile_reply_;
    }

private:
    void serve(int fd) {
        const bool slow = script_.slow_greeting;
        if (slow) ++trickled_;
        if (!(slow ? scripted_server::trickle(fd, greeting(), script_.gap) : scripted_server::send_all(fd, greeting())))
            return;
        const auto login = read_packet(fd);
        if (!login || !scripted_server::send_all(fd, ok(2))) return;  // any login is fine
        if (login->size() >= 4)
            caps_ = static_cast<std::uint32_t>(static_cast<unsigned char>((*login)[0])) |
                    static_cast<std::uint32_t>(static_cast<unsigned char>((*login)[1])) << 8 |
                    static_cast<std::uint32_t>(static_cast<unsigned char>((*login)[2])) << 16 |
                    static_cast<std::uint32_t>(static_cast<unsigned char>((*login)[3])) << 24;
        bool trickled = false, infile = false;
        while (auto cmd = read_packet(fd)) {
            if (cmd->empty() || (*cmd)[0] == '\x01') return;  // COM_QUIT
            const std::string q = cmd->substr(1);
            if (std::getenv("FAKE_MYSQL_LOG")) fprintf(stderr, "[fake] %s\n", q.c_str());
            if (!trickled && !script_.slow_query.empty() && q.find(script_.slow_query) != std::string::npos) {
                trickled = true;
                ++trickled_;
                std::uint8_t seq = 1;
                const std::string reply = q.rfind("SELECT", 0) == 0 ? rows_of(seq, select_columns(q), 1, "1", 0x0002)
                                                                    : ok(1, std::string(script_.reply_bytes, 'x'));
                if (!scripted_server::trickle(fd, reply, script_.gap)) return;
                continue;
            }
            if (!infile && !script_.infile_query.empty() && q.find(script_.infile_query) != std::string::npos) {
                infile = true;
                if (!ask_for_file(fd)) return;
                continue;
            }
            if (!scripted_server::send_all(fd, replies(q))) return;
        }
    }

    // LOCAL INFILE: 0xFB and the file's name; the client answers with the
    // file's content in packets, then an empty one (only an empty one when it
    // refuses). Answered with OK.
    bool ask_for_file(int fd) {
        infile_asked_ = true;
        if (!scripted_server::send_all(fd, packet(1, "\xfb" + script_.infile_name))) return false;
        for (std::uint8_t seq = 0;;) {
            const auto data = read_packet(fd, &seq);
            if (!data) return false;
            {
                std::lock_guard<std::mutex> hold(mutex_);
                infile_reply_ += *data;
            }
            if (data->empty()) return scripted_server::send_all(fd, ok(static_cast<std::uint8_t>(seq + 1)));
        }
    }

    // One result per statement of a multi-statement query (distlock joins them with ";\n").
    std::string replies(const std::string& query) const {
        std::vector<std::string> parts;
        for (std::size_t from = 0;;) {
            const auto at = query.find(";\n", from);
            parts.push_back(query.substr(from, at == std::string::npos ? std::string::npos : at - from));
            if (at == std::string::npos) break;
            from = at + 2;
        }
        std::string out;
        std::uint8_t seq = 1;
        for (std::size_t i = 0; i < parts.size(); ++i) {
            const auto& q = parts[i];
            const std::uint16_t status = i + 1 < parts.size() ? 0x0002 | more_results : 0x0002;
            const bool odd = !script_.odd_query.empty() && q.find(script_.odd_query) != std::string::npos;
            if (q.rfind("SELECT", 0) == 0 || q.rfind("SHOW", 0) == 0)
                out += odd ? rows_of(seq, select_columns(q), script_.odd_rows, script_.odd_cell, status)
                           : rows_of(seq, select_columns(q), 1, "1", status);
            else out += ok(seq++, {}, status);
        }
        return out;
    }

    script script_;
    std::atomic<int> trickled_{0};
    std::atomic<std::uint32_t> caps_{0};
    std::atomic<bool> infile_asked_{false};
    mutable std::mutex mutex_;
    std::string infile_reply_;
    scripted_server srv_;
};

}  // namespace fake_mysql
