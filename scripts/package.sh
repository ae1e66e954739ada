#!/usr/bin/env bash
# The Debian packages (docs/packaging.md): built from a modules build, checked
# with lintian, and with --test installed with dpkg -i, used, and removed.
#
#   scripts/package.sh [--build-dir DIR] [--test]
#
# DIR (default build) is configured with -DDISTLOCK_BACKEND_MODULES=ON
# -DCMAKE_INSTALL_PREFIX=/usr and built; the packages go to DIR/packages.
# --test (root; scripts/test.sh runs it with the servers up, their URLs in the
# environment): installs the library, the Redis module, the tool and the
# headers only, and the installed distlock takes a lock on
# DISTLOCK_TEST_REDIS_URL, while postgres:// (a lock, and flash-sale's
# optimistic update) is refused naming its package; then installs every other
# package, and
#   - the installed distlock lists its modules from /usr and takes a lock on
#     DISTLOCK_TEST_POSTGRES_URL, and flash-sale --strategy optimistic runs on
#     it and on DISTLOCK_TEST_MYSQL_URL through the tool's plugins;
#   - man distlock and the bash completion work from the packages;
#   - each backend package (and tool plugin package) depends on its client
#     library and libdistlock0 (distlock-tools), and on no other database's
#     client library; distlock-tools on none;
#   - the find_package and pkg-config consumers (tests/package) build against
#     /usr and run;
# and removes the packages, checking that no file of theirs is left. Then, on
# a clean Debian 12 (debootstrap --variant=minbase bookworm, a chroot in
# DIR/debian12, with the mirror of this machine's apt sources), apt installs
# what a Redis-only service needs (libdistlock0, libdistlock0-redis,
# distlock-tools) with nothing but the packages' own Depends: no other
# database's client library comes with them, and distlock run takes a lock on
# DISTLOCK_TEST_REDIS_URL; then libdistlock-dev with a compiler, and the
# find_package and pkg-config consumers build and run there.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
. scripts/lib.sh
dir=build test=0
while [ $# -gt 0 ]; do
    case "$1" in
        --build-dir) dir=$2; shift 2 ;;
        --test) test=1; shift ;;
        *) echo "usage: $0 [--build-dir DIR] [--test]" >&2; exit 2 ;;
    esac
done
grep -q '^DISTLOCK_BACKEND_MODULES:BOOL=ON' "$dir/CMakeCache.txt" ||
    { echo "$dir is not a modules build (-DDISTLOCK_BACKEND_MODULES=ON)" >&2; exit 2; }
grep -q '^CMAKE_INSTALL_PREFIX:PATH=/usr$' "$dir/CMakeCache.txt" ||
    { echo "$dir is not configured for /usr (-DCMAKE_INSTALL_PREFIX=/usr)" >&2; exit 2; }
ensure_packages "${PACKAGE_PACKAGES[@]}"

