#!/usr/bin/env bash
# The full fault matrix (tests/faults/README.md), on this machine:
#   scripts/faults.sh [--seconds S] [--repeat N] [--lanes N] [--only ID,...] [--nemesis N,...] [--report FILE] [--resume]
#   scripts/faults.sh --soak [--ops N] [--seconds S] [--workers N] [--lanes N] [--only ID,...] [--nemesis N,...]
#                     [--report FILE] [--resume]
# Builds the worker, starts every real server (integration/backends.sh), runs
# every backend x nemesis cell that applies for S seconds (default 60) N times
# (default 1) and writes the page of docs/reliability.md (--report, default
# docs/reliability.md; --report - for none). Each cell's histories, report and
# log stay in build/faults-full. Takes hours (about 65 s a cell, --lanes N at a time,
# default 1; two lanes want two free cores); scripts/test.sh runs the short matrix
# (seconds per cell). --resume: go on with the run in build/faults-full, cut short
# (same commit and arguments): its cells are kept, the rest run, the page lists the parts.
# --soak: the soak profile instead (matrix.py --profile soak): per backend, cells of
# the nemeses that apply to it in turn, workers holding each grant 2 ms, until N
# (default 100,000) lock operations were made and checked and every nemesis had its
# turn (cells of --seconds, default 20 here); --workers (default 10)
# processes on the lock; two lanes; the record is build/faults-soak/soak.json, and its
# page --report (default docs/soak.md). --resume: go on with build/faults-soak, each
# backend from where it stopped. Hours, not minutes: never in CI.
# Exit status 1 when a cell failed in a way that is not expected.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
seconds="" repeat=1 only="" nemesis="" report="" soak=0 ops=100000 resume=0 lanes="" workers=""
while [ $# -gt 0 ]; do
    case "$1" in
        --seconds) seconds=$2; shift 2 ;;
        --repeat) repeat=$2; shift 2 ;;
        --only) only=$2; shift 2 ;;
        --nemesis) nemesis=$2; shift 2 ;;
        --report) report=$2; shift 2 ;;
        --resume) resume=1; shift ;;
        --lanes) lanes=$2; shift 2 ;;
        --workers) workers=$2; shift 2 ;;
        --soak) soak=1; shift ;;
        --ops) ops=$2; shift 2 ;;
        *) echo "usage: $0 [--seconds S] [--repeat N] [--lanes N] [--only ID,...] [--nemesis N,...] [--report FILE|-] [--resume]" \
                "| --soak [--ops N] [--workers N] ..." >&2
           exit 2 ;;
    esac
done
. scripts/lib.sh
ensure_packages "${CORE_PACKAGES[@]}" "${BACKEND_PACKAGES[@]}" "${FAULT_PACKAGES[@]}"
configure_and_build build "" distlock-fault-worker

say "starting the real servers"
trap 'integration/backends.sh down || true' EXIT
integration/backends.sh up

export DISTLOCK_FAULT_WORKER=$PWD/build/bin/distlock-fault-worker
if [ "$soak" -eq 1 ]; then
    out=build/faults-soak
    say "the soak profile ($ops lock operations per backend, ${seconds:-20} s per cell)"
    args=(--profile soak --ops "$ops" --seconds "${seconds:-20}" --lanes "${lanes:-2}" --workers "${workers:-10}" --out "$out")
else
    out=build/faults-full
    say "the full fault matrix (${seconds:-60} s per cell, ${repeat} time(s))"
    args=(--profile full --seconds "${seconds:-60}" --repeat "$repeat" --lanes "${lanes:-1}" --out "$out")
    [ -n "$workers" ] && args+=(--workers "$workers")
fi
[ -n "$only" ] && args+=(--only "$only")
[ -n "$nemesis" ] && args+=(--nemesis "$nemesis")
if [ "$resume" -eq 1 ]; then args+=(--resume); else rm -rf "$out"; fi
rc=0
python3 tests/faults/matrix.py "${args[@]}" || rc=$?
# The page of what was recorded (a run cut short too: it says so).
[ -n "$report" ] || report=$([ "$soak" -eq 1 ] && echo docs/soak.md || echo docs/reliability.md)
if [ "$report" != - ]; then
    if [ "$soak" -eq 1 ]; then
        [ ! -f "$out/soak.json" ] || python3 tests/faults/matrix.py --render-soak "$out/soak.json" --report "$report"
    else
        [ ! -f "$out/matrix.json" ] || python3 tests/faults/matrix.py --render "$out/matrix.json" --report "$report"
    fi
fi
exit $rc
