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
