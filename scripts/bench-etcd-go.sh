#!/usr/bin/env bash
# distlock's etcd mutex beside Go's gRPC client on one etcd (docs/benchmarks.md,
# "etcd against its write floor"):
#   scripts/bench-etcd-go.sh [--runs N] [--seconds S]
# Builds tools/etcd-go-bench (Go's clientv3/concurrency.Mutex of Debian's
# golang-etcd-server-dev, and distlock's recipe sent over the same client, each
# with its gRPC write floor), starts etcd alone (integration/backends.sh), and
# runs it and `distlock bench` in alternation, printing one line per run.
# A benchmark only: nothing of it is part of the library or of scripts/test.sh.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
runs=3 seconds=4
while [ $# -gt 0 ]; do
    case "$1" in
        --runs) runs=$2; shift 2 ;;
        --seconds) seconds=$2; shift 2 ;;
        *) echo "usage: $0 [--runs N] [--seconds S]" >&2; exit 2 ;;
    esac
done
. scripts/lib.sh
ensure_packages "${CORE_PACKAGES[@]}" "${BACKEND_PACKAGES[@]}" golang-go golang-etcd-server-dev
configure_and_build build "" distlock-cli
gopath=$(mktemp -d)
trap 'rm -rf "$gopath"; integration/backends.sh down >/dev/null 2>&1 || true' EXIT
mkdir -p "$gopath/src/etcdbench"
cp tools/etcd-go-bench/main.go "$gopath/src/etcdbench/"
GOPATH="$gopath:/usr/share/gocode" GO111MODULE=off GOCACHE="$gopath/cache" go build -o "$gopath/etcdbench" etcdbench
if compgen -G "integration/.run/*.pids" >/dev/null; then
    echo "servers from integration/backends.sh are running: stop them first (integration/backends.sh down)" >&2
    exit 1
fi
integration/backends.sh up etcd >/dev/null
url=$(sed -n "s/^DISTLOCK_TEST_ETCD_URL='\{0,1\}\([^']*\)'\{0,1\}$/\1/p" integration/.run/etcd.env)
endpoint=$(echo "$url" | sed 's|^etcd://\([^/?]*\).*|\1|')
for _ in $(seq "$runs"); do
    build/bin/distlock bench --backend "$url" --seconds "$seconds" --json --quiet | python3 -c '
import json, sys
j = json.load(sys.stdin)
print("distlock (JSON gateway): p50 %.0f us, write floor %.0f us, p50 / floor %.2f" % (j["p50_us"], j["native_floor_us"], j["native_ratio"]))'
    "$gopath/etcdbench" --endpoint "$endpoint" --seconds "$seconds" | python3 -c '
import json, sys
j = json.load(sys.stdin)
print("Go concurrency.Mutex (gRPC): p50 %.0f us, gRPC write floor %.0f us, p50 / floor %.2f; distlock recipe over gRPC: p50 %.0f us, / floor %.2f" % (j["p50_us"], j["native_floor_us"], j["native_ratio"], j["recipe_p50_us"], j["recipe_ratio"]))'
done
