# A three-server ZooKeeper 3.8 ensemble on loopback for the zk:// tests: client
# ports 12281-12283, quorum ports 12381-12383, election ports 12481-12483,
# tickTime=200 (sessions of 400 ms .. 4 s). Writes
#   DISTLOCK_TEST_ZK_ENSEMBLE_URL  zk://all three/distlock-tests?session_timeout=2s
#   DISTLOCK_TEST_ZK_ENSEMBLE_CTL  a control script for fault tests:
#       ctl.sh leader        the number (1-3) of the current leader
#       ctl.sh pid N         PID of server N
#       ctl.sh kill N        SIGKILL server N
#       ctl.sh start N       start server N again (in the background, PID recorded
#                            where integration/backends.sh down finds it)
#       ctl.sh wait N [S]    wait (S seconds, default 60) until server N serves
# Needs zookeeper.sh (sourced first: zk_java_cmd, zk_serving).
ZK_ENSEMBLE_CLIENT_BASE=${DISTLOCK_ZK_ENSEMBLE_CLIENT_BASE:-12280}

zk_ensemble_install() { zookeeper_install; }

zk_ensemble_start() {
    local dir=$1 n
    local servers=""
    for n in 1 2 3; do
        servers+="server.$n=127.0.0.1:$((ZK_ENSEMBLE_CLIENT_BASE + 100 + n)):$((ZK_ENSEMBLE_CLIENT_BASE + 200 + n))"$'\n'
    done
    for n in 1 2 3; do
        mkdir -p "$dir/s$n/data"
        echo "$n" > "$dir/s$n/data/myid"
        cat > "$dir/s$n/zoo.cfg" <<CFG
tickTime=200
initLimit=10
syncLimit=5
dataDir=$dir/s$n/data
clientPort=$((ZK_ENSEMBLE_CLIENT_BASE + n))
clientPortAddress=127.0.0.1
admin.enableServer=false
4lw.commands.whitelist=*
maxClientCnxns=0
forceSync=${DISTLOCK_ZK_FORCE_SYNC:-yes}
$servers
CFG
    done
    # The control script; "exec N" replaces itself by server N, so that "ctl.sh exec N &"
    # gives the server's own PID.
    cat > "$dir/ctl.sh" <<CTL
#!/usr/bin/env bash
set -euo pipefail
DIR='$dir'; RUNDIR='$RUN'; BASE=$ZK_ENSEMBLE_CLIENT_BASE
$(declare -f zk_java_cmd zk_mode zk_serving)
port() { echo \$((BASE + \$1)); }
case "\${1:-}" in
  exec) exec \$(zk_java_cmd org.apache.zookeeper.server.quorum.QuorumPeerMain "\$DIR/s\$2/zoo.cfg") </dev/null >>"\$DIR/s\$2/log" 2>&1 ;;
  pid) cat "\$DIR/s\$2/pid" ;;
  leader) for n in 1 2 3; do [ "\$(zk_mode \$(port \$n))" = leader ] && { echo \$n; exit 0; }; done; exit 1 ;;
  kill) kill -KILL "\$(cat "\$DIR/s\$2/pid")" 2>/dev/null || true ;;
  start)
    "\$0" exec "\$2" </dev/null >/dev/null 2>&1 &
    echo \$! > "\$DIR/s\$2/pid"
    cat "\$DIR"/s1/pid "\$DIR"/s2/pid "\$DIR"/s3/pid > "\$RUNDIR/zk-ensemble.pids" ;;
  wait)
    deadline=\$(( \$(date +%s) + \${3:-60} ))
    until zk_serving \$(port \$2) 'leader|follower'; do
      [ \$(date +%s) -lt \$deadline ] || exit 1
      sleep 0.1
    done ;;
  *) echo "usage: \$0 leader | pid N | kill N | start N | wait N [S]" >&2; exit 2 ;;
esac
CTL
    chmod +x "$dir/ctl.sh"
    for n in 1 2 3; do
        "$dir/ctl.sh" exec $n &
        echo $! > "$dir/s$n/pid"
        record_pid zk-ensemble $!
    done
    for n in 1 2 3; do
        "$dir/ctl.sh" wait $n 90 || { fail_with_log "zookeeper ensemble server $n" "$dir/s$n/log"; return 1; }
    done
    local hosts="127.0.0.1:$((ZK_ENSEMBLE_CLIENT_BASE + 1)),127.0.0.1:$((ZK_ENSEMBLE_CLIENT_BASE + 2)),127.0.0.1:$((ZK_ENSEMBLE_CLIENT_BASE + 3))"
    {
        echo "DISTLOCK_TEST_ZK_ENSEMBLE_URL=zk://$hosts/distlock-tests?session_timeout=2s"
        echo "DISTLOCK_TEST_ZK_ENSEMBLE_CTL=$dir/ctl.sh"
    } > "$RUN/zk-ensemble.env"
}
