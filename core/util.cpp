// Small shared helpers of the backend-author interface: backoff, random tokens,
// hashing, durations, and the default hooks of spi::backend / spi::lock_handle.
#include <openssl/evp.h>
#include <pthread.h>
#include <sys/random.h>

#include <cerrno>
#include <cstring>

#include <array>
#include <atomic>
#include <charconv>
#include <cmath>
#include <random>
#include <thread>

#include "distlock/provider.hpp"
#include "distlock/spi/backend.hpp"
#include "process.hpp"

namespace distlock {

std::chrono::milliseconds parse_duration(std::string_view text) {
    auto fail = [&]() -> std::chrono::milliseconds {
        throw_error(errc::invalid_argument, "",
                    "'" + std::string(text) + "' is not a duration (e.g. 500ms, 2s, 1m30s, or bare seconds: 1.5)");
    };
    if (text.empty()) return fail();
    // Bare seconds ("1.5"), or number-unit pairs from the largest unit down
    // ("1h2m", "1m30s", "2s500ms").
    double ms = 0;
    int last_rank = 99;
    for (std::size_t i = 0; i < text.size();) {
        const std::size_t start = i;
        while (i < text.size() && (spi::ascii_digit(text[i]) || text[i] == '.')) ++i;
        std::string number(text.substr(start, i - start));
        if (number.empty() || number == "." || number.find('.') != number.rfind('.')) return fail();
        const std::size_t unit_start = i;
        while (i < text.size() && spi::ascii_alpha(text[i])) ++i;
        const std::string_view unit = text.substr(unit_start, i - unit_start);
        // from_chars, not stod: "1.5" must not read as 1 where the locale's
        // decimal separator is ','.
        double value = 0;
        const auto [end, ec] = std::from_chars(number.data(), number.data() + number.size(), value);
        if (ec != std::errc{} || end != number.data() + number.size()) return fail();
        double per = 0;
        int rank = 0;  // units must come largest first, each at most once
        if (unit.empty()) {
            if (start != 0) return fail();  // a bare number only alone: "1m30" is ambiguous
            per = 1000, rank = 3;
        } else if (unit == "h") per = 3600000, rank = 5;
        else if (unit == "m" || unit == "min") per = 60000, rank = 4;
        else if (unit == "s") per = 1000, rank = 3;
        else if (unit == "ms") per = 1, rank = 2;
        else if (unit == "us") per = 0.001, rank = 1;
        else return fail();
        if (rank >= last_rank) return fail();
        last_rank = rank;
        ms += value * per;
    }
    if (!std::isfinite(ms) || ms > 1e15) return fail();
    return std::chrono::milliseconds(static_cast<long long>(std::llround(ms)));
}

}  // namespace distlock

namespace distlock::detail {
namespace {

// Bumped in the child of every fork(): per-thread random state copied from the
// parent must not be used again there (both processes would draw the same
// owner tokens, and one could release the other's lock), nor the parent's
// grants, connections and threads (process.hpp).
std::atomic<unsigned> fork_count{0};
const bool fork_handler_installed = [] {
    ::pthread_atfork(nullptr, nullptr, [] { fork_count.fetch_add(1, std::memory_order_relaxed); });
    return true;
}();

// What abandon() keeps: a list that only grows, pushed without a lock (a
// forked child may inherit any mutex locked).
struct abandoned {
    std::shared_ptr<const void> object;
    abandoned* next;
};
std::atomic<abandoned*> abandoned_list{nullptr};

}  // namespace

unsigned fork_generation() noexcept { return fork_count.load(std::memory_order_relaxed); }

void abandon(std::shared_ptr<const void> object) noexcept {
    if (!object) return;
    auto* node = new abandoned{std::move(object), abandoned_list.load()};  // noexcept: terminates when out of memory
    while (!abandoned_list.compare_exchange_weak(node->next, node)) {}
}

}  // namespace distlock::detail

