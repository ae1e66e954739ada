# The Consul HTTP API EMULATOR (tests/consul-emulator/consul_emulator.py, not a
# real Consul: none is packaged for these machines) for the consul:// tests, on
# 127.0.0.1:18500. It accepts session TTLs down to 100 ms (--min-ttl; a real
# Consul refuses TTLs under 10 s) so that the suite runs with lease=2s, and keeps
# Consul's 2 x TTL expiry. Sourced by integration/backends.sh. It keeps everything
# in memory, nothing on disk: a killed and spawned emulator starts empty. Writes
#   DISTLOCK_TEST_CONSUL_EMULATOR_URL  consul://127.0.0.1:18500/distlock-tests?lease=2s&lock_delay=1s
# (A real Consul is used instead when DISTLOCK_TEST_CONSUL_URL is set by hand,
# e.g. consul://127.0.0.1:8500/distlock-tests?lease=10s&lock_delay=1s with docker/compose.yml.)
CONSUL_EMULATOR_PORT=${DISTLOCK_CONSUL_EMULATOR_PORT:-18500}
NOTHING_ON_DISK+=(consul-emulator)

consul_emulator_install() { apt_ensure python3 curl; }

consul_emulator_ready() { curl -sf --max-time 1 "http://127.0.0.1:$1/v1/status/leader" >/dev/null; }

consul_emulator_init() { :; }  # nothing on disk (DIR holds its log)

consul_emulator_spawn() {
    local dir=$1 here
    here="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
    /usr/bin/python3 "$here/tests/consul-emulator/consul_emulator.py" --bind 127.0.0.1 --port "$CONSUL_EMULATOR_PORT" \
        --min-ttl 100ms </dev/null >>"$dir/log" 2>&1 &
    record_pid consul-emulator $!
    wait_serving 20 $! consul_emulator_ready "$CONSUL_EMULATOR_PORT" || { fail_with_log consul-emulator "$dir/log"; return 1; }
    echo "DISTLOCK_TEST_CONSUL_EMULATOR_URL='consul://127.0.0.1:$CONSUL_EMULATOR_PORT/distlock-tests?lease=2s&lock_delay=1s'" \
        > "$RUN/consul-emulator.env"
}
