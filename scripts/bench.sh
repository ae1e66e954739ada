#!/usr/bin/env bash
# The server figures of docs/benchmarks.md, on this machine:
#   scripts/bench.sh [--seconds S] [--runs N] [--primitives | --tls | --async] [SERVER...]
# For each server (default: redis redlock mysql postgres zookeeper etcd
# consul-emulator) it starts that server alone (integration/backends.sh), so
# that the others' background work does not load the machine, and runs
# `distlock bench` on each of its URLs: uncontended (one thread) and contended
# (4 processes, with the hand-offs in round trips), N runs each. It prints one Markdown row per run; the
# floor is measured in the same run (see docs/cli.md, `bench`). With --primitives it
# measures instead, per URL and run, uncontended cycles of the mutex, of a
# read-write lock's read and write sides and of a semaphore's permit, the
# others as ratios to the mutex's p50 of the same run.
# With --tls it measures each TLS URL beside its plaintext twin instead
# (docs/benchmarks.md, "TLS"): both servers up, the two URLs in alternation,
# each run's ratio p50 cycle / two floors, the floor taken over that URL's own
# connection (TLS included), and how far the TLS ratio is from the plaintext one.
# With --async it measures instead `distlock bench --async` (docs/benchmarks.md,
# "Asynchronous waiters") at 1,000 and 10,000 pending waiters on memory://,
# file:// and one URL per server (its mutex's usual strategy), one row each.
# With --flash-sale it runs the flash sale on 1 stock segment and on 10 per URL.
# With --compare OLD it measures each URL with OLD (another build's distlock
# tool, e.g. of the commit before a refactoring) beside this build's, the two in
# alternation, and prints per URL both p50 / 2 floors ratios and new / old.
# With --record FILE, the default and --flash-sale modes also append each run's
# JSON to FILE, one line each ({"server", "kind", "result"}); --plot FILE...
# renders such records (tools/bench/plot_bench.py, python3-matplotlib) as the
# SVGs of docs/benchmarks/ that docs/benchmarks.md shows, and measures nothing.
# Servers this script did not start must be stopped first (backends.sh down).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
seconds=3 runs=3 servers=() primitives=0 tls=0 async=0 flash=0 old="" record="" plot=0
while [ $# -gt 0 ]; do
    case "$1" in
        --seconds) seconds=$2; shift 2 ;;
        --runs) runs=$2; shift 2 ;;
        --primitives) primitives=1; shift ;;
        --tls) tls=1; shift ;;
        --async) async=1; shift ;;
        --flash-sale) flash=1; shift ;;
        --compare) old=$2; shift 2 ;;
        --record) record=$2; shift 2 ;;
        --plot) plot=1; shift ;;
        -*) echo "usage: $0 [--seconds S] [--runs N] [--record FILE] [--primitives | --tls | --async | --flash-sale | --compare OLD_DISTLOCK] [SERVER...]" >&2
            echo "       $0 --plot RECORD..." >&2; exit 2 ;;
        *) servers+=("$1"); shift ;;
    esac
