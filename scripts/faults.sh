#!/usr/bin/env bash
# The full fault matrix (tests/faults/README.md), on this machine:
#   scripts/faults.sh [--seconds S] [--repeat N] [--only ID,...] [--nemesis N,...] [--report FILE]
#   scripts/faults.sh --soak [--ops N] [--seconds S] [--only ID,...] [--nemesis N,...]
# Builds the worker, starts every real server (integration/backends.sh), runs
# every backend x nemesis cell that applies for S seconds (default 60) N times
# (default 1) and writes the page of docs/reliability.md (--report, default
# docs/reliability.md; --report - for none). Each cell's histories, report and
# log stay in the output directory it prints. Takes about two and a half hours with the
# defaults; scripts/test.sh runs the short matrix (seconds per cell).
# --soak: the soak profile instead (matrix.py --profile soak): per backend, cells of
# the nemeses that apply to it in turn, workers holding each grant 2 ms, until N
# (default 100,000) lock operations were made and checked; two lanes; the record is
# build/faults-soak/soak.json. Hours, not minutes: never in CI.
# Exit status 1 when a cell failed in a way that is not expected.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
seconds=60 repeat=1 only="" nemesis="" report=docs/reliability.md soak=0 ops=100000
while [ $# -gt 0 ]; do
    case "$1" in
        --seconds) seconds=$2; shift 2 ;;
        --repeat) repeat=$2; shift 2 ;;
        --only) only=$2; shift 2 ;;
        --nemesis) nemesis=$2; shift 2 ;;
        --report) report=$2; shift 2 ;;
        --soak) soak=1; shift ;;
        --ops) ops=$2; shift 2 ;;
        *) echo "usage: $0 [--seconds S] [--repeat N] [--only ID,...] [--nemesis N,...] [--report FILE|-] | --soak [--ops N] ..." >&2
           exit 2 ;;
    esac
done
. scripts/lib.sh
ensure_packages "${CORE_PACKAGES[@]}" "${BACKEND_PACKAGES[@]}" "${FAULT_PACKAGES[@]}"
configure_and_build build "" distlock-fault-worker

say "starting the real servers"
trap 'integration/backends.sh down || true' EXIT
integration/backends.sh up

if [ "$soak" -eq 1 ]; then
    say "the soak profile ($ops lock operations per backend, ${seconds} s per cell)"
    args=(--profile soak --ops "$ops" --seconds "$seconds" --lanes 2 --out build/faults-soak)
    [ -n "$only" ] && args+=(--only "$only")
    [ -n "$nemesis" ] && args+=(--nemesis "$nemesis")
    rm -rf build/faults-soak
    DISTLOCK_FAULT_WORKER=$PWD/build/bin/distlock-fault-worker python3 tests/faults/matrix.py "${args[@]}"
    exit $?
fi

say "the full fault matrix (${seconds} s per cell, ${repeat} time(s))"
args=(--profile full --seconds "$seconds" --repeat "$repeat" --out "build/faults-full")
[ -n "$only" ] && args+=(--only "$only")
[ -n "$nemesis" ] && args+=(--nemesis "$nemesis")
[ "$report" != - ] && args+=(--report "$report")
rm -rf build/faults-full
DISTLOCK_FAULT_WORKER=$PWD/build/bin/distlock-fault-worker python3 tests/faults/matrix.py "${args[@]}"
