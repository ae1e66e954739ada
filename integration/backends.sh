#!/usr/bin/env bash
# Real servers for the tests, natively on loopback (no Docker engine here).
#
#   integration/backends.sh up [NAMES...]   start (all known when no names), wait until each answers
#   integration/backends.sh down            stop every server this script started, by PID
#   integration/backends.sh env             print integration/.run/backends.env
#   integration/backends.sh list            the server names this script knows
#
# Each server lives in integration/servers/<name>.sh, which defines:
#   <name>_install            install its Debian packages if missing (apt-get, as root)
#   <name>_start <dir>        start it in <dir> (a fresh temp dir) as background children, appending
#                             each PID to "$RUN/<name>.pids"; print DISTLOCK_TEST_..._URL=... lines to
#                             "$RUN/<name>.env"; return non-zero with the log tail printed on failure
# "up" is idempotent: a server whose PIDs are all alive is left alone.
# Function names use '_' for '-' in server names (zk-ensemble -> zk_ensemble_start).
# A three-member cluster (etcd-cluster, zk-ensemble) starts through cluster_start
# below, which also writes its control script for the fault tests.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
RUN="$HERE/.run"
export RUN
mkdir -p "$RUN"

log() { echo "[backends] $*" >&2; }

# Shared helpers for the server scripts ---------------------------------------
apt_ensure() {  # apt_ensure PKG... : install the missing ones
    local missing=()
    for p in "$@"; do dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p"); done
    [ ${#missing[@]} -eq 0 ] && return 0
    log "installing ${missing[*]}"
    if [ ! -f "$RUN/.apt-updated" ]; then apt-get update -q >/dev/null && touch "$RUN/.apt-updated"; fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
}
wait_until() {  # wait_until SECONDS CMD... : retry CMD every 0.1 s
    local deadline=$(( $(date +%s%N) + $1 * 1000000000 )); shift
    until "$@" >/dev/null 2>&1; do
        [ "$(date +%s%N)" -lt "$deadline" ] || return 1
        sleep 0.1
    done
}
record_pid() { echo "$2" >> "$RUN/$1.pids"; }
alive() { [ -f "$RUN/$1.pids" ] || return 1; local p; while read -r p; do kill -0 "$p" 2>/dev/null || return 1; done < "$RUN/$1.pids"; }
stop_pids() {  # stop_pids FILE: TERM (INT for postgres-style servers via <name>_stop_signal), then KILL after 15 s
    local file=$1 sig=${2:-TERM} p
    [ -f "$file" ] || return 0
    while read -r p; do kill -"$sig" "$p" 2>/dev/null || true; done < "$file"
    while read -r p; do
        for _ in $(seq 150); do
            kill -0 "$p" 2>/dev/null || break
            [ "$(ps -o stat= -p "$p" 2>/dev/null | cut -c1)" = "Z" ] && break
            sleep 0.1
        done
        kill -KILL "$p" 2>/dev/null || true
    done < "$file"
    rm -f "$file"
}
fail_with_log() { log "$1 failed to start; last lines of $2:"; tail -n 25 "$2" >&2 || true; return 1; }

# Three-member clusters --------------------------------------------------------
# The script of a cluster NAME (functions P_..., P = NAME with '_' for '-') defines
#   P_member_cmd N   member N's command line (called in ctl.sh, where $DIR is the cluster's dir)
#   P_port N         member N's client port
#   P_is_leader N    true when member N says it is the leader
#   P_ready N        true when member N serves
# and starts through cluster_start, which writes DIR/ctl.sh for the fault tests:
#   ctl.sh leader        the number (1-3) of the current leader
#   ctl.sh port N        client port of member N
#   ctl.sh pid N         PID of member N
#   ctl.sh kill N        SIGKILL member N
#   ctl.sh start N       start member N again on its data (in the background, PID
#                        recorded where "backends.sh down" finds it)
#   ctl.sh wait N [S]    wait S seconds (default: the cluster's) until member N serves
#   ctl.sh exec N        replace itself by member N (so that "ctl.sh exec N &" gives its PID)
# Member N keeps its pid file and log in DIR/<member prefix>N.

# The body of every ctl.sh; its settings (NAME DIR RUNDIR MEMBER WAIT FN) come first.
# shellcheck disable=SC2153  # those settings are ctl.sh's globals
cluster_ctl() {
    local m="$DIR/$MEMBER${2:-}"
    case "${1:-}" in
      exec) exec $("${FN}_member_cmd" "$2") </dev/null >>"$m/log" 2>&1 ;;
      port) "${FN}_port" "$2" ;;
      pid) cat "$m/pid" ;;
      leader)
        local n
        for n in 1 2 3; do "${FN}_is_leader" $n && { echo $n; return 0; }; done
        return 1 ;;
      kill) kill -KILL "$(cat "$m/pid")" 2>/dev/null || true ;;
      start)
        "$0" exec "$2" </dev/null >/dev/null 2>&1 &
        echo $! > "$m/pid"
        cat "$DIR/${MEMBER}1/pid" "$DIR/${MEMBER}2/pid" "$DIR/${MEMBER}3/pid" > "$RUNDIR/$NAME.pids" ;;
      wait) wait_until "${3:-$WAIT}" "${FN}_ready" "$2" ;;
      *) echo "usage: $0 leader | port N | pid N | kill N | start N | wait N [S]" >&2; return 2 ;;
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
        printf 'NAME=%q DIR=%q RUNDIR=%q MEMBER=%q WAIT=%q FN=%q\n' "$name" "$dir" "$RUN" "$member" "$wait" "$fn"
        for x in "$@"; do if declare -F "$x" >/dev/null; then declare -f "$x"; else declare -p "$x"; fi; done
        declare -f wait_until cluster_ctl "${fn}_member_cmd" "${fn}_port" "${fn}_is_leader" "${fn}_ready"
        echo 'cluster_ctl "$@"'
    } > "$dir/ctl.sh"
    chmod +x "$dir/ctl.sh"
    for n in 1 2 3; do
        mkdir -p "$dir/$member$n"
        "$dir/ctl.sh" exec $n &
        echo $! > "$dir/$member$n/pid"
        record_pid "$name" $!
    done
    for n in 1 2 3; do
        "$dir/ctl.sh" wait $n "$start_wait" || { fail_with_log "$name member $n" "$dir/$member$n/log"; return 1; }
    done
}

