# redis-cluster: a Redis 7.0 Cluster for redis-cluster:// (issue 14). Sourced by
# integration/backends.sh; uses redis_install from redis.sh.
#
# Six nodes on ports 17000-17005 (cluster bus 27000-27005), members 1-6 for
# backends.sh kill/spawn redis-cluster N (lines of redis-cluster.pids), each on a host of
# its own (a network namespace: see member_ns_up in backends.sh), member N at
# 10.199.0.<40+N>, so that the partition nemesis can cut a master from its replica and
# the other masters while clients still reach it. Created with "redis-cli --cluster
# create ... --cluster-replicas 1": three masters (17000, 17001, 17002 when created)
# each with one replica. --cluster-node-timeout 2000 (a killed
# master's replica takes over within ~3-5 s), --cluster-replica-validity-factor 0 (a
# replica always may take over, however long its link was down), no RDB/AOF,
# requirepass and masterauth cluster-secret-pw. Each node has its dir DIR/node-PORT with
# its nodes.conf (so a killed and spawned node keeps its identity and role; its data is
# in memory only: it comes back empty and a replica resyncs) and its log.
#
# The cluster is created when all six nodes run and none belongs to a cluster yet: by
# "up", and after "wipe" (which removes the nodes' dirs) by the spawn that starts the
# last of them. "up" (and any spawn that leaves all six running) returns once every node
# reports cluster_state:ok, all 16384 slots assigned and 6 known nodes, and every master
# has a replica online: a failover is possible from then on. A master started again
# while the cluster still counts it the owner of its slots and a replica that was linked
# to it runs first waits (up to 20 s) for that replica to take over, so that the
# restarted empty master does not make its replica drop the data.
#
# Env ($RUN/redis-cluster.env):
#   DISTLOCK_TEST_REDIS_CLUSTER_URL            redis-cluster://:pw@10.199.0.41:17000,.42:17001,.43:17002?lease=2s
#   DISTLOCK_TEST_REDIS_CLUSTER_REENTRANT_URL  ...?strategy=reentrant&lease=2s
#   DISTLOCK_TEST_REDIS_CLUSTER_MIN_REPLICAS_URL  the first with min_replicas=1 (grants
#                                              confirmed by WAIT), and its _CTL (the same
#                                              script), for the fault matrix
#   DISTLOCK_TEST_REDIS_CLUSTER_CTL            DIR/ctl.sh, the control script:
#     ctl.sh master-of-slot SLOT        port of the master serving SLOT (the view of the
#                                       masters, majority)
#     ctl.sh migrate-slot SLOT TOPORT   move SLOT with its keys to the master on TOPORT
#                                       (SETSLOT IMPORTING on the target, MIGRATING on the
#                                       source, GETKEYSINSLOT + MIGRATE ... AUTH .. KEYS in
#                                       batches of 100, SETSLOT NODE on the target, the
#                                       source, then every other master); nothing printed;
#                                       a slot that is there already: nothing to do
#     ctl.sh migrate-slot-begin SLOT TOPORT   only IMPORTING / MIGRATING (clients get ASK
#                                       for keys not on the source any more)
#     ctl.sh migrate-slot-end SLOT TOPORT     the rest: the keys, then SETSLOT NODE
#     ctl.sh kill PORT|N | start PORT|N SIGKILL a node by recorded PID (waits until dead) |
#                                       start it again on its dir, wait until it answers PING
#     ctl.sh wait PORT|N [S]            wait up to S s (30) until that node answers PING and
#                                       the cluster is as "up" leaves it (wait-ready)
#     ctl.sh leader NAME                for the fault harness: the member number (1-6) of
#                                       the master serving the slot of lock NAME (of NAME
#                                       as a key: the lock's, for a name without braces)
#     ctl.sh host PORT|N                the address of that node
#     ctl.sh cut N M | cut-off N | isolate N | heal   the partition nemesis (as
#                                       redis-sentinel's): N and M cut from each other | N
#                                       cut from every other node (clients still reach
#                                       it) | and from clients too | every link back
#     ctl.sh failover-replica-of PORT   CLUSTER FAILOVER on a replica of the master on PORT
#                                       (FORCE when that master is down); waits until the
#                                       replica is master, every live node says
#                                       cluster_state:ok and all have the same view of the
#                                       roles and slots; prints the replica's port
#     ctl.sh wait-failover PORT [S]     wait up to S s (15) until another master serves the
#                                       slots of the master on PORT (killed or paused: the
#                                       cluster notices after the 2 s node timeout) and every
#                                       other live node says cluster_state:ok; prints its port
#     ctl.sh wait-ok [S]                wait up to S s (30) until every live node says
#                                       cluster_state:ok (right after a kill it still does:
#                                       the failure is noticed after the node timeout)
#     ctl.sh wait-ready [S]             wait up to S s (60) for the state "up" waits for
#     ctl.sh pause PORT [S] | resume PORT   SIGSTOP (SIGCONT after S s when given) | SIGCONT
#     ctl.sh port N | pid PORT | nodes  port of member N | recorded PID | CLUSTER NODES
#     ctl.sh create                     (for redis_cluster_spawn) create the cluster when all
#                                       six nodes are new
#   Ports are printed alone on one line; failures exit non-zero with a message on stderr.
#   Keys are read line by line (GETKEYSINSLOT): a key with a newline cannot be migrated.
RCLUS_NAME=redis-cluster
RCLUS_PW=cluster-secret-pw
RCLUS_PORTS=(17000 17001 17002 17003 17004 17005)  # member N is RCLUS_PORTS[N-1]

