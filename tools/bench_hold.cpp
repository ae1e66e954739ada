// distlock bench --hold N: N locks held on one provider for --seconds, and what
// keeping them costs: the renewal calls per renewal period (and grants per
// call), the process's CPU while it only holds (its renewal thread, and the
// backend's threads), how late each renewal call went out and the least lease
// left then, and whether any grant was lost. Runs in a child process of its
// own (run_in_processes), so that the figures are of nothing else.
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <iostream>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "bench.hpp"
#include "bench_holders.hpp"
#include "common.hpp"
#include "distlock/distlock.hpp"
#include "distlock/observe.hpp"
#include "distlock/spi/backend.hpp"

namespace distlock::tool {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;

// What the provider's renewal thread reported while the run measured.
class renewals final : public observer {
public:
    void renewed(const renewal_event& e) override {
        std::lock_guard lk(m_);
        if (!measuring_) return;
        ++calls_;
        grants_ += e.batch;
        ok_ += e.ok;
        failed_ += e.failed;
        lost_ += e.lost;
        late_ms_.push_back(ms(e.late));
        left_ms_.push_back(ms(e.least_left));
        latency_ms_.push_back(ms(e.latency));
    }
    void lost(const loss_event&) override {
        std::lock_guard lk(m_);
        ++losses_;  // at any time, measuring or not
    }
    void measure(bool on) {
        std::lock_guard lk(m_);
        measuring_ = on;
    }
    json report(double periods, std::size_t held) const {
        std::lock_guard lk(m_);
        auto spread = [](const std::vector<double>& v) {
            if (v.empty()) return json(nullptr);
            return json{{"min", round2(*std::min_element(v.begin(), v.end()))},
                        {"p50", round2(percentile(v, 50))},
                        {"p99", round2(percentile(v, 99))},
                        {"max", round2(*std::max_element(v.begin(), v.end()))}};
        };
        const double per_period = periods > 0 ? static_cast<double>(calls_) / periods : 0;
        return {{"renewal_calls", calls_},
                {"renewal_calls_per_period", round2(per_period)},
                {"renewal_calls_per_1000_locks_per_period", round2(per_period * 1000 / static_cast<double>(held))},
                {"grants_per_call", calls_ > 0 ? round2(static_cast<double>(grants_) / calls_) : 0},
                {"renewed_ok", ok_},
                {"renewals_failed", failed_},
                {"renewals_lost", lost_},
                {"losses", losses_},
                {"late_ms", spread(late_ms_)},
                {"least_left_ms", spread(left_ms_)},
                {"call_latency_ms", spread(latency_ms_)}};
    }

private:
    static double ms(std::chrono::nanoseconds d) { return std::chrono::duration<double, std::milli>(d).count(); }
    static double round2(double v) { return std::round(v * 100) / 100; }
    mutable std::mutex m_;
    bool measuring_ = false;
    std::uint64_t calls_ = 0, grants_ = 0, ok_ = 0, failed_ = 0, lost_ = 0, losses_ = 0;
    std::vector<double> late_ms_, left_ms_, latency_ms_;
};

// User + system CPU time of this process so far, in seconds.
double cpu_seconds() {
    rusage u{};
    ::getrusage(RUSAGE_SELF, &u);
    auto secs = [](const timeval& t) { return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) / 1e6; };
    return secs(u.ru_utime) + secs(u.ru_stime);
}

