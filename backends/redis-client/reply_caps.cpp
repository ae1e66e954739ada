// The Redis client layer (redis_client.hpp): hiredis's reply reader behind
// the caps on what one reply may make the client allocate (max_reply_bytes,
// max_reply_elements), and the length a bulk string announces before its bytes.
#include "reply_caps.hpp"

#include <algorithm>
#include <charconv>
#include <new>

namespace distlock::backends::redis_client {

namespace {

// The reply object functions hiredis's reader calls as it parses: its own,
// behind a budget per reply (connection::reply_budget, the reader's privdata).
// A function that returns null makes the reader fail ("out of memory"): the
// connection then reports the cap that was hit instead.
const redisReplyObjectFunctions* hiredis_functions = nullptr;

connection::reply_budget& budget_of(const redisReadTask* t) {
    return *static_cast<connection::reply_budget*>(t->privdata);
}

// Charges `bytes` to the reply `t` belongs to (a task without a parent starts a
// new reply); false when that goes past max_reply_bytes.
bool charge(const redisReadTask* t, std::size_t bytes, const char* what) {
    auto& b = budget_of(t);
    if (t->parent == nullptr) b.used = 0;
    if (bytes > max_reply_bytes - std::min(b.used, max_reply_bytes)) {
        b.exceeded =
            std::string("a reply larger than ") + std::to_string(max_reply_bytes >> 20) + " MiB (" + what + ")";
        return false;
    }
    b.used += bytes;
    return true;
}

void* capped_string(const redisReadTask* t, char* str, std::size_t len) {
    if (!charge(t, len + sizeof(redisReply), "a string")) return nullptr;
    return hiredis_functions->createString(t, str, len);
}

// hiredis 0.14 counts elements in an int, 1.x in a size_t.
template <class F>
struct count_of;
template <class R, class T, class N>
struct count_of<R (*)(T, N)> {
    using type = N;
};
using element_count = count_of<decltype(redisReplyObjectFunctions::createArray)>::type;

void* capped_array(const redisReadTask* t, element_count n) {
    const auto elements = static_cast<long long>(n);
    if (elements > max_reply_elements) {
        budget_of(t).exceeded = "an array of " + std::to_string(elements) + " elements (at most " +
                                std::to_string(max_reply_elements) + ")";
        return nullptr;
    }
    if (!charge(t, static_cast<std::size_t>(elements) * (sizeof(redisReply) + sizeof(redisReply*)), "an array"))
        return nullptr;
    return hiredis_functions->createArray(t, n);
}

}  // namespace

redisReader* capped_reader(connection::reply_budget& budget) {
    redisReader* r = redisReaderCreate();
    if (r == nullptr) throw std::bad_alloc();
    static const redisReplyObjectFunctions capped = [&] {
        hiredis_functions = r->fn;  // hiredis's defaults, the same for every reader
        redisReplyObjectFunctions f = *r->fn;
        f.createString = capped_string;
        f.createArray = capped_array;
        return f;
    }();
    r->fn = const_cast<redisReplyObjectFunctions*>(&capped);
    r->privdata = &budget;
    return r;
}

// The length a bulk string the reader is waiting for the bytes of announces
// (its length line is complete): hiredis buffers the whole string before it
// makes an object of it, so a cap checked only then would come after the
// memory is spent.
std::optional<long long> announced_bulk(const redisReader* r) {
    if (r->ridx < 0) return std::nullopt;
#if HIREDIS_MAJOR >= 1
    const redisReadTask* t = r->task[r->ridx];
#else
    const redisReadTask* t = &r->rstack[r->ridx];
#endif
    if (t == nullptr || t->type != REDIS_REPLY_STRING) return std::nullopt;
    // The reader stands after the '$': the length's digits, then "\r\n".
    const char* p = r->buf + r->pos;
    const char* end = r->buf + r->len;
    long long len = 0;
    auto [stop, ec] = std::from_chars(p, end, len);
    if (ec != std::errc{} || stop == p || end - stop < 2 || stop[0] != '\r' || stop[1] != '\n') return std::nullopt;
    return len;
}

}  // namespace distlock::backends::redis_client
