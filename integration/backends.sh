#!/usr/bin/env bash
# Real servers for the tests, natively on loopback (no Docker engine here).
#
#   integration/backends.sh up [NAMES...]   start (all known when no names), wait until each answers
#   integration/backends.sh down            stop every server this script started, by PID
#   integration/backends.sh env             print $RUN/backends.env
#   integration/backends.sh list            the server names this script knows
# Server control for fault tests (tests/faults), on servers started by "up":
#   integration/backends.sh kill NAME [N]   SIGKILL the server (member N only: 1-based, in the
#                                           order of NAME.pids, e.g. redlock's three masters, a
#                                           cluster's members, redis-sentinel's data nodes 1-3 and
#                                           sentinels 4-6, redis-cluster's nodes 1-6) with its
#                                           child processes, by recorded PID; returns once
#                                           they are dead (zombies count: PID 1, their parent,
#                                           reaps them late). The data dir stays.
#   integration/backends.sh spawn NAME [N]  start the dead server (member N only) again on its
#                                           data dir, with the ports and flags of "up" (the
#                                           DISTLOCK_* settings of "up" are restored), record the
#                                           new PIDs, wait until it answers like "up"; the server
#                                           keeps running after the caller exits. Members still
#                                           running are left alone.
#   integration/backends.sh wipe NAME       with the server dead: remove its data and initialise
#                                           it again as "up" does (the next spawn starts empty).
#                                           Not the three-member clusters. redis, redlock and
#                                           consul-emulator keep nothing on disk: it says so.
#                                           redis-sentinel gets fresh sentinel configs, and
#                                           redis-cluster loses its nodes.conf files (the
#                                           spawn that starts the last node creates it anew).
# Run one of these commands per server at a time (they rewrite NAME.pids).
# integration/test_control.sh checks up/kill/spawn/wipe/down of every server in a
# network namespace of its own.
#
# DISTLOCK_RUN_DIR (default integration/.run, called $RUN here) holds the state: NAME.pids
# (one line per member: its PID, or "killed:PID" after "kill"), NAME.dir (its data dir),
# NAME.env, backends.env, NAME.settings, netns. With a run dir each, independent sets of
# servers run side by side in separate network namespaces (same ports):
#   ip netns add X; ip netns exec X ip link set lo up
#   ip netns exec X env DISTLOCK_RUN_DIR=/tmp/x integration/backends.sh up
# Run every command of one set in its namespace: "up" and "spawn" refuse to start servers of
# a run dir whose servers live in another network namespace.
#
# Each single server lives in integration/servers/<name>.sh (sourced here: it uses the helpers
# below, apt_ensure, wait_until, wait_serving, record_pid, fail_with_log...), which defines:
#   <name>_install            install its Debian packages if missing (apt-get, as root)
#   <name>_init <dir>         create its data in <dir> (a fresh temp dir for "up"; for "wipe", the
#                             server's dir with the server dead: it removes the old data first)
#   <name>_spawn <dir> [N]    start member N (all when N is omitted) on the data in <dir> as
#                             background children, recording each PID with record_pid; wait
#                             until it answers; print DISTLOCK_TEST_..._URL=... lines to
#                             "$RUN/<name>.env"; return non-zero with the log tail printed on failure
# "up" runs <name>_init then <name>_spawn. "up" is idempotent: a server whose PIDs are all
# alive is left alone. Function names use '_' for '-' in server names (zk-ensemble ->
# zk_ensemble_start). A three-member cluster (etcd-cluster, zk-ensemble) defines
# <name>_start instead, which starts through cluster_start below (it also writes the
# cluster's control script ctl.sh, which "kill" and "spawn" use).
# The servers by kind:
#   single:          redis, mysql, postgres, zookeeper, etcd, consul-emulator
#   several members, <name>_init/<name>_spawn DIR [N]: redlock (3 independent masters);
#                    redis-sentinel (3 data nodes + 3 sentinels) and redis-cluster (6
#                    nodes), which also write a control script DIR/ctl.sh with write_ctl
#                    below for the fault tests (DISTLOCK_TEST_REDIS_SENTINEL_CTL,
#                    DISTLOCK_TEST_REDIS_CLUSTER_CTL; see their files)
#   three-member clusters, <name>_start: etcd-cluster, zk-ensemble
#   TLS (issue 24), independent members started through spawn_members below, with the
#                    throwaway CA of integration/tls/make-ca.sh: redis-tls, postgres-tls,
#                    mysql-tls, etcd-tls, zookeeper-tls (each file lists its members and env)
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
RUN="${DISTLOCK_RUN_DIR:-$HERE/.run}"
mkdir -p "$RUN"
RUN="$(cd "$RUN" && pwd)"
export RUN

