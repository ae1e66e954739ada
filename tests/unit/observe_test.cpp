// The observer, distlock::metrics, the Prometheus rendering and the log hook,
// against known sequences of operations on memory:// (in-process: every count
// is exact). Renewals need a lease backend: tests/backends/redis checks them.
#include <fcntl.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "distlock/distlock.hpp"
#include "distlock/observe.hpp"
#include "distlock/testing.hpp"
#include "support.hpp"

using namespace std::chrono_literals;
using distlock::test::unique_name;

namespace {

// The value of one sample of the rendering, by its exact name and labels text.
std::optional<std::string> sample(const std::string& text, const std::string& series) {
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);)
        if (line.size() > series.size() && line.compare(0, series.size(), series) == 0 && line[series.size()] == ' ')
            return line.substr(series.size() + 1);
    return std::nullopt;
}

// Checks `text` against the rules of the Prometheus text exposition format
// (0.0.4): every line a HELP or TYPE comment or a sample; metric and label names
// of the allowed characters; label values quoted with only \\, \" and \n
// escaped; each family's TYPE given once, before its samples, which come
// together; values that parse as floats; histogram buckets cumulative, `le`
// increasing to "+Inf", whose count equals _count. Returns what is wrong ("" = nothing).
std::string check_format(const std::string& text) {
    static const std::regex help(R"(^# HELP ([a-zA-Z_:][a-zA-Z0-9_:]*) (.*)$)");
    static const std::regex type(R"(^# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (counter|gauge|histogram|summary|untyped)$)");
    static const std::regex line_re(R"(^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$)");
    static const std::regex label(R"(([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\[\\"n])*)\"(,|$))");
    std::map<std::string, std::string> types;  // family -> type
    std::set<std::string> closed;              // families whose samples are over
    std::string current;
    // histogram state per series (labels without le)
    std::map<std::string, std::pair<double, double>> last_bucket;  // series -> (le, count)
    std::map<std::string, double> inf_count;
    std::istringstream in(text);
    int n = 0;
    if (text.empty() || text.back() != '\n') return "the text does not end with a line feed";
    for (std::string l; std::getline(in, l);) {
        ++n;
        std::smatch m;
        if (std::regex_match(l, m, help)) continue;
        if (std::regex_match(l, m, type)) {
            const std::string family = m[1];
            if (types.count(family)) return "line " + std::to_string(n) + ": a second TYPE for " + family;
            types[family] = m[2];
            if (!current.empty()) closed.insert(current);
            current = family;
            continue;
        }
        if (!l.empty() && l[0] == '#') return "line " + std::to_string(n) + ": an unknown comment";
        if (!std::regex_match(l, m, line_re)) return "line " + std::to_string(n) + ": not a sample: " + l;
        const std::string name = m[1], labels = m[3], value = m[4];
        std::string family = name;
        for (const char* suffix : {"_bucket", "_sum", "_count"}) {
            const std::string s(suffix);
            if (name.size() > s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0 &&
                types.count(name.substr(0, name.size() - s.size())) &&
                types[name.substr(0, name.size() - s.size())] == "histogram")
                family = name.substr(0, name.size() - s.size());
        }
        if (!types.count(family)) return "line " + std::to_string(n) + ": a sample of " + family + " before its TYPE";
        if (family != current || closed.count(family)) return "line " + std::to_string(n) + ": " + family + " is split";
        // labels
        std::string rest = labels, le, others;
        for (std::smatch lm; !rest.empty();) {
            if (!std::regex_search(rest, lm, label) || lm.position(0) != 0)
                return "line " + std::to_string(n) + ": bad labels: " + labels;
            if (lm[1] == "le") le = lm[2];
            else others += lm[1].str() + "=" + lm[2].str() + ";";
            rest = lm.suffix();
        }
        char* end = nullptr;
        const double v = value == "+Inf" ? HUGE_VAL : value == "-Inf" ? -HUGE_VAL : std::strtod(value.c_str(), &end);
        if (value != "+Inf" && value != "-Inf" && value != "NaN" && (end == nullptr || *end != '\0'))
            return "line " + std::to_string(n) + ": bad value " + value;
        if (types[family] == "counter" && (v < 0 || name.size() < 6 || name.compare(name.size() - 6, 6, "_total") != 0))
            return "line " + std::to_string(n) + ": a counter must end in _total and not go below 0";
        if (types[family] == "histogram" && name == family + "_bucket") {
            if (le.empty()) return "line " + std::to_string(n) + ": a bucket without le";
            const double bound = le == "+Inf" ? HUGE_VAL : std::strtod(le.c_str(), nullptr);
            auto it = last_bucket.find(family + others);
            if (it != last_bucket.end() && (bound <= it->second.first || v < it->second.second))
                return "line " + std::to_string(n) + ": buckets not increasing and cumulative";
            last_bucket[family + others] = {bound, v};
            if (le == "+Inf") inf_count[family + others] = v;
        }
        if (types[family] == "histogram" && name == family + "_count") {
            auto it = inf_count.find(family + others);
            if (it == inf_count.end()) return "line " + std::to_string(n) + ": _count before a +Inf bucket";
            if (it->second != v) return "line " + std::to_string(n) + ": _count differs from the +Inf bucket";
        }
    }
    return "";
}

