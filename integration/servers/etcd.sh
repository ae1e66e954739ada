# etcd 3.4, one member, for the etcd:// backend tests: client port 12379, peer
# port 12380, on loopback, with fast election flags (heartbeat 10 ms, election
# 100 ms) so that it serves within a fraction of a second. Sourced by
# integration/backends.sh, which provides apt_ensure, wait_serving, record_pid and
# fail_with_log. Data in DIR/data: "backends.sh spawn etcd" restarts on it, "wipe"
# removes it (etcd creates an empty one when it starts). Writes
#   DISTLOCK_TEST_ETCD_URL   etcd://127.0.0.1:12379/distlock-tests?lease=2s
ETCD_PORT=${DISTLOCK_ETCD_PORT:-12379}

# etcd_cmd NAME DATADIR CLIENT_PORT PEER_PORT INITIAL_CLUSTER [STATE] [HOST]: a member's
# command line, on HOST (default 127.0.0.1).
etcd_cmd() {
    local h=${7:-127.0.0.1}
    echo etcd --name "$1" --data-dir "$2" \
        --listen-client-urls "http://$h:$3" --advertise-client-urls "http://$h:$3" \
        --listen-peer-urls "http://$h:$4" --initial-advertise-peer-urls "http://$h:$4" \
        --initial-cluster "$5" --initial-cluster-state "${6:-new}" --initial-cluster-token distlock-tests \
        --heartbeat-interval=10 --election-timeout=100 --logger=zap --log-outputs=stderr
}

# etcd_healthy PORT [HOST]: the member answers and the cluster has a leader.
etcd_healthy() { curl -sf --max-time 1 "http://${2:-127.0.0.1}:$1/health" | grep -q '"health":"true"'; }

etcd_install() { apt_ensure etcd-server etcd-client curl openssl; }  # etcdctl and openssl: interop and TLS tests

etcd_init() { rm -rf "$1/data"; }  # etcd creates its data dir DIR/data when it starts

# On an existing data dir, etcd takes its membership from there (--initial-cluster is ignored).
etcd_spawn() {
    local dir=$1
    # shellcheck disable=SC2046
    $(etcd_cmd s1 "$dir/data" "$ETCD_PORT" $((ETCD_PORT + 1)) "s1=http://127.0.0.1:$((ETCD_PORT + 1))") \
        </dev/null >>"$dir/log" 2>&1 &
    record_pid etcd $!
    wait_serving 30 $! etcd_healthy "$ETCD_PORT" || { fail_with_log etcd "$dir/log"; return 1; }
    echo "DISTLOCK_TEST_ETCD_URL=etcd://127.0.0.1:$ETCD_PORT/distlock-tests?lease=2s" > "$RUN/etcd.env"
}