log() { echo "[backends] $*" >&2; }

# Shared helpers for the server scripts ---------------------------------------
apt_ensure() { "$HERE/../scripts/apt-ensure" "$@"; }  # apt_ensure PKG... : install the missing ones
wait_until() {  # wait_until SECONDS CMD... : retry CMD every 0.1 s
    local deadline=$(( $(date +%s%N) + $1 * 1000000000 )); shift
    until "$@" >/dev/null 2>&1; do
        [ "$(date +%s%N)" -lt "$deadline" ] || return 1
        sleep 0.1
    done
}
# wait_serving SECONDS PID CMD...: wait_until CMD succeeds, but fail at once when PID exits.
wait_serving() {
    local seconds=$1 pid=$2; shift 2
    wait_until "$seconds" serving_or_gone "$pid" "$@" && running "$pid"
}
serving_or_gone() { local pid=$1; shift; ! running "$pid" || "$@"; }
# record_pid NAME PID [N]: PID of member N (default 1) on line N of "$RUN/NAME.pids".
record_pid() {
    local f="$RUN/$1.pids" n=${3:-1} lines=()
    [ -f "$f" ] && mapfile -t lines < "$f"
    while [ ${#lines[@]} -lt "$n" ]; do lines+=(""); done
    lines[n-1]=$2
    printf '%s\n' "${lines[@]}" > "$f.$$" && mv -f "$f.$$" "$f"
}
# running PID: the process exists and is not a zombie (the servers are not our children:
# once their starting shell has exited, PID 1 reaps them, ~1.5 s late on these machines).
# A killed multi-threaded server's main thread can be a zombie while its other threads
# still exit and hold its files (ports, locks): it runs until they are gone too.
running() {
    local s t
    [[ ${1:-} =~ ^[0-9]+$ ]] || return 1
    { read -r s < "/proc/$1/stat"; } 2>/dev/null || return 1
    s=${s##*) }
    [ "${s:0:1}" != Z ] && return 0
    for t in "/proc/$1/task/"*; do [ "${t##*/}" = "$1" ] || [ ! -e "$t" ] || return 0; done
    return 1
}
alive() { [ -f "$RUN/$1.pids" ] || return 1; local p; while read -r p; do running "$p" || return 1; done < "$RUN/$1.pids"; }
stop_pids() {  # stop_pids FILE: TERM (INT for postgres-style servers via <name>_stop_signal), then KILL after 15 s
    local file=$1 sig=${2:-TERM} p
    [ -f "$file" ] || return 0
    while read -r p; do running "$p" && kill -"$sig" "$p" 2>/dev/null || true; done < "$file"
    while read -r p; do
        [[ $p =~ ^[0-9]+$ ]] || continue  # "killed:PID" (backends.sh kill): nothing to stop
        for _ in $(seq 150); do
            running "$p" || break
            sleep 0.1
        done
        running "$p" && kill -KILL "$p" 2>/dev/null || true
    done < "$file"
    rm -f "$file"
}
# wait_reaped PID SECONDS: wait while PID is a zombie (PID 1 reaps late): a server that
# finds the PID of its killed predecessor in its lock file (postgres) refuses to start
# while that PID exists.
wait_reaped() {
    local s deadline=$(( $(date +%s%N) + $2 * 1000000000 ))
    while [[ ${1:-} =~ ^[0-9]+$ ]] && { read -r s < "/proc/$1/stat"; } 2>/dev/null; do
        s=${s##*) }
        [ "${s:0:1}" = Z ] && [ "$(date +%s%N)" -lt "$deadline" ] || return 0
        sleep 0.02
    done
}
tree_of() {  # tree_of PID: PID and its descendants, one a line
    ps -e -o pid=,ppid= | awk -v root="$1" '
        { kids[$2] = kids[$2] " " $1 }
        END {
            todo = root
            while (todo != "") {
                n = split(todo, q, " "); todo = ""
                for (i = 1; i <= n; i++) { print q[i]; if (q[i] in kids) todo = todo kids[q[i]] }
            }
        }'
}
# kill_tree PID: SIGKILL PID and its descendants (postgres forks a process per
# connection), all frozen with SIGSTOP first so that none forks meanwhile, and wait
# until all are dead (or zombies, which PID 1 reaps late: their sockets and locks are
# released already).
kill_tree() {
    local procs=() n=-1 p deadline
    running "$1" || return 0
    kill -STOP "$1" 2>/dev/null || true
    until [ ${#procs[@]} -eq $n ]; do
        n=${#procs[@]}
        mapfile -t procs < <(tree_of "$1")
        for p in "${procs[@]}"; do kill -STOP "$p" 2>/dev/null || true; done
    done
    for p in "${procs[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
    deadline=$(( $(date +%s%N) + 10000000000 ))
    for p in "${procs[@]}"; do
        while running "$p"; do
            [ "$(date +%s%N)" -lt "$deadline" ] || { echo "PID $p survived SIGKILL for 10 s" >&2; return 1; }
            sleep 0.01
        done
    done
}
fail_with_log() { log "$1 failed to start; last lines of $2:"; tail -n 25 "$2" >&2 || true; return 1; }

# Three-member clusters --------------------------------------------------------
# The script of a cluster NAME (functions P_..., P = NAME with '_' for '-') defines
#   P_member_cmd N   member N's command line (called in ctl.sh, where $DIR is the cluster's dir)
#   P_port N         member N's client port
#   P_is_leader N    true when member N says it is the leader
#   P_ready N        true when member N serves
# and starts through cluster_start, which writes DIR/ctl.sh for the fault tests:
#   ctl.sh leader [NAME] the number (1-3) of the current leader (NAME, a lock, is ignored: one leader)
#   ctl.sh port N        client port of member N
#   ctl.sh pid N         PID of member N ("killed:PID" after "ctl.sh kill N")
#   ctl.sh kill N        SIGKILL member N and wait until it is dead (see kill_tree)
#   ctl.sh start N       start member N again on its data (in the background, PID
#                        recorded where "backends.sh down" finds it)
#   ctl.sh wait N [S]    wait S seconds (default: the cluster's) until member N serves
#   ctl.sh exec N        replace itself by member N (so that "ctl.sh exec N &" gives its PID)
#   ctl.sh host N        address of member N (127.0.0.1, or its own on a host of its own)
#   ctl.sh cut N M       members N and M no longer reach each other (hosts of their own only)
#   ctl.sh cut-off N     member N reaches no other member (clients still reach it)
#   ctl.sh isolate N     member N reaches nobody, clients included, and nobody reaches it
#   ctl.sh heal          every link back
# Member N keeps its pid file and log in DIR/<member prefix>N.
# "backends.sh kill/spawn NAME [N]" use ctl.sh kill, start and wait.

# Members on hosts of their own (the partition nemesis of tests/faults): a cluster
# whose script defines P_slot N (etcd-cluster: 11-13) runs member N in a network
# namespace of its own, with the address 10.199.0.<slot> on a bridge (dl-br0,
# 10.199.0.1) in the servers' namespace, as Jepsen runs each node on a host. Clients
# here reach every member at its address; ctl.sh cuts and heals the links between
# members there with blackhole routes (cut, isolate, heal), which clients do not cross.
# A namespace is held by an anchor process (unshare -n sleep, its PID in
# $RUN/netns.<slot>) and entered by that PID: no name under /run/netns, whose bind
# mounts a command run under "ip netns exec" (a mount namespace of its own) would
# not share with the next one.
MEMBER_NET=10.199.0
member_ip() { echo "$MEMBER_NET.$1"; }
member_pid() { cat "$RUN/netns.$1"; }  # the anchor of slot N's namespace
member_ns_up() {  # member_ns_up SLOT: its namespace, address and link to the bridge (made anew)
    local pid veth=dlv$1 here
    member_ns_down "$1" keep-bridge
    unshare -n sleep infinity </dev/null >/dev/null 2>&1 &
    pid=$!
    echo "$pid" > "$RUN/netns.$1"
    here=$(readlink /proc/self/ns/net)
    wait_until 5 eval '[ "$(readlink /proc/'"$pid"'/ns/net 2>/dev/null)" != "$here" ]' || return 1
    # The bridge is shared by every deployment of this namespace, which may start side by
    # side: made, joined and removed (member_ns_down) under one lock.
    (
        flock 9
        if ! ip link show dl-br0 >/dev/null 2>&1; then
            ip link add dl-br0 type bridge && ip addr add "$MEMBER_NET.1/24" dev dl-br0 && ip link set dl-br0 up || exit 1
        fi
        ip link add "$veth" type veth peer name eth0 netns "$pid" && ip link set "$veth" master dl-br0 up
    ) 9>>"$RUN/bridge.lock" || return 1
    nsenter -t "$pid" -n sh -c "ip addr add $(member_ip "$1")/24 dev eth0 && ip link set eth0 up && ip link set lo up"
}
member_ns_alive() {  # member_ns_alive SLOT: its anchor runs (a PID of the file that is an anchor)
    local pid
    pid=$(cat "$RUN/netns.$1" 2>/dev/null) || return 1
    [[ $pid =~ ^[0-9]+$ ]] && [ "$(tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null)" = "sleep infinity " ]
}
member_ns_down() {  # member_ns_down SLOT [keep-bridge]; the bridge goes with the last member
    if member_ns_alive "$1"; then kill -KILL "$(member_pid "$1")" 2>/dev/null || true; fi
    rm -f "$RUN/netns.$1"
    ip link del "dlv$1" 2>/dev/null || true
    [ "${2:-}" != keep-bridge ] || return 0
    (
        flock 9
        ip -o link show type veth 2>/dev/null | grep -q ' dlv[0-9]*@' || ip link del dl-br0 2>/dev/null || true
    ) 9>>"$RUN/bridge.lock"
}
# In ctl.sh: blackhole routes in slot A's namespace to each address that follows.
member_blackhole() {
    local pid ip
    pid=$(member_pid "$1"); shift
    for ip in "$@"; do nsenter -t "$pid" -n ip route replace blackhole "$ip/32"; done
}
# In ctl.sh: member_cut A B...: slot A and each slot B no longer reach each other.
member_cut() {
    local a=$1 b; shift
    for b in "$@"; do member_blackhole "$a" "$(member_ip "$b")"; member_blackhole "$b" "$(member_ip "$a")"; done
}
member_isolate() { member_cut "$@"; member_blackhole "$1" "$MEMBER_NET.1"; }  # ... and A no client (the bridge)
member_heal() { local s; for s in "$@"; do nsenter -t "$(member_pid "$s")" -n ip route flush type blackhole; done; }
# In ctl.sh: member_partition SLOTFN COUNT OP ARGS, the partition commands of a deployment
# of COUNT members, member N on the host of slot "SLOTFN N": cut N M (N and M no longer
# reach each other), cut-off N (N reaches no other member; clients still reach it),
# isolate N (nor any client), heal (every link back).
member_partition() {
    local fn=$1 count=$2 op=$3 b others=(); shift 3
    for b in "$@"; do
        [[ $b =~ ^[1-9][0-9]*$ ]] && [ "$b" -le "$count" ] || { echo "no member '$b' (1-$count)" >&2; return 2; }
    done
    for b in $(seq "$count"); do [ "$b" = "${1:-}" ] || others+=("$("$fn" "$b")"); done
    case "$op:$#" in
      cut:2) member_cut "$("$fn" "$1")" "$("$fn" "$2")" ;;
      cut-off:1) member_cut "$("$fn" "$1")" "${others[@]}" ;;
      isolate:1) member_isolate "$("$fn" "$1")" "${others[@]}" ;;
      heal:0) member_heal "${others[@]}" ;;
      *) echo "usage: cut N M | cut-off N | isolate N | heal" >&2; return 2 ;;
    esac
}

# The body of every ctl.sh; its settings (NAME DIR RUNDIR MEMBER WAIT FN) come first.
# shellcheck disable=SC2153  # those settings are ctl.sh's globals
cluster_ctl() {
    local m="$DIR/$MEMBER${2:-}" p
    case "${1:-}" in
      exec)
        if declare -F "${FN}_slot" >/dev/null; then
            exec nsenter -t "$(member_pid "$("${FN}_slot" "$2")")" -n $("${FN}_member_cmd" "$2") </dev/null >>"$m/log" 2>&1
        fi
        exec $("${FN}_member_cmd" "$2") </dev/null >>"$m/log" 2>&1 ;;
      port) "${FN}_port" "$2" ;;
      host) if declare -F "${FN}_slot" >/dev/null; then member_ip "$("${FN}_slot" "$2")"; else echo 127.0.0.1; fi ;;
      cut | cut-off | isolate | heal)  # members on hosts of their own only
        declare -F "${FN}_slot" >/dev/null || { echo "$NAME runs on one host: no links to cut" >&2; return 2; }
        member_partition "${FN}_slot" 3 "$@" ;;
      pid) cat "$m/pid" ;;
      leader)
        local n
        for n in 1 2 3; do "${FN}_is_leader" $n && { echo $n; return 0; }; done
        return 1 ;;
      kill)
        p=$(cat "$m/pid")
        [[ $p =~ ^[0-9]+$ ]] || return 0
        kill_tree "$p"
        echo "killed:$p" > "$m/pid"
        cat "$DIR/${MEMBER}1/pid" "$DIR/${MEMBER}2/pid" "$DIR/${MEMBER}3/pid" > "$RUNDIR/$NAME.pids" ;;
      start)
        "$0" exec "$2" </dev/null >/dev/null 2>&1 &
        echo $! > "$m/pid"
        cat "$DIR/${MEMBER}1/pid" "$DIR/${MEMBER}2/pid" "$DIR/${MEMBER}3/pid" > "$RUNDIR/$NAME.pids" ;;
      wait) wait_until "${3:-$WAIT}" "${FN}_ready" "$2" ;;
      *) echo "usage: $0 leader [NAME] | port N | host N | pid N | kill N | start N | wait N [S] | cut N M | cut-off N | isolate N | heal" >&2
         return 2 ;;
    esac
}

