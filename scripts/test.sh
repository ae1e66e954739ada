#!/usr/bin/env bash
# Every test, against real servers started here (integration/backends.sh).
#   scripts/test.sh                       plain build (backends as modules) + ctest + the README's
#                                         commands (tests/docs/run_readme.sh) + the Debian packages
#                                         (scripts/package.sh --test) + the short fault matrix + a
#                                         30 s libFuzzer run over the URL parser, then an
#                                         AddressSanitizer+UBSan build + ctest
#   scripts/test.sh --sanitize thread     the second pass with ThreadSanitizer instead
#   scripts/test.sh --sanitize none       no sanitizer pass
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
sanitize="address,undefined"
while [ $# -gt 0 ]; do
    case "$1" in
        --sanitize) sanitize=$2; shift 2 ;;
        *) echo "usage: $0 [--sanitize address,undefined|thread|none]" >&2; exit 2 ;;
    esac
done
. scripts/lib.sh
ensure_packages "${CORE_PACKAGES[@]}" "${BACKEND_PACKAGES[@]}" "${FAULT_PACKAGES[@]}" "${PACKAGE_PACKAGES[@]}"
# The code's one format (.clang-format), first: seconds, and a failure says which files.
scripts/format.sh --check
# -g1 (line tables only): the tests need no more, and the build is CI's longest step.
# The backends as modules, for /usr: the Debian packages' build
# (docs/packaging.md), which every test below then runs on (the conformance
# suite through each module, loaded by its scheme), and which
# scripts/package.sh packages.
DISTLOCK_CONFIGURE_ARGS="-DDISTLOCK_EXTRA_COMPILE_OPTIONS=-g1 -DDISTLOCK_BACKEND_MODULES=ON -DCMAKE_INSTALL_PREFIX=/usr" \
    configure_and_build build ""