# cluster_env NAME DIR VAR URL: writes VAR_URL=URL and VAR_CTL=DIR/ctl.sh to NAME's env file.
cluster_env() { printf '%s_URL=%s\n%s_CTL=%s\n' "$3" "$4" "$3" "$2/ctl.sh" > "$RUN/$1.env"; }

# cluster_hosts NAME: the members' client addresses, "127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3".
cluster_hosts() { local n out=""; for n in 1 2 3; do out+="${out:+,}127.0.0.1:$("${1//-/_}_port" $n)"; done; echo "$out"; }

for f in "$HERE"/servers/*.sh; do [ -e "$f" ] && . "$f"; done
known() { for f in "$HERE"/servers/*.sh; do [ -e "$f" ] && basename "$f" .sh; done; }

write_env() { cat "$RUN"/*.env 2>/dev/null > "$RUN/backends.env" || : > "$RUN/backends.env"; }

cmd=${1:-}; shift || true
case "$cmd" in
  up)
    names=("$@"); [ ${#names[@]} -gt 0 ] || mapfile -t names < <(known)
    for n in "${names[@]}"; do
      fn=${n//-/_}
      declare -F "${fn}_start" >/dev/null || { log "unknown server '$n' (known: $(known | tr '\n' ' '))"; exit 2; }
      if alive "$n"; then log "$n already running"; continue; fi
      stop_pids "$RUN/$n.pids"
      "${fn}_install"
      dir=$(mktemp -d "/tmp/distlock-$n.XXXXXX"); echo "$dir" > "$RUN/$n.dir"
      rm -f "$RUN/$n.env"
      t0=$(date +%s%N)
      "${fn}_start" "$dir" || { stop_pids "$RUN/$n.pids"; exit 1; }
      log "$n up in $(( ($(date +%s%N) - t0) / 1000000 )) ms"
    done
    write_env ;;
  down)
    for f in "$RUN"/*.pids; do
      [ -e "$f" ] || continue
      n=$(basename "$f" .pids); fn=${n//-/_}
      sig=TERM; declare -F "${fn}_stop_signal" >/dev/null && sig=$("${fn}_stop_signal")
      stop_pids "$f" "$sig"
      [ -f "$RUN/$n.dir" ] && rm -rf "$(cat "$RUN/$n.dir")" "$RUN/$n.dir"
      rm -f "$RUN/$n.env"
    done
    write_env ;;
  env) write_env; cat "$RUN/backends.env" ;;
  list) known ;;
  *) echo "usage: $0 up [NAMES...] | down | env | list" >&2; exit 2 ;;
esac
