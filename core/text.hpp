// Text that distlock did not write itself (a holder label read back, a server's
// message in a loss reason) on its way to the application, its terminal and
// its logs. Anyone who can write the server's state can write that text: a
// neighbour on a shared server, a client that is not distlock, a hostile
// server. Raw, its ESC and OSC sequences would retitle or clear an operator's
// terminal, and its line feeds would forge lines ("waiters: 0") in a log.
#pragma once

#include <cstddef>
#include <cstdio>
#include <string>
#include <string_view>

namespace distlock::detail {

// A C0 control byte or DEL: refused in what distlock writes (checked_label),
// escaped in what it hands on (printable).
constexpr bool control_byte(unsigned char c) noexcept { return c < 0x20 || c == 0x7f; }

inline bool has_control_byte(std::string_view text) noexcept {
    for (unsigned char c : text)
        if (control_byte(c)) return true;
    return false;
}

// The longest server text a loss reason carries: enough for any message a
// server means to send, short enough for one log line.
inline constexpr std::size_t max_reason_bytes = 512;

// `text` with each control byte shown as "\xNN", and cut to at most `max_bytes`
// (ending in "..."; never inside a UTF-8 sequence nor an escape). Other bytes
// pass as they are: UTF-8 stays readable.
inline std::string printable(std::string_view text, std::size_t max_bytes = max_reason_bytes) {
    static constexpr std::string_view cut_mark = "...";
    std::string out;
    std::size_t fits = 0;  // where `out` may be cut with room left for the mark
    for (unsigned char c : text) {
        if ((c & 0xC0) != 0x80 && out.size() + cut_mark.size() <= max_bytes) fits = out.size();
        if (control_byte(c)) {
            char escaped[5];
            std::snprintf(escaped, sizeof escaped, "\\x%02x", static_cast<unsigned>(c));
            out += escaped;
        } else {
            out += static_cast<char>(c);
        }
        if (out.size() > max_bytes) {
            out.resize(fits);
            out += cut_mark;
            return out;
        }
    }
    return out;
}

}  // namespace distlock::detail