say "packages: cpack -G DEB in $dir/packages"
rm -rf "$dir/packages"
(cd "$dir" && cpack -G DEB -B "$PWD/packages" >cpack.log 2>&1) || { tail -n 40 "$dir/cpack.log" >&2; exit 1; }
rm -rf "$dir/packages/_CPack_Packages"
mapfile -t debs < <(ls "$dir"/packages/*.deb)
for d in "${debs[@]}"; do
    echo "$(basename "$d"): $(dpkg-deb -f "$d" Depends)"
done

say "lintian (no error allowed)"
lintian --fail-on error --tag-display-limit 0 "${debs[@]}"

[ "$test" -eq 1 ] || exit 0
[ "$(id -u)" -eq 0 ] || { echo "--test installs packages: run it as root" >&2; exit 2; }
names=()
for d in "${debs[@]}"; do names+=("$(dpkg-deb -f "$d" Package)"); done
# The machine as it was: no package of ours before, none after.
if dpkg-query -W "${names[@]}" >/dev/null 2>&1; then
    echo "some of ${names[*]} are installed already: remove them first (dpkg -P)" >&2
    exit 1
fi
files=$(mktemp)
for d in "${debs[@]}"; do dpkg-deb -c "$d" | awk '$1 !~ /^d/ {print $NF}' | sed 's|^\./|/|'; done >"$files"
cleanup() {
    dpkg -P "${names[@]}" >/dev/null 2>&1 || true
    local left
    left=$(while read -r f; do if [ -e "$f" ] || [ -L "$f" ]; then echo "$f"; fi; done <"$files")
    rm -f "$files"
    if [ -n "$left" ]; then
        echo "left behind after dpkg -P:" >&2
        echo "$left" >&2
        return 1
    fi
}
trap 'cleanup || true' EXIT

# First what a service that talks only to Redis installs: the library, the
# Redis module, the tool and the headers. Then the rest.
first=() rest=()
for d in "${debs[@]}"; do
    case "$(dpkg-deb -f "$d" Package)" in
        libdistlock0 | libdistlock0-redis | distlock-tools | libdistlock-dev) first+=("$d") ;;
        *) rest+=("$d") ;;
    esac
done
say "dpkg -i libdistlock0 libdistlock0-redis distlock-tools libdistlock-dev"
dpkg -i "${first[@]}" >/dev/null
installed=/usr/bin/distlock
for var in DISTLOCK_TEST_REDIS_URL DISTLOCK_TEST_POSTGRES_URL DISTLOCK_TEST_MYSQL_URL; do
    [ -n "${!var:-}" ] || { echo "$var is not set: the servers' URLs are needed" >&2; exit 1; }
done
# A lock through a module of the installed tool: "token N" on stdout.
run_on() { env -u DISTLOCK_MODULE_PATH "$installed" run --backend "$1" --name "package-test-$$" -- sh -c 'echo "token $DISTLOCK_FENCING_TOKEN"'; }
out=$(run_on "$DISTLOCK_TEST_REDIS_URL")
grep -q '^token [1-9]' <<<"$out" || { echo "distlock run on Redis: $out" >&2; exit 1; }
echo "Redis alone: distlock run took the lock ($out)"
# PostgreSQL's module is not installed yet: refused, naming its package.
status=0
err=$(run_on "$DISTLOCK_TEST_POSTGRES_URL" 2>&1 >/dev/null) || status=$?
[ "$status" -ne 0 ] && grep -q "install the package libdistlock0-postgres" <<<"$err" ||
    { echo "without its module, postgres:// gave status $status: $err" >&2; exit 1; }
echo "PostgreSQL without its module: status $status, $err"
# flash-sale's optimistic update over PostgreSQL: the tool's plugin, not installed yet.
optimistic() {
    env -u DISTLOCK_MODULE_PATH "$installed" flash-sale --strategy optimistic --backend "$1" -p 1 -c 4 -r 20 -s 10 \
        --pause-ms 0 --json --quiet
}
status=0
err=$(optimistic "$DISTLOCK_TEST_POSTGRES_URL" 2>&1 >/dev/null) || status=$?
[ "$status" -ne 0 ] && grep -q "install the package distlock-tools-postgres" <<<"$err" ||
    { echo "without its plugin, flash-sale --strategy optimistic on postgres:// gave status $status: $err" >&2; exit 1; }
echo "flash-sale --strategy optimistic without its plugin: status $status, $err"

say "dpkg -i the other backends"
dpkg -i "${rest[@]}" >/dev/null

# Each backend package: its client library and libdistlock0 (= this version),
# nothing else of distlock's (a module pulls in no other backend's library).
# Each tool plugin package: its client library and distlock-tools (= this
# version). distlock-tools: no database client library at all.
version=$(dpkg-deb -f "$dir"/packages/libdistlock0_*.deb Version)
for d in "${debs[@]}"; do
    pkg=$(dpkg-deb -f "$d" Package)
    deps=$(dpkg-deb -f "$d" Depends)
    case "$pkg" in
        libdistlock0-*) need="libdistlock0 (= $version)" ;;
        distlock-tools-*) need="distlock-tools (= $version)" ;;
        distlock-tools) need="libdistlock0 (= $version)" ;;
        *) continue ;;
    esac
    grep -qF "$need" <<<"$deps" || { echo "$pkg: no $need in: $deps" >&2; exit 1; }
    for other in libpq5 libmysqlcppconn7v5 libzookeeper-mt2 libhiredis libcurl; do
        case "$pkg:$other" in
            libdistlock0-postgres:libpq5 | libdistlock0-mysql:libmysqlcppconn7v5 | libdistlock0-zookeeper:libzookeeper-mt2 | \
                libdistlock0-redis:libhiredis | libdistlock0-redlock:libhiredis | distlock-tools-postgres:libpq5 | \
                distlock-tools-mysql:libmysqlcppconn7v5 | libdistlock0-etcd:libcurl | libdistlock0-consul:libcurl) ;;
            *) if grep -q "$other" <<<"$deps"; then echo "$pkg depends on $other: $deps" >&2; exit 1; fi ;;
        esac
    done
done

say "the installed distlock"
env -u DISTLOCK_MODULE_PATH "$installed" --version
modules=$(env -u DISTLOCK_MODULE_PATH "$installed" schemes --verbose)
echo "$modules"
grep -q "^redis	module libdistlock-redis.so: /usr/lib/.*/distlock/modules/libdistlock-redis.so" <<<"$modules" ||
    { echo "the installed distlock does not find its modules under /usr" >&2; exit 1; }
out=$(run_on "$DISTLOCK_TEST_POSTGRES_URL")
grep -q '^token [1-9]' <<<"$out" || { echo "distlock run on PostgreSQL: $out" >&2; exit 1; }
echo "PostgreSQL: distlock run took the lock ($out)"
for url in "$DISTLOCK_TEST_POSTGRES_URL" "$DISTLOCK_TEST_MYSQL_URL"; do
    out=$(optimistic "$url")
    grep -q '"consistent":true' <<<"$out" && grep -q '"oversold":0[,}]' <<<"$out" && grep -q '"sold":10[,}]' <<<"$out" ||
        { echo "flash-sale --strategy optimistic on ${url%%://*}://: $out" >&2; exit 1; }
    echo "flash-sale --strategy optimistic on ${url%%://*}:// through its plugin: sold 10 of 10, none oversold"
done

say "man distlock and the bash completion"
man -w distlock | grep -q '^/usr/share/man/man1/distlock.1.gz$'
MANWIDTH=100 man distlock 2>/dev/null | grep -q 'distlock run' || { echo "man distlock shows no 'distlock run'" >&2; exit 1; }
completed=$(bash -c '. /usr/share/bash-completion/completions/distlock
    COMP_WORDS=(distlock ru); COMP_CWORD=1; _distlock; echo "${COMPREPLY[*]}"
    COMP_WORDS=(distlock run --backend red); COMP_CWORD=3; _distlock; echo "${COMPREPLY[*]}"')
[ "$completed" = $'run\nredis:// redis-cluster:// redis-sentinel:// rediss:// redlock://' ] ||
    { echo "bash completion gave: $completed" >&2; exit 1; }

say "the find_package and pkg-config consumers against /usr"
work=$(mktemp -d)
cmake -S tests/package -B "$work/find_package" -G Ninja >/dev/null
cmake --build "$work/find_package" >/dev/null
"$work/find_package/consumer"
g++ -std=c++20 tests/package/main.cpp -o "$work/pkgconfig-consumer" $(pkg-config --cflags --libs distlock)
"$work/pkgconfig-consumer"
rm -rf "$work"

say "dpkg -P ${names[*]}"
trap - EXIT
cleanup
echo "packages removed; nothing of them is left"

say "a clean Debian 12: debootstrap --variant=minbase bookworm"
root=$(realpath "$dir")/debian12
unmount_root() { if mountpoint -q "$root/proc"; then umount -l "$root/proc"; fi; }
unmount_root
rm -rf "$root"
trap 'unmount_root' EXIT
# The mirror this machine's apt uses (deb822 or one-line sources).
mirror=$(cat /etc/apt/sources.list.d/*.sources /etc/apt/sources.list 2>/dev/null |
    grep -E '^URIs:|^deb ' | grep -v security | grep -oE 'https?://[^ ]+' | head -n 1 || true)
[ -n "$mirror" ] || mirror=http://deb.debian.org/debian
debootstrap --variant=minbase bookworm "$root" "$mirror" >"$dir/debootstrap.log" 2>&1 ||
    { tail -n 20 "$dir/debootstrap.log" >&2; exit 1; }
mount -t proc proc "$root/proc"
cp /etc/resolv.conf "$root/etc/resolv.conf"
mkdir -p "$root/tmp/debs"
cp "${debs[@]}" "$root/tmp/debs/"
in_root() { chroot "$root" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 "$@"; }
in_root apt-get update -q >/dev/null
apt_in_root() {
    in_root env DEBIAN_FRONTEND=noninteractive DEBCONF_NOWARNINGS=yes \
        apt-get install -y -q -o Dpkg::Use-Pty=0 --no-install-recommends "$@" >/dev/null
}
# The root's path of the packages whose file names match (globbed here).
debs_in_root() { for f in "$@"; do echo "/tmp/debs/$f"; done; }
apt_in_root $(cd "$root/tmp/debs" && debs_in_root libdistlock0_*.deb libdistlock0-redis_*.deb distlock-tools_[0-9]*.deb)
clients=$(in_root dpkg-query -W -f '${Package} ${Status}\n' | awk '/ installed$/ {print $1}' |
    grep -E '^(libpq5|libmysqlcppconn|libmariadb|libzookeeper|libcurl)' || true)
# libcurl: the core's URL parser (docs/packaging.md); the others are databases'.
grep -v '^libcurl' <<<"$clients" | grep -q . &&
    { echo "a Redis-only install on Debian 12 brought other databases' client libraries: $clients" >&2; exit 1; }
echo "installed on Debian 12 with their Depends: libdistlock0 libdistlock0-redis distlock-tools; client libraries: $(echo $clients)"
out=$(in_root distlock run --backend "$DISTLOCK_TEST_REDIS_URL" --name "package-test-debian12-$$" -- sh -c 'echo "token $DISTLOCK_FENCING_TOKEN"')
grep -q '^token [1-9]' <<<"$out" || { echo "distlock run on Redis in Debian 12: $out" >&2; exit 1; }
echo "Debian 12: distlock run took the lock on Redis ($out)"
apt_in_root $(cd "$root/tmp/debs" && debs_in_root libdistlock-dev_*.deb) g++ cmake make pkg-config libasio-dev
cp -r tests/package "$root/tmp/consumer"
in_root cmake -S /tmp/consumer -B /tmp/consumer/build >/dev/null
in_root cmake --build /tmp/consumer/build >/dev/null
in_root /tmp/consumer/build/consumer
in_root /tmp/consumer/build/asio-consumer
in_root sh -c 'g++ -std=c++20 /tmp/consumer/main.cpp -o /tmp/pkgconfig-consumer $(pkg-config --cflags --libs distlock)'
in_root /tmp/pkgconfig-consumer
echo "Debian 12: the find_package and pkg-config consumers built against the packages and ran"
trap - EXIT
unmount_root
rm -rf "$root"
