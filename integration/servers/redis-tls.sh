# redis-tls: Redis 7.0 over TLS only (issue 24), with the throwaway CA of
# integration/tls/make-ca.sh ($RUN/tls, see tls_ensure in backends.sh). Sourced by
# integration/backends.sh; uses redis_install from redis.sh. No persistence: a killed and
# spawned member starts empty. Every member has requirepass tls-secret-pw.
#
# Members (lines of redis-tls.pids, backends.sh kill/spawn redis-tls N):
#   1  127.0.0.1:16400  TLS only (port 0), server.crt, client certificates not asked for
#   2  127.0.0.1:16401  TLS only, requires a client certificate of the CA (tls-auth-clients yes)
#   3  127.0.0.1:16402  TLS only, serves expired.crt
#   4  127.0.0.1:16403  TLS only, serves wrong-name.crt (DNS wrong.example only)
#   5  127.0.0.1:16404  plaintext only (for "TLS required, server plaintext")
#   6-8 127.0.0.1:17100-17102  a Redis Cluster of three masters, no replicas, TLS on the
#                       client port and the cluster bus (tls-cluster yes, tls-replication yes),
#                       server.crt; created by the spawn that finds all three new
#   9  127.0.0.1:16405  TLS only, the master of a Sentinel deployment (tls-replication yes)
#   10 127.0.0.1:16406  TLS only, its replica (replicates over TLS)
#   11-13 127.0.0.1:26400-26402  three sentinels, TLS only, watching member 9 as "tls-master"
#                       (quorum 2, down after 2 s; they reach the data nodes and each other
#                       over TLS, requirepass tls-secret-pw)
# Env ($RUN/redis-tls.env; values single-quoted, $T is $RUN/tls):
#   DISTLOCK_TEST_REDIS_TLS_URL            rediss://:tls-secret-pw@127.0.0.1:16400?tls_ca=$T/ca.crt&lease=2s
#   DISTLOCK_TEST_REDIS_TLS_REENTRANT_URL  rediss://...:16400/1?strategy=reentrant&tls_ca=...&lease=2s
#   DISTLOCK_TEST_REDIS_TLS_CLIENT_CERT_URL rediss://...:16401?tls_ca=..&tls_cert=$T/client.crt&tls_key=$T/client.key&lease=2s
#   DISTLOCK_TEST_REDIS_TLS_EXPIRED_URL_MUST_FAIL    rediss://...:16402?tls_ca=...&lease=2s (must fail: expired)
#   DISTLOCK_TEST_REDIS_TLS_WRONG_NAME_URL_MUST_FAIL rediss://...:16403?tls_ca=...&lease=2s (must fail: name)
#   DISTLOCK_TEST_REDIS_TLS_ON_PLAIN_URL_MUST_FAIL   rediss://...:16404?tls_ca=...&lease=2s (must fail: plaintext server)
#   DISTLOCK_TEST_REDIS_PLAIN_ON_TLS_URL_MUST_FAIL   redis://...:16400?lease=2s (must fail: TLS server, no TLS)
#   DISTLOCK_TEST_REDIS_CLUSTER_TLS_URL    redis-cluster://:tls-secret-pw@127.0.0.1:17100,...:17101,...:17102?tls=true&tls_ca=...&lease=2s
#   DISTLOCK_TEST_REDIS_SENTINEL_TLS_URL   redis-sentinel://:tls-secret-pw@the 3 sentinels/tls-master?tls=true&tls_ca=...&sentinel_password=tls-secret-pw&lease=2s
#   DISTLOCK_TEST_REDIS_TLS_PW             tls-secret-pw
RTLS_PW='tls-secret-pw'
RTLS_PORTS=(16400 16401 16402 16403 16404 17100 17101 17102 16405 16406 26400 26401 26402)  # member N is RTLS_PORTS[N-1]
RTLS_CLUSTER=(6 7 8)
RTLS_SENTINELS=(11 12 13)
RTLS_SENTINEL_MASTER=tls-master

redis_tls_install() { redis_install; apt_ensure openssl; }

redis_tls_init() {  # redis_tls_init DIR: the CA, empty member dirs (no nodes.conf: a new cluster)
    local dir=$1 p
    tls_ensure || return 1
    for p in "${RTLS_PORTS[@]}"; do rm -rf "$dir/node-$p"; mkdir -p "$dir/node-$p"; done
}

