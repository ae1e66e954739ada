# redlock: three independent Redis masters (no replication between them) on
# 127.0.0.1:16380, 16381 and 16382 (members 1, 2, 3 for backends.sh kill/spawn), for
# redlock://. Sourced by integration/backends.sh; uses redis_server and redis_install
# from redis.sh. Like redis, it keeps nothing on disk.
REDLOCK_PORTS=(16380 16381 16382)
NOTHING_ON_DISK+=(redlock)

redlock_install() { redis_install; }

redlock_init() { local port; for port in "${REDLOCK_PORTS[@]}"; do mkdir -p "$1/node-$port"; done; }  # nothing on disk

redlock_spawn() {  # redlock_spawn DIR [N]: master N (all when omitted)
    local dir=$1 n port hosts=""
    for n in ${2:-$(seq ${#REDLOCK_PORTS[@]})}; do
        port=${REDLOCK_PORTS[n-1]}
        redis_server redlock "$dir/node-$port" "$port" "$n" || return 1
    done
    for port in "${REDLOCK_PORTS[@]}"; do hosts+="${hosts:+,}127.0.0.1:$port"; done
    cat > "$RUN/redlock.env" <<ENV
DISTLOCK_TEST_REDLOCK_URL='redlock://$hosts?lease=2s'
ENV
}
