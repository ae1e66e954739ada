// distlock::metrics and its Prometheus rendering (include/distlock/observe.hpp).
#include "distlock/observe.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace distlock {

std::string_view to_string(log_level level) noexcept {
    switch (level) {
        case log_level::debug: return "debug";
        case log_level::info: return "info";
        case log_level::warning: return "warning";
        case log_level::error: return "error";
    }
    return "?";
}

std::string_view to_string(grant_kind kind) noexcept {
    switch (kind) {
        case grant_kind::exclusive: return "exclusive";
        case grant_kind::read: return "read";
        case grant_kind::write: return "write";
        case grant_kind::permit: return "permit";
        case grant_kind::leader: return "leader";
    }
    return "?";
}

std::string_view to_string(acquire_outcome outcome) noexcept {
    switch (outcome) {
        case acquire_outcome::granted: return "granted";
        case acquire_outcome::timed_out: return "timed_out";
        case acquire_outcome::failed: return "failed";
    }
    return "?";
}

std::string_view to_string(contention c) noexcept {
    switch (c) {
        case contention::none: return "none";
        case contention::waited: return "waited";
        case contention::unknown: return "unknown";
    }
    return "?";
}

namespace {

std::string_view errc_name(errc e) noexcept {
    switch (e) {
        case errc::unavailable: return "unavailable";
        case errc::lock_lost: return "lock_lost";
        case errc::not_owner: return "not_owner";
        case errc::in_doubt: return "in_doubt";
        case errc::invalid_argument: return "invalid_argument";
        case errc::unsupported: return "unsupported";
        case errc::access_denied: return "access_denied";
        case errc::would_deadlock: return "would_deadlock";
        case errc::cancelled: return "cancelled";
    }
    return "other";
}

std::size_t index_of(errc e) noexcept {
    const auto i = static_cast<std::size_t>(e);
    return i < 16 ? i : 0;
}

}  // namespace

// ---- metrics ------------------------------------------------------------------------

void metrics::atomic_histogram::add(std::chrono::nanoseconds d) noexcept {
    const double seconds = std::chrono::duration<double>(d).count();
    std::size_t b = 0;
    while (b < bounds.size() && seconds > bounds[b]) ++b;
    buckets[b].fetch_add(1, std::memory_order_relaxed);
    count.fetch_add(1, std::memory_order_relaxed);
    sum_ns.fetch_add(static_cast<std::uint64_t>(d.count() > 0 ? d.count() : 0), std::memory_order_relaxed);
}

metrics::histogram metrics::atomic_histogram::read() const noexcept {
    histogram h;
    for (std::size_t b = 0; b < buckets.size(); ++b) h.buckets[b] = buckets[b].load(std::memory_order_relaxed);
    // The count is the buckets' total (read apart, an event landing between the
    // reads would make _count disagree with the +Inf bucket).
    for (auto n : h.buckets) h.count += n;
    h.sum = static_cast<double>(sum_ns.load(std::memory_order_relaxed)) / 1e9;
    return h;
}

metrics::per_backend& metrics::of(std::string_view backend) {
    std::lock_guard lk(mutex_);
    for (auto& b : backends_)
        if (b->backend == backend) return *b;
    backends_.push_back(std::make_unique<per_backend>());
    backends_.back()->backend = std::string(backend);
    return *backends_.back();
}

namespace {

// A kind's row in the metrics' arrays, which grant_kinds sizes. A kind added to
// grant_kind fails this switch (-Werror=switch) until it has a case here, and
// its case, in the form of the others, fails to compile until grant_kinds
// (observe.hpp) counts it.
template <std::size_t Row>
constexpr std::size_t row() noexcept {
    static_assert(Row < grant_kinds, "raise distlock::grant_kinds (observe.hpp) to count every grant_kind");
    return Row;
}
constexpr std::size_t row_of(grant_kind kind) noexcept {
    switch (kind) {
        case grant_kind::exclusive: return row<0>();
        case grant_kind::read: return row<1>();
        case grant_kind::write: return row<2>();
        case grant_kind::permit: return row<3>();
        case grant_kind::leader: return row<4>();
    }
    return grant_kinds;  // not a grant_kind
}
// The rendering names row k after grant_kind value k: so each kind's row is its
// value, and grant_kinds counts no more kinds than there are.
constexpr bool rows_follow_the_enum() noexcept {
    for (std::size_t k = 0; k < grant_kinds; ++k)
        if (row_of(static_cast<grant_kind>(k)) != k) return false;
    return true;
}
static_assert(rows_follow_the_enum(), "grant_kinds and the rows of row_of() must follow grant_kind's values");

}  // namespace

void metrics::acquired(const acquire_event& e) {
    auto& b = of(e.backend);
    b.acquisitions[row_of(e.kind)][static_cast<std::size_t>(e.outcome)].fetch_add(1, std::memory_order_relaxed);
    b.wait.add(e.waited);
    if (e.outcome == acquire_outcome::granted)
        b.contended[static_cast<std::size_t>(e.contended)].fetch_add(1, std::memory_order_relaxed);
    if (e.outcome == acquire_outcome::failed) b.errors[index_of(e.error)].fetch_add(1, std::memory_order_relaxed);
}