namespace distlock::spi {
namespace {

using detail::fork_generation;

// The kernel's CSPRNG, read 4 KiB at a time into a per-thread pool: one system
// call per 256 tokens instead of one per token (~10 us each).
void random_bytes(unsigned char* out, std::size_t n) {
    struct pool {
        std::array<unsigned char, 4096> bytes{};
        std::size_t used = 4096;  // empty
        unsigned generation = ~0u;
    };
    thread_local pool p;
    const auto generation = fork_generation();
    if (p.generation != generation) {
        p.used = p.bytes.size();
        p.generation = generation;
    }
    if (p.bytes.size() - p.used < n) {
        std::size_t got = 0;
        while (got < p.bytes.size()) {
            ssize_t r = ::getrandom(p.bytes.data() + got, p.bytes.size() - got, 0);
            if (r > 0) got += static_cast<std::size_t>(r);
            else if (errno != EINTR) throw_error(errc::unavailable, "", "getrandom failed", errno);
        }
        p.used = 0;
    }
    std::memcpy(out, p.bytes.data() + p.used, n);
    std::memset(p.bytes.data() + p.used, 0, n);  // a token drawn is not kept
    p.used += n;
}

std::array<unsigned char, 16> random_bytes16() {
    std::array<unsigned char, 16> b{};
    random_bytes(b.data(), b.size());
    return b;
}

// For jitter only (not secret): seeded from the pool, again after a fork.
std::mt19937_64& rng() {
    thread_local std::mt19937_64 engine;
    thread_local unsigned generation = ~0u;
    if (const auto g = fork_generation(); generation != g) {
        std::array<std::uint32_t, 8> seed{};
        random_bytes(reinterpret_cast<unsigned char*>(seed.data()), sizeof seed);
        std::seed_seq seq(seed.begin(), seed.end());
        engine.seed(seq);
        generation = g;
    }
    return engine;
}

}  // namespace

std::string to_hex(std::string_view bytes) {
    static constexpr char digits[] = "0123456789abcdef";
    std::string out;
    out.reserve(bytes.size() * 2);
    for (unsigned char c : bytes) {
        out += digits[c >> 4];
        out += digits[c & 15];
    }
    return out;
}

std::string random_token() {
    auto b = random_bytes16();
    return to_hex(std::string_view(reinterpret_cast<const char*>(b.data()), b.size()));
}

std::string random_uuid() {
    auto b = random_bytes16();
    b[6] = static_cast<unsigned char>((b[6] & 0x0f) | 0x40);
    b[8] = static_cast<unsigned char>((b[8] & 0x3f) | 0x80);
    std::string hex = to_hex(std::string_view(reinterpret_cast<const char*>(b.data()), b.size()));
    return hex.substr(0, 8) + '-' + hex.substr(8, 4) + '-' + hex.substr(12, 4) + '-' + hex.substr(16, 4) + '-' +
           hex.substr(20);
}

std::string sha256(std::string_view data) {
    std::array<unsigned char, EVP_MAX_MD_SIZE> md{};
    unsigned int len = 0;
    if (EVP_Digest(data.data(), data.size(), md.data(), &len, EVP_sha256(), nullptr) != 1)
        throw_error(errc::unavailable, "", "SHA-256 failed in libcrypto");
    return std::string(reinterpret_cast<const char*>(md.data()), len);
}

std::string sha256_hex(std::string_view data) { return to_hex(sha256(data)); }

backoff::backoff(std::chrono::milliseconds min, std::chrono::milliseconds max) noexcept
    : min_(std::max(min, std::chrono::milliseconds{1})), max_(std::max(max, min_)), ceiling_(min_) {}

std::chrono::nanoseconds backoff::next(deadline until) {
    std::uniform_int_distribution<long long> dist(min_.count() * 1000, ceiling_.count() * 1000);
    std::chrono::nanoseconds delay = std::chrono::microseconds(dist(rng()));
    ceiling_ = std::min(max_, ceiling_ * 2);
    auto left = until - clock::now();
    if (left < delay) delay = std::max(left, std::chrono::nanoseconds{0});
    return delay;
}

std::chrono::milliseconds random_between(std::chrono::milliseconds lo, std::chrono::milliseconds hi) {
    std::uniform_int_distribution<long long> dist(lo.count(), std::max(lo.count(), hi.count()));
    return std::chrono::milliseconds(dist(rng()));
}

bool backoff::sleep(deadline until) {
    if (clock::now() >= until) return false;
    std::this_thread::sleep_for(next(until));
    return true;
}

void backend::keepalive_batch(std::span<lock_handle* const> handles, std::span<keepalive_result> results) {
    for (std::size_t i = 0; i < handles.size(); ++i)
        results[i] = keepalive_result::lost("the " + std::string(name()) +
                                            " backend does not implement renewals or checks (keepalive_batch)");
}

lock_info backend::inspect(std::string_view, lock_kind) {
    lock_info info;
    const std::string why = "the " + std::string(name()) + " backend does not implement inspect";
    for (const char* field : {"held", "waiters"}) info.unknown.emplace(field, why);
    return info;
}

read_write_info backend::inspect_read_write(std::string_view) {
    read_write_info info;
    const std::string why = "the " + std::string(name()) + " backend does not implement inspect for read-write locks";
    for (const char* field : {"write_held", "readers", "writers_waiting"}) info.unknown.emplace(field, why);
    return info;
}

semaphore_info backend::inspect_semaphore(std::string_view) {
    semaphore_info info;
    const std::string why = "the " + std::string(name()) + " backend does not implement inspect for semaphores";
    for (const char* field : {"size", "permits", "free"}) info.unknown.emplace(field, why);
    return info;
}

void backend::break_lock(std::string_view) {
    throw_error(errc::unsupported, std::string(name()), "break_lock is not supported by this backend");
}

}  // namespace distlock::spi
