// distlock-fault-worker: one worker of the fault harness (tests/faults/README.md).
//
// Takes one lock over and over through the public API only, runs "one grant"
// of the README exactly, and records every event as one JSON line (one write(2)
// on an O_APPEND descriptor each) stamped with CLOCK_MONOTONIC read by the raw
// system call, so that libfaketime (which wraps the libc functions) cannot fake
// the history's time line. Talks to the controller's store over AF_UNIX
// SOCK_SEQPACKET. Self-pauses (SIGSTOP) and self-kills (SIGKILL) at the given
// points with the given probabilities, recording the event first.
//
//   distlock-fault-worker --url URL --lock NAME --id W --history FILE --store SOCK
//       [--seconds S] [--lease-ms L] [--hold-ms H] [--wait-ms M]
//       [--pause-point hold|before-write] [--pause-prob P] [--kill-prob P]
//       [--threads N] [--break-lock-every MS] [--nemesis-log FILE] [--seed N]
//       [--first-fault FILE] [--election 1] [--async 1] [--observe-every MS]
//
// --observe-every MS (with --threads 0): the server's view, for the loss
// detection measure: every MS, provider::inspect(lock), and one line to
// --nemesis-log whenever what it shows changes: {"ev":"server","t_invoke",
// "held" (true, false, or null: unknown), "token", "holder"} or {"ev":"server",
// "error"} (no answer; "t" is when inspect() returned).
// --election 1: each grant is a term of leadership of the election named by
// --lock (provider::election: campaign, term(), is_leader(), resign()), in
// place of the mutex; the history is the same.
// --async 1: each grant is taken and given back through the asynchronous API
// (async_lock / async_campaign with a completion handler, async_unlock /
// async_resign), the worker waiting for each handler: the grant is held by no
// thread, and the history is the same as a blocking worker's.
// --threads N (N > 1): N logical workers as threads of one process (memory://),
// ids W.1 .. W.N, one history file each: "{w}" in --history is replaced by the
// id, else ".<k>" is inserted before the extension. --threads 0: no grant loop,
// only the --break-lock-every thread (a worker of its own for the break-lock
// nemesis). --break-lock-every MS: a thread calling testing::break_lock every MS,
// each call logged to --nemesis-log (default stderr); the period is jittered
// uniformly between 0.5 and 1.5 MS.
// --first-fault FILE: the first worker (of all that share FILE) to reach its
// pause or kill point creates FILE and pauses or kills there whatever the
// probability, so that a short run always injects at least one fault.
// --seconds 0 (the default) = until SIGTERM.
// Exit status: 0 clean end, 2 store failure, 64 bad arguments, 1 other.
#include <distlock/distlock.hpp>
#include <distlock/testing.hpp>

#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <future>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace {

std::atomic<bool> g_stop{false};

extern "C" void on_stop_signal(int) { g_stop.store(true); }

