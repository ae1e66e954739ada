#!/usr/bin/env bash
# Checks the server control of integration/backends.sh (up, kill, spawn, wipe, down) with
# real servers and their own client CLIs, in a network namespace of its own (created
# here, deleted at the end), with its own DISTLOCK_RUN_DIR: the servers of the root
# namespace (default ports) are not touched. Needs root (ip netns); exits 77 (skipped)
# when a network namespace cannot be made.
#
#   integration/test_control.sh [NAMES...]   default: every server of backends.sh list
#
# For each single server: up; write a marker (a key, a row, a znode, a KV); kill; its port
# is closed; spawn; it answers and the marker survived (redis, redlock, consul-emulator:
# the marker is gone, they keep nothing on disk); kill; wipe; spawn; the marker is gone
# (mysql, postgres: the test user and database are back). redlock also kills and spawns
# master 2 alone; the clusters kill and spawn their leader, then all members.
# redis-sentinel first kills its master (the sentinels fail over, the marker is on the
# new master), spawns it back as a replica and drives its ctl.sh (failover, kill-master,
# start, wait-replicas); redis-cluster first kills the master of the marker's slot (its
# replica takes over), spawns it back as a replica, migrates the slot away and back
# (with the half-way ASK state) and fails over by hand; then both run the checks of a
# single server that keeps nothing on disk (wipe: fresh sentinel configs, a new
# cluster). Then down:
# no process of the set is left (checked by PID) and the data dirs are gone. Prints the
# time of each kill and spawn. Exit status: 0 when every check passed, 1 otherwise.
# The servers' checks run side by side: DISTLOCK_TEST_CONTROL_JOBS (default 4) at a time.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
B="$HERE/backends.sh"

if [ "${1:-}" != --inside ]; then
    [ "$(id -u)" = 0 ] || { echo "SKIP: needs root for ip netns" >&2; exit 77; }
    ns=distlock-ctl-$$ ns2=distlock-ctl2-$$
    if ! ip netns add "$ns" 2>/dev/null; then echo "SKIP: ip netns add is not permitted here" >&2; exit 77; fi
    run=$(mktemp -d /tmp/distlock-ctl-run.XXXXXX)
    cleanup() {
        ip netns exec "$ns" env DISTLOCK_RUN_DIR="$run" "$B" down >/dev/null 2>&1 || true
        ip netns delete "$ns" 2>/dev/null || true
        ip netns delete "$ns2" 2>/dev/null || true
        rm -rf "$run"
    }
    trap cleanup EXIT
    ip netns exec "$ns" ip link set lo up
    ip netns add "$ns2" && ip netns exec "$ns2" ip link set lo up
    rc=0
    ip netns exec "$ns" env DISTLOCK_RUN_DIR="$run" OTHER_NETNS="$ns2" "$0" --inside "$@" || rc=$?
    exit $rc
