# redis: one Redis server on 127.0.0.1:16379, no persistence, for redis:// (plain
# SET NX lease lock, database 0) and redis://...?strategy=reentrant (Redisson
# layout, database 1). Sourced by integration/backends.sh.
REDIS_PORT=16379

redis_ping() {  # redis_ping PORT: true when the server answers PONG
    [ "$(redis-cli -h 127.0.0.1 -p "$1" ping 2>/dev/null)" = "PONG" ]
}

redis_install() {
    command -v redis-server >/dev/null 2>&1 && command -v redis-cli >/dev/null 2>&1 && return 0
    apt_ensure redis-server redis-tools
}

redis_spawn() {  # redis_spawn NAME DIR PORT: one server as a background child, waits for PONG
    local name=$1 dir=$2 port=$3
    mkdir -p "$dir"
    redis-server --port "$port" --bind 127.0.0.1 --dir "$dir" --save '' --appendonly no \
        --logfile "$dir/redis.log" --databases 16 </dev/null >/dev/null 2>&1 &
    record_pid "$name" $!
    wait_until 10 redis_ping "$port" || fail_with_log "$name (port $port)" "$dir/redis.log"
}

redis_start() {
    local dir=$1
    redis_spawn redis "$dir" "$REDIS_PORT" || return 1
    # Values are single-quoted: the file is sourced by shells and '&' separates parameters.
    cat > "$RUN/redis.env" <<ENV
DISTLOCK_TEST_REDIS_URL='redis://127.0.0.1:$REDIS_PORT?lease=2s'
DISTLOCK_TEST_REDIS_REENTRANT_URL='redis://127.0.0.1:$REDIS_PORT/1?strategy=reentrant&lease=2s'
ENV
}