// CLOCK_MONOTONIC by the system call itself (never the vDSO or a wrapped libc).
std::int64_t mono_ns() {
    struct timespec ts {};
    syscall(SYS_clock_gettime, CLOCK_MONOTONIC, &ts);
    return static_cast<std::int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// Sleeps on CLOCK_MONOTONIC by the system call (libfaketime cannot stretch it).
void sleep_ms(std::int64_t ms) {
    if (ms <= 0) return;
    struct timespec req {
        static_cast<time_t>(ms / 1000), static_cast<long>((ms % 1000) * 1000000)
    };
    struct timespec rem {};
    while (syscall(SYS_clock_nanosleep, CLOCK_MONOTONIC, 0, &req, &rem) != 0) {
        if (errno != EINTR) return;
        req = rem;
    }
}

[[noreturn]] void usage(const std::string& why) {
    std::fprintf(stderr,
                 "distlock-fault-worker: %s\n"
                 "usage: distlock-fault-worker --url URL --lock NAME --id W --history FILE --store SOCK\n"
                 "         [--seconds S] [--lease-ms L] [--hold-ms H] [--wait-ms M]\n"
                 "         [--pause-point hold|before-write] [--pause-prob P] [--kill-prob P]\n"
                 "         [--threads N] [--break-lock-every MS] [--nemesis-log FILE] [--seed N]\n"
                 "         [--first-fault FILE] [--election 1] [--async 1]\n",
                 why.c_str());
    std::exit(64);
}

// ---- JSON -------------------------------------------------------------------

// Appends `s` as a JSON string. Valid UTF-8 is kept; every byte that is not part
// of a valid UTF-8 sequence becomes \u00XX (its Latin-1 reading), so any bytes
// give valid JSON.
void append_json_string(std::string& out, std::string_view s) {
    static const char hex[] = "0123456789abcdef";
    auto esc_byte = [&](unsigned char c) {
        out += "\\u00";
        out += hex[c >> 4];
        out += hex[c & 15];
    };
    out += '"';
    const auto* p = reinterpret_cast<const unsigned char*>(s.data());
    const std::size_t n = s.size();
    std::size_t i = 0;
    while (i < n) {
        const unsigned char c = p[i];
        if (c < 0x80) {
            switch (c) {
                case '"': out += "\\\""; break;
                case '\\': out += "\\\\"; break;
                case '\n': out += "\\n"; break;
                case '\r': out += "\\r"; break;
                case '\t': out += "\\t"; break;
                case '\b': out += "\\b"; break;
                case '\f': out += "\\f"; break;
                default:
                    if (c < 0x20 || c == 0x7f) esc_byte(c);
                    else out += static_cast<char>(c);
            }
            ++i;
            continue;
        }
        // A multi-byte sequence: length and the range of its second byte (no
        // overlongs, no surrogates, nothing above U+10FFFF).
        std::size_t len = 0;
        unsigned char lo = 0x80, hi = 0xbf;
        if (c >= 0xc2 && c <= 0xdf) len = 2;
        else if (c == 0xe0) len = 3, lo = 0xa0;
        else if (c >= 0xe1 && c <= 0xec) len = 3;
        else if (c == 0xed) len = 3, hi = 0x9f;
        else if (c >= 0xee && c <= 0xef) len = 3;
        else if (c == 0xf0) len = 4, lo = 0x90;
        else if (c >= 0xf1 && c <= 0xf3) len = 4;
        else if (c == 0xf4) len = 4, hi = 0x8f;
        bool ok = len > 0 && i + len <= n && p[i + 1] >= lo && p[i + 1] <= hi;
        for (std::size_t k = 2; ok && k < len; ++k) ok = p[i + k] >= 0x80 && p[i + k] <= 0xbf;
        if (ok) {
            out.append(reinterpret_cast<const char*>(p + i), len);
            i += len;
        } else {
            esc_byte(c);
            ++i;
        }
    }
    out += '"';
}

// One JSON object, built field by field.
class json_line {
public:
    json_line& str(std::string_view key, std::string_view value) {
        sep(key);
        append_json_string(s_, value);
        return *this;
    }
    json_line& num(std::string_view key, std::int64_t value) {
        sep(key);
        s_ += std::to_string(value);
        return *this;
    }
    json_line& unum(std::string_view key, std::uint64_t value) {
        sep(key);
        s_ += std::to_string(value);
        return *this;
    }
    json_line& boolean(std::string_view key, bool value) {
        sep(key);
        s_ += value ? "true" : "false";
        return *this;
    }
    json_line& raw(std::string_view key, std::string_view json) {
        sep(key);
        s_ += json;
        return *this;
    }
    std::string done() const { return s_ + "}\n"; }

private:
    void sep(std::string_view key) {
        s_ += s_.size() > 1 ? "," : "";
        append_json_string(s_, key);
        s_ += ':';
    }
    std::string s_ = "{";
};

// Writes `line` with one write(2) (a regular file opened O_APPEND: the line
// lands whole, after every other line, whichever thread writes it).
void write_line(int fd, const std::string& line) {
    std::size_t off = 0;
    while (off < line.size()) {
        ssize_t r = ::write(fd, line.data() + off, line.size() - off);
        if (r < 0) {
            if (errno == EINTR) continue;
            return;  // nothing better to do: the history shows the gap
        }
        off += static_cast<std::size_t>(r);
    }
}

int open_append(const std::string& path) {
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) {
        std::fprintf(stderr, "distlock-fault-worker: cannot open %s: %s\n", path.c_str(), std::strerror(errno));
        std::exit(1);
    }
    return fd;
}