fi
shift
RUN=$DISTLOCK_RUN_DIR
names=("$@"); [ ${#names[@]} -gt 0 ] || mapfile -t names < <("$B" list)

fails=0
check() {  # check DESCRIPTION CMD...: prints ok or FAIL
    local d=$1; shift
    if "$@" >/dev/null 2>&1; then echo "  ok   $d"; else echo "  FAIL $d"; fails=$((fails + 1)); fi
}
not() { ! "$@"; }
eventually() {  # eventually CMD...: retry CMD for up to 30 s (clients are slow on a loaded machine)
    local i
    for i in $(seq 60); do "$@" && return 0; sleep 0.5; done
    return 1
}
# closed PORT | HOST:PORT (default host 127.0.0.1; a cluster member on a host of its own has its own)
closed() { local h=127.0.0.1 p=$1; if [[ $1 == *:* ]]; then h=${1%:*} p=${1##*:}; fi; ! nc -z -w1 "$h" "$p"; }
endpoint() { if [[ $1 == *:* ]]; then echo "$1"; else echo "127.0.0.1:$1"; fi; }
all_closed() { local p; for p in "$@"; do closed "$p" || return 1; done; }
times=()
timed() {  # timed LABEL CMD...: runs CMD, records its wall time
    local label=$1 t0 rc=0; shift; t0=$(date +%s%N)
    "$@" 2>/dev/null || rc=$?
    times+=("$label $(( ($(date +%s%N) - t0) / 1000000 ))")
    return $rc
}
ctl() { timed "$*" "$B" "$@"; }

# Every PID of the set seen during the run (servers and their children), checked after "down".
seen=()
note_pids() {
    local p c
    while read -r p; do
        [[ $p =~ ^[0-9]+$ ]] || continue
        seen+=("$p")
        for c in $(ps -o pid= --ppid "$p" 2>/dev/null); do seen+=("$c"); done
    done < "$RUN/$1.pids"
}
dirs=()

# Per server: PORTS, put (write marker m1), get (print the marker, empty when missing),
# answers (a real request as the tests' user), persists (yes/no).
ZKCLI=/usr/share/zookeeper/bin/zkCli.sh
zk_get() { "$ZKCLI" -server "$(endpoint "$1")" get /distlock-marker 2>&1 | tail -n 1 | grep -x m1 || true; }
zk_put() {  # zkCli may give up before its session is up: retried
    local i
    for i in 1 2 3 4 5; do
        "$ZKCLI" -server "$(endpoint "$1")" create /distlock-marker m1 >/dev/null 2>&1 || true
        [ "$(zk_get "$1")" = m1 ] && return 0
    done
    return 1
}
zk_answers() { local e; e=$(endpoint "$1"); [ "$(echo srvr | nc -w1 "${e%:*}" "${e##*:}" | sed -n 's/^Mode: //p')" != "" ]; }
etcd_put() { etcdctl --endpoints="$(endpoint "$1")" put distlock-marker m1; }
etcd_get() { etcdctl --endpoints="$(endpoint "$1")" --command-timeout=5s get distlock-marker --print-value-only 2>/dev/null || true; }
etcd_answers() { etcdctl --endpoints="$(endpoint "$1")" endpoint health; }
my() { mariadb --no-defaults -udistlock -pdistlock -h127.0.0.1 -P13306 distlock -N -B -e "$1"; }
pg() { PGPASSWORD=distlock psql -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p 15432 -U distlock -d distlock -tA -c "$1"; }
# The TLS servers (issue 24), verified against the test CA of their run dir.
tls_ca() { echo "$RUN/tls/ca.crt"; }
rt() { local p=$1; shift; REDISCLI_AUTH=tls-secret-pw timeout 5 redis-cli --tls --cacert "$(tls_ca)" -p "$p" "$@"; }
my_tls() { mariadb --no-defaults -udistlock -pdistlock -h127.0.0.1 -P13316 --ssl-ca="$(tls_ca)" --ssl-verify-server-cert distlock -N -B -e "$1"; }
pg_tls() {
    psql -X -q -v ON_ERROR_STOP=1 -tA -c "$1" \
        "host=127.0.0.1 port=15442 user=distlock password=distlock dbname=distlock sslmode=verify-full sslrootcert=$(tls_ca)"
}
etcd_tls() { etcdctl --endpoints=https://127.0.0.1:12679 --cacert="$(tls_ca)" --command-timeout=5s "$@"; }

setup() {
    case $1 in
      redis-tls) PORTS=(16400 16401 16402 16403 16404 17100 17101 17102 16405 16406 26400 26401 26402); persists=no
        put() { rt 16400 set distlock-marker m1; }
        get() { rt 16400 get distlock-marker; }
        answers() {
            [ "$(rt 16400 ping)" = PONG ] && [ "$(REDISCLI_AUTH=tls-secret-pw redis-cli -p 16404 ping)" = PONG ] &&
                [ "$(rt 17100 CLUSTER INFO | tr -d '\r' | sed -n 's/^cluster_state://p')" = ok ] &&
                [ "$(rt 26400 SENTINEL GET-MASTER-ADDR-BY-NAME tls-master | tail -1)" = 16405 ]
        } ;;
      mysql-tls) PORTS=(13316 13317 13318 13319); persists=yes
        put() { my_tls "CREATE TABLE distlock_marker (v VARCHAR(8)); INSERT INTO distlock_marker VALUES ('m1')"; }
        get() { my_tls "SELECT v FROM distlock_marker" 2>/dev/null || true; }
        answers() { [ "$(my_tls 'SELECT 1')" = 1 ]; } ;;
      postgres-tls) PORTS=(15442 15443 15444 15445); persists=yes
        put() { pg_tls "CREATE TABLE distlock_marker (v text); INSERT INTO distlock_marker VALUES ('m1')"; }
        get() { pg_tls "SELECT v FROM distlock_marker" 2>/dev/null || true; }
        answers() { [ "$(pg_tls 'SELECT 1')" = 1 ]; } ;;
      etcd-tls) PORTS=(12679 12681 12683 12685 12687); persists=yes
        put() { etcd_tls put distlock-marker m1; }
        get() { etcd_tls get distlock-marker --print-value-only 2>/dev/null || true; }
        answers() { etcd_tls endpoint health; } ;;
      zookeeper-tls) PORTS=(12191 12192); persists=yes  # through the TLS tunnel (12192)
        put() { zk_put 12192; }
        get() { zk_get 12192; }
        answers() { zk_answers 12192; } ;;
      redis) PORTS=(16379); persists=no
        put() { redis-cli -p 16379 set distlock-marker m1; }
        get() { redis-cli -p 16379 get distlock-marker; }
        answers() { [ "$(redis-cli -p 16379 ping)" = PONG ]; } ;;
      redlock) PORTS=(16380 16381 16382); persists=no
        put() { local p; for p in "${PORTS[@]}"; do redis-cli -p "$p" set distlock-marker m1 >/dev/null || return 1; done; }
        get() { local p v; for p in "${PORTS[@]}"; do v=$(redis-cli -p "$p" get distlock-marker); [ "$v" = m1 ] || return 0; done; echo m1; }
        answers() { local p; for p in "${PORTS[@]}"; do [ "$(redis-cli -p "$p" ping)" = PONG ] || return 1; done; } ;;
      mysql) PORTS=(13306); persists=yes
        put() { my "CREATE TABLE distlock_marker (v VARCHAR(8)); INSERT INTO distlock_marker VALUES ('m1')"; }
        get() { my "SELECT v FROM distlock_marker" 2>/dev/null || true; }
        answers() { [ "$(my 'SELECT 1')" = 1 ]; } ;;
      postgres) PORTS=(15432); persists=yes
        put() { pg "CREATE TABLE distlock_marker (v text); INSERT INTO distlock_marker VALUES ('m1')"; }
        get() { pg "SELECT v FROM distlock_marker" 2>/dev/null || true; }
        answers() { [ "$(pg 'SELECT 1')" = 1 ]; } ;;
      zookeeper) PORTS=(12181); persists=yes
        put() { zk_put 12181; }
        get() { zk_get 12181; }
        answers() { zk_answers 12181; } ;;
      etcd) PORTS=(12379); persists=yes
        put() { etcd_put 12379; }
        get() { etcd_get 12379; }
        answers() { etcd_answers 12379; } ;;
      consul-emulator) PORTS=(18500); persists=no
        put() { curl -sf -X PUT --data m1 http://127.0.0.1:18500/v1/kv/distlock-marker | grep -q true; }
        get() { curl -sf 'http://127.0.0.1:18500/v1/kv/distlock-marker?raw' || true; }
        answers() { curl -sf http://127.0.0.1:18500/v1/status/leader; } ;;
      etcd-cluster) PORTS=(10.199.0.11:12579 10.199.0.12:12581 10.199.0.13:12583); persists=yes  # hosts of their own
        put() { etcd_put "${PORTS[0]}"; }
        get() { etcd_get "${PORTS[${1:-1}-1]}"; }
        answers() { etcd_answers "${PORTS[${1:-1}-1]}"; } ;;
      zk-ensemble) PORTS=(10.199.0.21:12281 10.199.0.22:12282 10.199.0.23:12283); persists=yes  # hosts of their own
        put() { zk_put "${PORTS[0]}"; }
        get() { zk_get "${PORTS[${1:-1}-1]}"; }
        answers() { zk_answers "${PORTS[${1:-1}-1]}"; } ;;
      redis-sentinel) PORTS=(10.199.0.31:16390 10.199.0.32:16391 10.199.0.33:16392 10.199.0.34:26390 10.199.0.35:26391 10.199.0.36:26392); persists=no  # hosts of their own
        # The marker on the master the sentinels name (get N: on data node N).
        put() { rs set distlock-marker m1; }
        get() { if [ -n "${1:-}" ]; then rs_at "${PORTS[$1-1]}" get distlock-marker; else rs get distlock-marker; fi; }
        answers() {
            local p
            [ "$(rs ROLE | sed -n 1p)" = master ] || return 1
            for p in "${PORTS[@]}"; do [ "$(rs_at "$p" PING)" = PONG ] || return 1; done
        } ;;
      redis-cluster) PORTS=(10.199.0.41:17000 10.199.0.42:17001 10.199.0.43:17002 10.199.0.44:17003 10.199.0.45:17004 10.199.0.46:17005); persists=no  # hosts of their own
        put() { rc -c set distlock-marker m1; }
        get() { rc -c get distlock-marker; }
        answers() {
            local p
            for p in "${PORTS[@]}"; do
                [ "$(rc_at "$p" CLUSTER INFO | tr -d '\r' | sed -n 's/^cluster_state://p')" = ok ] || return 1
            done
        } ;;
      *) return 1 ;;
    esac
}
# The control script of NAME ($RUN/NAME.env: DISTLOCK_TEST_..._CTL, quoted or not).
ctl_script() { sed -n "s/^DISTLOCK_TEST_${2}_CTL=//p" "$RUN/$1.env" | tr -d "'"; }
# redis-sentinel: redis-cli on PORT / on the master the sentinels name (ctl.sh master).
# Its nodes are on hosts of their own: rs_ep PORT is HOST:PORT (ctl.sh host), rs_at takes either.
rs_ep() { if [[ $1 == *:* ]]; then echo "$1"; else echo "$("$(ctl_script redis-sentinel REDIS_SENTINEL)" host "$1"):$1"; fi; }
rs_at() { local e; e=$(rs_ep "$1"); shift; REDISCLI_AUTH=sentinel-secret-pw timeout 5 redis-cli -h "${e%:*}" -p "${e##*:}" "$@"; }
rs() { local m; m=$("$(ctl_script redis-sentinel REDIS_SENTINEL)" master) && rs_at "$m" "$@"; }
# redis-cluster: redis-cli on PORT / on the first node that answers. Its nodes are on
# hosts of their own: rc_ep PORT is HOST:PORT (ctl.sh host), rc_at takes either.
rc_ep() { if [[ $1 == *:* ]]; then echo "$1"; else echo "$("$(ctl_script redis-cluster REDIS_CLUSTER)" host "$1"):$1"; fi; }
rc_at() { local e; e=$(rc_ep "$1"); shift; REDISCLI_AUTH=cluster-secret-pw timeout 5 redis-cli -h "${e%:*}" -p "${e##*:}" "$@"; }
rc() {
    local p
    for p in "${PORTS[@]}"; do [ "$(rc_at "$p" PING 2>/dev/null)" != PONG ] || { rc_at "$p" "$@"; return; }; done
    return 1
}
has_marker() { [ "$(get "$@")" = m1 ]; }
pids_running() {  # every PID of NAME.pids is a live process
    local p s
    while read -r p; do
        [[ $p =~ ^[0-9]+$ ]] && s=$(ps -o stat= -p "$p") && [ "${s:0:1}" != Z ] || return 1
    done < "$RUN/$1.pids"
}
expect_fail() { ! "$B" "$@"; }

