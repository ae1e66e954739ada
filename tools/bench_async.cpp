// distlock bench --async: N pending asynchronous acquisitions of one name and
// of N names (the process's threads, TCP connections and RSS per waiter while
// they wait), and the hand-off latency along a chain of them beside the
// synchronous contended hand-off. Each part runs in a fresh process.
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <functional>
#include <iostream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <stop_token>
#include <thread>

#include "bench.hpp"
#include "bench_holders.hpp"
#include "bench_proc.hpp"
#include "common.hpp"
#include "distlock/distlock.hpp"
#include "distlock/spi/backend.hpp"

namespace distlock::tool {
namespace {

using steady = std::chrono::steady_clock;
using nlohmann::json;

// Printed beside the figures, never asserted (issue 26): for 10,000 waiters.
constexpr long target_threads = 16;
constexpr long target_rss_per_waiter = 8192;
constexpr double target_async_sync = 1.2;
// How long the pending acquisitions may take to settle (bench_proc.hpp).
constexpr std::chrono::milliseconds settle_min{1000}, settle_max{30000};
// The bound of every wait for completions, past which a waiter is reported stuck.
constexpr std::chrono::seconds completion_bound{120};

double us_between(steady::time_point a, steady::time_point b) {
    return std::chrono::duration<double, std::micro>(b - a).count();
}
steady::duration seconds_of(double s) {
    return std::chrono::duration_cast<steady::duration>(std::chrono::duration<double>(s));
}
double round1(double v) { return std::round(v * 10) / 10; }
double round2(double v) { return std::round(v * 100) / 100; }

// What the handlers of a set of asynchronous operations came to, and the
// hand-offs measured along a chain of them.
struct outcomes {
    long granted = 0, timed_out = 0, cancelled = 0, failed = 0, released = 0;
    std::string first_error;
    std::vector<double> handoffs_us;  // from a waiter's release to the next grant (the holders' is not one)
    steady::time_point last_release;
    bool chain_started = false;  // the first grant, after the holder's release
    long keeper = -1;  // the waiter granted at the last hand-off measured: it holds until the rest are cancelled
    long completed() const { return granted + timed_out + cancelled + failed; }
};

class tally {
public:
    // Counts an acquisition's outcome, then runs `also` under the same lock.
    void acquired(const std::exception_ptr& error, bool granted, const std::function<void(outcomes&)>& also = {}) {
        std::lock_guard lk(mu_);
        if (granted) {
            ++o_.granted;
        } else if (!error) {
            ++o_.timed_out;
        } else {
            try {
                std::rethrow_exception(error);
            } catch (const cancelled_error&) {
                ++o_.cancelled;
            } catch (const std::exception& e) {
                if (o_.failed++ == 0) o_.first_error = e.what();
            } catch (...) {
                if (o_.failed++ == 0) o_.first_error = "an exception that is not a std::exception";
            }
        }
        if (also) also(o_);
        cv_.notify_all();
    }
    void released() {
        std::lock_guard lk(mu_);
        ++o_.released;
        cv_.notify_all();
    }
    outcomes now() const {
        std::lock_guard lk(mu_);
        return o_;
    }
    // Waits until `done` holds or `until` passes; returns whether it holds.
    bool wait_until(steady::time_point until, const std::function<bool(const outcomes&)>& done) {
        std::unique_lock lk(mu_);
        return cv_.wait_until(lk, until, [&] { return done(o_); });
    }

private:
    mutable std::mutex mu_;
    std::condition_variable cv_;
    outcomes o_;
};

// The waiters of one part and what they came to. Handlers point into it: when
// some never complete (an engine that loses them) it is leaked, not freed.
struct waiting_set {
    tally waiters;
    std::vector<distlock::mutex> locks;
    std::stop_source stop;
};

std::vector<double> floor_samples(const provider& locks, int n) {
    std::vector<double> out;
    for (int i = 0; i < n; ++i) {
        auto rtt = locks.round_trip();
        if (!rtt) break;  // embedded: no round trip
        out.push_back(std::chrono::duration<double, std::micro>(*rtt).count());
    }
    return out;
}

json sample_json(const process_sample& p) {
    return {{"threads", p.threads},
            {"descriptors", p.descriptors},
            {"sockets", p.sockets},
            {"tcp_connections", p.tcp_connections},
            {"rss_bytes", p.rss_bytes}};
}

json outcomes_json(const outcomes& o) {
    json j{{"granted", o.granted},
           {"timed_out", o.timed_out},
           {"cancelled", o.cancelled},
           {"failed", o.failed},
           {"released", o.released}};
    if (!o.first_error.empty()) j["first_error"] = o.first_error;
    return j;
}

// Starts an acquisition on each of `set.waiters`' locks and samples the
// process once they are pending: before (with the locks made) and while
// pending, with the RSS per waiter of each step.
void start_pending(waiting_set& set, int n, const process_sample& before, steady::time_point deadline,
                   const std::function<acquire_handler(std::size_t)>& handler, json& report) {
    const auto objects = sample_process();
    for (std::size_t i = 0; i < set.locks.size(); ++i)
        set.locks[i].async_lock(deadline, handler(i), set.stop.get_token());
    std::chrono::milliseconds settled{};
    const auto pending = settle_process(settle_min, settle_max, settled);
    report["before"] = sample_json(before);
    report["pending"] = sample_json(pending);
    report["settle_ms"] = settled.count();
    report["completed_early"] = set.waiters.now().completed();  // 0: every waiter was still waiting when sampled
    report["object_rss_per_waiter_bytes"] = (objects.rss_bytes - before.rss_bytes) / n;
    report["rss_per_waiter_bytes"] = (pending.rss_bytes - before.rss_bytes) / n;
}

// Waits for every waiter's outcome and the release of each grant; leaks `set`
// when some never come (their handlers would use it).
void finish(std::unique_ptr<waiting_set>& set, int n, json& report) {
    const bool all = set->waiters.wait_until(steady::now() + completion_bound, [n](const outcomes& o) {
        return o.completed() >= n && o.released >= o.granted;
    });
    const auto o = set->waiters.now();
    report["outcomes"] = outcomes_json(o);
    report["stuck"] = n - o.completed();            // acquisitions without an outcome after the bound
    report["unreleased"] = o.granted - o.released;  // grants whose async_unlock had not completed by then
    if (!all) (void)set.release();
}

std::string one_name_name(const std::string& run_id) { return "bench:" + run_id + ":one"; }

// N waiters on the name one holder holds; then the holder releases and each
// waiter, once granted, releases: the hand-offs along that chain are timed
// (at most s.handoffs of them, for at most s.seconds); the waiter granted at
// the last one holds while the rest are cancelled.

std::string one_name(const bench_settings& s, const std::string& run_id, holder_channel* ch) {
    raise_descriptor_limit();
    auto locks = connect(s.backend);
    json report{{"floor_us", floor_samples(locks, s.floor_samples)}};
    const std::string name = one_name_name(run_id);
    holders holder(locks, {name}, ch, completion_bound);
    report["holder_in_another_process"] = holder.in_another_process();
    auto set = std::make_unique<waiting_set>();
    const auto before = sample_process();
    set->locks.reserve(static_cast<std::size_t>(s.waiters));
    for (int i = 0; i < s.waiters; ++i) set->locks.push_back(locks.mutex(name));
    const auto deadline = steady::now() + settle_max + completion_bound + seconds_of(s.seconds);
    auto* w = set.get();
    const auto cap = static_cast<std::size_t>(s.handoffs);
    start_pending(
        *set, s.waiters, before, deadline,
        [w, cap](std::size_t i) -> acquire_handler {
            return [w, cap, i](std::exception_ptr error, bool granted) {
                const auto at = steady::now();
                bool keep = false;
                w->waiters.acquired(error, granted, [&](outcomes& o) {
                    if (!granted) return;
                    if (o.chain_started && o.handoffs_us.size() < cap)
                        o.handoffs_us.push_back(us_between(o.last_release, at));
                    o.chain_started = true;
                    o.last_release = steady::now();
                    keep = o.handoffs_us.size() >= cap && o.keeper < 0;
                    if (keep) o.keeper = static_cast<long>(i);
                });
                if (granted && !keep) w->locks[i].async_unlock([w] { w->waiters.released(); });
            };
        },
        report);
    const auto t0 = steady::now();
    holder.release();
    set->waiters.wait_until(t0 + seconds_of(s.seconds), [&](const outcomes& o) {
        return o.handoffs_us.size() >= cap || o.completed() >= s.waiters;
    });
    set->stop.request_stop();
    set->waiters.wait_until(steady::now() + completion_bound,
                            [&](const outcomes& o) { return o.completed() >= s.waiters; });
    const auto chain = set->waiters.now();
    if (chain.keeper >= 0)
        set->locks[static_cast<std::size_t>(chain.keeper)].async_unlock([w] { w->waiters.released(); });
    report["handoffs_us"] = chain.handoffs_us;
    finish(set, s.waiters, report);
    return report.dump();
}

std::vector<std::string> many_names_names(const std::string& run_id, int n) {
    std::vector<std::string> names;
    for (int i = 0; i < n; ++i) names.push_back("bench:" + run_id + ":many:" + std::to_string(i));
    return names;
}

// N waiters on N names, each held by a holder (bench_holders.hpp); then the
// holders release and the time until every waiter is granted is measured.
std::string many_names(const bench_settings& s, const std::string& run_id, holder_channel* ch) {
    raise_descriptor_limit();
    auto locks = connect(s.backend);
    json report;
    const auto names = many_names_names(run_id, s.waiters);
    const auto t_hold = steady::now();
    holders holding(locks, names, ch, completion_bound);
    report["holders_ms"] = static_cast<long>(ms_since(t_hold));
    report["holder_in_another_process"] = holding.in_another_process();
    auto set = std::make_unique<waiting_set>();
    auto* w = set.get();
    const auto before = sample_process();
    set->locks.reserve(names.size());
    for (const auto& name : names) set->locks.push_back(locks.mutex(name));
    const auto deadline = steady::now() + settle_max + completion_bound * 2;
    start_pending(
        *set, s.waiters, before, deadline,
        [w](std::size_t i) -> acquire_handler {
            return [w, i](std::exception_ptr error, bool granted) {
                w->waiters.acquired(error, granted);
                if (granted) w->locks[i].async_unlock([w] { w->waiters.released(); });
            };
        },
        report);
    const auto t0 = steady::now();
    holding.release();
    report["holders_release_ms"] = round1(ms_since(t0));  // in this process: its own unlocks; else a word to the holder
    set->waiters.wait_until(t0 + completion_bound, [&](const outcomes& o) { return o.completed() >= s.waiters; });
    report["all_granted_ms"] = round1(ms_since(t0));
    finish(set, s.waiters, report);
    return report.dump();
}

// The synchronous contended bench's loop (each thread its own mutex of one
// name, lock() then unlock()), timing each hand-off to another thread: from the
// unlock() before it to the lock() that returns.
std::string sync_handoffs(const bench_settings& s, const std::string& run_id, int threads) {
    auto locks = connect(s.backend);
    json report{{"floor_us", floor_samples(locks, s.floor_samples)}};
    const std::string name = "bench:" + run_id + ":sync";
    const auto until = steady::now() + seconds_of(s.seconds);
    std::mutex mu;
    std::vector<double> handoffs;
    steady::time_point last_release;
    int last_owner = -1;
    bool stop = false;
    std::string failure;
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
        pool.emplace_back([&, t] {
            try {
                auto m = locks.mutex(name);
                for (bool more = true; more;) {
                    m.lock();
                    const auto at = steady::now();
                    {
                        std::lock_guard lk(mu);
                        if (last_owner >= 0 && last_owner != t && !stop)
                            handoffs.push_back(us_between(last_release, at));
                        stop = stop || handoffs.size() >= static_cast<std::size_t>(s.handoffs) || at >= until;
                        more = !stop;
                        last_owner = t;
                        last_release = steady::now();
                    }
                    m.unlock();
                }
            } catch (const std::exception& e) {
                std::lock_guard lk(mu);
                failure = e.what();
                stop = true;
            }
        });
    }
    for (auto& th : pool) th.join();
    if (!failure.empty()) throw std::runtime_error(failure);
    report["threads"] = threads;
    report["handoffs_us"] = handoffs;
    return report.dump();
}

// p50 and p99 of `samples` (µs), with the p50 in two round trips.
json latency_json(const std::vector<double>& samples, double floor_us) {
    json j{{"handoffs", samples.size()}};
    if (samples.empty()) return j;
    const double p50 = percentile(samples, 50);
    j["handoff_p50_us"] = round1(p50);
    j["handoff_p99_us"] = round1(percentile(samples, 99));
    j["handoff_floor_ratio"] = floor_us > 0 ? json(round2(p50 / (2 * floor_us))) : json(nullptr);
    return j;
}

// One part's pending figures as a text line.
std::string pending_text(const json& part) {
    const auto& p = part["pending"];
    const auto& b = part["before"];
    std::string line = "threads " + p["threads"].dump() + " (" + b["threads"].dump() +
                       " before; target <= " + std::to_string(target_threads) + "), TCP connections " +
                       p["tcp_connections"].dump() + " (" + b["tcp_connections"].dump() + " before), sockets " +
                       p["sockets"].dump() + ", descriptors " + p["descriptors"].dump() + " (" +
                       b["descriptors"].dump() + " before), RSS per waiter " + part["rss_per_waiter_bytes"].dump() +
                       " B (target <= " + std::to_string(target_rss_per_waiter) + "; the mutex objects alone " +
                       part["object_rss_per_waiter_bytes"].dump() + " B)";
    const auto& o = part["outcomes"];
    for (const char* k : {"timed_out", "failed"})
        if (o[k].get<long>() > 0) line += "; " + o[k].dump() + " " + k;
    if (part["stuck"].get<long>() > 0) line += "; " + part["stuck"].dump() + " never completed";
    if (part["unreleased"].get<long>() > 0)
        line += "; " + part["unreleased"].dump() + " grants not released " + "within " +
                std::to_string(completion_bound.count()) + " s";
    if (part["completed_early"].get<long>() > 0)
        line += "; " + part["completed_early"].dump() + " completed before the release (not pending)";
    return line;
}

}  // namespace

