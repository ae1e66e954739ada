# redis-sentinel: Redis 7.0 under Sentinel for redis-sentinel:// (issue 14). Sourced
# by integration/backends.sh; uses redis_install from redis.sh.
#
# Every node on a host of its own (a network namespace: see member_ns_up in
# backends.sh), member N at 10.199.0.<30+N>, so that the partition nemesis can cut
# the master from its replicas and sentinels while clients still reach it.
# Data nodes: a master on 10.199.0.31:16390 and two replicas on .32:16391 and
# .33:16392 (when started fresh), no persistence, requirepass and masterauth
# sentinel-secret-pw. Sentinels: 10.199.0.34:26390, .35:26391 and .36:26392,
# monitoring "distlock-master" with quorum 2, down-after-milliseconds 1000 and
# failover-timeout 3000 (a killed master is replaced within ~2-4 s), auth-pass and
# requirepass sentinel-secret-pw (a sentinel authenticates to the other sentinels
# with its requirepass). Nothing needs announce-ip: a replica is listed by the
# address it connects from (its own) and its --port, a sentinel announces the
# address its hello connection comes from. Ports stay unique across the nodes, and
# the scripts below name a node by its port.
#
# Members (backends.sh kill/spawn redis-sentinel N; lines of redis-sentinel.pids):
#   1, 2, 3   the data nodes on 16390, 16391, 16392 (after a failover the master may
#             be any of them)
#   4, 5, 6   the sentinels on 26390, 26391, 26392
# A data node started again (spawn, ctl start) comes back as a replica of the master
# the sentinels name (majority of those that answer; without sentinels: a running data
# node whose ROLE is master, else the master in the sentinels' rewritten config files).
# When the sentinels still name the very node being started and a replica that was
# linked to it runs, it first waits (up to 20 s) for their failover, so that a master that
# lost its data by restarting does not make its replicas drop theirs. "up" (and a spawn that
# leaves all six running) returns once all three sentinels agree on the master, see 2
# replicas and 2 other sentinels, and the master has 2 replicas online: a failover is
# possible from then on.
#
# Data: DIR/node-PORT (a data node's log; its dataset is in memory only: a killed
# node starts empty and resyncs) and DIR/sentinel-PORT (sentinel.conf, which the
# sentinel rewrites with its id, the replicas, the other sentinels and the current
# master and epoch, and its log). "wipe" writes fresh sentinel configs (16390 master).
#
# Env ($RUN/redis-sentinel.env):
#   DISTLOCK_TEST_REDIS_SENTINEL_URL            redis-sentinel://:pw@the 3 sentinels/distlock-master?lease=2s&sentinel_password=pw
#                                               (the sentinels get only sentinel_password=, never the URL's)
#   DISTLOCK_TEST_REDIS_SENTINEL_REENTRANT_URL  .../distlock-master/1?strategy=reentrant&lease=2s
#   DISTLOCK_TEST_REDIS_SENTINEL_MIN_REPLICAS_URL  the first with min_replicas=2 (grants
#                                               confirmed by WAIT on both replicas), and its
#                                               _CTL (the same script), for the fault matrix
#   DISTLOCK_TEST_REDIS_SENTINEL_CTL            DIR/ctl.sh, the control script:
#     ctl.sh master                   port of the current master (the sentinels' majority
#                                     answer; waits up to 10 s for one)
#     ctl.sh kill-master              SIGKILL the current master (and wait until it is
#                                     dead), print its port
#     ctl.sh failover                 SENTINEL FAILOVER, wait for the new master (answering
#                                     ROLE master), print its port. The old master keeps
#                                     saying it is the master for ~10 s more, until the
#                                     sentinels reconfigure it (Sentinel waits 8 s before
#                                     it does): "wait-replicas 2" waits for that
#     ctl.sh wait-master-change OLDPORT [S]   wait up to S s (15) until the sentinels name
#                                     a master other than OLDPORT that answers ROLE master;
#                                     print its port
#     ctl.sh start PORT               start the node of PORT (data node or sentinel) again,
#                                     a data node as a replica of the current master; wait
#                                     until it answers PING; a running one is left alone
#     ctl.sh kill PORT                SIGKILL the node of PORT
#     ctl.sh wait-replicas N [S]      wait up to S s (15) until the master has N replicas
#                                     online (INFO replication)
#     ctl.sh wait-sentinels [S]       wait up to S s (30) for the state "up" waits for
#     ctl.sh pause PORT [S]           SIGSTOP the node of PORT (SIGCONT after S s when given)
#     ctl.sh resume PORT              SIGCONT it
#     ctl.sh port N | pid PORT        the port of member N | the recorded PID of PORT
#     ctl.sh host PORT|N              the address of that node
#     ctl.sh cut N M | cut-off N | isolate N | heal   the partition nemesis (members on
#                                     hosts of their own, in backends.sh): N and M cut
#                                     from each other | N cut from every other node
#                                     (clients still reach it) | and from clients too |
#                                     every link back
#     ctl.sh leader [NAME]            the master's member number (1-3), for the fault
#                                     harness (which names its lock: one master serves
#                                     every lock here, NAME is ignored); kill, start and wait take
#                                     a member number as well as a port
#     ctl.sh wait PORT|N [S]          wait up to S s (30) until that node answers PING and
#                                     the master has 2 replicas online
#   Ports are printed alone on one line; failures exit non-zero with a message on stderr.
RSENT_NAME=redis-sentinel
RSENT_PW=sentinel-secret-pw
RSENT_MASTER=distlock-master
RSENT_DATA_PORTS=(16390 16391 16392)
RSENT_SENTINEL_PORTS=(26390 26391 26392)
RSENT_PORTS=("${RSENT_DATA_PORTS[@]}" "${RSENT_SENTINEL_PORTS[@]}")  # member N is RSENT_PORTS[N-1]

