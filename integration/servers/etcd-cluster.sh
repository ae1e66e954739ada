# A three-member etcd 3.4 cluster for the etcd:// fault tests, each member on a
# host of its own (a network namespace, 10.199.0.11-13: see member_ns_up in
# backends.sh), so that the partition nemesis can cut the links between them:
# client ports 12579, 12581, 12583, peer ports 12580, 12582, 12584 (12479-12483
# are the ZooKeeper ensemble's), fast election flags. Writes
#   DISTLOCK_TEST_ETCD_CLUSTER_URL  etcd://all three/distlock-tests?lease=2s
#   DISTLOCK_TEST_ETCD_CLUSTER_CTL  the control script for fault tests (leader,
#                                   port N, pid N, kill N, start N, wait N [S],
#                                   default 30 s: see cluster_start in backends.sh),
#                                   which "backends.sh kill/spawn etcd-cluster [N]" use
# Needs etcd.sh (sourced first: etcd_cmd, etcd_healthy).
ETCD_CLUSTER_BASE=${DISTLOCK_ETCD_CLUSTER_BASE:-12577}

etcd_cluster_install() { etcd_install; apt_ensure iproute2; }  # ip: its members' hosts

etcd_cluster_port() { echo $((ETCD_CLUSTER_BASE + 2 * $1)); }
etcd_cluster_peer_port() { echo $((ETCD_CLUSTER_BASE + 2 * $1 + 1)); }
etcd_cluster_slot() { echo $((10 + $1)); }                      # member N's host: 10.199.0.<10+N>
etcd_cluster_host() { member_ip "$(etcd_cluster_slot "$1")"; }

# In ctl.sh: member N on its data dir (joining the existing cluster once it has one).
etcd_cluster_member_cmd() {
    local n initial="" state=new
    for n in 1 2 3; do initial+="${initial:+,}m$n=http://$(etcd_cluster_host $n):$(etcd_cluster_peer_port $n)"; done
    [ -d "$DIR/m$1/data/member" ] && state=existing
    etcd_cmd "m$1" "$DIR/m$1/data" "$(etcd_cluster_port "$1")" "$(etcd_cluster_peer_port "$1")" "$initial" $state \
        "$(etcd_cluster_host "$1")"
}

etcd_cluster_is_leader() {
    local s id leader
    s=$(curl -sf --max-time 1 -XPOST "http://$(etcd_cluster_host "$1"):$(etcd_cluster_port "$1")/v3/maintenance/status" -d '{}') ||
        return 1
    id=$(echo "$s" | sed -n 's/.*"member_id":"\([0-9]*\)".*/\1/p')
    leader=$(echo "$s" | sed -n 's/.*"leader":"\([0-9]*\)".*/\1/p')
    [ -n "$id" ] && [ "$id" = "$leader" ]
}

etcd_cluster_ready() { etcd_healthy "$(etcd_cluster_port "$1")" "$(etcd_cluster_host "$1")"; }

etcd_cluster_start() {
    cluster_start etcd-cluster "$1" m 30 60 ETCD_CLUSTER_BASE etcd_cluster_peer_port etcd_cmd etcd_healthy || return 1
    cluster_env etcd-cluster "$1" DISTLOCK_TEST_ETCD_CLUSTER "etcd://$(cluster_hosts etcd-cluster)/distlock-tests?lease=2s"
}