test_single() {
    local n=$1
    ctl kill "$n"
    check "$n: kill closes port(s) ${PORTS[*]}" all_closed "${PORTS[@]}"
    check "$n: NAME.pids marks the killed PIDs" grep -q '^killed:' "$RUN/$n.pids"
    check "$n: spawn after kill" ctl spawn "$n"
    note_pids "$n"
    check "$n: spawned server answers" eventually answers
    check "$n: spawned server runs under the recorded PID(s)" pids_running "$n"
    if [ "$persists" = yes ]; then
        check "$n: marker survived kill+spawn" eventually has_marker
    else
        check "$n: marker gone after kill+spawn (keeps nothing on disk)" not has_marker
        put >/dev/null 2>&1 || true
    fi
    check "$n: spawn of a running server is a no-op" "$B" spawn "$n"
    check "$n: wipe of a running server is refused" expect_fail wipe "$n"
    ctl kill "$n"
    check "$n: wipe" ctl wipe "$n"
    check "$n: spawn after wipe" ctl spawn "$n"
    note_pids "$n"
    check "$n: answers after wipe (as the tests' user)" eventually answers
    check "$n: marker gone after wipe" not has_marker
}

test_redlock_member() {
    ctl kill redlock 2
    check "redlock: kill 2 closes 16381 only" all_closed 16381
    check "redlock: masters 1 and 3 still answer" redis-cli -p 16380 ping
    check "redlock: members 1 and 3 keep their PIDs" not grep -q '^killed:' <(sed -n '1p;3p' "$RUN/redlock.pids")
    check "redlock: spawn 2" ctl spawn redlock 2
    note_pids redlock
    check "redlock: all three answer" eventually answers
    check "redlock: master 2 lost the marker (no persistence)" test -z "$(redis-cli -p 16381 get distlock-marker)"
    check "redlock: masters 1 and 3 kept it" test "$(redis-cli -p 16380 get distlock-marker)$(redis-cli -p 16382 get distlock-marker)" = m1m1
    put >/dev/null
    check "redlock: kill 4 is refused" expect_fail kill redlock 4
}

