// The Redis client layer (redis_client.hpp): what a reply says. Reading an
// integer or a text from it, a redirection it asks for, and an error reply or a
// connection failure as a distlock error.
#include <algorithm>
#include <charconv>

#include "replies.hpp"

namespace distlock::backends::redis_client {

bool error_starts_with(const redisReply* r, std::string_view prefix) {
    return r != nullptr && r->type == REDIS_REPLY_ERROR && r->str != nullptr &&
           std::string_view(r->str, r->len).substr(0, prefix.size()) == prefix;
}

bool is_error(const redisReply* r) noexcept { return r != nullptr && r->type == REDIS_REPLY_ERROR; }

long long as_integer(const redisReply* r) noexcept {
    if (r == nullptr) return 0;
    if (r->type == REDIS_REPLY_INTEGER) return r->integer;
    if (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS) {
        long long v = 0;
        std::from_chars(r->str, r->str + r->len, v);
        return v;
    }
    return 0;
}

std::string reply_text(const redisReply* r) {
    if (r == nullptr) return "(no reply)";
    switch (r->type) {
        case REDIS_REPLY_STRING:
        case REDIS_REPLY_STATUS:
        case REDIS_REPLY_ERROR: return std::string(r->str, r->len);
        case REDIS_REPLY_INTEGER: return std::to_string(r->integer);
        case REDIS_REPLY_NIL: return "(nil)";
        case REDIS_REPLY_ARRAY: return "(array of " + std::to_string(r->elements) + ")";
        default: return "(reply type " + std::to_string(r->type) + ")";
    }
}

void throw_client_error(const redisReply* r, const std::string& backend, const std::string& context) {
    std::string text = reply_text(r);
    errc code = errc::unavailable;
    // An ACL that refuses a command or key inside a script is an ERR with these words.
    if (error_starts_with(r, "NOAUTH") || error_starts_with(r, "WRONGPASS") || error_starts_with(r, "NOPERM") ||
        text.find("The user executing the script can't") != std::string::npos ||
        text.find("invalid password") != std::string::npos || text.find("invalid username") != std::string::npos ||
        text.find("AUTH <password> called without") != std::string::npos ||
        text.find("no password is set") != std::string::npos)
        code = errc::access_denied;
    else if (error_starts_with(r, "WRONGTYPE")) code = errc::invalid_argument;
    // A server that wants a password the URL did not give: say where it goes.
    const std::string hint = error_starts_with(r, "NOAUTH")
                                 ? " (this server needs a password: redis://:PASSWORD@host:port, or "
                                   "redis://USER:PASSWORD@host:port for an ACL user)"
                                 : "";
    throw_error(code, backend, context + ": " + text + hint, 0, text);
}

void throw_client_error(const connection_failure& e, const std::string& backend, const std::string& context) {
    const errc code = e.not_redis() ? errc::invalid_argument : e.denied() ? errc::access_denied : errc::unavailable;
    throw_error(code, backend, context + ": " + e.what());
}

// The redirection an error reply asks for, if any (see `redirect`).
std::optional<redirect> redirect_of(const redisReply* r) {
    if (r == nullptr || r->type != REDIS_REPLY_ERROR || r->str == nullptr) return std::nullopt;
    const std::string_view text(r->str, r->len);
    const bool moved = text.substr(0, 6) == "MOVED ", ask = text.substr(0, 4) == "ASK ";
    if (moved || ask) {
        // "MOVED 3999 127.0.0.1:6381": the slot, then host:port (the host may be
        // empty: the node we asked, in Redis 7's unknown-endpoint form).
        auto rest = text.substr(moved ? 6 : 4);
        const auto space = rest.find(' ');
        int slot = -1;
        std::from_chars(rest.data(), rest.data() + std::min(space, rest.size()), slot);
        auto addr = space == std::string_view::npos ? std::string_view{} : rest.substr(space + 1);
        const auto colon = addr.rfind(':');
        std::uint16_t port = 0;
        if (colon != std::string_view::npos) std::from_chars(addr.data() + colon + 1, addr.data() + addr.size(), port);
        std::string host(addr.substr(0, colon == std::string_view::npos ? 0 : colon));
        return redirect(moved ? redirect::kind::moved : redirect::kind::ask, slot, std::move(host), port,
                        std::string(text));
    }
    for (std::string_view retry : {"READONLY", "TRYAGAIN", "CLUSTERDOWN", "LOADING", "MASTERDOWN"})
        if (text.substr(0, retry.size()) == retry) return redirect(redirect::kind::retry, -1, "", 0, std::string(text));
    return std::nullopt;
}

}  // namespace distlock::backends::redis_client