# The sanitizer pass's build, now, before the servers start: their idle work
# (the etcd cluster's heartbeats, the JVMs) would slow it (its tests run last).
if [ "$sanitize" != none ]; then
    # The sanitizer pass: the core's unit tests, the CLI tests and the whole
    # conformance suite against every backend (the backends' own fault tests run
    # in the plain pass), on a STATIC libdistlock, whose installed package
    # is tested there too (find_package and pkg-config consumers).
    # -O0 -g1 (line tables: sanitizer reports still name files and lines): the
    # shortest build (a third less than -O1), the longest step of CI on two
    # cores; the tests mostly wait for servers and leases.
    dir=build-${sanitize//,/-}
    # The ThreadSanitizer pass also runs what has threads of its own beyond the
    # core's: <distlock/asio.hpp>'s tests (Asio's threads; on memory:// and
    # file://: its code is the same on every URL, whose runs are the plain
    # pass's) and the backends' release-event tests (their listener threads,
    # and the connections they kill). Their code runs under the AddressSanitizer
    # pass through the conformance suite's [async] cases on every URL.
    thread_targets=() thread_tests=
    if [ "$sanitize" = thread ]; then
        thread_targets=(distlock-asio-tests distlock-file-tests distlock-redis-tests distlock-postgres-tests
            distlock-zk-async-tests)
        thread_tests='|distlock-asio-tests(\.file)?$|distlock-(file|redis|postgres|zk-async)-tests$'
    fi
    DISTLOCK_CONFIGURE_ARGS="-DDISTLOCK_SHARED=OFF -DDISTLOCK_EXTRA_COMPILE_OPTIONS=-O0;-g1" \
        configure_and_build "$dir" "$sanitize" distlock-unit-tests distlock-cli-tests distlock-conformance \
        distlock-cli "${thread_targets[@]}"
fi

say "starting the real servers"
trap 'integration/backends.sh down || true' EXIT
integration/backends.sh up
set -a
. integration/.run/backends.env
set +a
export DISTLOCK_REQUIRE_ALL=1  # a missing server URL fails instead of skipping

say "tests (plain build)"
# Four at a time on two cores: most of the suite waits for servers and leases
# (crash and expiry cases wait out a 2 s lease), not for the processor.
ctest --test-dir build --output-on-failure -j 4

# The README's shell commands in order, as a newcomer runs them (its build and
# install in this tree, the demo with the tool built here; the script says
# what it substitutes), then the installed tool takes a lock.
say "the README's commands"
tests/docs/run_readme.sh

# The Debian packages of that build: lintian, then installed with dpkg -i,
# used (the installed tool on the servers, man, completion, the consumers
# against /usr) and removed; then the Redis-only set and the consumers on a
# clean Debian 12 chroot (debootstrap), about 60 s (scripts/package.sh).
scripts/package.sh --build-dir build --test

# The short fault matrix (tests/faults/README.md): a few seconds per cell, every
# backend and every nemesis at least once, histories checked by checker.py; two
# cells at a time, never two on one server (--lanes). The full matrix is
# scripts/faults.sh (docs/reliability.md).
#
# No message shows a password: the URL parser under libFuzzer, bounded. Its
# build (clang) and run go beside the matrix, whose cells mostly wait, at a
# lower priority (nice 10): the matrix's processes get the CPU when they need it.
say "fault harness, short matrix (beside it, at nice 10: the URL parser's fuzz build and run, log in build/fuzz.log)"
nice -n 10 scripts/fuzz.sh --seconds 30 >build/fuzz.log 2>&1 &
fuzz_pid=$!
rm -rf build/faults-short
matrix_status=0
DISTLOCK_FAULT_WORKER=$PWD/build/bin/distlock-fault-worker \
    python3 tests/faults/matrix.py --profile short --lanes 2 --out build/faults-short || matrix_status=$?
fuzz_status=0
wait "$fuzz_pid" || fuzz_status=$?
say "the fuzz run (scripts/fuzz.sh --seconds 30)"
cat build/fuzz.log
[ "$matrix_status" -eq 0 ] || { echo "the short fault matrix failed ($matrix_status)" >&2; exit "$matrix_status"; }
[ "$fuzz_status" -eq 0 ] || { echo "the fuzz run failed ($fuzz_status)" >&2; exit "$fuzz_status"; }

if [ "$sanitize" != none ]; then
    say "unit, CLI and conformance tests under -fsanitize=$sanitize"
    export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
    export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1
    # (MySQL's counter-row fence differs from its sequence in SQL text only: the plain pass runs it.)
    # The library's code under the sanitizers, once per backend and strategy: the
    # clusters' URLs (etcd-cluster, zk-ensemble) run the same client code as
    # their single servers' and are left to the plain pass, as are the
    # fence-table URLs (the same strategies with MySQL 8's counter rows). Of the
    # Redis deployments, redis-cluster runs here (the topology layer's slot
    # routing, redirections and sharded pub/sub); the sentinel lookup and the
    # reentrant strategy over either deployment run in the plain pass only.
    # Over TLS, the client code that is distlock's own runs here (the Redis
    # TLS transport on one server and on the cluster, PostgreSQL's TLS
    # parameters); the URLs whose TLS is the client library's or curl's, or a
    # tunnel's, run in the plain pass. So do the CLI's cases that run one
    # command on every URL (distlock-cli-tests.every-url): the CLI's code is
    # the same on each, and its other cases run here.
    ctest --test-dir "$dir" --output-on-failure -j 4 -R "^(distlock-unit-tests|distlock-cli-tests|conformance\\.|package\\.$thread_tests)" \
        -E '(distlock-cli-tests\.every-url|\.fence-table|conformance\.etcd-cluster|conformance\.zk-ensemble|conformance\.redis-sentinel.*|conformance\.redis-cluster-reentrant|conformance\.redis-tls-.*|conformance\.mysql\.tls|conformance\.etcd-tls|conformance\.zookeeper-tls-tunnel)$'
fi