test_cluster() {
    local n=$1 leader
    leader=$("$(sed -n "s/^DISTLOCK_TEST_${2}_CTL=//p" "$RUN/$n.env")" leader) || leader=1
    ctl kill "$n" "$leader"
    check "$n: kill $leader (the leader) closes port ${PORTS[leader-1]}" closed "${PORTS[leader-1]}"
    check "$n: spawn $leader" ctl spawn "$n" "$leader"
    note_pids "$n"
    check "$n: member $leader answers" eventually answers "$leader"
    check "$n: member $leader has the marker" eventually has_marker "$leader"
    ctl kill "$n"
    check "$n: kill (all) closes ${PORTS[*]}" all_closed "${PORTS[@]}"
    check "$n: spawn (all)" ctl spawn "$n"
    note_pids "$n"
    check "$n: member 1 answers" eventually answers 1
    check "$n: marker survived the restart of all members" eventually has_marker 1
    check "$n: wipe is refused (clusters)" expect_fail wipe "$n"
}

# The partition commands of a deployment on hosts of their own (ctl.sh cut-off, isolate,
# heal): member 1 cut off still answers here but no longer from member 2's host; isolated,
# not here either; healed, from both again.
test_partition() {
    local n=$1 c a b
    c=$(ctl_script "$n" "$2")
    a=${PORTS[0]} b=${PORTS[1]}
    b=${b%:*}
    from2() { nsenter -t "$(cat "$RUN/netns.${b##*.}")" -n nc -z -w1 "${a%:*}" "${a##*:}"; }
    check "$n: member 1 ($a) answers member 2's host" from2
    check "$n: ctl.sh cut-off 1" "$c" cut-off 1
    check "$n: ... member 1 still answers here" not closed "$a"
    check "$n: ... but not member 2's host" not from2
    check "$n: ctl.sh heal" "$c" heal
    check "$n: ... member 1 answers member 2's host again" from2
    check "$n: ctl.sh isolate 1" "$c" isolate 1
    check "$n: ... member 1 answers nobody here" closed "$a"
    check "$n: ctl.sh heal (after isolate)" "$c" heal
    check "$n: ... member 1 answers here again" not closed "$a"
    check "$n: ctl.sh cut-off 7 is refused" not "$c" cut-off 7
}

# redis-sentinel: the master (member 1-3) killed, the sentinels fail over, the marker
# is on the new master; the killed node spawned comes back as a replica with the marker;
# then the control script: failover, kill-master + start, wait-replicas.
test_sentinel_members() {
    local c m n new
    c=$(ctl_script redis-sentinel REDIS_SENTINEL)
    m=$("$c" master) || m=16390
    n=$(( m - 16389 ))
    ctl kill redis-sentinel "$n"
    check "redis-sentinel: kill $n (the master, $m) closes $m only" all_closed "$(rs_ep "$m")"
    check "redis-sentinel: the sentinels still answer" test "$(rs_at 26390 PING)" = PONG
    check "redis-sentinel: ctl.sh wait-master-change $m (the sentinels fail over)" timed "redis-sentinel: wait-master-change after kill" "$c" wait-master-change "$m" 20
    check "redis-sentinel: the marker is on the new master" eventually has_marker
    check "redis-sentinel: spawn $n" ctl spawn redis-sentinel "$n"
    note_pids redis-sentinel
    check "redis-sentinel: member $n is a replica again" eventually test "$(rs_at "$m" ROLE | sed -n 1p)" = slave
    check "redis-sentinel: member $n has the marker again" eventually has_marker "$n"
    m=$("$c" master) || true
    check "redis-sentinel: ctl.sh failover names a new master" eval 'new=$("$c" failover) && [ "$new" != "$m" ]'
    check "redis-sentinel: ctl.sh kill-master prints the killed master" eval 'm=$("$c" kill-master) && closed "$(rs_ep "$m")"'
    check "redis-sentinel: ctl.sh wait-master-change" eval 'new=$("$c" wait-master-change "$m" 20) && [ "$new" != "$m" ]'
    check "redis-sentinel: ctl.sh start (the old master)" timed "redis-sentinel: ctl start" "$c" start "$m"
    check "redis-sentinel: ... as a replica of the new master" eventually test "$(rs_at "$m" ROLE | sed -n 3p)" = "$new"
    check "redis-sentinel: ctl.sh wait-replicas 2" "$c" wait-replicas 2 20
    check "redis-sentinel: NAME.pids has six running PIDs" pids_running redis-sentinel
    note_pids redis-sentinel
    check "redis-sentinel: the marker survived" eventually has_marker
    check "redis-sentinel: kill 7 is refused" expect_fail kill redis-sentinel 7
}

# redis-cluster: the master of the marker's slot killed, its replica takes over, the
# marker is still there; the killed node spawned comes back as a replica; the slot
# migrated to another master (the key with it); a manual failover.
test_rcluster_members() {
    local c s o n to p r
    c=$(ctl_script redis-cluster REDIS_CLUSTER)
    s=$(rc CLUSTER KEYSLOT distlock-marker)
    o=$("$c" master-of-slot "$s") || o=17000
    n=$(( o - 16999 ))
    check "redis-cluster: ctl.sh leader distlock-marker names member $n (the master of its slot)" test "$("$c" leader distlock-marker)" = "$n"
    ctl kill redis-cluster "$n"
    check "redis-cluster: kill $n (master of slot $s, $o) closes $o" closed "$(rc_ep "$o")"
    check "redis-cluster: ctl.sh wait-failover $o (its replica takes over)" timed "redis-cluster: wait-failover after kill" "$c" wait-failover "$o" 20
    check "redis-cluster: the marker is on the new master" eventually has_marker
    check "redis-cluster: spawn $n" ctl spawn redis-cluster "$n"
    note_pids redis-cluster
    check "redis-cluster: member $n is a replica again" eventually test "$(rc_at "$o" ROLE | sed -n 1p)" = slave
    check "redis-cluster: ctl.sh wait-ready" "$c" wait-ready 60
    o=$("$c" master-of-slot "$s") || true
    to=""
    for p in "${PORTS[@]##*:}"; do [ "$p" = "$o" ] || [ "$(rc_at "$p" ROLE | sed -n 1p)" != master ] || { to=$p; break; }; done
    check "redis-cluster: ctl.sh migrate-slot $s $to" timed "redis-cluster: migrate-slot" "$c" migrate-slot "$s" "$to"
    check "redis-cluster: ctl.sh master-of-slot says $to" test "$("$c" master-of-slot "$s")" = "$to"
    check "redis-cluster: $to has the marker (no redirect)" test "$(rc_at "$to" GET distlock-marker)" = m1
    check "redis-cluster: $o redirects it" eval '[[ "$(rc_at "$o" GET distlock-marker)" == MOVED* ]]'
    check "redis-cluster: ctl.sh migrate-slot-begin $s $o" "$c" migrate-slot-begin "$s" "$o"
    check "redis-cluster: ... a new key of the slot is asked for at $o" eval '[[ "$(rc_at "$to" SET "{distlock-marker}new" x)" == ASK* ]]'
    check "redis-cluster: ... the marker is still served by $to" test "$(rc_at "$to" GET distlock-marker)" = m1
    check "redis-cluster: ctl.sh migrate-slot-end $s $o" "$c" migrate-slot-end "$s" "$o"
    check "redis-cluster: $o has the marker back" test "$(rc_at "$o" GET distlock-marker)" = m1
    check "redis-cluster: ctl.sh failover-replica-of $o" eval 'r=$("$c" failover-replica-of "$o") && [ "$(rc_at "$r" ROLE | sed -n 1p)" = master ]'
    check "redis-cluster: ctl.sh wait-ok" "$c" wait-ok 30
    check "redis-cluster: the marker survived" eventually has_marker
    check "redis-cluster: kill 7 is refused" expect_fail kill redis-cluster 7
}

# test_server NAME: every check of one server; its results go to files in $RUN/test/.
test_server() {
    local n=$1
    setup "$n"
    echo "== $n"
    if ctl up "$n"; then
        check "$n: up again is a no-op (idempotent)" "$B" up "$n"
        note_pids "$n"; dirs+=("$(cat "$RUN/$n.dir")")
        check "$n: answers" eventually answers
        check "$n: marker written" put
        check "$n: marker readable" eventually has_marker
        case $n in
          etcd-cluster) test_partition "$n" ETCD_CLUSTER; test_cluster "$n" ETCD_CLUSTER ;;
          zk-ensemble) test_partition "$n" ZK_ENSEMBLE; test_cluster "$n" ZK_ENSEMBLE ;;
          redlock) test_redlock_member; test_single "$n" ;;
          redis-sentinel) test_sentinel_members; test_partition "$n" REDIS_SENTINEL; test_single "$n" ;;
          redis-cluster) test_rcluster_members; test_partition "$n" REDIS_CLUSTER; test_single "$n" ;;
          *) test_single "$n" ;;
        esac
        if [ "$n" = redis ] && [ -n "${OTHER_NETNS:-}" ]; then
            "$B" kill redis 2>/dev/null
            check "redis: spawn from another network namespace is refused" \
                not ip netns exec "$OTHER_NETNS" env DISTLOCK_RUN_DIR="$RUN" "$B" spawn redis
            check "redis: ... and started nothing there" ip netns exec "$OTHER_NETNS" bash -c '! nc -z -w1 127.0.0.1 16379'
            "$B" spawn redis 2>/dev/null
            note_pids redis
        fi
    else
        echo "  FAIL $n: up"; fails=$((fails + 1))
    fi
    echo "$fails" > "$RUN/test/$n.fails"
    printf '%s\n' "${seen[@]}" > "$RUN/test/$n.seen"
    printf '%s\n' "${dirs[@]}" > "$RUN/test/$n.dirs"
    printf '  %s\n' "${times[@]}" > "$RUN/test/$n.times"
}