// A memory:// URL of a space of its own ("base:hex" names are no host).
std::string space(const char* base) {
    auto n = unique_name(base);
    for (auto& ch : n)
        if (ch == ':') ch = '-';
    return "memory://" + n;
}

struct recorded_logs {
    std::mutex m;
    std::vector<std::tuple<distlock::log_level, std::string, std::string, std::string>> records;
    distlock::log_hook hook() {
        return [this](const distlock::log_record& r) {
            std::lock_guard lk(m);
            records.emplace_back(r.level, std::string(r.backend), std::string(r.lock), std::string(r.message));
        };
    }
};

}  // namespace

TEST_CASE("the metrics observer counts a known sequence of operations exactly", "[observe]") {
    auto m = std::make_shared<distlock::metrics>();
    auto p = distlock::connect(space("obs"), {.observer = m});
    const auto name = unique_name("lock");
    auto a = p.mutex(name);
    auto b = p.mutex(name);

    a.lock();                                                        // granted at once
    std::thread([&] { CHECK_FALSE(b.try_lock_for(20ms)); }).join();  // timed out behind a
    std::atomic<bool> got{false};
    std::thread waiter([&] {
        b.lock();  // waits for a: a contended grant
        got = true;
    });
    std::this_thread::sleep_for(50ms);
    a.unlock();
    waiter.join();
    REQUIRE(got);
    b.unlock();
    {
        auto rw = p.shared_mutex(name + "-rw");
        rw.lock_shared();
        rw.unlock_shared();
        rw.lock();
        rw.unlock();
        auto sem = p.semaphore(name + "-sem", 2);
        sem.acquire();
        sem.release();
    }
    // A loss: the lock removed out of band while held.
    auto c = p.mutex(name + "-lost");
    c.lock();
    distlock::testing::break_lock(p, name + "-lost");
    REQUIRE(distlock::test::eventually([&] { return !c.held(); }, 2000ms));
    c.unlock();

    const auto all = m->snapshot();
    REQUIRE(all.size() == 1);
    const auto& s = all[0];
    CHECK(s.backend == "memory");
    using k = distlock::grant_kind;
    using o = distlock::acquire_outcome;
    auto acq = [&](k kind, o outcome) { return s.acquisitions[std::size_t(kind)][std::size_t(outcome)]; };
    CHECK(acq(k::exclusive, o::granted) == 3);  // a, b after waiting, c
    CHECK(acq(k::exclusive, o::timed_out) == 1);
    CHECK(acq(k::exclusive, o::failed) == 0);
    CHECK(acq(k::read, o::granted) == 1);
    CHECK(acq(k::write, o::granted) == 1);
    CHECK(acq(k::permit, o::granted) == 1);
    CHECK(s.contended[std::size_t(distlock::contention::waited)] == 1);  // b behind a
    CHECK(s.contended[std::size_t(distlock::contention::none)] == 5);
    CHECK(s.contended[std::size_t(distlock::contention::unknown)] == 0);
    CHECK(s.wait.count == 7);  // every acquire call, the timed-out one included
    CHECK(s.releases == 6);
    CHECK(s.releases_unclean == 1);  // c's release found its grant gone
    CHECK(s.hold.count == 6);
    CHECK(s.losses[std::size_t(k::exclusive)] == 1);
    CHECK(s.renewal_calls == 0);  // memory:// has no leases
    // b waited ~50 ms behind a: its wait is in a bucket above 25 ms.
    std::uint64_t above = 0;
    for (std::size_t i = 0; i < distlock::metrics::bounds.size() + 1; ++i)
        if (i >= distlock::metrics::bounds.size() || distlock::metrics::bounds[i] > 0.025) above += s.wait.buckets[i];
    CHECK(above >= 1);

    const auto text = distlock::render_prometheus(*m);
    INFO(text);
    CHECK(check_format(text) == "");
    CHECK(sample(text, R"(distlock_acquisitions_total{backend="memory",kind="exclusive",outcome="granted"})") == "3");
    CHECK(sample(text, R"(distlock_acquisitions_total{backend="memory",kind="exclusive",outcome="timed_out"})") == "1");
    CHECK(sample(text, R"(distlock_grants_total{backend="memory",contention="waited"})") == "1");
    CHECK(sample(text, R"(distlock_losses_total{backend="memory",kind="exclusive"})") == "1");
    CHECK(sample(text, R"(distlock_releases_total{backend="memory",clean="false"})") == "1");
    CHECK(sample(text, R"(distlock_acquire_wait_seconds_count{backend="memory"})") == "7");
    CHECK(sample(text, R"(distlock_acquire_wait_seconds_bucket{backend="memory",le="+Inf"})") == "7");
    CHECK(sample(text, R"(distlock_hold_seconds_count{backend="memory"})") == "6");
    // Bounds as Prometheus's Go client writes them (strconv 'g', shortest):
    // a query written for those (le="10") finds these.
    for (const char* le : {"0.0001", "0.00025", "0.001", "0.01", "0.5", "1", "2.5", "10"}) {
        INFO("le=" << le);
        CHECK(sample(text, std::string(R"(distlock_acquire_wait_seconds_bucket{backend="memory",le=")") + le + "\"}"));
    }
    CHECK(text.find("e+01") == std::string::npos);
}

