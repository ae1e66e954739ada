// distlock flash-sale: the seed scenario. Many buyers on several "app servers"
// (processes) read the stock, pause, and write it back decremented. Without a
// lock they oversell; with one lock per stock segment they sell exactly the stock.
#include <fcntl.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <semaphore>
#include <thread>

#include "common.hpp"
#include "distlock/distlock.hpp"
#include "distlock/spi/url.hpp"
#include "flash_sale_async.hpp"
#include "optimistic_stock.hpp"
#include "tool.hpp"

namespace distlock::tool {
namespace {

// The shared stock store: one fixed-width decimal record per segment in a file.
// --store may name a file in a shared directory: every open (the parent's and
// each app server's) refuses a symlink, another user's file, a hard link and a
// file others may write (access denied, 77), and creates it 0600.
class store {
public:
    static constexpr std::size_t record = 22;
    explicit store(const std::string& path) : fd_(open_own_file(path, "the stock store " + path, "flash-sale")) {}
    ~store() { ::close(fd_); }
    store(const store&) = delete;
    store& operator=(const store&) = delete;
    long long get(int seg) const {
        char buf[record + 1] = {};
        if (::pread(fd_, buf, record, static_cast<off_t>(seg) * record) != static_cast<ssize_t>(record))
            throw std::runtime_error("cannot read the stock store");
        return std::atoll(buf);
    }
    void set(int seg, long long v) const {
        char buf[record + 1];
        std::snprintf(buf, sizeof buf, "%021lld\n", v);
        if (::pwrite(fd_, buf, record, static_cast<off_t>(seg) * record) != static_cast<ssize_t>(record))
            throw std::runtime_error("cannot write the stock store");
    }

private:
    int fd_;
};

struct settings {
    backend_choice source;          // --backend, --backend-file, the environment or the default directory
    std::string backend;            // the URL, from source
    std::string strategy = "lock";  // lock | optimistic (no lock: version-checked UPDATE, SQL URLs)
    int db_pool = 20;               // optimistic: statements in flight per app server (its DB pool)
    std::string name = "stock:product_01";
    std::string store_path;
    bool no_lock = false;
    bool async = false;  // the buyers are coroutines waiting with lock_async(), not threads
    int processes = 2, concurrency = 200, requests = 1000, segments = 1;
    long long stock = 50;
    double pause_ms = 1.0;
    double wait_s = 30;
    bool json = false, quiet = false;
};

// The lock name of a segment, and the stock row name in the optimistic strategy.
std::string segment_name(const settings& s, int seg) {
    return s.segments == 1 ? s.name : s.name + ":seg" + std::to_string(seg);
}

// The segment request r of app server `index` tries first.
int first_segment(const settings& s, int r, int index) {
    return static_cast<int>((static_cast<unsigned>(r) * 2654435761u + index) % s.segments);
}

// How many requests app server `index` serves, and how many of them at once.
int request_share(const settings& s, int index) {
    return s.requests / s.processes + (index < s.requests % s.processes ? 1 : 0);
}
int buyer_share(const settings& s, int index) {
    return std::max(1, s.concurrency / s.processes + (index < s.concurrency % s.processes ? 1 : 0));
}

// An app server's report to the parent.
std::string sale_report(unsigned long long sold, unsigned long long failed, const std::vector<double>& latencies,
                        const std::vector<double>& purchases) {
    std::string out;
    put_u64(out, sold);
    put_u64(out, failed);
    put_doubles(out, latencies);
    put_doubles(out, purchases);
    return out;
}

// What one purchase attempt on one stock segment came to.
enum class attempt { sold, segment_empty, failed };

// One app server: its share of the requests, served by its share of the buyers
// (threads). Each request tries the segments in turn, from one picked by the
// request, until `buy(seg)` sells or fails. A segment found empty never refills:
// it is remembered locally and not tried again (the usual flash-sale "sold out"
// flag), so the requests after the sell-out are cheap. Reports sold, failed and
// the latency of every request.
std::string serve_buyers(const settings& s, int index, const std::function<attempt(int seg)>& buy) {
    const int share = request_share(s, index);
    const int buyers = buyer_share(s, index);
    std::vector<std::atomic<bool>> sold_out(static_cast<std::size_t>(s.segments));
    std::atomic<int> next{0};
    std::atomic<unsigned long long> sold{0}, failed{0};
    std::mutex mu;
    std::vector<double> latencies, purchases;
    std::string failure;
    auto buyer = [&] {
        std::vector<double> mine, bought;
        try {
            for (int r; (r = next++) < share;) {
                auto t0 = std::chrono::steady_clock::now();
                const int first = first_segment(s, r, index);
                for (int k = 0; k < s.segments; ++k) {
                    const int seg = (first + k) % s.segments;
                    if (sold_out[static_cast<std::size_t>(seg)].load()) continue;
                    const attempt a = buy(seg);
                    if (a == attempt::segment_empty) {
                        sold_out[static_cast<std::size_t>(seg)] = true;
                        continue;
                    }
                    ++(a == attempt::sold ? sold : failed);
                    if (a == attempt::sold) bought.push_back(ms_since(t0));
                    break;
                }
                mine.push_back(ms_since(t0));
            }
        } catch (const std::exception& e) {
            std::lock_guard lk(mu);
            failure = e.what();
        }
        std::lock_guard lk(mu);
        latencies.insert(latencies.end(), mine.begin(), mine.end());
        purchases.insert(purchases.end(), bought.begin(), bought.end());
    };
    std::vector<std::thread> threads;
    for (int b = 0; b < buyers; ++b) threads.emplace_back(buyer);
    for (auto& t : threads) t.join();
    if (!failure.empty()) throw std::runtime_error(failure);
    return sale_report(sold.load(), failed.load(), latencies, purchases);
}

// The optimistic strategy: no lock at all; a purchase is a version-checked
// UPDATE of the segment's stock row, retried a bounded number of times. A
// purchase that lost every race fails (it never oversells).
std::string optimistic_app_server(const settings& s, int index) {
    auto stock = open_optimistic_stock(s.backend);
    std::counting_semaphore<> db_pool(std::max(1, s.db_pool));
    return serve_buyers(s, index, [&](int seg) {
        db_pool.acquire();
        stock_result res;
        try {
            res = stock->take(segment_name(s, seg));
        } catch (...) {
            db_pool.release();
            throw;
        }
        db_pool.release();
        switch (res.outcome) {
            case stock_outcome::taken: return attempt::sold;
            case stock_outcome::sold_out: return attempt::segment_empty;
            case stock_outcome::conflict: break;
        }
        return attempt::failed;
    });
}

// The stock of each segment, from its row.
std::vector<long long> optimistic_stock_left(const settings& s) {
    auto st = open_optimistic_stock(s.backend);
    std::vector<long long> left;
    for (int i = 0; i < s.segments; ++i) left.push_back(st->stock(segment_name(s, i)).value_or(0));
    return left;
}

// Creates the stock table and sets each segment's row.
void optimistic_stock_setup(const settings& s, const std::function<long long(int seg)>& segment_stock) {
    auto st = open_optimistic_stock(s.backend);
    st->create_table();
    for (int i = 0; i < s.segments; ++i) st->put(segment_name(s, i), segment_stock(i));
}

// The lock strategy (or no lock at all): read the segment's stock from the
// shared store, pause for the business work, write it back decremented, under a
// distlock mutex per segment. A buyer that waits too long for the lock fails.
std::string app_server(const settings& s, int index) {
    store stock(s.store_path);
    std::optional<provider> locks;
    std::vector<distlock::mutex> seg_locks;
    if (!s.no_lock) {
        locks = connect(s.backend);
        for (int i = 0; i < s.segments; ++i) seg_locks.push_back(locks->mutex(segment_name(s, i)));
    }
    const auto pause = std::chrono::duration<double, std::milli>(s.pause_ms);
    const auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::duration<double>(s.wait_s));
    if (s.async) {
        sale_plan plan{request_share(s, index),
                       buyer_share(s, index),
                       s.segments,
                       pause,
                       wait,
                       [&](int r) { return first_segment(s, r, index); },
                       [&](int seg) { return segment_name(s, seg); },
                       [&](int seg) { return stock.get(seg); },
                       [&](int seg, long long left) { stock.set(seg, left); }};
        auto res = serve_buyers_async(*locks, plan);
        return sale_report(res.sold, res.failed, res.latencies_ms, res.purchase_ms);
    }
    return serve_buyers(s, index, [&](int seg) {
        std::unique_lock<distlock::mutex> guard;
        if (!s.no_lock) {
            guard = std::unique_lock(seg_locks[static_cast<std::size_t>(seg)], wait);
            if (!guard.owns_lock()) return attempt::failed;
        }
        long long left = stock.get(seg);
        if (left <= 0) return attempt::segment_empty;
        std::this_thread::sleep_for(pause);  // the business work between read and write
        stock.set(seg, left - 1);
        return attempt::sold;
    });
}

int run_flash_sale(settings s) {
    auto at_least = [](double value, const char* option, int min) {
        if (value < min)
            throw invalid_argument_error(errc::invalid_argument, "flash-sale",
                                         std::string(option) + " must be at least " + std::to_string(min));
    };
    at_least(s.processes, "--processes", 1);
    at_least(s.concurrency, "--concurrency", 1);
    at_least(static_cast<double>(s.requests), "--requests", 0);
    at_least(s.segments, "--segments", 1);
    at_least(static_cast<double>(s.stock), "--stock", 0);
    at_least(s.pause_ms, "--pause-ms", 0);
    const bool optimistic = s.strategy == "optimistic";
    if (s.strategy != "lock" && !optimistic)
        throw invalid_argument_error(errc::invalid_argument, "flash-sale", "--strategy is lock or optimistic");
    if (optimistic && s.no_lock)
        throw invalid_argument_error(errc::invalid_argument, "flash-sale",
                                     "--strategy optimistic takes no lock already");
    if (s.async && (optimistic || s.no_lock))
        throw invalid_argument_error(errc::invalid_argument, "flash-sale",
                                     "--async is for the lock strategy: its buyers wait for the lock asynchronously");
    if (!s.no_lock && !optimistic) require_cross_process(s.backend, s.processes, "flash-sale");
    if (optimistic) {
        const auto scheme = spi::url::parse(s.backend).scheme();
        if (scheme != "mysql" && scheme != "postgres" && scheme != "postgresql")
            throw invalid_argument_error(
                errc::invalid_argument, "flash-sale",
                "--strategy optimistic needs a mysql:// or postgres:// URL, not " + scheme + "://");
    }
    // Stock stores are set up and read in child processes too, so that this
    // process opens no database connection and starts no thread before fork.
    auto segment_stock = [&](int seg) { return s.stock / s.segments + (seg < s.stock % s.segments ? 1 : 0); };
    auto stock_left = [&]() -> long long {
        if (!optimistic) {
            store view(s.store_path);
            long long left = 0;
            for (int i = 0; i < s.segments; ++i) left += view.get(i);
            return left;
        }
        auto out = run_in_processes(1,
                                    [&](int) {
                                        std::string o;
                                        for (long long left : optimistic_stock_left(s))
                                            put_u64(o, static_cast<unsigned long long>(left));
                                        return o;
                                    },
                                    {});
        long long left = 0;
        std::size_t pos = 0;
        for (int i = 0; i < s.segments; ++i) left += static_cast<long long>(get_u64(out[0], pos));
        return left;
    };
    if (optimistic) {
        run_in_processes(1,
                         [&](int) {
                             optimistic_stock_setup(s, segment_stock);
                             return std::string{};
                         },
                         {});
    }
    std::string temp_store;
    if (optimistic) {
    } else if (s.store_path.empty()) {
        char tmpl[] = "/tmp/distlock-flash-store-XXXXXX";
        int fd = ::mkstemp(tmpl);
        if (fd < 0) throw std::runtime_error("mkstemp failed");
        ::close(fd);
        s.store_path = temp_store = tmpl;
    }
    if (!optimistic) {
        store init(s.store_path);
        for (int i = 0; i < s.segments; ++i) init.set(i, segment_stock(i));
    }
    if (!s.quiet)
        std::cerr << "flash sale: " << s.requests << " requests, " << s.concurrency << " buyers in flight on "
                  << s.processes << " app servers, stock " << s.stock << " in " << s.segments << " segment(s), "
                  << (s.no_lock    ? "NO LOCK"
                      : optimistic ? "optimistic version-checked updates on " + printable(redact(s.backend))
                                   : "locked via " + printable(redact(s.backend)))
                  << (s.async ? ", asynchronous buyers (coroutines on one thread per app server)" : "") << "\n";
    auto t0 = std::chrono::steady_clock::now();
    auto tick = [&] {
        if (s.quiet) return;
        std::cerr << "  ... " << static_cast<long>(ms_since(t0)) << " ms";
        if (!optimistic) std::cerr << ", stock left " << stock_left();
        std::cerr << "\n";
    };
    auto reports = run_in_processes(
        s.processes, [&](int i) { return optimistic ? optimistic_app_server(s, i) : app_server(s, i); }, tick);
    double elapsed = ms_since(t0);
    unsigned long long sold = 0, timeouts = 0;
    std::vector<double> lat, bought;
    for (const auto& r : reports) {
        std::size_t pos = 0;
        sold += get_u64(r, pos);
        timeouts += get_u64(r, pos);
        auto v = get_doubles(r, pos);
        lat.insert(lat.end(), v.begin(), v.end());
        auto b = get_doubles(r, pos);
        bought.insert(bought.end(), b.begin(), b.end());
    }
    const long long left = stock_left();
    if (!temp_store.empty()) ::unlink(temp_store.c_str());
    const long long oversold = std::max(0LL, static_cast<long long>(sold) - s.stock);
    const bool consistent = static_cast<long long>(sold) + left == s.stock;
    nlohmann::json j{{"backend", s.no_lock ? "none" : redact(s.backend)},
                     {"strategy", s.no_lock ? "none" : s.strategy},
                     {"locked", !s.no_lock && !optimistic},
                     {"async", s.async},
                     {"processes", s.processes},
                     {"concurrency", s.concurrency},
                     {"segments", s.segments},
                     {"stock", s.stock},
                     {"requests", s.requests},
                     {"sold", sold},
                     {"oversold", oversold},
                     {"stock_left", left},
                     {"consistent", consistent},
                     {optimistic ? "conflicts" : "lock_timeouts", timeouts},
                     {"elapsed_ms", std::round(elapsed * 10) / 10},
                     {"throughput_rps", std::round(s.requests / (elapsed / 1000) * 10) / 10},
                     // Every request, those answered from the sold-out flag included (µs resolution),
                     {"p50_ms", std::round(percentile(lat, 50) * 1000) / 1000},
                     {"p99_ms", std::round(percentile(lat, 99) * 1000) / 1000},
                     // and the purchases alone: what a buyer who got an item waited.
                     {"purchase_p50_ms", std::round(percentile(bought, 50) * 1000) / 1000},
                     {"purchase_p99_ms", std::round(percentile(bought, 99) * 1000) / 1000}};
    if (s.json) {
        std::cout << j.dump() << "\n";
    } else {
        std::cout << (s.no_lock ? std::string("WITHOUT a lock")
                      : optimistic
                          ? "OPTIMISTIC, no lock (" + printable(redact(s.backend)) + ")"
                          : "WITH distlock (" + printable(redact(s.backend)) + (s.async ? ", async" : "") + ")")
                  << ":\n"
                  << "  stock " << s.stock << ", sold " << sold << ", stock left " << left << ", OVERSOLD " << oversold
                  << (consistent ? "" : "  (sold + left != stock: lost updates)") << "\n"
                  << "  " << s.requests << " requests in " << static_cast<long>(elapsed) << " ms ("
                  << j["throughput_rps"] << " req/s); a purchase took p50 " << j["purchase_p50_ms"] << " ms, p99 "
                  << j["purchase_p99_ms"] << " ms; every request p50 " << j["p50_ms"] << " ms, p99 " << j["p99_ms"]
                  << " ms (those after the sell-out are answered at once from a sold-out flag)"
                  << (timeouts ? ", " + std::to_string(timeouts) +
                                     (optimistic
                                          ? (timeouts == 1 ? " purchase lost every race" : " purchases lost every race")
                                          : (timeouts == 1 ? " lock timeout" : " lock timeouts"))
                               : "")
                  << "\n";
    }
    if (!s.no_lock && (oversold > 0 || !consistent)) return 1;  // a lock or the version check failed its one job
    return 0;
}

}  // namespace

