# redis: one Redis server on 127.0.0.1:16379, no persistence, for redis:// (plain
# SET NX lease lock, database 0) and redis://...?strategy=reentrant (Redisson
# layout, database 1). Sourced by integration/backends.sh. It keeps nothing on disk
# (--save '', --appendonly no): a killed and spawned server starts empty, and
# "backends.sh wipe redis" has nothing to do.
REDIS_PORT=16379
NOTHING_ON_DISK+=(redis)

redis_ping() {  # redis_ping PORT: true when the server answers PONG
    [ "$(redis-cli -h 127.0.0.1 -p "$1" ping 2>/dev/null)" = "PONG" ]
}

redis_install() {
    command -v redis-server >/dev/null 2>&1 && command -v redis-cli >/dev/null 2>&1 && return 0
    apt_ensure redis-server redis-tools
}

# redis_server NAME DIR PORT [N]: one server (member N of NAME, default 1) as a
# background child in DIR (its log only), waits for PONG.
redis_server() {
    local name=$1 dir=$2 port=$3
    mkdir -p "$dir"
    redis-server --port "$port" --bind 127.0.0.1 --dir "$dir" --save '' --appendonly no \
        --logfile "$dir/redis.log" --databases 16 </dev/null >/dev/null 2>&1 &
    record_pid "$name" $! "${4:-1}"
    wait_serving 10 $! redis_ping "$port" || fail_with_log "$name (port $port)" "$dir/redis.log"
}

redis_init() { mkdir -p "$1"; }  # nothing on disk

redis_spawn() {
    local dir=$1
    redis_server redis "$dir" "$REDIS_PORT" || return 1
    # Values are single-quoted: the file is sourced by shells and '&' separates parameters.
    cat > "$RUN/redis.env" <<ENV
DISTLOCK_TEST_REDIS_URL='redis://127.0.0.1:$REDIS_PORT?lease=2s'
DISTLOCK_TEST_REDIS_REENTRANT_URL='redis://127.0.0.1:$REDIS_PORT/1?strategy=reentrant&lease=2s'
ENV
}