redis_cluster_install() { redis_install; apt_ensure iproute2; }  # ip: its nodes' hosts
redis_cluster_slot() { echo $((40 + $1)); }  # member N's host: 10.199.0.<40+N>

redis_cluster_init() {  # redis_cluster_init DIR: hosts, empty node dirs (no nodes.conf: a new cluster)
    local dir=$1 p n
    for n in $(seq ${#RCLUS_PORTS[@]}); do
        member_ns_alive "$(redis_cluster_slot "$n")" || member_ns_up "$(redis_cluster_slot "$n")" ||
            { log "redis-cluster: cannot make member $n's host"; return 1; }
    done
    for p in "${RCLUS_PORTS[@]}"; do rm -rf "$dir/node-$p"; mkdir -p "$dir/node-$p"; done
    rm -f "$dir/create.log"
}

redis_cluster_spawn() {  # redis_cluster_spawn DIR [N]
    local dir=$1 p hosts=""
    # shellcheck disable=SC2046  # the names: no spaces
    write_ctl "$dir/ctl.sh" rclus_ctl $(compgen -v RCLUS_) $(compgen -A function rclus_) redis_cluster_slot \
        MEMBER_NET member_ip member_pid member_blackhole member_cut member_isolate member_heal member_partition
    if [ -n "${2:-}" ]; then
        "$dir/ctl.sh" start "${RCLUS_PORTS[$2-1]}" || return 1
    else
        for p in "${RCLUS_PORTS[@]}"; do "$dir/ctl.sh" start "$p" || return 1; done
    fi
    if alive redis-cluster; then
        "$dir/ctl.sh" create || { fail_with_log "redis-cluster create" "$dir/create.log"; return 1; }
        "$dir/ctl.sh" wait-ready 60 ||
            { fail_with_log "redis-cluster (not every node ok with a replica per master)" "$dir/node-${RCLUS_PORTS[0]}/redis.log"; return 1; }
    fi
    for p in "${RCLUS_PORTS[@]:0:3}"; do hosts+="${hosts:+,}$(member_ip "$(redis_cluster_slot "$(rclus_member "$p")")"):$p"; done
    cat > "$RUN/redis-cluster.env" <<ENV
DISTLOCK_TEST_REDIS_CLUSTER_URL='redis-cluster://:$RCLUS_PW@$hosts?lease=2s'
DISTLOCK_TEST_REDIS_CLUSTER_REENTRANT_URL='redis-cluster://:$RCLUS_PW@$hosts?strategy=reentrant&lease=2s'
DISTLOCK_TEST_REDIS_CLUSTER_CTL='$dir/ctl.sh'
DISTLOCK_TEST_REDIS_CLUSTER_MIN_REPLICAS_URL='redis-cluster://:$RCLUS_PW@$hosts?lease=2s&min_replicas=1&replica_timeout=500ms'
DISTLOCK_TEST_REDIS_CLUSTER_MIN_REPLICAS_CTL='$dir/ctl.sh'
ENV
}

# The functions below run in ctl.sh (RUN, DIR and the RCLUS_ variables set). -------

# rclus_cli PORT ARGS...: redis-cli with the password, bounded (a SIGSTOPped server accepts
# connections and never answers).
rclus_cli() { local p=$1; shift; REDISCLI_AUTH=$RCLUS_PW timeout 3 redis-cli -h "$(rclus_host "$p")" -p "$p" "$@"; }
rclus_pong() { [ "$(rclus_cli "$1" PING 2>/dev/null)" = PONG ]; }
rclus_role() { rclus_cli "$1" ROLE 2>/dev/null | sed -n 1p; }
rclus_member() { member_of "$1" redis-cluster "${RCLUS_PORTS[@]}"; }  # rclus_member PORT: its member number
rclus_host() { local n; n=$(rclus_member "$1") && member_ip "$(redis_cluster_slot "$n")"; }  # rclus_host PORT
rclus_ns() { member_pid "$(redis_cluster_slot "$(rclus_member "$1")")"; }  # the anchor of PORT's host
rclus_port_of() { port_of_member "$1" "${RCLUS_PORTS[@]}"; }  # rclus_port_of PORT|N: a member number (1-6) as its port
rclus_pid() { local n; n=$(rclus_member "$1") || return 2; sed -n "${n}p" "$RUN/$RCLUS_NAME.pids" 2>/dev/null || true; }
rclus_info_field() {  # rclus_info_field PORT FIELD: a field of CLUSTER INFO
    rclus_cli "$1" CLUSTER INFO 2>/dev/null | tr -d '\r' | sed -n "s/^$2://p"
}
rclus_live() {  # the ports whose recorded PID runs, one a line (but PORT $1)
    local p
    for p in "${RCLUS_PORTS[@]}"; do [ "$p" = "${1:-}" ] || ! running "$(rclus_pid "$p")" || echo "$p"; done
}
rclus_nodes() {  # rclus_nodes [EXCEPT]: CLUSTER NODES of the first live node that answers
    local p out
    for p in $(rclus_live "${1:-}"); do
        out=$(rclus_cli "$p" CLUSTER NODES 2>/dev/null) && [ -n "$out" ] && [[ $out != ERR* ]] && { printf '%s\n' "$out"; return 0; }
    done
    return 1
}
# awk: the client port of an address field 10.199.0.41:17000@27000[,hostname]
rclus_line_port() { awk '{ a = $2; sub(/@.*/, "", a); sub(/.*:/, "", a); print a }'; }
rclus_owner_in() {  # rclus_owner_in SLOT < CLUSTER NODES: the port of the master owning SLOT
    awk -v s="$1" '$3 ~ /master/ {
        a = $2; sub(/@.*/, "", a); sub(/.*:/, "", a)
        for (i = 9; i <= NF; i++) {
            if ($i ~ /^\[/) continue
            n = split($i, r, "-"); lo = r[1] + 0; hi = (n > 1 ? r[2] : r[1]) + 0
            if (s >= lo && s <= hi) { print a; exit }
        }
    }'
}
# rclus_master_of_slot SLOT [EXCEPT]: the majority of the live masters' views (any live
# node's when no master answers), asking all but EXCEPT (a paused node would not answer).
rclus_master_of_slot() {
    local p role o views=()
    for p in $(rclus_live "${2:-}"); do
        role=$(rclus_role "$p")
        [ "$role" = master ] || continue
        o=$(rclus_cli "$p" CLUSTER NODES 2>/dev/null | rclus_owner_in "$1") || true
        [ -z "$o" ] || views+=("$o")
    done
    if [ ${#views[@]} -eq 0 ]; then
        rclus_nodes "${2:-}" | rclus_owner_in "$1" || true
        return 0
    fi
    printf '%s\n' "${views[@]}" | sort | uniq -c | sort -rn | awk 'NR == 1 { print $2 }'
}
rclus_all_ok() {  # rclus_all_ok [EXCEPT]: every live node (but EXCEPT) says cluster_state:ok (and one lives)
    local p n=0
    for p in $(rclus_live "${1:-}"); do [ "$(rclus_info_field "$p" cluster_state)" = ok ] || return 1; n=$((n + 1)); done
    [ $n -gt 0 ]
}
rclus_ready() {  # all six run, agree, cover every slot, and every master has a replica online
    local p
    for p in "${RCLUS_PORTS[@]}"; do
        running "$(rclus_pid "$p")" || return 1
        [ "$(rclus_cli "$p" CLUSTER INFO 2>/dev/null | tr -d '\r' |
             grep -E -c '^(cluster_state:ok|cluster_slots_assigned:16384|cluster_slots_ok:16384|cluster_known_nodes:6)$')" = 4 ] || return 1
        if [ "$(rclus_role "$p")" = master ]; then
            rclus_cli "$p" INFO replication 2>/dev/null | grep -q '^slave[0-9]*:.*state=online' || return 1
        fi
    done
    rclus_converged
}
rclus_create() {  # create the cluster when no node belongs to one yet (all six must run)
    local p fresh=0 hosts=()
    for p in "${RCLUS_PORTS[@]}"; do
        wait_until 10 rclus_pong "$p" || { echo "redis-cluster: $p does not answer" >&2; return 1; }
        [ "$(rclus_info_field "$p" cluster_known_nodes)" = 1 ] && [ "$(rclus_info_field "$p" cluster_slots_assigned)" = 0 ] &&
            fresh=$((fresh + 1))
        hosts+=("$(rclus_host "$p"):$p")
    done
    [ $fresh -gt 0 ] || return 0
    [ $fresh -eq ${#RCLUS_PORTS[@]} ] ||
        { echo "redis-cluster: only $fresh of the nodes are new (a node dir lost its nodes.conf?): backends.sh down, then up" >&2; return 1; }
    timeout 60 redis-cli -a "$RCLUS_PW" --no-auth-warning --cluster create "${hosts[@]}" --cluster-replicas 1 --cluster-yes \
        </dev/null >>"$DIR/create.log" 2>&1
}
rclus_kill() {  # rclus_kill PORT: SIGKILL its node by recorded PID, wait until it is dead
    local n pid
    n=$(rclus_member "$1") || return 2
    pid=$(rclus_pid "$1")
    running "$pid" || return 0
    kill_tree "$pid"
    record_pid "$RCLUS_NAME" "killed:$pid" "$n"
}
rclus_slots_of() {  # rclus_slots_of PORT < CLUSTER NODES: its slot ranges (none: nothing)
    awk -v p="$1" '{ a = $2; sub(/@.*/, "", a); sub(/.*:/, "", a) }
        a == p { for (i = 9; i <= NF; i++) if ($i !~ /^\[/) print $i }'
}
rclus_is_master() { [ "$(rclus_role "$1")" = master ]; }
rclus_taken_over() {  # rclus_taken_over PORT SLOT: the masters name another owner of SLOT, which is a master
    local o
    o=$(rclus_master_of_slot "$2" "$1") && [ -n "$o" ] && [ "$o" != "$1" ] && rclus_is_master "$o"
}
# rclus_had_link PORT: a replica that has had a link to its master since it started (and so
# may have data of it): INFO says master_link_down_since_seconds:-1 when it never had one.
rclus_had_link() {
    local i
    i=$(rclus_cli "$1" INFO replication 2>/dev/null | tr -d '\r') || return 1
    [[ $i == *role:slave* && $i != *master_link_down_since_seconds:-1* ]]
}
# rclus_wait_takeover PORT: before the dead PORT starts (empty) while it still owns slots
# and a replica of it that had a link to it runs, let that replica take over (a replica
# that started after it died is as empty as it: no wait then, e.g. when all start). Its
# own nodes.conf (its view when it died) and a live node's view (which may lag behind)
# each may say that it owns slots.
rclus_wait_takeover() {
    local port=$1 view conf id r slots waiting=no
    view=$(rclus_nodes "$port") || return 0  # no other node runs
    conf=$DIR/node-$port/nodes.conf
    [ -f "$conf" ] || return 0
    slots=$( { rclus_slots_of "$port" < "$conf"; rclus_slots_of "$port" <<<"$view"; } | sed -n 1p)
    [ -n "$slots" ] || return 0
    id=$(awk '$3 ~ /myself/ { print $1 }' "$conf")
    for r in $( { grep -v '^vars ' "$conf"; printf '%s\n' "$view"; } | awk -v id="$id" '$4 == id' | rclus_line_port | sort -u); do
        running "$(rclus_pid "$r")" && rclus_had_link "$r" && waiting=yes
    done
    [ $waiting = yes ] || return 0
    echo "redis-cluster: $port owns slots $slots and its replica runs: waiting for the replica to take over" >&2
    wait_until 20 rclus_taken_over "$port" "${slots%%-*}" ||
        echo "redis-cluster: no takeover within 20 s: $port starts as the owner of its slots" >&2
}
rclus_wait_failover() {  # rclus_wait_failover PORT [S]: another master took PORT's slots over; prints it
    local port=$1 conf slots view o
    conf=$DIR/node-$port/nodes.conf
    view=$(rclus_nodes "$port") || { echo "redis-cluster: no other node runs" >&2; return 1; }
    slots=$( { [ ! -f "$conf" ] || rclus_slots_of "$port" < "$conf"; rclus_slots_of "$port" <<<"$view"; } | awk 'NR == 1')
    [ -n "$slots" ] || { echo "redis-cluster: $port serves no slots" >&2; return 1; }
    wait_until "${2:-15}" rclus_taken_over "$port" "${slots%%-*}" ||
        { echo "redis-cluster: slot ${slots%%-*} still served by $port after ${2:-15} s" >&2; return 1; }
    wait_until "${2:-15}" rclus_all_ok "$port" || { echo "redis-cluster: not every other live node ok after ${2:-15} s" >&2; return 1; }
    o=$(rclus_master_of_slot "${slots%%-*}" "$port")
    echo "$o"
}
# rclus_converged: every live node has the same view of every node's role, master and slots.
rclus_converged() {
    local p v first="" n=0
    for p in $(rclus_live); do
        v=$(rclus_cli "$p" CLUSTER NODES 2>/dev/null | awk '{
            a = $2; sub(/@.*/, "", a); sub(/.*:/, "", a); s = ""
            for (i = 9; i <= NF; i++) if ($i !~ /^\[/) s = s " " $i
            print a, ($3 ~ /master/ ? "master" : "replica"), $4, s }' | sort) || return 1
        [ -n "$v" ] || return 1
        [ $n -eq 0 ] && first=$v
        [ "$v" = "$first" ] || return 1
        n=$((n + 1))
    done
    [ $n -gt 0 ]
}
rclus_start() {  # rclus_start PORT: start its node (unless it runs), wait until it answers PING
    local port=$1 n pid d
    n=$(rclus_member "$port") || return 2
    pid=$(rclus_pid "$port")
    if running "$pid"; then echo "redis-cluster: $port is running (PID $pid)" >&2; return 0; fi
    d=$DIR/node-$port
    mkdir -p "$d"
    rm -f "$d"/*.rdb  # no persistence: a node starts empty (and a replica resyncs)
    rclus_wait_takeover "$port"
    # Diskless replication without delay: a replica syncs at once and writes no RDB file.
    nsenter -t "$(rclus_ns "$port")" -n redis-server --port "$port" --bind "$(rclus_host "$port")" --dir "$d" --logfile "$d/redis.log" \
        --cluster-enabled yes --cluster-config-file nodes.conf --cluster-node-timeout 2000 \
        --cluster-replica-validity-factor 0 \
        --save '' --appendonly no --requirepass "$RCLUS_PW" --masterauth "$RCLUS_PW" \
        --repl-diskless-sync yes --repl-diskless-sync-delay 0 --repl-diskless-load on-empty-db \
        --rdb-del-sync-files yes --shutdown-on-sigterm now </dev/null >/dev/null 2>&1 &
    pid=$!
    record_pid "$RCLUS_NAME" "$pid" "$n"
    wait_serving 10 "$pid" rclus_pong "$port" && return 0
    echo "redis-cluster: $port (PID $pid) does not answer; last lines of $d/redis.log:" >&2
    tail -n 25 "$d/redis.log" >&2 || true
    return 1
}
# rclus_migrate_begin SLOT TOPORT: IMPORTING on the target, MIGRATING on the source (again
# when they are set already); prints the source's port.
rclus_migrate_begin() {
    local slot=$1 to=$2 src src_id to_id r
    [[ $slot =~ ^[0-9]+$ ]] && [ "$slot" -lt 16384 ] || { echo "redis-cluster: no slot '$slot' (0-16383)" >&2; return 2; }
    rclus_member "$to" >/dev/null || return 2
    src=$(rclus_master_of_slot "$slot")
    [ -n "$src" ] || { echo "redis-cluster: no master serves slot $slot" >&2; return 1; }
    [ "$src" != "$to" ] || return 3  # there already
    [ "$(rclus_role "$to")" = master ] || { echo "redis-cluster: $to is not a master" >&2; return 1; }
    src_id=$(rclus_cli "$src" CLUSTER MYID) && to_id=$(rclus_cli "$to" CLUSTER MYID) ||
        { echo "redis-cluster: CLUSTER MYID failed on $src or $to" >&2; return 1; }
    r=$(rclus_cli "$to" CLUSTER SETSLOT "$slot" IMPORTING "$src_id" 2>&1) || true
    [ "$r" = OK ] || { echo "redis-cluster: $to: CLUSTER SETSLOT $slot IMPORTING: $r" >&2; return 1; }
    r=$(rclus_cli "$src" CLUSTER SETSLOT "$slot" MIGRATING "$to_id" 2>&1) || true
    [ "$r" = OK ] || { echo "redis-cluster: $src: CLUSTER SETSLOT $slot MIGRATING: $r" >&2; return 1; }
    echo "$src"
}
rclus_migrate_end() {  # rclus_migrate_end SLOT TOPORT: the keys, then SETSLOT NODE everywhere
    local slot=$1 to=$2 src to_id r p i keys=()
    src=$(rclus_migrate_begin "$slot" "$to") || { [ $? = 3 ] && return 0; return 1; }
    to_id=$(rclus_cli "$to" CLUSTER MYID) || { echo "redis-cluster: CLUSTER MYID failed on $to" >&2; return 1; }
    for ((i = 0; i < 1000000; i++)); do
        mapfile -t keys < <(rclus_cli "$src" CLUSTER GETKEYSINSLOT "$slot" 100 2>/dev/null | sed '/^$/d')
        [ ${#keys[@]} -gt 0 ] || break
        r=$(rclus_cli "$src" MIGRATE "$(rclus_host "$to")" "$to" "" 0 5000 AUTH "$RCLUS_PW" KEYS "${keys[@]}" 2>&1) || true
        [ "$r" = OK ] || [ "$r" = NOKEY ] ||
            { echo "redis-cluster: $src: MIGRATE of ${#keys[@]} keys of slot $slot to $to: $r" >&2; return 1; }
    done
    # The target first (it takes the slot and bumps its epoch), then the source (refused
    # while it still holds keys of the slot), then the other masters.
    local order=("$to" "$src")
    for p in $(rclus_live); do
        [ "$p" = "$to" ] || [ "$p" = "$src" ] || [ "$(rclus_role "$p")" != master ] || order+=("$p")
    done
    for p in "${order[@]}"; do
        r=$(rclus_cli "$p" CLUSTER SETSLOT "$slot" NODE "$to_id" 2>&1) || true
        [ "$r" = OK ] || { echo "redis-cluster: $p: CLUSTER SETSLOT $slot NODE: $r" >&2; return 1; }
    done
}
rclus_failover_replica_of() {  # rclus_failover_replica_of PORT: prints the new master's port
    local port=$1 view id r="" c mode=()
    rclus_member "$port" >/dev/null || return 2
    view=$(rclus_nodes) || { echo "redis-cluster: no node answers" >&2; return 1; }
    id=$(awk -v p="$port" '{ a = $2; sub(/@.*/, "", a); sub(/.*:/, "", a) } a == p { print $1 }' <<<"$view")
    for c in $(awk -v id="$id" '$4 == id && $3 ~ /slave/ && $3 !~ /fail/' <<<"$view" | rclus_line_port); do
        running "$(rclus_pid "$c")" && rclus_pong "$c" && { r=$c; break; }
    done
    [ -n "$r" ] || { echo "redis-cluster: the master on $port has no live replica" >&2; return 1; }
    rclus_pong "$port" || mode=(FORCE)
    c=$(rclus_cli "$r" CLUSTER FAILOVER "${mode[@]}" 2>&1) || true
    [ "$c" = OK ] || { echo "redis-cluster: $r: CLUSTER FAILOVER ${mode[*]}: $c" >&2; return 1; }
    wait_until 15 rclus_is_master "$r" ||
        { echo "redis-cluster: $r is not master 15 s after CLUSTER FAILOVER" >&2; return 1; }
    wait_until 30 rclus_all_ok || { echo "redis-cluster: not every node ok 30 s after the failover" >&2; return 1; }
    wait_until 30 rclus_converged || { echo "redis-cluster: the nodes' views differ 30 s after the failover" >&2; return 1; }
    echo "$r"
}

rclus_ctl() {
    local p
    case "${1:-}" in
      master-of-slot)
        [[ ${2:-} =~ ^[0-9]+$ ]] || { echo "usage: $0 master-of-slot SLOT" >&2; return 2; }
        p=$(rclus_master_of_slot "$2")
        [ -n "$p" ] || { echo "redis-cluster: no master serves slot $2" >&2; return 1; }
        echo "$p" ;;
      migrate-slot)
        [ -n "${3:-}" ] || { echo "usage: $0 migrate-slot SLOT TOPORT" >&2; return 2; }
        rclus_migrate_end "$2" "$3" ;;
      migrate-slot-begin)
        [ -n "${3:-}" ] || { echo "usage: $0 migrate-slot-begin SLOT TOPORT" >&2; return 2; }
        rclus_migrate_begin "$2" "$3" >/dev/null || {
            p=$?; [ $p != 3 ] || echo "redis-cluster: slot $2 is served by $3 already" >&2; return $p; } ;;
      migrate-slot-end)
        [ -n "${3:-}" ] || { echo "usage: $0 migrate-slot-end SLOT TOPORT" >&2; return 2; }
        rclus_migrate_end "$2" "$3" ;;
      kill) [ -n "${2:-}" ] || { echo "usage: $0 kill PORT|N" >&2; return 2; }; rclus_kill "$(rclus_port_of "$2")" ;;
      start) [ -n "${2:-}" ] || { echo "usage: $0 start PORT|N" >&2; return 2; }; rclus_start "$(rclus_port_of "$2")" ;;
      wait)  # wait PORT|N [S]: until that node answers PING and the cluster is ready again
        [ -n "${2:-}" ] || { echo "usage: $0 wait PORT|N [SECONDS]" >&2; return 2; }
        wait_until "${3:-30}" rclus_pong "$(rclus_port_of "$2")" && wait_until "${3:-30}" rclus_ready ||
            { echo "redis-cluster: $2 does not serve, or the cluster is not ready, after ${3:-30} s" >&2; return 1; } ;;
      # The fault harness (tests/faults/harness.py) speaks of members: "leader NAME" prints
      # the member number of the master of lock NAME's slot: the slot of NAME as a key,
      # which is the lock's for a name without braces (the harness's): the plain
      # strategy's keys carry it as their hash tag, {NAME}, and Redisson's are NAME.
      leader)
        [ -n "${2:-}" ] || { echo "usage: $0 leader NAME" >&2; return 2; }
        local s
        s=$(rclus_cli "$(rclus_live | sed -n 1p)" CLUSTER KEYSLOT "$2") && [[ $s =~ ^[0-9]+$ ]] ||
            { echo "redis-cluster: CLUSTER KEYSLOT failed" >&2; return 1; }
        p=$(rclus_master_of_slot "$s")
        [ -n "$p" ] || { echo "redis-cluster: no master serves slot $s" >&2; return 1; }
        rclus_member "$p" ;;
      host) rclus_host "$(rclus_port_of "${2:-}")" ;;
      cut | cut-off | isolate | heal) member_partition redis_cluster_slot ${#RCLUS_PORTS[@]} "$@" ;;
      failover-replica-of)
        [ -n "${2:-}" ] || { echo "usage: $0 failover-replica-of PORT" >&2; return 2; }
        rclus_failover_replica_of "$2" ;;
      wait-failover)
        [ -n "${2:-}" ] || { echo "usage: $0 wait-failover PORT [SECONDS]" >&2; return 2; }
        rclus_member "$2" >/dev/null || return 2
        rclus_wait_failover "$2" "${3:-15}" ;;
      wait-ok) wait_until "${2:-30}" rclus_all_ok || { echo "redis-cluster: not every live node ok after ${2:-30} s" >&2; return 1; } ;;
      wait-ready) wait_until "${2:-60}" rclus_ready || { echo "redis-cluster: not ready after ${2:-60} s" >&2; return 1; } ;;
      create) rclus_create ;;
      pause)
        [ -n "${2:-}" ] || { echo "usage: $0 pause PORT [SECONDS]" >&2; return 2; }
        p=$(rclus_pid "$2") && running "$p" || { echo "redis-cluster: $2 is not running" >&2; return 1; }
        kill -STOP "$p"
        if [ -n "${3:-}" ]; then ( sleep "$3"; kill -CONT "$p" 2>/dev/null ) </dev/null >/dev/null 2>&1 & fi ;;
      resume)
        [ -n "${2:-}" ] || { echo "usage: $0 resume PORT" >&2; return 2; }
        p=$(rclus_pid "$2") && running "$p" || { echo "redis-cluster: $2 is not running" >&2; return 1; }
        kill -CONT "$p" ;;
      port) [[ ${2:-} =~ ^[1-9]$ ]] && [ "$2" -le ${#RCLUS_PORTS[@]} ] && echo "${RCLUS_PORTS[$2-1]}" ||
                { echo "usage: $0 port N (1-${#RCLUS_PORTS[@]})" >&2; return 2; } ;;
      pid) rclus_pid "${2:-}" ;;
      nodes) rclus_nodes ;;
      *) echo "usage: $0 master-of-slot SLOT | migrate-slot[-begin|-end] SLOT TOPORT | kill PORT|N | start PORT|N | wait PORT|N [S]" \
              "| failover-replica-of PORT | wait-failover PORT [S] | wait-ok [S] | wait-ready [S] | pause PORT [S] | resume PORT | port N | pid PORT | nodes" \
              "| leader NAME | host PORT|N | cut N M | cut-off N | isolate N | heal" >&2
         return 2 ;;
    esac
}