const char* errc_name(distlock::errc e) {
    switch (e) {
        case distlock::errc::unavailable: return "unavailable";
        case distlock::errc::lock_lost: return "lock_lost";
        case distlock::errc::not_owner: return "not_owner";
        case distlock::errc::in_doubt: return "in_doubt";
        case distlock::errc::invalid_argument: return "invalid_argument";
        case distlock::errc::unsupported: return "unsupported";
        case distlock::errc::access_denied: return "access_denied";
        case distlock::errc::would_deadlock: return "would_deadlock";
        case distlock::errc::cancelled: return "cancelled";
    }
    return "unknown";
}

// ---- the store ----------------------------------------------------------------

struct store_failure : std::runtime_error {
    using std::runtime_error::runtime_error;
};

class store_client {
public:
    explicit store_client(const std::string& path) {
        fd_ = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
        if (fd_ < 0) throw store_failure(std::string("socket: ") + std::strerror(errno));
        sockaddr_un addr{};
        addr.sun_family = AF_UNIX;
        if (path.size() >= sizeof(addr.sun_path)) throw store_failure("store socket path too long: " + path);
        std::memcpy(addr.sun_path, path.data(), path.size());
        if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0)
            throw store_failure("connect " + path + ": " + std::strerror(errno));
    }
    ~store_client() {
        if (fd_ >= 0) ::close(fd_);
    }
    store_client(const store_client&) = delete;
    store_client& operator=(const store_client&) = delete;

    std::string request(const std::string& msg) {
        for (;;) {
            if (::send(fd_, msg.data(), msg.size(), MSG_NOSIGNAL) >= 0) break;
            if (errno != EINTR) throw store_failure(std::string("store send: ") + std::strerror(errno));
        }
        char buf[512];
        for (;;) {
            ssize_t r = ::recv(fd_, buf, sizeof(buf), 0);
            if (r > 0) return std::string(buf, static_cast<std::size_t>(r));
            if (r == 0) throw store_failure("store closed the connection");
            if (errno != EINTR) throw store_failure(std::string("store recv: ") + std::strerror(errno));
        }
    }

private:
    int fd_ = -1;
};

// "<letter> <number>" replies.
std::int64_t reply_number(const std::string& reply, std::size_t from) {
    try {
        return std::stoll(reply.substr(from));
    } catch (const std::exception&) {
        throw store_failure("bad store reply: " + reply);
    }
}

// ---- options ----------------------------------------------------------------

struct options {
    std::string url, lock, id, history, store, nemesis_log, first_fault;
    double seconds = 0;
    long lease_ms = 1000, hold_ms = 200, wait_ms = 2000;
    std::string pause_point = "hold";
    double pause_prob = 0, kill_prob = 0;
    int threads = 1;
    long break_lock_every_ms = 0;
    long observe_every_ms = 0;
    bool election = false;
    bool asynchronous = false;
    std::uint64_t seed = 0;
    bool seeded = false;
};

// The mutex, or with --election a candidate of the election of that name: the
// grant loop uses either through this.
class grant_source {
public:
    grant_source(const distlock::provider& p, const options& o, distlock::lock_options lo)
        : asynchronous_(o.asynchronous) {
        if (!o.election) {
            mutex_.emplace(p.mutex(o.lock, std::move(lo)));
            return;
        }
        distlock::election_options eo;
        eo.id = o.id;
        eo.lease = lo.lease;
        eo.on_lost = std::move(lo.on_lost);
        eo.on_error = std::move(lo.on_error);
        election_.emplace(p.election(o.lock, std::move(eo)));
    }
    bool try_lock_for(std::chrono::milliseconds d) {
        if (!asynchronous_) return mutex_ ? mutex_->try_lock_for(d) : election_->campaign(d);
        auto done = std::make_shared<std::promise<bool>>();
        auto outcome = done->get_future();
        distlock::acquire_handler handler = [done](std::exception_ptr error, bool granted) {
            if (error) done->set_exception(error);
            else done->set_value(granted);
        };
        mutex_ ? mutex_->async_lock(d, std::move(handler)) : election_->async_campaign(d, std::move(handler));
        return outcome.get();  // rethrows the handler's distlock::error
    }
    std::uint64_t token() const { return mutex_ ? mutex_->token() : election_->term(); }
    bool held() const { return mutex_ ? mutex_->held() : election_->is_leader(); }
    void unlock() {
        if (!asynchronous_) return mutex_ ? mutex_->unlock() : election_->resign();
        auto done = std::make_shared<std::promise<void>>();
        auto over = done->get_future();
        distlock::release_handler handler = [done] { done->set_value(); };
        mutex_ ? mutex_->async_unlock(std::move(handler)) : election_->async_resign(std::move(handler));
        over.get();
    }

private:
    bool asynchronous_;
    std::optional<distlock::mutex> mutex_;
    std::optional<distlock::election> election_;
};