# The servers use distinct ports: their checks run side by side, at most
# DISTLOCK_TEST_CONTROL_JOBS (default 4) at a time, the Java ones apart.
t_start=$(date +%s)
for n in "${names[@]}"; do setup "$n" || { echo "unknown server $n" >&2; exit 2; }; done
mkdir -p "$RUN/test"
order=()
for n in zk-ensemble mysql postgres etcd-cluster zookeeper; do [[ " ${names[*]} " == *" $n "* ]] && order+=("$n"); done
for n in "${names[@]}"; do [[ " ${order[*]} " == *" $n "* ]] || order+=("$n"); done
jobs_max=${DISTLOCK_TEST_CONTROL_JOBS:-4}
for n in "${order[@]}"; do
    while [ "$(jobs -rp | wc -l)" -ge "$jobs_max" ]; do wait -n || true; done
    test_server "$n" > "$RUN/test/$n.out" 2>&1 &
done
wait
for n in "${names[@]}"; do
    cat "$RUN/test/$n.out"
    fails=$((fails + $(cat "$RUN/test/$n.fails" 2>/dev/null || echo 1)))
    mapfile -t -O ${#seen[@]} seen < "$RUN/test/$n.seen"
    mapfile -t -O ${#dirs[@]} dirs < "$RUN/test/$n.dirs"
done

echo "== down"
ctl down
left=()
for p in "${seen[@]}"; do
    s=$(ps -o stat= -p "$p" 2>/dev/null) || continue
    [ "${s:0:1}" = Z ] || left+=("$p")
done
check "down: none of the ${#seen[@]} PIDs seen is left running" test ${#left[@]} -eq 0
[ ${#left[@]} -eq 0 ] || ps -o pid,stat,args -p "$(IFS=,; echo "${left[*]}")" || true
for d in "${dirs[@]}"; do check "down: $d removed" test ! -e "$d"; done
check "down: no PID files left" not compgen -G "$RUN/*.pids"

echo "== times (ms; the servers' checks run side by side)"
for n in "${names[@]}"; do cat "$RUN/test/$n.times"; done
printf '  %s\n' "${times[@]}"
echo "== $fails failed check(s), $(( $(date +%s) - t_start )) s"
[ "$fails" -eq 0 ]