void add_flash_sale(CLI::App& app, std::function<int()>& action) {
    auto s = std::make_shared<settings>();
    auto* cmd =
        app.add_subcommand("flash-sale", "Replay the flash-sale (秒杀) oversell scenario with or without the lock");
    s->source.use_default("flash-sale");
    add_backend_options(cmd, s->source,
                        "Lock backend URL (default: $DISTLOCK_BACKEND, else the file:// dir shown; with --strategy "
                        "optimistic: a mysql:// or postgres:// URL)");
    cmd->add_option("--strategy", s->strategy,
                    "lock (a distlock mutex per stock segment) or optimistic (no lock: version-checked UPDATE of a "
                    "stock row with bounded retries; SQL URLs only)")
        ->check(CLI::IsMember({"lock", "optimistic"}))
        ->capture_default_str();
    cmd->add_option("--db-pool", s->db_pool, "optimistic: updates in flight per app server (its database pool)")
        ->capture_default_str();
    cmd->add_flag("--no-lock", s->no_lock, "Run without any lock (shows the oversell)");
    cmd->add_flag("--async", s->async,
                  "Buyers wait for the lock asynchronously (C++20 coroutines on one event-loop thread per app server, "
                  "with lock_async) instead of a thread each");
    cmd->add_option("--processes,-p", s->processes, "App server processes")->capture_default_str();
    cmd->add_option("--concurrency,-c", s->concurrency, "Purchase requests in flight at once (all processes)")
        ->capture_default_str();
    cmd->add_option("--requests,-r", s->requests, "Purchase requests in total")->capture_default_str();
    cmd->add_option("--stock,-s", s->stock, "Items in stock")->capture_default_str();
    cmd->add_option("--segments", s->segments, "Split the stock into N segments, each with its own lock")
        ->capture_default_str();
    cmd->add_option("--pause-ms", s->pause_ms, "Work between reading and writing the stock (ms)")
        ->capture_default_str();
    cmd->add_option("--wait", s->wait_s, "How long a buyer waits for the lock before giving up (30s, 1m30s, 2.5)")
        ->transform(duration_in_seconds())
        ->capture_default_str();
    cmd->add_option("--name", s->name, "Lock name (segments append :segN)")->capture_default_str();
    cmd->add_option("--store", s->store_path, "Stock store file shared by the processes (default: a temp file)");
    cmd->add_flag("--json", s->json, "Print one JSON object");
    cmd->add_flag("--quiet,-q", s->quiet, "No progress on stderr");
    cmd->callback([s, &action] {
        action = [s] {
            s->backend = s->source.resolve("flash-sale");
            return run_flash_sale(*s);
        };
    });
}

}  // namespace distlock::tool
