// A flash sale in Asio coroutines: a few hundred buyers on one thread, each
// taking the lock of a stock segment asynchronously (<distlock/asio.hpp>), so a
// waiting buyer holds no thread.
//
//   distlock-example-asio-flash-sale [URL] [BUYERS] [SEGMENTS] [STOCK]
//     URL       the lock backend (default memory://flash-sale)
//     BUYERS    buyers, one coroutine each (default 300)
//     SEGMENTS  the stock is split into this many segments, each with its own
//               lock "flash-sale:<run>:segment:<i>", so buyers of different
//               segments do not wait for each other (default 4)
//     STOCK     items per segment (default 50)
//
// A buyer starts at segment (buyer % SEGMENTS) and moves on to the next one
// when it is sold out. Inside a segment's lock it reads the stock, waits a
// moment (as a round trip to the store would) and writes it back less one: two
// buyers inside one segment at once would sell an item twice. It prints each
// segment's sales and exits 1 if anything was oversold or lost.
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include <asio.hpp>

#include "distlock/asio.hpp"
#include "distlock/distlock.hpp"

using namespace std::chrono_literals;

namespace {

// One segment of the stock: what is left, what was sold and to whom.
struct segment {
    int left = 0;
    int sold = 0;
    int sellers_inside = 0;  // buyers inside its lock now (must stay <= 1)
    bool overlapped = false;
    std::vector<int> buyers;
};

struct sale {
    std::vector<segment> segments;
    std::vector<std::string> lock_names;
    int empty_handed = 0;
};

// One buyer: tries its segments in turn until it buys an item or all are
// sold out.
asio::awaitable<void> buy(distlock::provider& locks, sale& s, int buyer) {
    const auto n = s.segments.size();
    for (std::size_t k = 0; k < n; ++k) {
        const std::size_t i = (static_cast<std::size_t>(buyer) + k) % n;
        auto m = locks.mutex(s.lock_names[i]);
        if (!co_await distlock::async_lock(m, 60s, asio::use_awaitable)) continue;  // busy for a minute: next
        segment& seg = s.segments[i];
        seg.overlapped = seg.overlapped || ++seg.sellers_inside > 1;
        const int left = seg.left;  // read the stock ...
        asio::steady_timer store(co_await asio::this_coro::executor, 1ms);
        co_await store.async_wait(asio::use_awaitable);  // ... a round trip ...
        const bool bought = left > 0;
        if (bought) {
            seg.left = left - 1;  // ... and write it back
            ++seg.sold;
            seg.buyers.push_back(buyer);
        }
        --seg.sellers_inside;
        co_await distlock::async_unlock(m, asio::use_awaitable);
        if (bought) co_return;
    }
    ++s.empty_handed;
}

int arg(int argc, char** argv, int i, int fallback) { return argc > i ? std::atoi(argv[i]) : fallback; }

}  // namespace

int main(int argc, char** argv) {
    const std::string url = argc > 1 ? argv[1] : "memory://flash-sale";
    const int buyers = arg(argc, argv, 2, 300);
    const int segments = arg(argc, argv, 3, 4);
    const int stock = arg(argc, argv, 4, 50);
    if (buyers < 1 || segments < 1 || stock < 0) {
        std::fprintf(stderr, "usage: %s [URL] [BUYERS >= 1] [SEGMENTS >= 1] [STOCK >= 0]\n", argv[0]);
        return 2;
    }
    try {
        auto locks = distlock::connect(url);
        sale s;
        s.segments.resize(static_cast<std::size_t>(segments));
        const auto run = std::to_string(std::random_device{}());  // this sale's own lock names
        for (int i = 0; i < segments; ++i) {
            s.segments[static_cast<std::size_t>(i)].left = stock;
            s.lock_names.push_back("flash-sale:" + run + ":segment:" + std::to_string(i));
        }

        asio::io_context io(1);  // every buyer on this one thread
        std::string failure;
        for (int b = 0; b < buyers; ++b)
            asio::co_spawn(io, buy(locks, s, b), [&failure](std::exception_ptr e) {
                if (!e) return;
                try {
                    std::rethrow_exception(e);
                } catch (const std::exception& x) {
                    failure = x.what();
                }
            });
        io.run();
        if (!failure.empty()) {
            std::fprintf(stderr, "a buyer failed: %s\n", failure.c_str());
            return 1;
        }

        int sold = 0;
        bool ok = true;
        for (std::size_t i = 0; i < s.segments.size(); ++i) {
            const auto& seg = s.segments[i];
            std::string first;  // the first few buyers served, in order
            for (std::size_t b = 0; b < seg.buyers.size() && b < 5; ++b)
                first += (b ? ", " : "") + std::to_string(seg.buyers[b]);
            std::printf("segment %zu: sold %d of %d, %d left (to buyers %s%s)%s\n", i, seg.sold, stock, seg.left,
                        first.c_str(), seg.buyers.size() > 5 ? ", ..." : "",
                        seg.overlapped ? " (two buyers inside its lock at once!)" : "");
            ok = ok && !seg.overlapped && seg.left >= 0 && seg.sold + seg.left == stock &&
                 static_cast<int>(seg.buyers.size()) == seg.sold;
            sold += seg.sold;
        }
        const int expected = std::min(buyers, segments * stock);
        std::printf("%d buyers, %d items: sold %d, %d went home empty-handed\n", buyers, segments * stock, sold,
                    s.empty_handed);
        ok = ok && sold == expected && sold + s.empty_handed == buyers;
        std::printf(ok ? "no item oversold or lost\n" : "WRONG: the sale does not add up\n");
        return ok ? 0 : 1;
    } catch (const distlock::error& e) {
        std::fprintf(stderr, "%s\n", e.what());
        return 1;
    }
}
