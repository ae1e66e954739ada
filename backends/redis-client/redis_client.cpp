#include "redis_client.hpp"

#include <openssl/evp.h>
#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>

namespace distlock::backends::redis_client {
namespace {

timeval to_timeval(std::chrono::milliseconds d) {
    if (d.count() <= 0) d = 1ms;
    timeval tv{};
    tv.tv_sec = static_cast<time_t>(d.count() / 1000);
    tv.tv_usec = static_cast<suseconds_t>((d.count() % 1000) * 1000);
    return tv;
}

bool starts_with(const redisReply* r, std::string_view prefix) {
    return r != nullptr && r->type == REDIS_REPLY_ERROR && r->str != nullptr &&
           std::string_view(r->str, r->len).substr(0, prefix.size()) == prefix;
}

}  // namespace

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

void throw_client_error(const std::string& backend, const redisReply* r, const std::string& context) {
    std::string text = reply_text(r);
    errc code = errc::unavailable;
    if (starts_with(r, "NOAUTH") || starts_with(r, "WRONGPASS") || starts_with(r, "NOPERM") ||
        text.find("invalid password") != std::string::npos || text.find("invalid username") != std::string::npos ||
        text.find("AUTH <password> called without") != std::string::npos ||
        text.find("no password is set") != std::string::npos)
        code = errc::access_denied;
    else if (starts_with(r, "WRONGTYPE"))
        code = errc::invalid_argument;
    // A server that wants a password the URL did not give: say where it goes.
    const std::string hint = starts_with(r, "NOAUTH")
                                 ? " (this server needs a password: redis://:PASSWORD@host:port, or "
                                   "redis://USER:PASSWORD@host:port for an ACL user)"
                                 : "";
    throw_error(code, backend, context + ": " + text + hint, 0, text);
}

void throw_client_error(const std::string& backend, const std::string& context, const connection_failure& e) {
    throw_error(e.not_redis() ? errc::invalid_argument : errc::unavailable, backend, context + ": " + e.what());
}

// ---- endpoint ------------------------------------------------------------------

endpoint endpoint_from_url(spi::url& u, const std::string& backend_name, std::chrono::milliseconds connect_default,
                           std::chrono::milliseconds command_default, std::optional<std::string_view> db_path) {
    endpoint ep;
    ep.backend_name = backend_name;
    ep.user = u.user();
    ep.password = u.password();
    std::string_view db = db_path ? *db_path : std::string_view(u.path());
    if (!db_path && !db.empty()) db.remove_prefix(1);
    if (!db.empty()) {
        int value = -1;
        auto [p, ec] = std::from_chars(db.data(), db.data() + db.size(), value);
        if (ec != std::errc{} || p != db.data() + db.size() || value < 0)
            throw_error(errc::invalid_argument, backend_name,
                        "the database must be a number (/0, /1, ...), not '" + std::string(db) + "'");
        ep.db = value;
    }
    ep.connect_timeout = u.take_duration("connect_timeout").value_or(connect_default);
    ep.command_timeout = u.take_duration("timeout").value_or(command_default);
    if (ep.connect_timeout.count() <= 0 || ep.command_timeout.count() <= 0)
        throw_error(errc::invalid_argument, backend_name, "connect_timeout and timeout must be positive");
    return ep;
}

// ---- connection ----------------------------------------------------------------

std::unique_ptr<connection> connection::open(const endpoint& ep) {
    redisContext* ctx = redisConnectWithTimeout(ep.host.c_str(), ep.port, to_timeval(ep.connect_timeout));
    if (ctx == nullptr) throw_error(errc::unavailable, ep.backend_name, "cannot allocate a hiredis context");
    if (ctx->err != 0) {
        std::string msg = ctx->errstr;
        int code = ctx->err;
        redisFree(ctx);
        throw_error(errc::unavailable, ep.backend_name,
                    "cannot connect to " + ep.label() + " (connect_timeout " +
                        std::to_string(ep.connect_timeout.count()) + " ms): " + msg,
                    code, msg);
    }
    std::unique_ptr<connection> c(new connection(ctx, ep));
    redisSetTimeout(ctx, to_timeval(ep.command_timeout));
    redisEnableKeepAlive(ctx);
    std::string db = std::to_string(ep.db);
    int expected = 0;
    try {
        if (!ep.user.empty()) {
            c->append({"AUTH", ep.user, ep.password});
            ++expected;
        } else if (!ep.password.empty()) {
            c->append({"AUTH", ep.password});
            ++expected;
        }
        if (ep.db != 0) {
            c->append({"SELECT", db});
            ++expected;
        }
        for (int i = 0; i < expected; ++i) {
            auto r = c->read_reply();
            if (!is_error(r.get())) continue;
            const bool is_auth = i == 0 && (!ep.user.empty() || !ep.password.empty());
            if (is_auth) {
                std::string who = ep.user.empty() ? "the default user" : "user '" + ep.user + "'";
                std::string text = reply_text(r.get());
                throw_error(errc::access_denied, ep.backend_name,
                            "authentication as " + who + " at " + ep.label() + " failed: " + text, 0, text);
            }
            if (starts_with(r.get(), "NOAUTH") || starts_with(r.get(), "NOPERM"))
                throw_client_error(ep.backend_name, r.get(), "SELECT " + db + " at " + ep.label());
            std::string text = reply_text(r.get());
            throw_error(errc::invalid_argument, ep.backend_name,
                        "cannot select database " + db + " at " + ep.label() + ": " + text, 0, text);
        }
    } catch (const connection_failure& e) {
        throw_client_error(ep.backend_name, "connection to " + ep.label() + " failed during AUTH/SELECT", e);
    }
    return c;
}

namespace {
std::string not_redis_text(const redisContext* ctx, const std::string& label) {
    return "the reply is not the Redis protocol (" + std::string(ctx->errstr) + "): is " + label + " a Redis server?";
}
}  // namespace

connection::~connection() {
    if (ctx_ != nullptr) redisFree(ctx_);
}

void connection::fail(const std::string& what, bool maybe_sent) {
    const int saved_errno = errno;
    broken_ = true;
    if (ctx_->err == REDIS_ERR_PROTOCOL)
        throw connection_failure(not_redis_text(ctx_, ep_.label()), false, maybe_sent, true);
    const bool eof = ctx_->err == REDIS_ERR_EOF;
    const bool reset = ctx_->err == REDIS_ERR_IO && (saved_errno == ECONNRESET || saved_errno == EPIPE);
    std::string detail = ctx_->err != 0 ? std::string(ctx_->errstr) : std::string("unknown error");
    if (ctx_->err == REDIS_ERR_IO && (saved_errno == EAGAIN || saved_errno == EWOULDBLOCK))
        detail = "no reply within the command timeout (" + std::to_string(ep_.command_timeout.count()) + " ms)";
    throw connection_failure(what + " on " + ep_.label() + ": " + detail, eof || reset, maybe_sent);
}

reply_ptr connection::command(const std::vector<std::string_view>& args) {
    append(args);
    return read_reply();
}

void connection::append(const std::vector<std::string_view>& args) {
    argv_buffers b(args);
    if (redisAppendCommandArgv(ctx_, b.argc(), b.ptrs.data(), b.lens.data()) != REDIS_OK)
        fail("cannot queue a command", false);
    sent_since_read_ = true;
}

void connection::flush() {
    int done = 0;
    while (done == 0) {
        if (redisBufferWrite(ctx_, &done) != REDIS_OK) fail("cannot send", true);
    }
}

namespace {
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
        if (colon != std::string_view::npos)
            std::from_chars(addr.data() + colon + 1, addr.data() + addr.size(), port);
        std::string host(addr.substr(0, colon == std::string_view::npos ? 0 : colon));
        return redirect(moved ? redirect::kind::moved : redirect::kind::ask, slot, std::move(host), port,
                        std::string(text));
    }
    for (std::string_view retry : {"READONLY", "TRYAGAIN", "CLUSTERDOWN", "LOADING", "MASTERDOWN"})
        if (text.substr(0, retry.size()) == retry) return redirect(redirect::kind::retry, -1, "", 0, std::string(text));
    return std::nullopt;
}
}  // namespace