redis_sentinel_install() { redis_install; apt_ensure iproute2; }  # ip: its nodes' hosts
redis_sentinel_slot() { echo $((30 + $1)); }  # member N's host: 10.199.0.<30+N>

redis_sentinel_init() {  # redis_sentinel_init DIR: hosts, empty node dirs, fresh sentinel configs
    local dir=$1 p n
    for n in $(seq ${#RSENT_PORTS[@]}); do
        member_ns_alive "$(redis_sentinel_slot "$n")" || member_ns_up "$(redis_sentinel_slot "$n")" ||
            { log "redis-sentinel: cannot make member $n's host"; return 1; }
    done
    for p in "${RSENT_DATA_PORTS[@]}"; do rm -rf "$dir/node-$p"; mkdir -p "$dir/node-$p"; done
    for p in "${RSENT_SENTINEL_PORTS[@]}"; do
        rm -rf "$dir/sentinel-$p"
        mkdir -p "$dir/sentinel-$p"
        cat > "$dir/sentinel-$p/sentinel.conf" <<CONF
port $p
bind $(rsent_host "$p")
daemonize no
dir $dir/sentinel-$p
logfile $dir/sentinel-$p/sentinel.log
requirepass $RSENT_PW
sentinel resolve-hostnames no
sentinel announce-hostnames no
sentinel monitor $RSENT_MASTER $(rsent_host "${RSENT_DATA_PORTS[0]}") ${RSENT_DATA_PORTS[0]} 2
sentinel down-after-milliseconds $RSENT_MASTER 1000
sentinel failover-timeout $RSENT_MASTER 3000
sentinel auth-pass $RSENT_MASTER $RSENT_PW
CONF
    done
}

redis_sentinel_spawn() {  # redis_sentinel_spawn DIR [N]
    local dir=$1 hosts="" p
    # shellcheck disable=SC2046  # the names: no spaces
    write_ctl "$dir/ctl.sh" rsent_ctl $(compgen -v RSENT_) $(compgen -A function rsent_) redis_sentinel_slot \
        MEMBER_NET member_ip member_pid member_blackhole member_cut member_isolate member_heal member_partition
    if [ -n "${2:-}" ]; then
        "$dir/ctl.sh" start "${RSENT_PORTS[$2-1]}" || return 1
    else
        # Data nodes first, the replicas synced, then the sentinels: a sentinel's first
        # INFO of the master then lists both replicas (it asks again only every 10 s).
        for p in "${RSENT_DATA_PORTS[@]}"; do "$dir/ctl.sh" start "$p" || return 1; done
        "$dir/ctl.sh" wait-replicas 2 20 || { fail_with_log "redis-sentinel replication" "$dir/node-${RSENT_DATA_PORTS[0]}/redis.log"; return 1; }
        for p in "${RSENT_SENTINEL_PORTS[@]}"; do "$dir/ctl.sh" start "$p" || return 1; done
    fi
    if alive redis-sentinel; then
        "$dir/ctl.sh" wait-sentinels 30 ||
            { fail_with_log "redis-sentinel (sentinels do not see the master, 2 replicas and each other)" \
                "$dir/sentinel-${RSENT_SENTINEL_PORTS[0]}/sentinel.log"; return 1; }
    fi
    for p in "${RSENT_SENTINEL_PORTS[@]}"; do hosts+="${hosts:+,}$(rsent_host "$p"):$p"; done
    cat > "$RUN/redis-sentinel.env" <<ENV
DISTLOCK_TEST_REDIS_SENTINEL_URL='redis-sentinel://:$RSENT_PW@$hosts/$RSENT_MASTER?lease=2s&sentinel_password=$RSENT_PW'
DISTLOCK_TEST_REDIS_SENTINEL_REENTRANT_URL='redis-sentinel://:$RSENT_PW@$hosts/$RSENT_MASTER/1?strategy=reentrant&lease=2s&sentinel_password=$RSENT_PW'
DISTLOCK_TEST_REDIS_SENTINEL_CTL='$dir/ctl.sh'
DISTLOCK_TEST_REDIS_SENTINEL_MIN_REPLICAS_URL='redis-sentinel://:$RSENT_PW@$hosts/$RSENT_MASTER?lease=2s&min_replicas=2&replica_timeout=500ms&sentinel_password=$RSENT_PW'
DISTLOCK_TEST_REDIS_SENTINEL_MIN_REPLICAS_CTL='$dir/ctl.sh'
ENV
}

# The functions below run in ctl.sh (RUN, DIR and the RSENT_ variables set). ------

# rsent_cli PORT ARGS...: redis-cli with the password, bounded (a SIGSTOPped server accepts
# connections and never answers).
rsent_cli() { local p=$1; shift; REDISCLI_AUTH=$RSENT_PW timeout 2 redis-cli -h "$(rsent_host "$p")" -p "$p" "$@"; }
rsent_pong() { [ "$(rsent_cli "$1" PING 2>/dev/null)" = PONG ]; }
rsent_role() { rsent_cli "$1" ROLE 2>/dev/null | sed -n 1p; }
rsent_member() { member_of "$1" redis-sentinel "${RSENT_PORTS[@]}"; }  # rsent_member PORT: its member number
rsent_host() { local n; n=$(rsent_member "$1") && member_ip "$(redis_sentinel_slot "$n")"; }  # rsent_host PORT
rsent_ns() { member_pid "$(redis_sentinel_slot "$(rsent_member "$1")")"; }  # the anchor of PORT's host
rsent_pid() { local n; n=$(rsent_member "$1") || return 2; sed -n "${n}p" "$RUN/$RSENT_NAME.pids" 2>/dev/null || true; }
# rsent_master_now: the master port that a majority of the answering sentinels name.
rsent_master_now() {
    local p m votes=()
    for p in "${RSENT_SENTINEL_PORTS[@]}"; do
        m=$(rsent_cli "$p" SENTINEL get-master-addr-by-name "$RSENT_MASTER" 2>/dev/null | sed -n 2p) || true
        [[ $m =~ ^[0-9]+$ ]] && votes+=("$m")
    done
    [ ${#votes[@]} -gt 0 ] || return 1
    printf '%s\n' "${votes[@]}" | sort | uniq -c | sort -rn |
        awk -v n=${#votes[@]} 'NR == 1 && 2 * $1 > n { print $2; ok = 1 } END { exit !ok }'
}
rsent_new_master() {  # rsent_new_master OLDPORT: the sentinels name another master, which says so
    local m
    m=$(rsent_master_now) && [ "$m" != "$1" ] && [ "$(rsent_role "$m")" = master ] && echo "$m"
}
rsent_current_master() {  # the sentinels' master, else a running data node whose ROLE is master
    local p
    rsent_master_now && return 0
    for p in "${RSENT_DATA_PORTS[@]}"; do
        running "$(rsent_pid "$p")" && [ "$(rsent_role "$p")" = master ] && { echo "$p"; return 0; }
    done
    return 1
}
rsent_conf_master() {  # the master of the sentinel config with the highest config-epoch
    local p f m e best="" best_e=-1
    for p in "${RSENT_SENTINEL_PORTS[@]}"; do
        f=$DIR/sentinel-$p/sentinel.conf
        [ -f "$f" ] || continue
        m=$(awk -v n="$RSENT_MASTER" '$1 == "sentinel" && $2 == "monitor" && $3 == n { print $5 }' "$f")
        e=$(awk -v n="$RSENT_MASTER" '$1 == "sentinel" && $2 == "config-epoch" && $3 == n { print $4 }' "$f")
        [[ $m =~ ^[0-9]+$ ]] || continue
        [[ $e =~ ^[0-9]+$ ]] || e=0
        [ "$e" -le "$best_e" ] || { best=$m; best_e=$e; }
    done
    echo "${best:-${RSENT_DATA_PORTS[0]}}"
}
# rsent_had_link PORT MASTER: PORT is a replica of MASTER that has had a link to it since it
# started (and so may have data of it): INFO says master_link_down_since_seconds:-1 when
# it never had one.
rsent_had_link() {
    local i
    i=$(rsent_cli "$1" INFO replication 2>/dev/null | tr -d '\r') || return 1
    [[ $i == *role:slave* && $i == *master_port:$2* && $i != *master_link_down_since_seconds:-1* ]]
}
rsent_master_for() {  # rsent_master_for PORT: the master a data node starting on PORT follows (PORT: none)
    local me=$1 m p others=no
    for p in "${RSENT_DATA_PORTS[@]}"; do
        [ "$p" = "$me" ] || ! running "$(rsent_pid "$p")" || ! rsent_had_link "$p" "$me" || others=yes
    done
    if m=$(rsent_master_now); then
        if [ "$m" = "$me" ] && [ $others = yes ]; then
            echo "redis-sentinel: the sentinels still name $me (being started) the master: waiting for their failover" >&2
            m=$(retry_output 20 rsent_new_master "$me") ||
                { echo "redis-sentinel: no failover within 20 s: $me starts as the master" >&2; m=$me; }
        fi
        echo "$m"
        return 0
    fi
    for p in "${RSENT_DATA_PORTS[@]}"; do
        [ "$p" != "$me" ] && running "$(rsent_pid "$p")" && [ "$(rsent_role "$p")" = master ] && { echo "$p"; return 0; }
    done
    rsent_conf_master
}
rsent_replicas_online() {  # rsent_replicas_online N: the current master has N replicas online
    local m n
    m=$(rsent_current_master) || return 1
    n=$(rsent_cli "$m" INFO replication | grep -c '^slave[0-9]*:.*state=online') || true
    [ "${n:-0}" -ge "$1" ]
}
rsent_sentinels_ready() {  # all sentinels: the same master, flags "master", 2 replicas, 2 other sentinels
    local p info m="" kv
    for p in "${RSENT_SENTINEL_PORTS[@]}"; do
        info=$(rsent_cli "$p" SENTINEL master "$RSENT_MASTER" 2>/dev/null) || return 1
        kv=$(printf '%s\n' "$info" | awk 'NR % 2 == 1 { k = $0; next }
            k == "port" || k == "flags" || k == "num-slaves" || k == "num-other-sentinels" { printf "%s=%s ", k, $0 }')
        [[ " $kv" == *" flags=master "* && " $kv" == *" num-slaves=2 "* && " $kv" == *" num-other-sentinels=2 "* ]] || return 1
        p=${kv#*port=}; p=${p%% *}
        [ -z "$m" ] || [ "$m" = "$p" ] || return 1
        m=$p
    done
    [ "$(rsent_role "$m")" = master ] && rsent_replicas_online 2
}
rsent_kill() {  # rsent_kill PORT: SIGKILL its node by recorded PID, wait until it is dead
    local n pid
    n=$(rsent_member "$1") || return 2
    pid=$(rsent_pid "$1")
    running "$pid" || return 0
    kill_tree "$pid"
    record_pid "$RSENT_NAME" "killed:$pid" "$n"
}
rsent_start() {  # rsent_start PORT: start its node (unless it runs), wait until it answers PING
    local port=$1 n pid d m log args=()
    n=$(rsent_member "$port") || return 2
    pid=$(rsent_pid "$port")
    if running "$pid"; then echo "redis-sentinel: $port is running (PID $pid)" >&2; return 0; fi
    if [ "$n" -gt ${#RSENT_DATA_PORTS[@]} ]; then
        d=$DIR/sentinel-$port log=$d/sentinel.log
        nsenter -t "$(rsent_ns "$port")" -n redis-server "$d/sentinel.conf" --sentinel </dev/null >/dev/null 2>&1 &
    else
        d=$DIR/node-$port log=$d/redis.log
        m=$(rsent_master_for "$port")
        [ "$m" = "$port" ] || args=(--replicaof "$(rsent_host "$m")" "$m")
        mkdir -p "$d"
        rm -f "$d"/*.rdb  # no persistence: a node starts empty (and a replica resyncs)
        # Diskless replication without delay: a replica syncs at once and writes no RDB file.
        nsenter -t "$(rsent_ns "$port")" -n redis-server --port "$port" --bind "$(rsent_host "$port")" --dir "$d" --logfile "$log" \
            --save '' --appendonly no --requirepass "$RSENT_PW" --masterauth "$RSENT_PW" \
            --repl-diskless-sync yes --repl-diskless-sync-delay 0 --repl-diskless-load on-empty-db \
            --rdb-del-sync-files yes --shutdown-on-sigterm now --databases 16 "${args[@]}" \
            </dev/null >/dev/null 2>&1 &
    fi
    pid=$!
    record_pid "$RSENT_NAME" "$pid" "$n"
    wait_serving 10 "$pid" rsent_pong "$port" && return 0
    echo "redis-sentinel: $port (PID $pid) does not answer; last lines of $log:" >&2
    tail -n 25 "$log" >&2 || true
    return 1
}

rsent_port_of() { port_of_member "$1" "${RSENT_PORTS[@]}"; }  # rsent_port_of PORT|N: a member number (1-6) as its port

rsent_ctl() {
    local m p
    case "${1:-}" in
      master) retry_output 10 rsent_master_now || { echo "redis-sentinel: the sentinels name no master" >&2; return 1; } ;;
      kill-master)
        m=$(retry_output 10 rsent_master_now) || { echo "redis-sentinel: the sentinels name no master" >&2; return 1; }
        rsent_kill "$m"
        echo "$m" ;;
      failover)
        m=$(retry_output 10 rsent_master_now) || { echo "redis-sentinel: the sentinels name no master" >&2; return 1; }
        # -INPROG (a failover runs) or -NOGOODSLAVE (replicas not yet known good): retried.
        local deadline=$(( $(date +%s%N) + 10000000000 )) r=""
        until [ "$r" = OK ]; do
            for p in "${RSENT_SENTINEL_PORTS[@]}"; do
                r=$(rsent_cli "$p" SENTINEL FAILOVER "$RSENT_MASTER" 2>&1) || true
                [ "$r" != OK ] || break
            done
            [ "$r" = OK ] || [ "$(date +%s%N)" -lt "$deadline" ] || { echo "redis-sentinel: SENTINEL FAILOVER: $r" >&2; return 1; }
            [ "$r" = OK ] || sleep 0.2
        done
        retry_output 15 rsent_new_master "$m" || { echo "redis-sentinel: no new master within 15 s" >&2; return 1; } ;;
      wait-master-change)
        [ -n "${2:-}" ] || { echo "usage: $0 wait-master-change OLDPORT [SECONDS]" >&2; return 2; }
        retry_output "${3:-15}" rsent_new_master "$2" ||
            { echo "redis-sentinel: the master is still $2 (or none) after ${3:-15} s" >&2; return 1; } ;;
      # The fault harness's kill-leader nemesis (tests/faults/harness.py) speaks of
      # members: "leader" prints the master's member number (1-3); kill, start and
      # wait take a member number (1-6) as well as a port.
      leader)
        m=$(retry_output 10 rsent_master_now) || { echo "redis-sentinel: the sentinels name no master" >&2; return 1; }
        for p in 1 2 3; do [ "${RSENT_PORTS[$p-1]}" != "$m" ] || { echo "$p"; return 0; }; done
        return 1 ;;
      start) [ -n "${2:-}" ] || { echo "usage: $0 start PORT|N" >&2; return 2; }; rsent_start "$(rsent_port_of "$2")" ;;
      kill) [ -n "${2:-}" ] || { echo "usage: $0 kill PORT|N" >&2; return 2; }; rsent_kill "$(rsent_port_of "$2")" ;;
      wait)  # wait PORT|N [S]: until that node answers PING and the master has 2 replicas online
        [ -n "${2:-}" ] || { echo "usage: $0 wait PORT|N [SECONDS]" >&2; return 2; }
        wait_until "${3:-30}" rsent_pong "$(rsent_port_of "$2")" && wait_until "${3:-30}" rsent_replicas_online 2 ||
            { echo "redis-sentinel: $2 does not serve, or the master has fewer than 2 replicas, after ${3:-30} s" >&2; return 1; } ;;
      wait-replicas)
        [ -n "${2:-}" ] || { echo "usage: $0 wait-replicas N [SECONDS]" >&2; return 2; }
        wait_until "${3:-15}" rsent_replicas_online "$2" ||
            { echo "redis-sentinel: the master has fewer than $2 replicas online after ${3:-15} s" >&2; return 1; } ;;
      wait-sentinels)
        wait_until "${2:-30}" rsent_sentinels_ready ||
            { echo "redis-sentinel: the sentinels do not agree on a master with 2 replicas and 2 other sentinels" >&2; return 1; } ;;
      pause)
        [ -n "${2:-}" ] || { echo "usage: $0 pause PORT [SECONDS]" >&2; return 2; }
        p=$(rsent_pid "$2") && running "$p" || { echo "redis-sentinel: $2 is not running" >&2; return 1; }
        kill -STOP "$p"
        if [ -n "${3:-}" ]; then ( sleep "$3"; kill -CONT "$p" 2>/dev/null ) </dev/null >/dev/null 2>&1 & fi ;;
      resume)
        [ -n "${2:-}" ] || { echo "usage: $0 resume PORT" >&2; return 2; }
        p=$(rsent_pid "$2") && running "$p" || { echo "redis-sentinel: $2 is not running" >&2; return 1; }
        kill -CONT "$p" ;;
      port) [[ ${2:-} =~ ^[1-9]$ ]] && [ "$2" -le ${#RSENT_PORTS[@]} ] && echo "${RSENT_PORTS[$2-1]}" ||
                { echo "usage: $0 port N (1-${#RSENT_PORTS[@]})" >&2; return 2; } ;;
      pid) rsent_pid "${2:-}" ;;
      host) rsent_host "$(rsent_port_of "${2:-}")" ;;
      cut | cut-off | isolate | heal) member_partition redis_sentinel_slot ${#RSENT_PORTS[@]} "$@" ;;
      *) echo "usage: $0 master | kill-master | failover | wait-master-change OLDPORT [S] | start PORT | kill PORT" \
              "| wait-replicas N [S] | wait-sentinels [S] | pause PORT [S] | resume PORT | port N | pid PORT" \
              "| leader [NAME] | wait PORT|N [S] | host PORT|N | cut N M | cut-off N | isolate N | heal" >&2
         return 2 ;;
    esac
}