# cluster_start NAME DIR MEMBER WAIT START_WAIT [NAMES...]: writes DIR/ctl.sh (with
# WAIT seconds as its default for "wait", and the functions and variables NAMES that
# the cluster's P_ functions use), starts the three members (PIDs recorded) and
# waits START_WAIT seconds for each.
cluster_start() {
    local name=$1 dir=$2 member=$3 wait=$4 start_wait=$5 fn=${1//-/_} x n; shift 5
    {
        echo '#!/usr/bin/env bash'
        echo "# Control script of the $name servers in $dir, written by integration/backends.sh."
        echo 'set -euo pipefail'
        printf 'NAME=%q DIR=%q RUNDIR=%q RUN=%q MEMBER=%q WAIT=%q FN=%q\n' "$name" "$dir" "$RUN" "$RUN" "$member" "$wait" "$fn"
        for x in "$@"; do if declare -F "$x" >/dev/null; then declare -f "$x"; else declare -p "$x"; fi; done
        declare -p MEMBER_NET
        declare -f wait_until running tree_of kill_tree cluster_ctl member_pid member_ip member_blackhole member_cut member_isolate member_heal \
            member_partition "${fn}_member_cmd" "${fn}_port" "${fn}_is_leader" "${fn}_ready"
        if declare -F "${fn}_slot" >/dev/null; then declare -f "${fn}_slot" "${fn}_host"; fi
        echo 'cluster_ctl "$@"'
    } > "$dir/ctl.sh"
    chmod +x "$dir/ctl.sh"
    if declare -F "${fn}_slot" >/dev/null; then
        for n in 1 2 3; do member_ns_up "$("${fn}_slot" $n)" || { log "$name: cannot make member $n's namespace"; return 1; }; done
    fi
    for n in 1 2 3; do
        mkdir -p "$dir/$member$n"
        "$dir/ctl.sh" exec $n &
        echo $! > "$dir/$member$n/pid"
        record_pid "$name" $! $n
    done
    for n in 1 2 3; do
        "$dir/ctl.sh" wait $n "$start_wait" || { fail_with_log "$name member $n" "$dir/$member$n/log"; return 1; }
    done
}

# cluster_env NAME DIR VAR URL: writes VAR_URL=URL and VAR_CTL=DIR/ctl.sh to NAME's env file.
cluster_env() { printf '%s_URL=%s\n%s_CTL=%s\n' "$3" "$4" "$3" "$2/ctl.sh" > "$RUN/$1.env"; }

# cluster_hosts NAME: the members' client addresses, "127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3"
# (each member's own address when it is on a host of its own: P_host N).
cluster_hosts() {
    local n out="" fn=${1//-/_} host
    for n in 1 2 3; do
        host=127.0.0.1
        if declare -F "${fn}_host" >/dev/null; then host=$("${fn}_host" $n); fi
        out+="${out:+,}$host:$("${fn}_port" $n)"
    done
    echo "$out"
}

# write_ctl FILE MAIN NAMES...: writes (atomically: a test may be running the old one) the
# self-contained control script FILE of a multi-member server that is not a
# cluster_start cluster (redis-sentinel, redis-cluster): it runs MAIN "$@" with the
# functions and variables NAMES, the helpers wait_until, wait_serving, record_pid,
# running and kill_tree, RUN (this run dir) and DIR (FILE's folder, the server's data
# dir). It works from any process with only its path (the C++ fault tests run it).
# retry_output SECONDS CMD...: retry CMD every 0.1 s until it succeeds; print its output.
retry_output() {
    local deadline=$(( $(date +%s%N) + $1 * 1000000000 )) out; shift
    while :; do
        if out=$("$@" 2>/dev/null); then printf '%s\n' "$out"; return 0; fi
        [ "$(date +%s%N)" -lt "$deadline" ] || return 1
        sleep 0.1
    done
}

# member_of PORT NAME PORTS...: the member number (1-based) of the node on PORT among
# NAME's nodes, listed by port in member order.
member_of() {
    local port=$1 name=$2 i=1 p; shift 2
    for p in "$@"; do [ "$p" != "$port" ] || { echo $i; return 0; }; i=$((i + 1)); done
    echo "no $name node on port '$port' ($*)" >&2
    return 2
}

# port_of_member PORT|N PORTS...: member number N (1-based, among PORTS in member order)
# as its port; anything else as it is (a port).
port_of_member() {
    local a=$1; shift
    if [[ $a =~ ^[1-9][0-9]*$ ]] && [ "$a" -le $# ]; then echo "${!a}"; else echo "$a"; fi
}

write_ctl() {
    local file=$1 main=$2 x; shift 2
    {
        echo '#!/usr/bin/env bash'
        echo "# Control script of the server in $(dirname "$file"), written by integration/backends.sh."
        echo 'set -euo pipefail'
        printf 'RUN=%q DIR=%q\n' "$RUN" "$(dirname "$file")"
        for x in "$@"; do if declare -F "$x" >/dev/null; then declare -f "$x"; else declare -p "$x"; fi; done
        declare -f wait_until wait_serving serving_or_gone record_pid running tree_of kill_tree retry_output member_of port_of_member \
            "$main"
        echo "$main \"\$@\""
    } > "$file.$$"
    chmod +x "$file.$$"
    mv -f "$file.$$" "$file"
}

# TLS servers (issue 24) -------------------------------------------------------
# Their throwaway CA and certificates (integration/tls/make-ca.sh lists the files) are made
# in $RUN/tls by the first TLS server's init, shared by all of them, removed by "down".
# tls_ensure makes them unless they exist and writes $RUN/tls.env (into backends.env).
# Their URLs that must fail (expired or wrong-name certificate, TLS against plaintext and
# back) are DISTLOCK_TEST_..._URL_MUST_FAIL, not ..._URL: the tests that try every
# DISTLOCK_TEST_*_URL of the environment (tests/tools/cli_test.cpp) must not take them.
TLS_DIR=$RUN/tls
tls_ensure() {
    "$HERE/tls/make-ca.sh" "$TLS_DIR" || { log "making the test CA in $TLS_DIR failed"; return 1; }
    printf "DISTLOCK_TEST_TLS_DIR='%s'\nDISTLOCK_TEST_TLS_CA='%s'\n" "$TLS_DIR" "$TLS_DIR/ca.crt" > "$RUN/tls.env"
}

# spawn_members NAME COUNT SECONDS DIR [N]: the spawn of a server of COUNT independent
# members (the TLS servers): starts member N (each when N is omitted) with
# P_member_start DIR M (in the background, its PID recorded with record_pid), all at once,
# then waits up to SECONDS for each with P_member_ready DIR M, printing the tail of the
# log P_member_log DIR M names when one does not come up (P: NAME with '_' for '-').
spawn_members() {
    local name=$1 count=$2 seconds=$3 dir=$4 fn=${1//-/_} m members pids
    if [ -n "${5:-}" ]; then members=("$5"); else mapfile -t members < <(seq "$count"); fi
    for m in "${members[@]}"; do "${fn}_member_start" "$dir" "$m" || return 1; done
    mapfile -t pids < "$RUN/$name.pids"
    for m in "${members[@]}"; do
        wait_serving "$seconds" "${pids[m-1]}" "${fn}_member_ready" "$dir" "$m" ||
            { fail_with_log "$name member $m" "$("${fn}_member_log" "$dir" "$m")"; return 1; }
    done
}

# Settings ---------------------------------------------------------------------
# "up NAME" saves the DISTLOCK_* environment (ports, forceSync, ...) in $RUN/NAME.settings;
# "spawn NAME" and "wipe NAME" run with exactly that one, so that a server comes back
# with the ports and flags it had, whatever the caller's environment.
save_settings() {
    local v
    for v in $(compgen -e); do
        case $v in DISTLOCK_RUN_DIR|DISTLOCK_TEST_*) ;; DISTLOCK_*) declare -p "$v" ;; esac
    done > "$RUN/$1.settings"
}
cmd=${1:-}; shift || true
if [[ $cmd =~ ^(spawn|wipe)$ ]] && [ -n "${1:-}" ] && [ -f "$RUN/$1.settings" ]; then
    for v in $(compgen -e); do
        case $v in DISTLOCK_RUN_DIR|DISTLOCK_TEST_*) ;; DISTLOCK_*) unset "$v" ;; esac
    done
    # shellcheck disable=SC1090
    . "$RUN/$1.settings"
