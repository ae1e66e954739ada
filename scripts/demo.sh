#!/usr/bin/env bash
# The flash-sale (秒杀) demo on the embedded default backend (file://): two app
# server processes, 200 buyers in flight, 1000 purchase requests, 50 items.
# First without a lock (it oversells), then with distlock (it sells exactly 50).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
. scripts/lib.sh
say "installing what is missing of: ${CORE_PACKAGES[*]}"
ensure_packages "${CORE_PACKAGES[@]}"
if [ -n "${DISTLOCK_DEMO_TOOL:-}" ]; then
    # A tool built already (scripts/test.sh runs the README's commands with the
    # one it built: tests/docs/run_readme.sh).
    tool=$DISTLOCK_DEMO_TOOL
    say "the tool of $tool"
else
    # The tool alone, in a directory of its own: build/ stays for the whole tree
    # (scripts/test.sh, and the README's build and install steps).
    DISTLOCK_CONFIGURE_ARGS="-DDISTLOCK_BUILD_TESTS=OFF ${DISTLOCK_CONFIGURE_ARGS:-}" \
        configure_and_build build-demo "" distlock-cli
    tool=build-demo/bin/distlock
fi

locks=$(mktemp -d /tmp/distlock-demo.XXXXXX)
trap 'rm -rf "$locks"' EXIT
echo
echo "1) Without a lock: every buyer reads the stock, pauses, writes it back."
without=$("$tool" flash-sale --no-lock --quiet)
echo "$without"
echo
echo "2) With distlock on file://$locks (flock, one lock for the stock):"
with=$("$tool" flash-sale --backend "file://$locks" --quiet)
echo "$with"
echo
echo "3) A bigger sale (400 items): one lock for the stock, then 8 stock segments with a lock each."
"$tool" flash-sale --backend "file://$locks" --stock 400 --quiet
"$tool" flash-sale --backend "file://$locks" --stock 400 --segments 8 --quiet
echo
over_without=$(grep -o 'OVERSOLD [0-9]*' <<<"$without" | awk '{print $2}')
over_with=$(grep -o 'OVERSOLD [0-9]*' <<<"$with" | awk '{print $2}')
sold_with=$(grep -o 'sold [0-9]*,' <<<"$with" | head -1 | tr -dc 0-9)
if [ "$over_without" -gt 0 ] && [ "$over_with" -eq 0 ] && [ "$sold_with" -eq 50 ]; then
    echo "Result: without a lock $over_without items were oversold; with distlock 0 were, and exactly 50 were sold."
else
    echo "Unexpected result: oversold without=$over_without with=$over_with, sold with lock=$sold_with" >&2
    exit 1
fi