reply_ptr connection::read_reply() {
    void* out = nullptr;
    if (redisGetReply(ctx_, &out) != REDIS_OK || out == nullptr) fail("no reply", true);
    reply_ptr r(static_cast<redisReply*>(out));
    if (ep_.follow_redirects) {
        if (auto to = redirect_of(r.get())) {
            broken_ = true;  // replies of a pipeline may still be pending: never reuse it
            throw *to;
        }
    }
    return r;
}

// ---- pool ------------------------------------------------------------------------

pool::borrowed::~borrowed() {
    if (conn_ && !conn_->broken()) pool_->put(std::move(conn_));
}

pool::borrowed pool::get() {
    {
        std::lock_guard lk(mutex_);
        if (!idle_.empty()) {
            auto c = std::move(idle_.back());
            idle_.pop_back();
            return borrowed(*this, std::move(c));
        }
    }
    return borrowed(*this, connection::open(ep_));
}

void pool::put(std::unique_ptr<connection> c) {
    std::lock_guard lk(mutex_);
    if (idle_.size() < max_idle_) idle_.push_back(std::move(c));
}

void pool::clear_idle() {
    std::vector<std::unique_ptr<connection>> drop;
    std::lock_guard lk(mutex_);
    drop.swap(idle_);
}

// ---- script ------------------------------------------------------------------------

namespace {
std::string sha1_hex(const std::string& text) {
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    EVP_Digest(text.data(), text.size(), md, &len, EVP_sha1(), nullptr);
    return spi::to_hex(std::string_view(reinterpret_cast<const char*>(md), len));
}
}  // namespace

