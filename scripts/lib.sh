# Shared by scripts/demo.sh and scripts/test.sh: install what is missing, build.
# Sourced, not run.

# What building libdistlock, the tool and the tests needs.
CORE_PACKAGES=(cmake g++ ninja-build pkg-config libcurl4-openssl-dev libssl-dev nlohmann-json3-dev libcli11-dev catch2
               libasio-dev libboost-dev)  # <distlock/asio.hpp>: its tests, standalone and Boost.Asio
# The client libraries of the server backends (each backend is built when found).
BACKEND_PACKAGES=(libhiredis-dev libmysqlcppconn-dev libpq-dev libzookeeper-mt-dev)
# The Debian packages (scripts/package.sh): dpkg-shlibdeps, lintian, and what
# their test uses (man, the completion's loader).
PACKAGE_PACKAGES=(dpkg-dev file lintian man-db bash-completion debootstrap)
# The fault harness (tests/faults/): libfaketime for the clock-jump nemesis.
FAULT_PACKAGES=(faketime)
# The URL parser's fuzz target (scripts/fuzz.sh): clang with libFuzzer.
FUZZ_PACKAGES=(clang libclang-rt-14-dev)

# Each line with the seconds since the script started (where CI's time goes).
say() { echo "==> [${SECONDS}s] $*" >&2; }

ensure_packages() { "$(dirname "${BASH_SOURCE[0]}")/apt-ensure" "$@"; }

# configure_and_build DIR SANITIZERS [TARGET...]   (DISTLOCK_CONFIGURE_ARGS: more -D options)
configure_and_build() {
    local dir=$1 sanitize=$2; shift 2
    local gen=()
    command -v ninja >/dev/null && gen=(-G Ninja)
    if [ ! -f "$dir/CMakeCache.txt" ]; then
        say "configuring $dir${sanitize:+ (sanitizers: $sanitize)}"
        # shellcheck disable=SC2086  # DISTLOCK_CONFIGURE_ARGS: words on purpose
        cmake -S . -B "$dir" "${gen[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDISTLOCK_SANITIZE="$sanitize" \
            ${DISTLOCK_CONFIGURE_ARGS:-} >"$dir.configure.log" 2>&1 \
            || { cat "$dir.configure.log" >&2; return 1; }
        grep -E "distlock" "$dir.configure.log" >&2 || true
    fi
    say "building $dir${*:+ ($*)}: the full log in $dir.build.log"
    local targets=()
    for t in "$@"; do targets+=(--target "$t"); done
    # In the background, with ninja's progress ([done/total]) shown every 20 s:
    # a build of the whole tree takes minutes on two cores.
    cmake --build "$dir" -j "$(nproc)" "${targets[@]}" >"$dir.build.log" 2>&1 &
    local pid=$! waited=0 status=0
    while kill -0 "$pid" 2>/dev/null; do
        sleep 1
        waited=$((waited + 1))
        if [ $((waited % 20)) -eq 0 ]; then
            local step
            step=$(grep -o '^\[[0-9]*/[0-9]*\]' "$dir.build.log" | tail -n 1 || true)
            say "building $dir: ${step:-under way} after ${waited}s"
        fi
    done
    wait "$pid" || status=$?
    [ "$status" -eq 0 ] || { tail -n 60 "$dir.build.log" >&2; return 1; }
}