fi

# The servers that keep nothing on disk (their scripts add themselves): "wipe" says so.
NOTHING_ON_DISK=()
for f in "$HERE"/servers/*.sh; do [ -e "$f" ] && . "$f"; done
known() { for f in "$HERE"/servers/*.sh; do [ -e "$f" ] && basename "$f" .sh; done; }

# backends.env: every NAME.env, and DISTLOCK_TEST_SERVERS_CTL, this script on this run dir (for
# tests that kill and spawn a server: "$DISTLOCK_TEST_SERVERS_CTL kill mysql"); atomically, as
# commands for other servers may run meanwhile.
write_env() {
    local f
    {
        printf 'DISTLOCK_TEST_SERVERS_CTL=%q\n' "env DISTLOCK_RUN_DIR=$(printf %q "$RUN") $(printf %q "$HERE/backends.sh")"
        for f in "$RUN"/*.env; do [ -f "$f" ] && [ "$f" != "$RUN/backends.env" ] && cat "$f"; done
    } > "$RUN/backends.env.$$"
    mv -f "$RUN/backends.env.$$" "$RUN/backends.env"
}

# The servers of one run dir live in one network namespace ($RUN/netns): starting some
# in another would find the ports of that namespace (maybe another set's servers).
NETNS=$(readlink /proc/self/ns/net 2>/dev/null || echo unknown)
netns_check() {  # netns_check up|spawn
    local rec
    rec=$(cat "$RUN/netns" 2>/dev/null) || rec=$NETNS
    if [ "$rec" != "$NETNS" ] && { [ "$1" = spawn ] || compgen -G "$RUN/*.pids" >/dev/null; }; then
        log "the servers of $RUN run in network namespace $rec, this is $NETNS: run this there (ip netns exec), or use another DISTLOCK_RUN_DIR"
        exit 1
    fi
    # Rewritten only when it changes, and atomically: commands for other servers may run meanwhile.
    [ "$(cat "$RUN/netns" 2>/dev/null)" = "$NETNS" ] || { echo "$NETNS" > "$RUN/netns.$$"; mv -f "$RUN/netns.$$" "$RUN/netns"; }
}

is_cluster() { declare -F "${1//-/_}_member_cmd" >/dev/null; }
ms_since() { echo $(( ($(date +%s%N) - $1) / 1000000 )); }
die() { log "$*"; exit 1; }

# control_args NAME [N]: checks for kill/spawn/wipe; sets fn, dir, pids (the lines of
# NAME.pids) and members (N, or every member).
control_args() {
    [ -n "${1:-}" ] || { echo "usage: $0 $cmd NAME [N]" >&2; exit 2; }
    fn=${1//-/_}
    declare -F "${fn}_spawn" >/dev/null || declare -F "${fn}_start" >/dev/null ||
        { log "unknown server '$1' (known: $(known | tr '\n' ' '))"; exit 2; }
    [ -f "$RUN/$1.dir" ] && [ -f "$RUN/$1.pids" ] || die "$1 was not started in $RUN (backends.sh up $1)"
    dir=$(cat "$RUN/$1.dir")
    mapfile -t pids < "$RUN/$1.pids"
    if [ -n "${2:-}" ]; then
        [[ $2 =~ ^[1-9][0-9]*$ ]] && [ "$2" -le ${#pids[@]} ] || die "$1 has members 1..${#pids[@]}, not '$2'"
        members=("$2")
    else
        mapfile -t members < <(seq ${#pids[@]})
    fi
}

case "$cmd" in
  up)
    names=("$@")
    if [ ${#names[@]} -eq 0 ]; then
        for n in $(known); do names+=("$n"); done
    fi
    netns_check up
    for n in "${names[@]}"; do
      fn=${n//-/_}
      declare -F "${fn}_spawn" >/dev/null || declare -F "${fn}_start" >/dev/null ||
          { log "unknown server '$n' (known: $(known | tr '\n' ' '))"; exit 2; }
      if alive "$n"; then log "$n already running"; continue; fi
      stop_pids "$RUN/$n.pids"
      [ -f "$RUN/$n.dir" ] && rm -rf "$(cat "$RUN/$n.dir")"  # the data of a dead (e.g. killed) server
      "${fn}_install"
      dir=$(mktemp -d "/tmp/distlock-$n.XXXXXX"); echo "$dir" > "$RUN/$n.dir"
      rm -f "$RUN/$n.env"
      save_settings "$n"
      t0=$(date +%s%N)
      if declare -F "${fn}_init" >/dev/null; then
          "${fn}_init" "$dir" && "${fn}_spawn" "$dir" || { stop_pids "$RUN/$n.pids"; exit 1; }
      else
          "${fn}_start" "$dir" || { stop_pids "$RUN/$n.pids"; exit 1; }
      fi
      log "$n up in $(ms_since "$t0") ms"
    done
    write_env ;;
  down)
    for f in "$RUN"/*.pids; do
      [ -e "$f" ] || continue
      n=$(basename "$f" .pids); fn=${n//-/_}
      sig=TERM; declare -F "${fn}_stop_signal" >/dev/null && sig=$("${fn}_stop_signal")
      stop_pids "$f" "$sig"
      [ -f "$RUN/$n.dir" ] && rm -rf "$(cat "$RUN/$n.dir")" "$RUN/$n.dir"
      rm -f "$RUN/$n.env" "$RUN/$n.settings"
    done
    # The namespaces of members on hosts of their own (and with the last, the bridge).
    for f in "$RUN"/netns.*; do [ -e "$f" ] && member_ns_down "${f##*/netns.}"; done
    rm -rf "$RUN/netns" "$TLS_DIR" "$RUN/tls.env"
    write_env ;;
  kill)
    control_args "$@"; name=$1
    t0=$(date +%s%N)
    for m in "${members[@]}"; do
      if is_cluster "$name"; then
        "$dir/ctl.sh" kill "$m"
      elif running "${pids[m-1]}"; then
        kill_tree "${pids[m-1]}"
        record_pid "$name" "killed:${pids[m-1]}" "$m"
      fi
    done
    log "$name${2:+ member $2} killed in $(ms_since "$t0") ms" ;;
  spawn)
    control_args "$@"; name=$1
    netns_check spawn
    todo=()
    for m in "${members[@]}"; do
      if running "${pids[m-1]}"; then log "$name member $m is running (PID ${pids[m-1]})"; else todo+=("$m"); fi
    done
    [ ${#todo[@]} -gt 0 ] || exit 0
    # spawn_failed WHAT: kill what this spawn started (the server stays down) and fail.
    spawn_failed() {
      log "$1"
      mapfile -t pids < "$RUN/$name.pids"
      for m in "${todo[@]}"; do
        running "${pids[m-1]}" || continue
        if is_cluster "$name"; then "$dir/ctl.sh" kill "$m"; else kill_tree "${pids[m-1]}"; record_pid "$name" "killed:${pids[m-1]}" "$m"; fi
      done
      exit 1
    }
    t0=$(date +%s%N)
    if is_cluster "$name"; then
      for m in "${todo[@]}"; do "$dir/ctl.sh" start "$m"; done
      for m in "${todo[@]}"; do "$dir/ctl.sh" wait "$m" || spawn_failed "$name member $m does not answer (logs in $dir)"; done
    else
      for m in "${todo[@]}"; do "${fn}_spawn" "$dir" "$m" || spawn_failed "$name member $m did not start"; done
    fi
    mapfile -t pids < "$RUN/$name.pids"
    for m in "${todo[@]}"; do
      running "${pids[m-1]}" || spawn_failed "$name member $m (PID ${pids[m-1]}) exited although its port answers: is another server on it?"
    done
    write_env
    log "$name${2:+ member $2} spawned in $(ms_since "$t0") ms" ;;
  wipe)
    [ -z "${2:-}" ] || { echo "usage: $0 wipe NAME" >&2; exit 2; }
    control_args "$@"; name=$1
    ! is_cluster "$name" || die "wipe of a cluster ($name) is not supported: backends.sh down, then up"
    for p in "${pids[@]}"; do ! running "$p" || die "$name is running (PID $p): backends.sh kill $name first"; done
    if [[ " ${NOTHING_ON_DISK[*]} " == *" $name "* ]]; then
      log "$name keeps nothing on disk (no persistence): nothing to wipe, a spawned $name starts empty anyway"
    else
      t0=$(date +%s%N)
      "${fn}_init" "$dir" || die "$name: initialising $dir failed"
      log "$name wiped and initialised in $(ms_since "$t0") ms"
    fi ;;
  env) write_env; cat "$RUN/backends.env" ;;
  list) known ;;
  *) echo "usage: $0 up [NAMES...] | down | env | list | kill NAME [N] | spawn NAME [N] | wipe NAME" >&2; exit 2 ;;
esac