options parse(int argc, char** argv) {
    options o;
    bool have_threads = false;
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        if (a == "-h" || a == "--help") usage("help");
        if (i + 1 >= argc) usage("missing value for " + a);
        std::string v = argv[++i];
        auto num = [&](auto& out) {
            try {
                std::size_t used = 0;
                if constexpr (std::is_same_v<std::decay_t<decltype(out)>, double>) out = std::stod(v, &used);
                else if constexpr (std::is_same_v<std::decay_t<decltype(out)>, std::uint64_t>)
                    out = std::stoull(v, &used);
                else out = static_cast<std::decay_t<decltype(out)>>(std::stol(v, &used));
                if (used != v.size()) throw std::invalid_argument(v);
            } catch (const std::exception&) {
                usage("bad number for " + a + ": " + v);
            }
        };
        if (a == "--url") o.url = v;
        else if (a == "--lock") o.lock = v;
        else if (a == "--id") o.id = v;
        else if (a == "--history") o.history = v;
        else if (a == "--store") o.store = v;
        else if (a == "--nemesis-log") o.nemesis_log = v;
        else if (a == "--first-fault") o.first_fault = v;
        else if (a == "--seconds") num(o.seconds);
        else if (a == "--lease-ms") num(o.lease_ms);
        else if (a == "--hold-ms") num(o.hold_ms);
        else if (a == "--wait-ms") num(o.wait_ms);
        else if (a == "--pause-point") o.pause_point = v;
        else if (a == "--pause-prob") num(o.pause_prob);
        else if (a == "--kill-prob") num(o.kill_prob);
        else if (a == "--threads") num(o.threads), have_threads = true;
        else if (a == "--break-lock-every") num(o.break_lock_every_ms);
        else if (a == "--observe-every") num(o.observe_every_ms);
        else if (a == "--seed") num(o.seed), o.seeded = true;
        else if (a == "--election") o.election = v == "1";
        else if (a == "--async") o.asynchronous = v == "1";
        else usage("unknown option " + a);
    }
    (void)have_threads;
    if (o.url.empty()) usage("--url is required");
    if (o.lock.empty()) usage("--lock is required");
    if (o.id.empty()) usage("--id is required");
    if (o.threads < 0) usage("--threads must be >= 0");
    if (o.threads > 0 && (o.history.empty() || o.store.empty())) usage("--history and --store are required");
    if (o.threads == 0 && o.break_lock_every_ms <= 0 && o.observe_every_ms <= 0)
        usage("--threads 0 needs --break-lock-every or --observe-every");
    if (o.observe_every_ms > 0 && o.threads != 0) usage("--observe-every runs alone (--threads 0)");
    if (o.pause_point != "hold" && o.pause_point != "before-write") usage("--pause-point is hold or before-write");
    if (o.pause_prob < 0 || o.pause_prob > 1 || o.kill_prob < 0 || o.kill_prob > 1) usage("probabilities are 0..1");
    if (o.lease_ms <= 0 || o.hold_ms < 0 || o.wait_ms < 0 || o.seconds < 0) usage("durations must be >= 0");
    return o;
}

std::string history_path(const std::string& pattern, const std::string& w, int k, int threads) {
    if (auto at = pattern.find("{w}"); at != std::string::npos)
        return pattern.substr(0, at) + w + pattern.substr(at + 3);
    if (threads <= 1) return pattern;
    const auto slash = pattern.rfind('/');
    const auto dot = pattern.rfind('.');
    const std::string k_str = "." + std::to_string(k);
    if (dot == std::string::npos || (slash != std::string::npos && dot < slash)) return pattern + k_str;
    return pattern.substr(0, dot) + k_str + pattern.substr(dot);
}

// ---- one logical worker --------------------------------------------------------