// The child process's run: take, hold and measure, give back.
std::string hold_and_measure(const bench_settings& s, const std::string& run_id) {
    auto seen = std::make_shared<renewals>();
    provider_options options;
    options.observer = seen;
    auto locks = connect(s.backend, options);
    const auto lease = locks.default_lease();
    std::vector<distlock::mutex> held;
    held.reserve(static_cast<std::size_t>(s.hold));
    for (int i = 0; i < s.hold; ++i) held.push_back(locks.mutex("bench-hold-" + run_id + "-" + std::to_string(i)));
    const auto t_take = std::chrono::steady_clock::now();
    for_each_parallel(held.size(), [&](std::size_t i) {
        if (!held[i].try_lock_for(60s))
            throw std::runtime_error("bench --hold: could not take lock " + std::to_string(i) + " within 60 s");
    });
    const double take_s = ms_since(t_take) / 1000;
    // Measured from here: nothing runs in this process but the renewals.
    seen->measure(true);
    const double cpu0 = cpu_seconds();
    const auto t0 = std::chrono::steady_clock::now();
    std::this_thread::sleep_for(std::chrono::duration<double>(s.seconds));
    const double cpu = cpu_seconds() - cpu0;
    const double wall = ms_since(t0) / 1000;
    seen->measure(false);
    std::size_t still_held = 0;
    for (auto& m : held) still_held += m.held() ? 1 : 0;
    const auto t_give = std::chrono::steady_clock::now();
    std::atomic<std::size_t> unclean{0};
    for_each_parallel(held.size(), [&](std::size_t i) {
        try {
            held[i].unlock();
        } catch (const error&) {  // lost meanwhile, or the server did not say: counted
            ++unclean;
        }
    });
    const double give_s = ms_since(t_give) / 1000;
    // The core renews every spi::renewal_period(lease), lease / 3.
    const double period_s = std::chrono::duration<double>(spi::renewal_period(lease)).count();
    json j{{"held", s.hold},
           {"lease_ms", lease.count()},
           {"renewal_period_ms", std::round(period_s * 1000)},
           {"periods", std::round(wall / period_s * 10) / 10},
           {"take_s", std::round(take_s * 100) / 100},
           {"give_back_s", std::round(give_s * 100) / 100},
           {"cpu_s", std::round(cpu * 1000) / 1000},
           {"cpu_share_of_one_core", std::round(cpu / wall * 10000) / 10000},
           {"still_held", still_held},
           {"releases_failed", unclean.load()}};
    j.update(seen->report(wall / period_s, held.size()));
    return j.dump();
}

}  // namespace

int run_hold_bench(const bench_settings& s) {
    auto invalid = [](const char* what) { throw invalid_argument_error(errc::invalid_argument, "bench", what); };
    if (s.hold < 1 || s.hold > max_hold) invalid("--hold must be between 1 and 1,000,000");
    if (s.seconds <= 0) invalid("--seconds must be positive");
    const std::string run_id = spi::random_token().substr(0, 10);
    if (!s.quiet)
        std::cerr << "bench --hold on " << printable(redact(s.backend)) << ": " << s.hold << " locks held for "
                  << s.seconds << " s\n";
    const auto t0 = std::chrono::steady_clock::now();
    auto out = run_in_processes(
        1, [&](int) { return hold_and_measure(s, run_id); },
        [&] {
            if (!s.quiet) std::cerr << "  ... " << static_cast<long>(ms_since(t0) / 1000) << " s\n";
        });
    json j{{"backend", redact(s.backend)}, {"mode", "hold"}, {"seconds", s.seconds}};
    j.update(json::parse(out[0]));
    const bool all_kept =
        j["still_held"] == s.hold && j["losses"] == 0 && j["renewals_lost"] == 0 && j["releases_failed"] == 0;
    j["all_kept"] = all_kept;
    if (s.json) {
        std::cout << j.dump() << "\n";
    } else {
        auto field = [&](const char* spread, const char* k) {
            return j[spread].is_null() ? std::string("-") : j[spread][k].dump();
        };
        std::cout << "hold " << printable(redact(s.backend)) << ": " << s.hold << " locks for " << j["seconds"]
                  << " s (took " << j["take_s"] << " s), " << j["renewal_calls_per_period"]
                  << " renewal calls per period of " << j["renewal_period_ms"] << " ms ("
                  << j["renewal_calls_per_1000_locks_per_period"] << " per 1,000 locks, " << j["grants_per_call"]
                  << " grants per call), CPU " << j["cpu_share_of_one_core"] << " of one core; late p50 "
                  << field("late_ms", "p50") << " ms, max " << field("late_ms", "max") << " ms; least lease left "
                  << field("least_left_ms", "min") << " ms; " << j["still_held"] << " of " << s.hold << " still held, "
                  << j["losses"] << " lost\n";
    }
    return all_kept ? 0 : 1;
}

}  // namespace distlock::tool
