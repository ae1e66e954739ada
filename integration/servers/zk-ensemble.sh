# A three-server ZooKeeper 3.8 ensemble for the zk:// tests, each server on a
# host of its own (a network namespace, 10.199.0.21-23: see member_ns_up in
# backends.sh), so that the partition nemesis can cut the links between them:
# client ports 12281-12283, quorum ports 12381-12383, election ports 12481-12483,
# tickTime=200 (sessions of 400 ms .. 4 s). Writes
#   DISTLOCK_TEST_ZK_ENSEMBLE_URL  zk://all three/distlock-tests?session_timeout=2s
#   DISTLOCK_TEST_ZK_ENSEMBLE_CTL  the control script for fault tests (leader,
#                                  port N, pid N, kill N, start N, wait N [S],
#                                  default 60 s: see cluster_start in backends.sh),
#                                  which "backends.sh kill/spawn zk-ensemble [N]" use
# Needs zookeeper.sh (sourced first: zk_java_cmd, zk_mode, zk_serving).
ZK_ENSEMBLE_CLIENT_BASE=${DISTLOCK_ZK_ENSEMBLE_CLIENT_BASE:-12280}

zk_ensemble_install() { zookeeper_install; apt_ensure iproute2; }  # ip: its members' hosts

zk_ensemble_port() { echo $((ZK_ENSEMBLE_CLIENT_BASE + $1)); }
zk_ensemble_slot() { echo $((20 + $1)); }                  # server N's host: 10.199.0.<20+N>
zk_ensemble_host() { member_ip "$(zk_ensemble_slot "$1")"; }
# In ctl.sh: server N with its zoo.cfg.
zk_ensemble_member_cmd() { zk_java_cmd org.apache.zookeeper.server.quorum.QuorumPeerMain "$DIR/s$1/zoo.cfg"; }
zk_ensemble_is_leader() { [ "$(zk_mode "$(zk_ensemble_port "$1")" "$(zk_ensemble_host "$1")")" = leader ]; }
zk_ensemble_ready() { zk_serving "$(zk_ensemble_port "$1")" 'leader|follower' "$(zk_ensemble_host "$1")"; }

zk_ensemble_start() {
    local dir=$1 n
    local servers=""
    for n in 1 2 3; do
        servers+="server.$n=$(zk_ensemble_host $n):$((ZK_ENSEMBLE_CLIENT_BASE + 100 + n)):$((ZK_ENSEMBLE_CLIENT_BASE + 200 + n))"$'\n'
    done
    for n in 1 2 3; do
        mkdir -p "$dir/s$n/data"
        echo "$n" > "$dir/s$n/data/myid"
        cat > "$dir/s$n/zoo.cfg" <<CFG
tickTime=200
initLimit=10
syncLimit=5
dataDir=$dir/s$n/data
clientPort=$(zk_ensemble_port $n)
clientPortAddress=$(zk_ensemble_host $n)
admin.enableServer=false
4lw.commands.whitelist=*
maxClientCnxns=0
forceSync=${DISTLOCK_ZK_FORCE_SYNC:-yes}
$servers
CFG
    done
    cluster_start zk-ensemble "$dir" s 60 90 ZK_ENSEMBLE_CLIENT_BASE zk_java_cmd zk_mode zk_serving || return 1
    cluster_env zk-ensemble "$dir" DISTLOCK_TEST_ZK_ENSEMBLE "zk://$(cluster_hosts zk-ensemble)/distlock-tests?session_timeout=2s"
}