void metrics::released(const release_event& e) {
    auto& b = of(e.backend);
    b.releases.fetch_add(1, std::memory_order_relaxed);
    if (!e.clean) b.releases_unclean.fetch_add(1, std::memory_order_relaxed);
    b.hold.add(e.held);
}

void metrics::renewed(const renewal_event& e) {
    auto& b = of(e.backend);
    b.renewal_calls.fetch_add(1, std::memory_order_relaxed);
    b.renewal_grants.fetch_add(e.batch, std::memory_order_relaxed);
    b.renewals_ok.fetch_add(e.ok, std::memory_order_relaxed);
    b.renewals_failed.fetch_add(e.failed, std::memory_order_relaxed);
    b.renewals_lost.fetch_add(e.lost, std::memory_order_relaxed);
    b.renewal_latency.add(e.latency);
}

void metrics::lost(const loss_event& e) {
    of(e.backend).losses[row_of(e.kind)].fetch_add(1, std::memory_order_relaxed);
}

void metrics::failed(const error_event& e) {
    of(e.backend).errors[index_of(e.code)].fetch_add(1, std::memory_order_relaxed);
}

std::vector<metrics::backend_counts> metrics::snapshot() const {
    std::vector<const per_backend*> list;
    {
        std::lock_guard lk(mutex_);
        for (const auto& b : backends_) list.push_back(b.get());
    }
    std::vector<backend_counts> out;
    for (const auto* b : list) {
        backend_counts c;
        c.backend = b->backend;
        for (std::size_t k = 0; k < grant_kinds; ++k)
            for (std::size_t o = 0; o < 3; ++o)
                c.acquisitions[k][o] = b->acquisitions[k][o].load(std::memory_order_relaxed);
        for (std::size_t i = 0; i < 3; ++i) c.contended[i] = b->contended[i].load(std::memory_order_relaxed);
        c.wait = b->wait.read();
        c.hold = b->hold.read();
        c.renewal_latency = b->renewal_latency.read();
        c.renewal_calls = b->renewal_calls.load(std::memory_order_relaxed);
        c.renewal_grants = b->renewal_grants.load(std::memory_order_relaxed);
        c.renewals_ok = b->renewals_ok.load(std::memory_order_relaxed);
        c.renewals_failed = b->renewals_failed.load(std::memory_order_relaxed);
        c.renewals_lost = b->renewals_lost.load(std::memory_order_relaxed);
        c.releases = b->releases.load(std::memory_order_relaxed);
        c.releases_unclean = b->releases_unclean.load(std::memory_order_relaxed);
        for (std::size_t k = 0; k < grant_kinds; ++k) c.losses[k] = b->losses[k].load(std::memory_order_relaxed);
        for (std::size_t e = 1; e < b->errors.size(); ++e)
            if (auto n = b->errors[e].load(std::memory_order_relaxed)) c.errors.emplace_back(static_cast<errc>(e), n);
        out.push_back(std::move(c));
    }
    return out;
}

// ---- Prometheus text format ----------------------------------------------------

namespace {

// A label value: backslash, double quote and line feed escaped.
std::string label_value(std::string_view v) {
    std::string out;
    for (char ch : v) {
        if (ch == '\\') out += "\\\\";
        else if (ch == '"') out += "\\\"";
        else if (ch == '\n') out += "\\n";
        else out += ch;
    }
    return out;
}

// A float sample or bucket bound as Prometheus's Go client writes it
// (strconv.FormatFloat(v, 'g', -1, 64)): the shortest digits that read back as
// the same double ("0.00025", not "0.00025000000000000001"), in plain
// notation unless the exponent is below -4 or at least 6 ("10", not "1e+01":
// a query that names le="10" must find the bucket).
std::string number(double v) {
    if (!std::isfinite(v)) return std::isnan(v) ? "NaN" : (v > 0 ? "+Inf" : "-Inf");
    if (v == 0) return "0";
    char buf[64];
    int digits = 1;
    for (; digits < 17; ++digits) {
        std::snprintf(buf, sizeof buf, "%.*e", digits - 1, v);
        if (std::strtod(buf, nullptr) == v) break;
    }
    std::snprintf(buf, sizeof buf, "%.*e", digits - 1, v);
    const int exponent = std::atoi(std::strchr(buf, 'e') + 1);
    if (exponent < -4 || exponent >= 6) return buf;
    std::snprintf(buf, sizeof buf, "%.*f", std::max(0, digits - 1 - exponent), v);
    return buf;
}

class writer {
public:
    explicit writer(std::string_view prefix) : prefix_(prefix) {}

