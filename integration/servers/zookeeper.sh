# ZooKeeper 3.8 standalone for the zk:// backend tests: client port 12181 on
# loopback, tickTime=200 so that sessions as short as 400 ms can be negotiated
# (the server allows 2..20 ticks: 400 ms .. 4 s), every four-letter-word command
# enabled (the tests read wchs/mntr/srvr), no per-IP connection limit (the herd
# test opens 100+ sessions). Sourced by integration/backends.sh, which provides
# apt_ensure, wait_serving, record_pid and fail_with_log. Data in DIR/data (zoo.cfg
# in DIR): "backends.sh spawn zookeeper" restarts on it (and writes the new PID to
# DISTLOCK_TEST_ZK_PID), "wipe" empties it.
#
# DISTLOCK_ZK_FORCE_SYNC=yes|no (default yes) is the server's forceSync: fsync of
# the transaction log on every write (benchmarks say which one they used).
ZK_PORT=${DISTLOCK_ZK_PORT:-12181}

# Empty CONTAINER nodes are removed every 500 ms instead of every minute, so that
# the tests see lock paths come and go (and sequences restart).
zk_java_cmd() {  # zk_java_cmd MAINCLASS CFG: the server's command line
    echo java -Xmx256m -XX:+UseSerialGC -Dznode.container.checkIntervalMs=500 \
        -cp /usr/share/java/zookeeper.jar "$1" "$2"
}

# zk_mode PORT [HOST]: the "Mode:" line of srvr (standalone, leader, follower) or nothing.
zk_mode() { { echo srvr | nc -w1 "${2:-127.0.0.1}" "$1" 2>/dev/null || true; } | sed -n 's/^Mode: //p'; }
# zk_serving PORT [MODES] [HOST]: the server answers srvr in one of MODES (a regex alternation).
zk_serving() { local m; m=$(zk_mode "$1" "${3:-}"); [ -n "$m" ] && [[ "$m" =~ ^(${2:-standalone|leader|follower})$ ]]; }

zookeeper_install() { apt_ensure zookeeper netcat-openbsd default-jre-headless; }

zookeeper_init() {  # zookeeper_init DIR: DIR/zoo.cfg and an empty DIR/data
    local dir=$1
    rm -rf "$dir/data"
    mkdir -p "$dir/data"
    cat > "$dir/zoo.cfg" <<CFG
tickTime=200
dataDir=$dir/data
clientPort=$ZK_PORT
clientPortAddress=127.0.0.1
admin.enableServer=false
4lw.commands.whitelist=*
maxClientCnxns=0
forceSync=${DISTLOCK_ZK_FORCE_SYNC:-yes}
CFG
}

zookeeper_spawn() {  # zookeeper_spawn DIR: the server of DIR/zoo.cfg
    local dir=$1
    # shellcheck disable=SC2046
    $(zk_java_cmd org.apache.zookeeper.server.ZooKeeperServerMain "$dir/zoo.cfg") </dev/null >>"$dir/log" 2>&1 &
    local pid=$!
    record_pid zookeeper $pid
    wait_serving 60 $pid zk_serving "$ZK_PORT" standalone || { fail_with_log zookeeper "$dir/log"; return 1; }
    # The anonymous tests' base path, open and persistent before any test runs:
    # zk:// with credentials makes a missing base path persistent and its own
    # (acl=creator), which would shut the anonymous tests out of it for good.
    /usr/share/zookeeper/bin/zkCli.sh -server "127.0.0.1:$ZK_PORT" create /distlock-tests </dev/null >/dev/null 2>&1 || true
    {
        echo "DISTLOCK_TEST_ZK_URL=zk://127.0.0.1:$ZK_PORT/distlock-tests?session_timeout=2s"
        # The conformance suite with digest credentials (acl=creator), under a
        # base path of that identity's.
        echo "DISTLOCK_TEST_ZK_ACL_URL=zk://dl-conformance:conformance-pw@127.0.0.1:$ZK_PORT/distlock-acl-tests?session_timeout=2s"
        echo "DISTLOCK_TEST_ZK_4LW=127.0.0.1:$ZK_PORT"
        echo "DISTLOCK_TEST_ZK_PID=$pid"  # fault tests freeze it with SIGSTOP (and always SIGCONT it)
    } > "$RUN/zookeeper.env"
}