class worker {
public:
    worker(const options& o, std::string w, std::string path, std::uint64_t seed)
        : o_(o), w_(std::move(w)), fd_(open_append(path)), rng_(seed) {}
    ~worker() { ::close(fd_); }

    // Runs the grant loop until stop or time over. Returns cycles.
    void run(std::int64_t end_ns) {
        store_client store(o_.store);
        // A worker started while its server is down (or the machine is slow) keeps
        // trying: the history starts once it is connected.
        std::optional<distlock::provider> connected;
        for (int attempt = 1; !connected; ++attempt) {
            try {
                connected.emplace(distlock::connect(o_.url));
            } catch (const distlock::error& e) {
                if (e.code_value() != distlock::errc::unavailable) throw;
                if (g_stop.load() || (end_ns != 0 && mono_ns() >= end_ns)) throw;
                std::fprintf(stderr, "distlock-fault-worker %s: connect attempt %d: %s\n", w_.c_str(), attempt,
                             e.what());
                sleep_ms(200);
            }
        }
        distlock::provider p = std::move(*connected);
        {
            const auto& caps = p.caps();
            json_line c;
            for (auto f :
                 {distlock::feature::fencing, distlock::feature::lease_expiry, distlock::feature::crash_release,
                  distlock::feature::loss_detection, distlock::feature::cross_process,
                  distlock::feature::notified_wakeup, distlock::feature::break_lock})
                c.boolean(distlock::to_string(f), caps.supports(f));
            std::string caps_json = c.done();
            caps_json.pop_back();  // the newline
            emit("start", json_line()
                              .num("pid", ::getpid())
                              .str("url", p.url())
                              .str("lock", o_.lock)
                              .raw("caps", caps_json)
                              .num("lease_ms", o_.lease_ms)
                              .num("default_lease_ms", p.default_lease().count())
                              .num("hold_ms", o_.hold_ms)
                              .num("wait_ms", o_.wait_ms));
        }
        distlock::lock_options lo;
        lo.lease = std::chrono::milliseconds(o_.lease_ms);
        lo.on_lost = [this](const distlock::lock_event& e) {
            emit("lost", json_line().unum("token", e.token).str("reason", e.reason));
        };
        lo.on_error = [this](const distlock::lock_event& e, const distlock::error& err) {
            emit("error",
                 json_line().unum("token", e.token).str("reason", e.reason).str("errc", errc_name(err.code_value())));
        };
        grant_source m(p, o_, std::move(lo));

        std::int64_t cycles = 0;
        while (!g_stop.load() && (end_ns == 0 || mono_ns() < end_ns)) {
            // 1. acquire
            emit("acquire", json_line().str("phase", "invoke"));
            bool ok = false;
            try {
                ok = m.try_lock_for(std::chrono::milliseconds(o_.wait_ms));
            } catch (const distlock::error& e) {
                emit("acquire",
                     json_line().str("phase", "unknown").str("errc", errc_name(e.code_value())).str("error", e.what()));
                sleep_ms(100);  // a server that refuses at once must not flood the history
                continue;
            } catch (const std::exception& e) {
                emit("acquire", json_line().str("phase", "unknown").str("errc", "exception").str("error", e.what()));
                sleep_ms(100);
                continue;
            }
            if (!ok) {
                emit("acquire", json_line().str("phase", "fail"));
                continue;
            }
            const std::uint64_t token = m.token();
            emit("acquire", clocks(json_line().str("phase", "ok").unum("token", token)));

            // 2. fenced write: announce
            fenced_write(store, token, "announce");

            // 3. point hold
            sleep_ms(o_.hold_ms);
            if (o_.kill_prob > 0 && (chance(o_.kill_prob) || first_fault())) {
                emit("kill", json_line().str("point", "hold"));
                ::raise(SIGKILL);
            }
            if (o_.pause_point == "hold") maybe_pause("hold");

            // 4. held() check
            const bool held = m.held();
            emit("held", clocks(json_line().boolean("held", held).str("step", "check").unum("token", token)));
            if (held) {
                // 5. read the counter
                emit("read", json_line().str("phase", "invoke"));
                const std::string got = store.request("G " + w_);
                if (got.rfind("V ", 0) != 0) throw store_failure("bad store reply to G: " + got);
                const std::int64_t value = reply_number(got, 2);
                emit("read", json_line().str("phase", "ok").num("value", value));

                // 6. point before-write
                if (o_.pause_point == "before-write") maybe_pause("before-write");

                // 7. set the counter (unfenced)
                emit("set", json_line().str("phase", "invoke").num("value", value + 1));
                const std::string r = store.request("S " + w_ + " " + std::to_string(value + 1));
                if (r != "OK") throw store_failure("bad store reply to S: " + r);
                emit("set", json_line().str("phase", "ok").num("value", value + 1));

                // 8. fenced write: final
                fenced_write(store, token, "final");
            }
            // 9. release
            emit("release", json_line().str("phase", "invoke").unum("token", token));
            m.unlock();
            emit("release", json_line().str("phase", "ok").unum("token", token));
            ++cycles;
        }
        emit("exit", json_line().num("cycles", cycles));
    }

private:
    void emit(std::string_view ev, const json_line& rest) {
        std::string body = rest.done();  // {"k":v,...}\n or {}\n
        std::string line = "{\"t\":" + std::to_string(mono_ns()) + ",\"w\":";
        append_json_string(line, w_);
        line += ",\"ev\":";
        append_json_string(line, ev);
        if (body.size() > 3) line += "," + body.substr(1);
        else line += "}\n";
        write_line(fd_, line);
    }