done
if [ "$plot" = 1 ]; then  # the arguments are record files
    [ ${#servers[@]} -gt 0 ] || { echo "--plot takes the record files (--record FILE) to render" >&2; exit 2; }
    . scripts/lib.sh
    ensure_packages python3-matplotlib
    # Debian's python3, whose python3-matplotlib this is (not another python3 on PATH).
    exec /usr/bin/python3 tools/bench/plot_bench.py --out docs/benchmarks "${servers[@]}"
fi
named=("${servers[@]}")  # --async: memory and file are measured unless servers are named without them
[ ${#servers[@]} -gt 0 ] || servers=(redis redlock mysql postgres zookeeper etcd consul-emulator)
. scripts/lib.sh
ensure_packages "${CORE_PACKAGES[@]}" "${BACKEND_PACKAGES[@]}"
configure_and_build build "" distlock-cli
if compgen -G "integration/.run/*.pids" >/dev/null; then
    echo "servers from integration/backends.sh are running: stop them first (integration/backends.sh down)" >&2
    exit 1
fi
trap 'integration/backends.sh down >/dev/null 2>&1 || true' EXIT

keep() {  # keep SERVER KIND JSON: one line of the --record file
    [ -n "$record" ] || return 0
    python3 -c 'import json, sys; print(json.dumps({"server": sys.argv[1], "kind": sys.argv[2], "result": json.loads(sys.argv[3])}))' \
        "$@" >>"$record"
}

row() {  # row SERVER MODE JSON
    python3 -c '
import json, sys
j = json.loads(sys.argv[3])
f, n = j["floor_rtt_us"], j["native_floor_us"]
h = "-" if "handoff_p50_rt" not in j else "%s / %s" % (j["handoff_p50_rt"], j["handoff_p99_rt"])
print("| %s | %s | %s | %.0f | %.1f | %.0f | %s | %s | %s | %s | %s |" % (sys.argv[1], j["backend"], sys.argv[2],
      j["cycles_per_s"], j["p50_us"], j["p99_us"], "-" if f is None else "%.1f" % f, "-" if f is None else j["floor_ratio"],
      "-" if n is None else "%.1f" % n, "-" if n is None else j["native_ratio"], h))' "$@"
}

# --primitives: uncontended cycles of each primitive beside the mutex's, in one
# run per URL: a read (rw, no writer), a write (rw, one writing thread) and one
# permit of a semaphore of 4, each as a ratio to the mutex's p50.
primitives_row() {  # primitives_row SERVER URL
    local mutex rw_read rw_write permit
    mutex=$(build/bin/distlock bench --backend "$2" --seconds "$seconds" --json --quiet)
    rw_read=$(build/bin/distlock bench --backend "$2" --primitive rw --seconds "$seconds" --json --quiet 2>&1) || rw_read=null
    rw_write=$(build/bin/distlock bench --backend "$2" --primitive rw --writers 1 --seconds "$seconds" --json --quiet 2>&1) ||
        rw_write=null
    permit=$(build/bin/distlock bench --backend "$2" --primitive semaphore --permits 4 --seconds "$seconds" --json --quiet 2>&1) ||
        permit=null
    python3 -c '
import json, sys
def load(t):
    try: return json.loads(t)
    except ValueError: return None
m, r, w, p = (load(a) for a in sys.argv[3:7])
def cell(j):
    if j is None: return "not supported"
    return "%.1f (%.2f)" % (j["p50_us"], j["p50_us"] / m["p50_us"])
print("| %s | %s | %.1f | %s | %s | %s |" % (sys.argv[1], m["backend"], m["p50_us"], cell(r), cell(w), cell(p)))' \
        "$1" "$2" "$mutex" "$rw_read" "$rw_write" "$permit"
}

# --tls: per pair (plain server, TLS server, plaintext URL variable, TLS URL
# variable), runs of the two URLs in alternation, one row per pair.
tls_pairs=(
    "redis redis-tls DISTLOCK_TEST_REDIS_URL DISTLOCK_TEST_REDIS_TLS_URL"
    "redis redis-tls DISTLOCK_TEST_REDIS_REENTRANT_URL DISTLOCK_TEST_REDIS_TLS_REENTRANT_URL"
    "redis-cluster redis-tls DISTLOCK_TEST_REDIS_CLUSTER_URL DISTLOCK_TEST_REDIS_CLUSTER_TLS_URL"
    "postgres postgres-tls DISTLOCK_TEST_POSTGRES_LEASE_TABLE_URL DISTLOCK_TEST_POSTGRES_TLS_URL"
    "mysql mysql-tls DISTLOCK_TEST_MYSQL_LEASE_TABLE_URL DISTLOCK_TEST_MYSQL_TLS_URL"
    "etcd etcd-tls DISTLOCK_TEST_ETCD_URL DISTLOCK_TEST_ETCD_TLS_URL"
    "zookeeper zookeeper-tls DISTLOCK_TEST_ZK_URL DISTLOCK_TEST_ZK_TLS_TUNNEL_URL")
if [ "$tls" = 1 ]; then
    echo "| plaintext URL | TLS URL | plaintext floor µs | TLS floor µs | plaintext p50 / 2 floors | TLS p50 / 2 floors | TLS ratio / plaintext ratio | TLS p50 / plaintext p50 |"
    echo "|---|---|---|---|---|---|---|---|"
    for pair in "${tls_pairs[@]}"; do
        read -r plain_server tls_server plain_var tls_var <<<"$pair"
        [ ${#servers[@]} -eq 0 ] || [[ " ${servers[*]} " == *" $plain_server "* ]] || continue
        integration/backends.sh up "$plain_server" "$tls_server" >/dev/null
        (
            set -a
            . integration/.run/backends.env
            set +a
            plain=() secure=()
            for _ in $(seq "$runs"); do
                plain+=("$(build/bin/distlock bench --backend "${!plain_var}" --seconds "$seconds" --json --quiet)")
                secure+=("$(build/bin/distlock bench --backend "${!tls_var}" --seconds "$seconds" --json --quiet)")
            done
            python3 -c '
import json, sys
n = int(sys.argv[1])
plain, secure = [json.loads(t) for t in sys.argv[2:2 + n]], [json.loads(t) for t in sys.argv[2 + n:]]
def span(values, fmt):
    return (fmt % min(values)) + ("" if fmt % min(values) == fmt % max(values) else "-" + fmt % max(values))
pr, tr = [j["floor_ratio"] for j in plain], [j["floor_ratio"] for j in secure]
mean = lambda values: sum(values) / len(values)
print("| %s | %s | %s | %s | %s | %s | %.2f | %.2f |" % (plain[0]["backend"], secure[0]["backend"],
      span([j["floor_rtt_us"] for j in plain], "%.0f"), span([j["floor_rtt_us"] for j in secure], "%.0f"),
      span(pr, "%.2f"), span(tr, "%.2f"), mean(tr) / mean(pr),
      mean([j["p50_us"] for j in secure]) / mean([j["p50_us"] for j in plain])))' "$runs" "${plain[@]}" "${secure[@]}"
        )
        integration/backends.sh down >/dev/null
    done
    exit 0
fi

# --async: per server, the URL variable measured; memory:// and file:// need none.
async_urls=(
    "redis DISTLOCK_TEST_REDIS_URL"
    "postgres DISTLOCK_TEST_POSTGRES_LEASE_TABLE_URL"
    "zookeeper DISTLOCK_TEST_ZK_URL"
    "etcd DISTLOCK_TEST_ETCD_URL"
    "mysql DISTLOCK_TEST_MYSQL_LEASE_TABLE_URL"
    "consul-emulator DISTLOCK_TEST_CONSUL_EMULATOR_URL")
async_row() {  # async_row URL: one row per number of waiters
    local n
    for n in 1000 10000; do
        python3 -c '
import json, sys
try:
    j = json.loads(sys.argv[2])
except ValueError:
    print("| %s | %s | no figures: the run failed or was cut off |" % (sys.argv[1], sys.argv[3])); sys.exit(0)
one, many, sync = j["one_name"], j["many_names"], j["sync"]
pair = lambda k: "%s / %s" % (one["pending"][k], many["pending"][k])
num = lambda v, f="%.1f": "-" if v is None else f % v
print("| %s | {:,} | %s | %s | {:,} / {:,} | %s / %s | %s | %s / %s | %s / %s | {:,} |".format(
      j["waiters"], one["rss_per_waiter_bytes"], many["rss_per_waiter_bytes"], many["all_granted_ms"]) % (
      j["backend"], pair("threads"), pair("tcp_connections"), num(one.get("handoff_p50_us")),
      num(sync.get("handoff_p50_us")), num(j["async_sync_ratio"], "%.2f"), num(one.get("handoff_floor_ratio"), "%.2f"),
      num(sync.get("handoff_floor_ratio"), "%.2f"), num(one.get("handoff_p99_us"), "%.0f"),
      num(sync.get("handoff_p99_us"), "%.0f")))' "$1" \
            "$(timeout 600 build/bin/distlock bench --backend "$1" --async --waiters "$n" --seconds "$seconds" --json --quiet || true)" "$n"
    done
}
if [ "$async" = 1 ]; then
    echo "| URL | N | threads (one name / N names) | TCP connections | RSS per waiter, B (one / N names) | hand-off p50 async / sync, µs | async / sync p50 | p50 in two round trips, async / sync | hand-off p99 async / sync, µs | N names granted after the release, ms |"
    echo "|---|---|---|---|---|---|---|---|---|---|"
    if [ ${#named[@]} -eq 0 ] || [[ " ${named[*]} " == *" memory "* ]]; then async_row memory://; fi
    if [ ${#named[@]} -eq 0 ] || [[ " ${named[*]} " == *" file "* ]]; then
        dir=$(mktemp -d)
        async_row "file://$dir"
        rm -rf "$dir"
    fi
    for entry in "${async_urls[@]}"; do
        read -r server var <<<"$entry"
        [ ${#named[@]} -eq 0 ] || [[ " ${named[*]} " == *" $server "* ]] || continue
        integration/backends.sh up "$server" >/dev/null
        (
            set -a
            . integration/.run/backends.env
            set +a
            async_row "${!var}"
        )
        integration/backends.sh down >/dev/null
    done
    exit 0
fi

# The distinct backend URLs of a server that is up (its env file also has other
# facts; the statement-count test's URL is the lease-table one under another user).
server_urls() {  # server_urls SERVER
    grep -v '^DISTLOCK_TEST_[A-Z]*_COUNT_URL=' "integration/.run/$1.env" |
        sed -n "s/^DISTLOCK_TEST_[A-Z0-9_]*_URL='\{0,1\}\([a-z]*:\/\/[^']*\)'\{0,1\}$/\1/p" | sort -u
}

# for_each_url FUNCTION: each server up alone, FUNCTION SERVER URL for each of
# its URLs, the server down again.
for_each_url() {
    local s url urls
    for s in "${servers[@]}"; do
        integration/backends.sh up "$s" >/dev/null
        mapfile -t urls < <(server_urls "$s")
        for url in "${urls[@]}"; do "$1" "$s" "$url"; done
        integration/backends.sh down >/dev/null
    done
}

# --compare: OLD and this build in alternation on one URL, one row.
compare_row() {  # compare_row SERVER URL
    local before=() after=()
    for _ in $(seq "$runs"); do
        before+=("$("$old" bench --backend "$2" --seconds "$seconds" --json --quiet)")
        after+=("$(build/bin/distlock bench --backend "$2" --seconds "$seconds" --json --quiet)")
    done
    python3 -c '
import json, sys
n = int(sys.argv[2])
old, new = [json.loads(t) for t in sys.argv[3:3 + n]], [json.loads(t) for t in sys.argv[3 + n:]]
if old[0]["floor_ratio"] is None:
    print("| %s | %s | no floor | no floor | %.2f (p50) |" % (sys.argv[1], new[0]["backend"],
          sum(j["p50_us"] for j in new) / sum(j["p50_us"] for j in old)))
    sys.exit(0)
def span(values):
    lo, hi = "%.2f" % min(values), "%.2f" % max(values)
    return lo if lo == hi else lo + "-" + hi
o, w = [j["floor_ratio"] for j in old], [j["floor_ratio"] for j in new]
print("| %s | %s | %s | %s | %.2f |" % (sys.argv[1], new[0]["backend"], span(o), span(w), (sum(w) / n) / (sum(o) / n)))' \
        "$1" "$runs" "${before[@]}" "${after[@]}"
}

# The default: N uncontended runs and N contended, one row each.
figures_rows() {  # figures_rows SERVER URL
    local j
    for _ in $(seq "$runs"); do
        j=$(build/bin/distlock bench --backend "$2" --seconds "$seconds" --json --quiet)
        row "$1" uncontended "$j"
        keep "$1" uncontended "$j"
    done
    for _ in $(seq "$runs"); do
        j=$(build/bin/distlock bench --backend "$2" --mode contended --processes 4 --seconds "$seconds" --json --quiet)
        row "$1" "contended, 4 processes" "$j"
        keep "$1" contended "$j"
    done
}

# --flash-sale: the flash sale of 4,000 requests for 2,000 items by 2 app
# servers, on 1 stock segment and on 10 (a lock each), in alternation, N runs;
# one row per URL: elapsed ms of each, and how much faster 10 segments sell.
flash_rows() {  # flash_rows SERVER URL
    local one=() ten=()
    for _ in $(seq "$runs"); do
        for n in 1 10; do
            local j
            j=$(build/bin/distlock flash-sale --backend "$2" --stock 2000 --requests 4000 --processes 2 \
                --segments "$n" --json --quiet)
            keep "$1" flash-sale "$j"
            if [ "$n" = 1 ]; then one+=("$j"); else ten+=("$j"); fi
        done
    done
    python3 -c '
import json, sys
n = int(sys.argv[2])
one, ten = [json.loads(t) for t in sys.argv[3:3 + n]], [json.loads(t) for t in sys.argv[3 + n:]]
for j in one + ten:
    assert j["sold"] == 2000 and not j.get("oversold"), j
def span(values, f="%.0f"):
    lo, hi = f % min(values), f % max(values)
    return lo if lo == hi else lo + "-" + hi
a, b = [j["elapsed_ms"] for j in one], [j["elapsed_ms"] for j in ten]
print("| %s | %s | %s | %s | %s |" % (sys.argv[1], one[0]["backend"], span(a), span(b),
      span([x / y for x, y in zip(a, b)], "%.1f")))' "$1" "$runs" "${one[@]}" "${ten[@]}"
}

primitives_rows() {  # primitives_rows SERVER URL
    for _ in $(seq "$runs"); do primitives_row "$1" "$2"; done
}

if [ -n "$old" ]; then
    [ -x "$old" ] || { echo "--compare: $old is not an executable" >&2; exit 2; }
    echo "| server | URL | old p50 / 2 floors | new p50 / 2 floors | new / old (mean ratios) |"
    echo "|---|---|---|---|---|"
    for_each_url compare_row
    exit 0
fi

if [ "$flash" = 1 ]; then
    echo "| server | URL | 1 segment, ms | 10 segments, ms | 10 segments faster by |"
    echo "|---|---|---|---|---|"
    for_each_url flash_rows
    exit 0
fi
if [ "$primitives" = 1 ]; then
    echo "| server | URL | mutex p50 µs | read p50 µs (/ mutex) | write p50 µs (/ mutex) | permit of 4 p50 µs (/ mutex) |"
    echo "|---|---|---|---|---|---|"
else
    echo "| server | URL | mode | cycles/s | p50 µs | p99 µs | floor µs | p50 / 2 floors | native µs | p50 / native | hand-off p50 / p99, round trips |"
    echo "|---|---|---|---|---|---|---|---|---|---|---|"
fi
if [ "$primitives" = 1 ]; then for_each_url primitives_rows; else for_each_url figures_rows; fi