TEST_CASE("a failed acquisition is counted by its error code", "[observe]") {
    auto m = std::make_shared<distlock::metrics>();
    auto p = distlock::connect(space("obs"), {.observer = m});
    const auto name = unique_name("sem");
    auto four = p.semaphore(name, 4);
    four.acquire();
    auto two = p.semaphore(name, 2);
    CHECK_THROWS_AS(two.acquire(), distlock::invalid_argument_error);  // another size on one name
    four.release();
    const auto s = m->snapshot().at(0);
    CHECK(s.acquisitions[std::size_t(distlock::grant_kind::permit)][std::size_t(distlock::acquire_outcome::failed)] ==
          1);
    REQUIRE(s.errors.size() == 1);
    CHECK(s.errors[0].first == distlock::errc::invalid_argument);
    CHECK(s.errors[0].second == 1);
    const auto text = distlock::render_prometheus(*m, "myapp_locks");
    CHECK(check_format(text) == "");
    CHECK(sample(text, R"(myapp_locks_errors_total{backend="memory",code="invalid_argument"})") == "1");
}

TEST_CASE("the Prometheus format checker itself rejects what the format forbids", "[observe]") {
    CHECK(check_format("# TYPE a_total counter\na_total 1\n") == "");
    CHECK(check_format("a_total 1\n") != "");                                     // no TYPE
    CHECK(check_format("# TYPE a counter\na 1\n") != "");                         // counter without _total
    CHECK(check_format("# TYPE a_total counter\na_total{x=\"\\q\"} 1\n") != "");  // bad escape
    CHECK(check_format("# TYPE a_total counter\na_total{1x=\"v\"} 1\n") != "");   // bad label name
    CHECK(check_format("# TYPE a_total counter\na_total one\n") != "");           // bad value
    CHECK(check_format("# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 1\nh_sum 1\nh_count 1\n") !=
          "");  // not cumulative
    CHECK(check_format("# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_bucket{le=\"+Inf\"} 2\nh_sum 1\nh_count 3\n") !=
          "");  // _count differs
    CHECK(check_format("# TYPE a_total counter\na_total 1\n# TYPE b_total counter\nb_total 1\na_total 2\n") !=
          "");                                                       // split family
    CHECK(check_format("# TYPE a_total counter\na_total 1") != "");  // no final line feed
}

TEST_CASE("the log hook gets losses and errors with the lock's name; nothing goes to stderr or stdout",
          "[observe][log]") {
    recorded_logs logs;
    // stdout and stderr into a pipe for the whole sequence
    int pipe_fds[2];
    REQUIRE(::pipe2(pipe_fds, O_NONBLOCK) == 0);
    ::fflush(stdout);
    ::fflush(stderr);
    const int saved_out = ::dup(1), saved_err = ::dup(2);
    ::dup2(pipe_fds[1], 1);
    ::dup2(pipe_fds[1], 2);
    std::string captured;
    {
        auto p = distlock::connect(space("log"), {.log = logs.hook(), .min_level = distlock::log_level::info});
        auto quiet = distlock::connect(space("quiet"));  // no hook: nothing anywhere
        for (auto* provider : {&p, &quiet}) {
            auto m = provider->mutex("the-lock-name");
            m.lock();
            distlock::testing::break_lock(*provider, "the-lock-name");
            REQUIRE(distlock::test::eventually([&] { return !m.held(); }, 2000ms));
            m.unlock();
        }
    }
    ::fflush(stdout);
    ::fflush(stderr);
    ::dup2(saved_out, 1);
    ::dup2(saved_err, 2);
    ::close(saved_out);
    ::close(saved_err);
    ::close(pipe_fds[1]);
    char buf[4096];
    for (ssize_t n; (n = ::read(pipe_fds[0], buf, sizeof buf)) > 0;) captured.append(buf, std::size_t(n));
    ::close(pipe_fds[0]);
    CHECK(captured == "");

    std::lock_guard lk(logs.m);
    bool connected = false, lost = false;
    for (const auto& [level, backend, lock, message] : logs.records) {
        CHECK(backend == "memory");
        if (level == distlock::log_level::info && lock.empty() && message.find("connected to memory://") == 0)
            connected = true;
        if (level == distlock::log_level::warning && lock == "the-lock-name" && message.find("lock lost") == 0)
            lost = true;
    }
    CHECK(connected);
    CHECK(lost);
    // Below min_level nothing is made: the default (warning) drops the info record.
    recorded_logs warnings;
    { auto p = distlock::connect(space("warn"), {.log = warnings.hook()}); }
    CHECK(warnings.records.empty());
}