    // The clocks as the library sees them (through libc, so libfaketime moves
    // them): wall_ms = system_clock, steady_ms = steady_clock. Only for reading
    // a clock-jump run by eye; `t` stays the raw CLOCK_MONOTONIC.
    static json_line& clocks(json_line& j) {
        using namespace std::chrono;
        return j.num("wall_ms", duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count())
            .num("steady_ms", duration_cast<milliseconds>(steady_clock::now().time_since_epoch()).count());
    }
    static json_line& clocks(json_line&& j) { return clocks(j); }

    bool chance(double p) {
        std::uniform_real_distribution<double> d(0.0, 1.0);
        return d(rng_) < p;
    }

    // True once, for the first worker of all sharing --first-fault to ask.
    bool first_fault() {
        if (o_.first_fault.empty()) return false;
        const int fd = ::open(o_.first_fault.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (fd < 0) return false;
        ::close(fd);
        return true;
    }

    void maybe_pause(const char* point) {
        if (o_.pause_prob <= 0 || !(chance(o_.pause_prob) || first_fault())) return;
        emit("pause", json_line().str("point", point).str("phase", "stop"));
        ::raise(SIGSTOP);
        emit("pause", json_line().str("point", point).str("phase", "cont"));
    }

    void fenced_write(store_client& store, std::uint64_t token, const char* step) {
        emit("write", json_line().str("phase", "invoke").unum("token", token).str("step", step));
        const std::string r = store.request("W " + w_ + " " + std::to_string(token));
        if (r.size() < 3 || (r[0] != 'A' && r[0] != 'R') || r[1] != ' ')
            throw store_failure("bad store reply to W: " + r);
        emit("write", json_line()
                          .str("phase", "ok")
                          .unum("token", token)
                          .str("step", step)
                          .boolean("accepted", r[0] == 'A')
                          .num("highest", reply_number(r, 2)));
    }

    const options& o_;
    std::string w_;
    int fd_;
    std::mt19937_64 rng_;
};

// The in-process break-lock nemesis: testing::break_lock every `every_ms`.
void break_lock_loop(const options& o, std::int64_t end_ns) {
    const int fd = o.nemesis_log.empty() ? 2 : open_append(o.nemesis_log);
    distlock::provider p = distlock::connect(o.url);
    // Jittered (0.5 to 1.5 periods): a fixed period locks onto the grant cycle
    // (hold + a few ms) and would always strike at the same point of a grant.
    std::mt19937_64 rng(o.seeded ? o.seed ^ 0x9e3779b97f4a7c15ull : std::random_device{}());
    std::uniform_real_distribution<double> jitter(0.5, 1.5);
    while (!g_stop.load() && (end_ns == 0 || mono_ns() < end_ns)) {
        // Sleep in slices so that SIGTERM ends the loop soon.
        const std::int64_t wake = mono_ns() + static_cast<std::int64_t>(o.break_lock_every_ms * 1e6 * jitter(rng));
        while (!g_stop.load() && mono_ns() < wake)
            sleep_ms(std::min<std::int64_t>(50, (wake - mono_ns()) / 1000000 + 1));
        if (g_stop.load() || (end_ns != 0 && mono_ns() >= end_ns)) break;
        json_line j;
        j.num("t", mono_ns()).str("ev", "break-lock").str("by", o.id).str("lock", o.lock);
        try {
            distlock::testing::break_lock(p, o.lock);
            j.boolean("ok", true);
        } catch (const std::exception& e) {
            j.boolean("ok", false).str("error", e.what());
        }
        j.num("t_done", mono_ns());
        write_line(fd, j.done());
    }
    if (fd != 2) ::close(fd);
}

// The server's view of the lock (--observe-every): a line whenever it changes.
void observe_loop(const options& o, std::int64_t end_ns) {
    const int fd = o.nemesis_log.empty() ? 1 : open_append(o.nemesis_log);
    std::optional<distlock::provider> p;
    std::string last;
    while (!g_stop.load() && (end_ns == 0 || mono_ns() < end_ns)) {
        const std::int64_t invoked = mono_ns();
        std::optional<distlock::lock_info> info;
        std::string error;
        try {
            if (!p) p.emplace(distlock::connect(o.url));
            info = p->inspect(o.lock);
        } catch (const std::exception& e) {
            error = e.what();
        }
        auto fields = [&](json_line& j) -> json_line& {
            if (!info) return j.str("error", error);
            if (info->held) j.boolean("held", *info->held);
            else j.raw("held", "null");
            if (info->token) j.unum("token", *info->token);
            if (info->holder) j.str("holder", *info->holder);
            return j;
        };
        json_line state;
        if (std::string now = fields(state).done(); now != last) {
            last = std::move(now);
            json_line line;
            line.num("t", mono_ns()).str("ev", "server").num("t_invoke", invoked);
            write_line(fd, fields(line).done());
        }
        const std::int64_t wake = invoked + static_cast<std::int64_t>(o.observe_every_ms) * 1000000;
        while (!g_stop.load() && mono_ns() < wake) sleep_ms(std::max<std::int64_t>(1, (wake - mono_ns()) / 1000000));
    }
    if (fd != 1) ::close(fd);
}

}  // namespace

