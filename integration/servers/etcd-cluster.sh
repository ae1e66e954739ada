# A three-member etcd 3.4 cluster on loopback for the etcd:// fault tests:
# client ports 12579, 12581, 12583, peer ports 12580, 12582, 12584 (12479-12483
# are the ZooKeeper ensemble's), fast election flags. Writes
#   DISTLOCK_TEST_ETCD_CLUSTER_URL  etcd://all three/distlock-tests?lease=2s
#   DISTLOCK_TEST_ETCD_CLUSTER_CTL  a control script for fault tests:
#       ctl.sh leader        the number (1-3) of the current leader
#       ctl.sh port N        client port of member N
#       ctl.sh pid N         PID of member N
#       ctl.sh kill N        SIGKILL member N
#       ctl.sh start N       start member N again on its data (in the background,
#                            PID recorded where integration/backends.sh down finds it)
#       ctl.sh wait N [S]    wait (S seconds, default 30) until member N is healthy
# Needs etcd.sh (sourced first: etcd_cmd, etcd_healthy).
ETCD_CLUSTER_BASE=${DISTLOCK_ETCD_CLUSTER_BASE:-12577}

etcd_cluster_install() { etcd_install; }

etcd_cluster_client_port() { echo $((ETCD_CLUSTER_BASE + 2 * $1)); }
etcd_cluster_peer_port() { echo $((ETCD_CLUSTER_BASE + 2 * $1 + 1)); }

etcd_cluster_start() {
    local dir=$1 n initial=""
    for n in 1 2 3; do
        initial+="${initial:+,}m$n=http://127.0.0.1:$(etcd_cluster_peer_port $n)"
    done
    # The control script; "exec N" replaces itself by member N, so that
    # "ctl.sh exec N &" gives the member's own PID.
    cat > "$dir/ctl.sh" <<CTL
#!/usr/bin/env bash
set -euo pipefail
DIR='$dir'; RUNDIR='$RUN'; BASE=$ETCD_CLUSTER_BASE; INITIAL='$initial'
$(declare -f etcd_cmd etcd_healthy etcd_cluster_client_port etcd_cluster_peer_port)
ETCD_CLUSTER_BASE=\$BASE
status() { curl -sf --max-time 1 -XPOST "http://127.0.0.1:\$(etcd_cluster_client_port \$1)/v3/maintenance/status" -d '{}'; }
field() { sed -n "s/.*\"\$1\":\"\\([0-9]*\\)\".*/\\1/p"; }
case "\${1:-}" in
  exec) state=new; [ -d "\$DIR/m\$2/data/member" ] && state=existing
        exec \$(etcd_cmd m\$2 "\$DIR/m\$2/data" \$(etcd_cluster_client_port \$2) \$(etcd_cluster_peer_port \$2) "\$INITIAL" \$state) </dev/null >>"\$DIR/m\$2/log" 2>&1 ;;
  port) etcd_cluster_client_port "\$2" ;;
  pid) cat "\$DIR/m\$2/pid" ;;
  leader)
    for n in 1 2 3; do
      s=\$(status \$n) || continue
      id=\$(echo "\$s" | sed -n 's/.*"member_id":"\([0-9]*\)".*/\1/p')
      leader=\$(echo "\$s" | sed -n 's/.*"leader":"\([0-9]*\)".*/\1/p')
      [ -n "\$id" ] && [ "\$id" = "\$leader" ] && { echo \$n; exit 0; }
    done
    exit 1 ;;
  kill) kill -KILL "\$(cat "\$DIR/m\$2/pid")" 2>/dev/null || true ;;
  start)
    "\$0" exec "\$2" </dev/null >/dev/null 2>&1 &
    echo \$! > "\$DIR/m\$2/pid"
    cat "\$DIR"/m1/pid "\$DIR"/m2/pid "\$DIR"/m3/pid > "\$RUNDIR/etcd-cluster.pids" ;;
  wait)
    deadline=\$(( \$(date +%s) + \${3:-30} ))
    until etcd_healthy \$(etcd_cluster_client_port \$2); do
      [ \$(date +%s) -lt \$deadline ] || exit 1
      sleep 0.1
    done ;;
  *) echo "usage: \$0 leader | port N | pid N | kill N | start N | wait N [S]" >&2; exit 2 ;;
esac
CTL
    chmod +x "$dir/ctl.sh"
    for n in 1 2 3; do
        mkdir -p "$dir/m$n"
        "$dir/ctl.sh" exec $n &
        echo $! > "$dir/m$n/pid"
        record_pid etcd-cluster $!
    done
    for n in 1 2 3; do
        "$dir/ctl.sh" wait $n 60 || { fail_with_log "etcd cluster member $n" "$dir/m$n/log"; return 1; }
    done
    local hosts="127.0.0.1:$(etcd_cluster_client_port 1),127.0.0.1:$(etcd_cluster_client_port 2),127.0.0.1:$(etcd_cluster_client_port 3)"
    {
        echo "DISTLOCK_TEST_ETCD_CLUSTER_URL=etcd://$hosts/distlock-tests?lease=2s"
        echo "DISTLOCK_TEST_ETCD_CLUSTER_CTL=$dir/ctl.sh"
    } > "$RUN/etcd-cluster.env"
}
