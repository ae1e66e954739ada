# redlock: three independent Redis masters (no replication between them) on
# 127.0.0.1:16380, 16381 and 16382, for redlock://. Sourced by integration/backends.sh;
# uses redis_spawn and redis_install from redis.sh.
REDLOCK_PORTS=(16380 16381 16382)

redlock_install() { redis_install; }

redlock_start() {
    local dir=$1 port hosts=""
    for port in "${REDLOCK_PORTS[@]}"; do
        redis_spawn redlock "$dir/node-$port" "$port" || return 1
        hosts+="${hosts:+,}127.0.0.1:$port"
    done
    cat > "$RUN/redlock.env" <<ENV
DISTLOCK_TEST_REDLOCK_URL='redlock://$hosts?lease=2s'
ENV
}