int run_async_bench(const bench_settings& s) {
    auto invalid = [](const char* what) { throw invalid_argument_error(errc::invalid_argument, "bench", what); };
    if (s.waiters < 1) invalid("--waiters must be at least 1");
    if (s.handoffs < 1) invalid("--handoffs must be at least 1");
    if (s.seconds <= 0) invalid("--seconds must be positive");
    const int threads = s.threads_given ? s.threads : 4;
    if (threads < 2) invalid("--async: --threads (of the synchronous hand-off) must be at least 2");
    const std::string run_id = spi::random_token().substr(0, 10);
    if (!s.quiet)
        std::cerr << "bench --async on " << printable(redact(s.backend)) << ": " << s.waiters
                  << " waiters, on one name then on as many names; synchronous hand-offs of " << threads
                  << " threads\n";
    auto t0 = std::chrono::steady_clock::now();
    auto tick = [&] {
        if (!s.quiet) std::cerr << "  ... " << static_cast<long>(ms_since(t0) / 1000) << " s\n";
    };
    auto part = [&](const std::function<std::string()>& work) {
        return json::parse(run_in_processes(
            1, [&](int) { return work(); }, tick)[0]);
    };
    // A part with waiters runs beside a holder process where the backend excludes processes.
    const bool separate = excludes_processes(s.backend);
    auto with_holders = [&](const std::vector<std::string>& names,
                            const std::function<std::string(holder_channel*)>& measure) {
        if (!separate) return part([&] { return measure(nullptr); });
        holder_channel ch;
        auto out = run_in_processes(
            2,
            [&](int i) {
                if (i == 1) return measure(&ch);
                hold_in_process(s.backend, names, ch, completion_bound);
                return std::string();
            },
            tick);
        return json::parse(out[1]);
    };
    json sync = part([&] { return sync_handoffs(s, run_id, threads); });
    json one = with_holders({one_name_name(run_id)}, [&](holder_channel* ch) { return one_name(s, run_id, ch); });
    json many = with_holders(many_names_names(run_id, s.waiters),
                             [&](holder_channel* ch) { return many_names(s, run_id, ch); });
    std::vector<double> floor = sync["floor_us"].get<std::vector<double>>();
    for (double f : one["floor_us"]) floor.push_back(f);
    const double floor_us = floor.empty() ? 0 : percentile(floor, 50);
    const auto sync_lat = latency_json(sync["handoffs_us"].get<std::vector<double>>(), floor_us);
    const auto async_lat = latency_json(one["handoffs_us"].get<std::vector<double>>(), floor_us);
    for (auto* p : {&sync, &one}) {
        p->erase("floor_us");
        p->erase("handoffs_us");
    }
    sync.update(sync_lat);
    one.update(async_lat);
    json ratio = nullptr;
    if (sync.contains("handoff_p50_us") && one.contains("handoff_p50_us") && sync["handoff_p50_us"] > 0)
        ratio = round2(one["handoff_p50_us"].get<double>() / sync["handoff_p50_us"].get<double>());
    const long threads_max = std::max(one["pending"]["threads"].get<long>(), many["pending"]["threads"].get<long>());
    const long rss_max = std::max(one["rss_per_waiter_bytes"].get<long>(), many["rss_per_waiter_bytes"].get<long>());
    json j{{"backend", redact(s.backend)},
           {"mode", "async"},
           {"primitive", "mutex"},
           {"waiters", s.waiters},
           {"seconds", s.seconds},
           {"floor_rtt_us", floor.empty() ? json(nullptr) : json(round1(floor_us))},
           {"one_name", one},
           {"many_names", many},
           {"sync", sync},
           {"async_sync_ratio", ratio},
           {"targets",
            {{"threads", target_threads},
             {"rss_per_waiter_bytes", target_rss_per_waiter},
             {"async_sync_ratio", target_async_sync}}},
           {"met",
            {{"threads", threads_max <= target_threads},
             {"rss_per_waiter_bytes", rss_max <= target_rss_per_waiter},
             {"async_sync_ratio", ratio.is_null() ? json(nullptr) : json(ratio.get<double>() <= target_async_sync)}}}};
    auto handoff_text = [&](const json& p) {
        if (!p.contains("handoff_p50_us")) return std::string("no hand-off measured");
        std::string t = "hand-off p50 " + p["handoff_p50_us"].dump() + " us, p99 " + p["handoff_p99_us"].dump() +
                        " us (" + p["handoffs"].dump() + " hand-offs)";
        if (!p["handoff_floor_ratio"].is_null())
            t += ", p50 = " + p["handoff_floor_ratio"].dump() + " x two round trips";
        return t;
    };
    if (s.json) {
        std::cout << j.dump() << "\n";
    } else {
        std::cout << "async mutex " << printable(redact(s.backend)) << ": " << s.waiters << " waiters";
        if (!floor.empty()) std::cout << "; floor (one round trip) " << j["floor_rtt_us"] << " us";
        std::cout << "\n  one name: " << pending_text(one) << "; " << handoff_text(one) << "\n  " << s.waiters
                  << " names: " << pending_text(many) << "; all granted " << many["all_granted_ms"]
                  << " ms after their holders' release\n  sync (" << threads
                  << " threads, one name): " << handoff_text(sync) << "\n  async/sync hand-off p50 " << ratio
                  << " (target <= " << target_async_sync << ")\n";
    }
    // Figures that are not of pending waiters, or waiters that failed or never
    // completed, fail the run (the figures are printed first).
    for (const json* p : {&one, &many})
        if ((*p)["completed_early"].get<long>() > 0 || (*p)["stuck"].get<long>() > 0 ||
            (*p)["unreleased"].get<long>() > 0 || (*p)["outcomes"]["failed"].get<long>() > 0 ||
            (*p)["outcomes"]["timed_out"].get<long>() > 0)
            return 1;
    return 0;
}

}  // namespace distlock::tool
