#!/usr/bin/env bash
# The URL parser under libFuzzer (tests/fuzz/url_fuzz.cpp: no message ever shows
# a password), for a bounded time:
#   scripts/fuzz.sh [--seconds S]     (default 60; scripts/test.sh runs it)
# Builds a clang build of its own (build-fuzz: static libdistlock with only the
# embedded backends, -fsanitize=fuzzer-no-link,address,undefined), starts from
# the seed corpus in tests/fuzz/corpus and keeps what it learns in
# build-fuzz/corpus. A finding is written to build-fuzz/findings/ and fails the run.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
seconds=60
while [ $# -gt 0 ]; do
    case "$1" in
        --seconds) seconds=$2; shift 2 ;;
        *) echo "usage: $0 [--seconds S]" >&2; exit 2 ;;
    esac
done
. scripts/lib.sh
ensure_packages "${CORE_PACKAGES[@]}" "${FUZZ_PACKAGES[@]}"
dir=build-fuzz
if [ ! -f "$dir/CMakeCache.txt" ]; then
    say "configuring $dir (clang, libFuzzer)"
    gen=()
    command -v ninja >/dev/null && gen=(-G Ninja)
    off=()
    for b in REDIS REDLOCK MYSQL POSTGRES ZOOKEEPER ETCD CONSUL; do off+=("-DDISTLOCK_BACKEND_$b=OFF"); done
    CC=clang CXX=clang++ cmake -S . -B "$dir" "${gen[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDISTLOCK_FUZZ=ON \
        -DDISTLOCK_SHARED=OFF -DDISTLOCK_SANITIZE=fuzzer-no-link,address,undefined -DDISTLOCK_BUILD_TESTS=OFF \
        -DDISTLOCK_BUILD_TOOLS=OFF -DDISTLOCK_INSTALL=OFF "${off[@]}" >"$dir.configure.log" 2>&1 \
        || { cat "$dir.configure.log" >&2; exit 1; }
fi
say "building $dir"
cmake --build "$dir" --target distlock-url-fuzz >"$dir.build.log" 2>&1 || { tail -n 40 "$dir.build.log" >&2; exit 1; }
mkdir -p "$dir/corpus" "$dir/findings"
cp tests/fuzz/corpus/* "$dir/corpus/"
say "fuzzing the URL parser for ${seconds} s"
"$dir/bin/distlock-url-fuzz" -max_total_time="$seconds" -artifact_prefix="$dir/findings/" -print_final_stats=1 \
    "$dir/corpus" 2>"$dir/fuzz.log" || { tail -n 30 "$dir/fuzz.log" >&2; exit 1; }
grep -E "^Done|number_of_executed_units" "$dir/fuzz.log" >&2 || true