int main(int argc, char** argv) {
    const options o = parse(argc, argv);

    struct sigaction sa {};
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGTERM, &sa, nullptr);
    sigaction(SIGINT, &sa, nullptr);
    signal(SIGPIPE, SIG_IGN);

    const std::int64_t end_ns = o.seconds > 0 ? mono_ns() + static_cast<std::int64_t>(o.seconds * 1e9) : 0;
    const std::uint64_t base_seed =
        o.seeded ? o.seed : (std::random_device{}() ^ (static_cast<std::uint64_t>(::getpid()) << 20) ^ mono_ns());

    std::atomic<int> status{0};
    auto run_one = [&](const std::string& w, const std::string& path, std::uint64_t seed) {
        try {
            worker wk(o, w, path, seed);
            wk.run(end_ns);
        } catch (const store_failure& e) {
            std::fprintf(stderr, "distlock-fault-worker %s: store failure: %s\n", w.c_str(), e.what());
            std::fflush(stderr);
            std::_Exit(2);  // the lock is released by the process's end (or its expiry)
        } catch (const std::exception& e) {
            std::fprintf(stderr, "distlock-fault-worker %s: %s\n", w.c_str(), e.what());
            status.store(1);
        }
    };

    std::vector<std::thread> threads;
    if (o.break_lock_every_ms > 0) threads.emplace_back([&] { break_lock_loop(o, end_ns); });
    if (o.observe_every_ms > 0) threads.emplace_back([&] { observe_loop(o, end_ns); });
    if (o.threads == 1) {
        run_one(o.id, history_path(o.history, o.id, 1, 1), base_seed);
        g_stop.store(true);  // ends the break-lock thread, if any
    } else if (o.threads > 1) {
        std::vector<std::thread> workers;
        for (int k = 1; k <= o.threads; ++k) {
            std::string w = o.id + "." + std::to_string(k);
            workers.emplace_back(run_one, w, history_path(o.history, w, k, o.threads), base_seed + 7919u * k);
        }
        for (auto& t : workers) t.join();
        g_stop.store(true);
    }
    for (auto& t : threads) t.join();
    return status.load();
}