# rtls_cli N ARGS...: redis-cli to member N, bounded, verifying the server where its
# certificate is good.
rtls_cli() {
    local n=$1 tls=(--tls --cacert "$TLS_DIR/ca.crt"); shift
    case $n in
      2) tls+=(--cert "$TLS_DIR/client.crt" --key "$TLS_DIR/client.key") ;;
      3|4) tls=(--tls --insecure) ;;
      5) tls=() ;;
    esac
    REDISCLI_AUTH=$RTLS_PW timeout 3 redis-cli -h 127.0.0.1 -p "${RTLS_PORTS[n-1]}" "${tls[@]}" "$@"
}
rtls_pong() { [ "$(rtls_cli "$1" PING 2>/dev/null)" = PONG ]; }
# A sentinel is ready once it knows the master and its replica.
rtls_sentinel_ready() {
    rtls_pong "$1" && [ "$(rtls_cli "$1" SENTINEL REPLICAS "$RTLS_SENTINEL_MASTER" 2>/dev/null | grep -c '^ip$')" -ge 1 ]
}

redis_tls_member_log() { echo "$1/node-${RTLS_PORTS[$2-1]}/redis.log"; }
redis_tls_member_ready() {
    case $2 in
      1[123]) rtls_sentinel_ready "$2" ;;
      *) rtls_pong "$2" ;;
    esac
}
redis_tls_member_start() {  # redis_tls_member_start DIR N: start member N in the background
    local dir=$1 n=$2 port=${RTLS_PORTS[$2-1]} d cert=server args
    d=$dir/node-$port
    mkdir -p "$d"
    rm -f "$d"/*.rdb
    case $n in
      2) args=(--tls-auth-clients yes) ;;
      3) cert=expired ;;
      4) cert=wrong-name ;;
      # The cluster bus always asks for a client certificate (whatever tls-auth-clients
      # says): the nodes present client.crt.
      [678]) args=(--tls-cluster yes --tls-replication yes --cluster-enabled yes --cluster-config-file nodes.conf
                   --tls-client-cert-file "$TLS_DIR/client.crt" --tls-client-key-file "$TLS_DIR/client.key"
                   --cluster-node-timeout 2000 --masterauth "$RTLS_PW") ;;
      9) args=(--tls-replication yes --masterauth "$RTLS_PW") ;;
      10) args=(--tls-replication yes --masterauth "$RTLS_PW" --replicaof 127.0.0.1 "${RTLS_PORTS[8]}") ;;
    esac
    if [ "$n" -ge 11 ]; then
        # A sentinel rewrites its configuration file: a fresh one at each start.
        cat > "$d/sentinel.conf" <<CONF
port 0
tls-port $port
tls-cert-file $TLS_DIR/server.crt
tls-key-file $TLS_DIR/server.key
tls-ca-cert-file $TLS_DIR/ca.crt
tls-auth-clients no
tls-replication yes
bind 127.0.0.1
dir $d
logfile $d/redis.log
requirepass $RTLS_PW
sentinel resolve-hostnames no
sentinel announce-hostnames no
sentinel monitor $RTLS_SENTINEL_MASTER 127.0.0.1 ${RTLS_PORTS[8]} 2
sentinel down-after-milliseconds $RTLS_SENTINEL_MASTER 2000
sentinel failover-timeout $RTLS_SENTINEL_MASTER 10000
sentinel auth-pass $RTLS_SENTINEL_MASTER $RTLS_PW
CONF
        redis-server "$d/sentinel.conf" --sentinel </dev/null >/dev/null 2>&1 &
        record_pid redis-tls $! "$n"
        return
    fi
    if [ "$n" = 5 ]; then
        args=(--port "$port")
    else
        args=(--port 0 --tls-port "$port" --tls-cert-file "$TLS_DIR/$cert.crt" --tls-key-file "$TLS_DIR/$cert.key"
              --tls-ca-cert-file "$TLS_DIR/ca.crt" --tls-auth-clients no "${args[@]}")
    fi
    redis-server "${args[@]}" --bind 127.0.0.1 --dir "$d" --logfile "$d/redis.log" --save '' --appendonly no \
        --requirepass "$RTLS_PW" --databases 16 </dev/null >/dev/null 2>&1 &
    record_pid redis-tls $! "$n"
}

rtls_info_field() { rtls_cli "$1" CLUSTER INFO 2>/dev/null | tr -d '\r' | sed -n "s/^$2://p"; }
rtls_cluster_ok() {
    local n
    for n in "${RTLS_CLUSTER[@]}"; do
        [ "$(rtls_info_field "$n" cluster_state)" = ok ] && [ "$(rtls_info_field "$n" cluster_known_nodes)" = 3 ] || return 1
    done
}
rtls_cluster_create() {  # when all three cluster nodes are new
    local dir=$1 n hosts=()
    for n in "${RTLS_CLUSTER[@]}"; do
        [ "$(rtls_info_field "$n" cluster_known_nodes)" = 1 ] && [ "$(rtls_info_field "$n" cluster_slots_assigned)" = 0 ] || return 0
        hosts+=("127.0.0.1:${RTLS_PORTS[n-1]}")
    done
    timeout 60 redis-cli --tls --cacert "$TLS_DIR/ca.crt" -a "$RTLS_PW" --no-auth-warning --cluster create "${hosts[@]}" \
        --cluster-replicas 0 --cluster-yes </dev/null >>"$dir/create.log" 2>&1 || { fail_with_log "redis-tls cluster create" "$dir/create.log"; return 1; }
}

redis_tls_spawn() {  # redis_tls_spawn DIR [N]
    local dir=$1
    tls_ensure && spawn_members redis-tls ${#RTLS_PORTS[@]} 25 "$dir" "${2:-}" || return 1
    if alive redis-tls; then
        rtls_cluster_create "$dir" || return 1
        wait_until 30 rtls_cluster_ok ||
            { fail_with_log "redis-tls cluster (cluster_state not ok on all three)" "$dir/node-${RTLS_PORTS[5]}/redis.log"; return 1; }
    fi
    local ca="tls_ca=$TLS_DIR/ca.crt" cred=":$RTLS_PW@127.0.0.1" c=("${RTLS_PORTS[@]:5:3}") st=("${RTLS_PORTS[@]:10:3}")
    cat > "$RUN/redis-tls.env" <<ENV
DISTLOCK_TEST_REDIS_TLS_URL='rediss://$cred:${RTLS_PORTS[0]}?$ca&lease=2s'
DISTLOCK_TEST_REDIS_TLS_REENTRANT_URL='rediss://$cred:${RTLS_PORTS[0]}/1?strategy=reentrant&$ca&lease=2s'
DISTLOCK_TEST_REDIS_TLS_CLIENT_CERT_URL='rediss://$cred:${RTLS_PORTS[1]}?$ca&tls_cert=$TLS_DIR/client.crt&tls_key=$TLS_DIR/client.key&lease=2s'
DISTLOCK_TEST_REDIS_TLS_EXPIRED_URL_MUST_FAIL='rediss://$cred:${RTLS_PORTS[2]}?$ca&lease=2s'
DISTLOCK_TEST_REDIS_TLS_WRONG_NAME_URL_MUST_FAIL='rediss://$cred:${RTLS_PORTS[3]}?$ca&lease=2s'
DISTLOCK_TEST_REDIS_TLS_ON_PLAIN_URL_MUST_FAIL='rediss://$cred:${RTLS_PORTS[4]}?$ca&lease=2s'
DISTLOCK_TEST_REDIS_PLAIN_ON_TLS_URL_MUST_FAIL='redis://$cred:${RTLS_PORTS[0]}?lease=2s'
DISTLOCK_TEST_REDIS_CLUSTER_TLS_URL='redis-cluster://$cred:${c[0]},127.0.0.1:${c[1]},127.0.0.1:${c[2]}?tls=true&$ca&lease=2s'
DISTLOCK_TEST_REDIS_SENTINEL_TLS_URL='redis-sentinel://$cred:${st[0]},127.0.0.1:${st[1]},127.0.0.1:${st[2]}/$RTLS_SENTINEL_MASTER?tls=true&$ca&sentinel_password=$RTLS_PW&lease=2s'
DISTLOCK_TEST_REDIS_TLS_PW='$RTLS_PW'
ENV
}
