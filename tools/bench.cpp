// distlock bench: acquire+release cycles per second and cycle latency, with the
// backend's cheapest round trip (and, for SQL, the server's own lock pair)
// measured in the same run as floors.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <functional>
#include <iostream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "bench.hpp"
#include "common.hpp"
#include "distlock/distlock.hpp"
#include "distlock/spi/backend.hpp"
#include "tool.hpp"

namespace distlock::tool {
namespace {

using settings = bench_settings;

// Now on the steady clock, in µs (comparable across the processes of a machine).
double steady_us() {
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The floors are measured beside the cycles, under the same load: the
// backend's cheapest round trip and, where the server has its own lock (SQL),
// one take+release of it as a client without distlock does it (the native
// pair). Uncontended, each thread takes one sample of each after each of its
// cycles (so every cycle has floor samples taken next to it); contended, one
// more thread takes them now and then (every 50 samples' time, at least 5 ms)
// while the others contend (interleaving would change the contention).
struct samples {
    std::vector<double> floor, native;
    void add(const samples& o) {
        floor.insert(floor.end(), o.floor.begin(), o.floor.end());
        native.insert(native.end(), o.native.begin(), o.native.end());
    }
};

std::string worker(const settings& s, const std::string& run_id, int index) {
    provider_options options;
    if (s.observe) options.observer = std::make_shared<metrics>();
    auto locks = connect(s.backend, std::move(options));
    auto us = [](std::optional<std::chrono::nanoseconds> d) -> std::optional<double> {
        if (!d) return std::nullopt;
        return std::chrono::duration<double, std::micro>(*d).count();
    };
    const bool has_floor = us(locks.round_trip()).has_value();  // also warms the connection up
    const bool has_native = us(locks.native_cycle()).has_value();
    // One sample of each floor; returns the time taken.
    auto sample = [&](samples& into) {
        double spent = 0;
        if (has_floor) spent += into.floor.emplace_back(*us(locks.round_trip()));
        if (has_native) spent += into.native.emplace_back(*us(locks.native_cycle()));
        return spent;
    };
    const bool contended = s.mode == "contended";
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(s.seconds);
    std::mutex mu;
    std::vector<double> cycles, writes;  // rw: cycles are the reads, writes the writes
    std::vector<double> stamps;          // contended mutex: per cycle, lock() called, granted (µs, steady clock)
    samples floors;
    std::string failure;
    std::vector<std::thread> pool;
    auto fail = [&](const std::exception& e) {
        std::lock_guard lk(mu);
        failure = e.what();
    };
    if (has_floor && contended) {
        pool.emplace_back([&] {
            samples mine;
            try {
                for (int i = 0; i < s.floor_samples; ++i) sample(mine);
                while (std::chrono::steady_clock::now() < until) {
                    const double spent = sample(mine);
                    // At most 2% of one connection's time, so as not to load the server.
                    std::this_thread::sleep_for(std::max(std::chrono::microseconds(5000),
                                                         std::chrono::microseconds(static_cast<long>(50 * spent))));
                }
            } catch (const std::exception& e) {
                fail(e);
            }
            std::lock_guard lk(mu);
            floors.add(mine);
        });
    }
    for (int t = 0; t < s.threads; ++t) {
        pool.emplace_back([&, t] {
            std::vector<double> mine, mine_writes, mine_stamps;
            samples beside;
            try {
                auto name = contended ? "bench:" + run_id
                                      : "bench:" + run_id + ":" + std::to_string(index) + ":" + std::to_string(t);
                // One acquire+release cycle of the primitive measured.
                std::function<void()> cycle;
                std::optional<mutex> m;
                std::optional<shared_mutex> rw;
                std::optional<semaphore> sem;
                const bool writer = s.primitive == "rw" && t < s.writers;
                if (s.primitive == "rw") {
                    rw.emplace(locks.shared_mutex(name));
                    if (writer)
                        cycle = [&] {
                            rw->lock();
                            rw->unlock();
                        };
                    else
                        cycle = [&] {
                            rw->lock_shared();
                            rw->unlock_shared();
                        };
                } else if (s.primitive == "semaphore") {
                    sem.emplace(locks.semaphore(name, s.permits));
                    cycle = [&] {
                        sem->acquire();
                        sem->release();
                    };
                } else {
                    m.emplace(locks.mutex(name));
                    cycle = [&] {
                        const double called = contended ? steady_us() : 0;
                        m->lock();
                        if (contended) mine_stamps.insert(mine_stamps.end(), {called, steady_us()});
                        m->unlock();
                    };
                }
                while (std::chrono::steady_clock::now() < until) {
                    auto t0 = std::chrono::steady_clock::now();
                    cycle();
                    (writer ? mine_writes : mine).push_back(ms_since(t0) * 1000);
                    if (!contended) sample(beside);
                }
            } catch (const std::exception& e) {
                fail(e);
            }
            std::lock_guard lk(mu);
            cycles.insert(cycles.end(), mine.begin(), mine.end());
            writes.insert(writes.end(), mine_writes.begin(), mine_writes.end());
            stamps.insert(stamps.end(), mine_stamps.begin(), mine_stamps.end());
            floors.add(beside);
        });
    }
    for (auto& th : pool) th.join();
    if (!failure.empty()) throw std::runtime_error(failure);
    std::string out;
    put_doubles(out, floors.floor);
    put_doubles(out, floors.native);
    put_doubles(out, cycles);
    put_doubles(out, writes);
    put_doubles(out, stamps);
    return out;
}

// The hand-offs of a contended mutex, from every process's (lock() called,
// granted) pairs on one steady clock (CLOCK_MONOTONIC, shared by the
// processes of a machine): in grant order, each grant whose lock() was called
// before the grant before it, so that it was waiting, is a hand-off; it took
// from that earlier grant's unlock() (called at once after its grant) to its
// own grant. µs each.
std::vector<double> handoffs(const std::vector<double>& stamps) {
    std::vector<std::pair<double, double>> grants;  // (granted, called)
    for (std::size_t i = 0; i + 1 < stamps.size(); i += 2) grants.emplace_back(stamps[i + 1], stamps[i]);
    std::sort(grants.begin(), grants.end());
    std::vector<double> out;
    for (std::size_t i = 1; i < grants.size(); ++i)
        if (grants[i].second < grants[i - 1].first) out.push_back(grants[i].first - grants[i - 1].first);
    return out;
}

int run_sync_bench(const settings& s) {
    if (s.mode != "uncontended" && s.mode != "contended")
        throw invalid_argument_error(errc::invalid_argument, "bench", "--mode is uncontended or contended");
    if (s.threads < 1) throw invalid_argument_error(errc::invalid_argument, "bench", "--threads must be at least 1");
    if (s.processes < 1)
        throw invalid_argument_error(errc::invalid_argument, "bench", "--processes must be at least 1");
    if (s.seconds <= 0) throw invalid_argument_error(errc::invalid_argument, "bench", "--seconds must be positive");
    if (s.writers < 0 || s.writers > s.threads)
        throw invalid_argument_error(errc::invalid_argument, "bench", "--writers must be between 0 and --threads");
    if (s.writers > 0 && s.primitive != "rw")
        throw invalid_argument_error(errc::invalid_argument, "bench", "--writers is for --primitive rw");
    if (s.permits < 1) throw invalid_argument_error(errc::invalid_argument, "bench", "--permits must be at least 1");
    require_cross_process(s.backend, s.processes, "bench");
    const std::string run_id = spi::random_token().substr(0, 10);
    if (!s.quiet)
        std::cerr << "bench " << s.mode << " on " << printable(redact(s.backend)) << ": " << s.processes
                  << " process(es) x " << s.threads << " thread(s) for " << s.seconds << " s\n";
    auto t0 = std::chrono::steady_clock::now();
    auto tick = [&] {
        if (!s.quiet) std::cerr << "  ... " << static_cast<long>(ms_since(t0) / 1000) << " s\n";
    };
    auto reports = run_in_processes(
        s.processes, [&](int i) { return worker(s, run_id, i); }, tick);
    std::vector<double> floor, native, reads, writes, stamps;
    for (const auto& r : reports) {
        std::size_t pos = 0;
        for (auto* into : {&floor, &native, &reads, &writes, &stamps}) {
            auto v = get_doubles(r, pos);
            into->insert(into->end(), v.begin(), v.end());
        }
    }
    // Every cycle, reads and writes together (a read-write lock's are reported apart too).
    std::vector<double> cycles = reads;
    cycles.insert(cycles.end(), writes.begin(), writes.end());
    const double p50 = percentile(cycles, 50), p99 = percentile(cycles, 99);
    const double cps = static_cast<double>(cycles.size()) / s.seconds;
    auto round1 = [](double v) { return std::round(v * 10) / 10; };
    nlohmann::json j{{"backend", redact(s.backend)}, {"mode", s.mode},        {"processes", s.processes},
                     {"threads", s.threads},         {"seconds", s.seconds},  {"cycles", cycles.size()},
                     {"cycles_per_s", round1(cps)},  {"p50_us", round1(p50)}, {"p99_us", round1(p99)},
                     {"primitive", s.primitive},     {"observed", s.observe}};
    if (s.primitive == "rw") {
        j["writers"] = s.writers;
        j["reads"] = reads.size();
        j["writes"] = writes.size();
        j["read_p50_us"] = reads.empty() ? nlohmann::json(nullptr) : nlohmann::json(round1(percentile(reads, 50)));
        j["write_p50_us"] = writes.empty() ? nlohmann::json(nullptr) : nlohmann::json(round1(percentile(writes, 50)));
    }
    if (s.primitive == "semaphore") j["permits"] = s.permits;
    if (floor.empty()) {
        j["floor_rtt_us"] = nullptr;  // embedded backend: no round trip to compare with
        j["floor_ratio"] = nullptr;
    } else {
        const double f = percentile(floor, 50);
        j["floor_rtt_us"] = round1(f);
        j["floor_ratio"] = std::round(p50 / (2 * f) * 100) / 100;
    }
    // Contended mutex: the hand-offs, and each in the backend's round trips.
    const auto passed = handoffs(stamps);
    if (!passed.empty()) {
        const double h50 = percentile(passed, 50), h99 = percentile(passed, 99);
        j["handoffs"] = passed.size();
        j["handoff_p50_us"] = round1(h50);
        j["handoff_p99_us"] = round1(h99);
        if (!floor.empty()) {
            const double f = percentile(floor, 50);
            j["handoff_p50_rt"] = round1(h50 / f);
            j["handoff_p99_rt"] = round1(h99 / f);
        }
    }
    if (native.empty()) {
        j["native_floor_us"] = nullptr;  // no lock of the server's own to compare with
        j["native_ratio"] = nullptr;
    } else {
        const double f = percentile(native, 50);
        j["native_floor_us"] = round1(f);
        j["native_ratio"] = std::round(p50 / f * 100) / 100;
    }
    if (s.json) {
        std::cout << j.dump() << "\n";
    } else {
        std::cout << s.mode << " " << s.primitive << " " << printable(redact(s.backend)) << ": " << j["cycles_per_s"]
                  << " cycles/s, p50 " << j["p50_us"] << " us, p99 " << j["p99_us"] << " us";
        if (s.primitive == "rw")
            std::cout << " (reads p50 " << j["read_p50_us"] << " us, writes p50 " << j["write_p50_us"] << " us)";
        if (!floor.empty())
            std::cout << "; floor (one round trip) " << j["floor_rtt_us"] << " us, p50 cycle = " << j["floor_ratio"]
                      << " x two round trips";
        if (!native.empty())
            std::cout << "; native lock+unlock " << j["native_floor_us"] << " us, p50 cycle = " << j["native_ratio"]
                      << " x native";
        if (j.contains("handoffs")) {
            std::cout << "; " << j["handoffs"] << " hand-offs, p50 " << j["handoff_p50_us"] << " us, p99 "
                      << j["handoff_p99_us"] << " us";
            if (j.contains("handoff_p50_rt"))
                std::cout << " (" << j["handoff_p50_rt"] << " / " << j["handoff_p99_rt"] << " round trips)";
        }
        std::cout << "\n";
    }
    return 0;
}

// On file://, in a directory of the run's own, removed at the end (scratch_names).
int run_bench(const settings& given) {
    const scratch_names scratch(given.backend, spi::random_token().substr(0, 10));
    settings s = given;
    s.backend = scratch.url();
    if (s.hold > 0) return run_hold_bench(s);
    return s.async ? run_async_bench(s) : run_sync_bench(s);
}

}  // namespace

void add_bench(CLI::App& app, std::function<int()>& action) {
    auto s = std::make_shared<settings>();
    auto* cmd = app.add_subcommand("bench", "Measure acquire+release cycles against the backend's round-trip floor");
    s->source.use_default("bench");
    add_backend_options(cmd, s->source, "Lock backend URL (default: $DISTLOCK_BACKEND, else the file:// dir shown)");
    auto* mode = cmd->add_option("--mode", s->mode, "uncontended (a name per thread) or contended (one name)")
                     ->check(CLI::IsMember({"uncontended", "contended"}))
                     ->capture_default_str();
    auto* primitive =
        cmd->add_option(
               "--primitive", s->primitive,
               "What each cycle takes and gives back: mutex, rw (a read-write lock: see --writers) or semaphore "
               "(one permit: see --permits)")
            ->check(CLI::IsMember({"mutex", "rw", "semaphore"}))
            ->capture_default_str();
    auto* writers = cmd->add_option("--writers", s->writers, "rw: threads per process that write; the others read")
                        ->capture_default_str();
    auto* permits = cmd->add_option("--permits", s->permits, "semaphore: its number of permits")->capture_default_str();
    cmd->add_option("--threads,-t", s->threads,
                    "Threads per process (--async: threads of the synchronous hand-off measured beside, default 4)")
        ->each([s](const std::string&) { s->threads_given = true; })
        ->capture_default_str();
    auto* processes = cmd->add_option("--processes,-p", s->processes, "Processes")->capture_default_str();
    cmd->add_option("--seconds", s->seconds, "Duration of the measurement (5, 10s, 1m30s)")
        ->transform(duration_in_seconds())
        ->capture_default_str();
    cmd->add_option("--floor-samples", s->floor_samples,
                    "Contended mode: round trips measured for the floor before the run (per process); more are taken"
                    " now and then during it. Uncontended, each cycle is followed by one")
        ->capture_default_str();
    auto* observe =
        cmd->add_flag("--observe", s->observe,
                      "Attach a distlock::metrics observer to each provider (to measure what observing costs)");
    auto* async =
        cmd->add_flag(
               "--async", s->async,
               "Asynchronous waiters: --waiters pending acquisitions of one name, then of as many names, with the "
               "process's threads, TCP connections and RSS per waiter while they wait; then the hand-off latency "
               "along a chain of them beside the synchronous contended hand-off (--threads threads), in one run")
            ->excludes(mode)
            ->excludes(primitive)
            ->excludes(writers)
            ->excludes(permits)
            ->excludes(processes)
            ->excludes(observe);
    cmd->add_option("--waiters", s->waiters, "--async: pending acquisitions")->needs(async)->capture_default_str();
    cmd->add_option("--handoffs", s->handoffs,
                    "--async: hand-offs measured per chain, at most (each chain also stops after --seconds)")
        ->needs(async)
        ->capture_default_str();
    cmd->add_option("--hold", s->hold,
                    "Hold N locks on one provider for --seconds and report what renewing them costs: renewal calls "
                    "per renewal period and per 1,000 locks, the process's CPU, how late each renewal went out and "
                    "the least lease left then, and whether any was lost (exit 1 if one was)")
        ->check(CLI::Range(1, max_hold))
        ->excludes(mode)
        ->excludes(primitive)
        ->excludes(writers)
        ->excludes(permits)
        ->excludes(processes)
        ->excludes(observe)
        ->excludes(async);
    cmd->add_flag("--json", s->json, "Print one JSON object");
    cmd->add_flag("--quiet,-q", s->quiet, "No progress on stderr");
    cmd->callback([s, &action] {
        action = [s] {
            s->backend = s->source.resolve("bench");
            return run_bench(*s);
        };
    });
}

}  // namespace distlock::tool