    // # HELP and # TYPE once per metric family, before its first sample.
    void family(std::string_view name, std::string_view type, std::string_view help) {
        out_ += "# HELP " + prefix_ + "_" + std::string(name) + " " + std::string(help) + "\n";
        out_ += "# TYPE " + prefix_ + "_" + std::string(name) + " " + std::string(type) + "\n";
    }
    void sample(std::string_view name, const std::vector<std::pair<std::string_view, std::string>>& labels,
                const std::string& value) {
        out_ += prefix_ + "_" + std::string(name);
        if (!labels.empty()) {
            out_ += "{";
            bool first = true;
            for (const auto& [k, v] : labels) {
                if (!first) out_ += ",";
                first = false;
                out_ += std::string(k) + "=\"" + label_value(v) + "\"";
            }
            out_ += "}";
        }
        out_ += " " + value + "\n";
    }
    void histogram(std::string_view name, const std::vector<std::pair<std::string_view, std::string>>& labels,
                   const metrics::histogram& h) {
        std::uint64_t cumulative = 0;
        for (std::size_t b = 0; b < h.buckets.size(); ++b) {
            cumulative += h.buckets[b];
            auto l = labels;
            l.emplace_back("le", b < metrics::bounds.size() ? number(metrics::bounds[b]) : std::string("+Inf"));
            sample(std::string(name) + "_bucket", l, std::to_string(cumulative));
        }
        sample(std::string(name) + "_sum", labels, number(h.sum));
        sample(std::string(name) + "_count", labels, std::to_string(h.count));
    }
    std::string take() { return std::move(out_); }

private:
    std::string prefix_;
    std::string out_;
};

}  // namespace

std::string render_prometheus(const metrics& m, std::string_view prefix) {
    const auto all = m.snapshot();
    writer w(prefix);
    using labels = std::vector<std::pair<std::string_view, std::string>>;
    w.family("acquisitions_total", "counter", "Calls of lock(), try_lock*() and their kin, by kind and outcome.");
    for (const auto& b : all)
        for (std::size_t k = 0; k < grant_kinds; ++k)
            for (std::size_t o = 0; o < 3; ++o)
                w.sample("acquisitions_total",
                         labels{{"backend", b.backend},
                                {"kind", std::string(to_string(static_cast<grant_kind>(k)))},
                                {"outcome", std::string(to_string(static_cast<acquire_outcome>(o)))}},
                         std::to_string(b.acquisitions[k][o]));
    w.family("grants_total", "counter",
             "Grants by whether they waited for another holder (unknown where the backend does not say).");
    for (const auto& b : all)
        for (std::size_t c = 0; c < 3; ++c)
            w.sample("grants_total",
                     labels{{"backend", b.backend}, {"contention", std::string(to_string(static_cast<contention>(c)))}},
                     std::to_string(b.contended[c]));
    w.family("acquire_wait_seconds", "histogram", "Time from an acquire call to its return, whatever the outcome.");
    for (const auto& b : all) w.histogram("acquire_wait_seconds", labels{{"backend", b.backend}}, b.wait);
    w.family("hold_seconds", "histogram", "Time from a grant to its release.");
    for (const auto& b : all) w.histogram("hold_seconds", labels{{"backend", b.backend}}, b.hold);
    w.family("releases_total", "counter", "Releases, by whether they went cleanly.");
    for (const auto& b : all) {
        w.sample("releases_total", labels{{"backend", b.backend}, {"clean", "true"}},
                 std::to_string(b.releases - b.releases_unclean));
        w.sample("releases_total", labels{{"backend", b.backend}, {"clean", "false"}},
                 std::to_string(b.releases_unclean));
    }
    w.family("renewal_calls_total", "counter", "Calls of the backend's batched renewal.");
    for (const auto& b : all)
        w.sample("renewal_calls_total", labels{{"backend", b.backend}}, std::to_string(b.renewal_calls));
    w.family("renewals_total", "counter", "Grants renewed or checked, by result.");
    for (const auto& b : all) {
        w.sample("renewals_total", labels{{"backend", b.backend}, {"result", "ok"}}, std::to_string(b.renewals_ok));
        w.sample("renewals_total", labels{{"backend", b.backend}, {"result", "failed"}},
                 std::to_string(b.renewals_failed));
        w.sample("renewals_total", labels{{"backend", b.backend}, {"result", "lost"}}, std::to_string(b.renewals_lost));
    }
    w.family("renewal_seconds", "histogram", "Latency of one batched renewal call.");
    for (const auto& b : all) w.histogram("renewal_seconds", labels{{"backend", b.backend}}, b.renewal_latency);
    w.family("losses_total", "counter", "Grants found lost while held, by kind.");
    for (const auto& b : all)
        for (std::size_t k = 0; k < grant_kinds; ++k)
            w.sample("losses_total",
                     labels{{"backend", b.backend}, {"kind", std::string(to_string(static_cast<grant_kind>(k)))}},
                     std::to_string(b.losses[k]));
    w.family("errors_total", "counter", "Failed acquisitions, releases and renewals, by error code.");
    for (const auto& b : all)
        for (const auto& [code, n] : b.errors)
            w.sample("errors_total", labels{{"backend", b.backend}, {"code", std::string(errc_name(code))}},
                     std::to_string(n));
    return w.take();
}

}  // namespace distlock