script::script(std::string text) : text_(std::move(text)), sharded_text_(text_) {
    constexpr std::string_view plain = "redis.call('publish',", sharded = "redis.call('spublish',";
    for (auto at = sharded_text_.find(plain); at != std::string::npos; at = sharded_text_.find(plain, at + sharded.size()))
        sharded_text_.replace(at, plain.size(), sharded);
    sha1_ = sha1_hex(text_);
    sharded_sha1_ = sha1_hex(sharded_text_);
}

std::vector<std::string_view> script::eval_args(const std::vector<std::string_view>& keys,
                                                const std::vector<std::string_view>& args, std::string& numkeys,
                                                bool sharded) const {
    numkeys = std::to_string(keys.size());
    std::vector<std::string_view> cmd{"EVAL", text(sharded), numkeys};
    cmd.insert(cmd.end(), keys.begin(), keys.end());
    cmd.insert(cmd.end(), args.begin(), args.end());
    return cmd;
}

reply_ptr script::run(connection& c, const std::vector<std::string_view>& keys,
                      const std::vector<std::string_view>& args) const {
    std::string numkeys;
    const bool sharded = c.where().sharded;
    auto cmd = eval_args(keys, args, numkeys, sharded);
    if (c.asking()) return c.command(cmd);  // one command: EVAL
    cmd[0] = "EVALSHA";
    cmd[1] = sha1(sharded);
    auto r = c.command(cmd);
    if (!starts_with(r.get(), "NOSCRIPT")) return r;
    cmd[0] = "EVAL";
    cmd[1] = text(sharded);
    return c.command(cmd);
}

reply_ptr script::eval(connection& c, const std::vector<std::string_view>& keys,
                       const std::vector<std::string_view>& args) const {
    std::string numkeys;
    return c.command(eval_args(keys, args, numkeys, c.where().sharded));
}

// ---- exchange (one command to several servers at once) ------------------------------

std::vector<exchange_result> exchange_all(const std::vector<pool*>& pools,
                                      const std::vector<std::vector<std::string_view>>& commands) {
    const std::size_t n = pools.size();
    std::vector<exchange_result> out(n);
    std::vector<std::optional<pool::borrowed>> conns(n);
    auto timeout = 0ms;
    for (std::size_t i = 0; i < n; ++i) {
        timeout = std::max(timeout, pools[i]->where().command_timeout);
        try {
            conns[i].emplace(pools[i]->get());
            (*conns[i])->append(commands[i]);
            (*conns[i])->flush();
        } catch (const connection_failure& e) {
            out[i].error = e.what();
            out[i].maybe_sent = e.maybe_sent();
            if (e.not_redis()) out[i].code = errc::invalid_argument;
            conns[i].reset();
            pools[i]->clear_idle();
        } catch (const error& e) {
            out[i].error = e.reason();  // the caller names the backend and the category
            out[i].code = e.code_value();
            conns[i].reset();
        }
    }
    const auto until = clock::now() + timeout;
    std::vector<std::size_t> waiting;
    for (std::size_t i = 0; i < n; ++i)
        if (conns[i]) waiting.push_back(i);
    auto fail_node = [&](std::size_t i, const std::string& why) {
        out[i].error = why + " on " + pools[i]->where().label();
        out[i].maybe_sent = true;
        (**conns[i]).poison();  // never reuse a connection with a reply pending
        conns[i].reset();
        pools[i]->clear_idle();
    };
    while (!waiting.empty()) {
        std::vector<pollfd> fds;
        for (auto i : waiting) fds.push_back(pollfd{(**conns[i]).raw()->fd, POLLIN, 0});
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - clock::now());
        if (left.count() <= 0) {
            for (auto i : waiting)
                fail_node(i, "no reply within the command timeout (" + std::to_string(timeout.count()) + " ms)");
            break;
        }
        int rc = ::poll(fds.data(), fds.size(), static_cast<int>(left.count()) + 1);
        if (rc < 0 && errno != EINTR) {
            for (auto i : waiting) fail_node(i, std::string("poll failed: ") + std::strerror(errno));
            break;
        }
        std::vector<std::size_t> still;
        for (std::size_t k = 0; k < waiting.size(); ++k) {
            auto i = waiting[k];
            if (rc <= 0 || fds[k].revents == 0) {
                still.push_back(i);
                continue;
            }
            redisContext* ctx = (**conns[i]).raw();
            if (redisBufferRead(ctx) != REDIS_OK) {
                fail_node(i, ctx->errstr[0] != '\0' ? std::string(ctx->errstr) : std::string("read failed"));
                continue;
            }
            void* r = nullptr;
            if (redisGetReplyFromReader(ctx, &r) != REDIS_OK) {
                const auto why = not_redis_text(ctx, pools[i]->where().label());
                fail_node(i, why);  // frees ctx
                out[i].error = why;
                out[i].code = errc::invalid_argument;
                continue;
            }
            if (r == nullptr) {
                still.push_back(i);
                continue;
            }
            out[i].reply.reset(static_cast<redisReply*>(r));
            (**conns[i]).mark_used();
        }
        waiting.swap(still);
    }
    return out;
}

}  // namespace distlock::backends::redis_client
