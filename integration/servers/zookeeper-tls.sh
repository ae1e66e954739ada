# zookeeper-tls: ZooKeeper 3.8 standalone with only a TLS client port (secureClientPort,
# Netty) and a local TLS tunnel to it (issue 24): Debian 12's C client has no TLS, so
# the supported way to encrypt zk:// today is a tunnel whose plaintext end is on the
# client's host. Sourced by integration/backends.sh; uses zk_java_cmd, zk_serving and
# zookeeper_install of zookeeper.sh. Certificates of integration/tls/make-ca.sh
# ($RUN/tls: server.p12 as the key store; no client certificates asked for).
#
# Members (lines of zookeeper-tls.pids):
#   1  the server, TLS on 127.0.0.1:12191 only (tickTime 200 like zookeeper.sh); data in
#      DIR/data, kept by kill/spawn
#   2  the tunnel: socat listening on 127.0.0.1:12192 (plaintext, loopback), one TLS
#      connection to 12191 per client, verifying the server against ca.crt and 127.0.0.1,
#      TCP_NODELAY on both sides
# Member 1 is ready when srvr over TLS (openssl s_client, verifying the server) says
# standalone, member 2 when srvr through the tunnel does.
# Env ($RUN/zookeeper-tls.env):
#   DISTLOCK_TEST_ZK_TLS_TUNNEL_URL   zk://127.0.0.1:12192/distlock-tests?session_timeout=2s
#   DISTLOCK_TEST_ZK_PLAIN_ON_TLS_URL_MUST_FAIL zk://127.0.0.1:12191/distlock-tests?session_timeout=2s
#                                     (the C client straight to the TLS port: must fail)
#   DISTLOCK_TEST_ZK_TLS_4LW          127.0.0.1:12192 (four-letter words through the tunnel)
ZK_TLS_PORT=12191
ZK_TLS_TUNNEL_PORT=12192

zookeeper_tls_install() { zookeeper_install; apt_ensure socat openssl; }

zookeeper_tls_init() {  # zookeeper_tls_init DIR: zookeeper.sh's DIR/zoo.cfg with the TLS port only, empty DIR/data
    local dir=$1
    tls_ensure && zookeeper_init "$dir" || return 1
    sed -i "s/^clientPort=.*/secureClientPort=$ZK_TLS_PORT/; s/^clientPortAddress=/secureClientPortAddress=/" "$dir/zoo.cfg"
}

# The TLS settings are system properties (zookeeper.*); Netty's codec and resolver are not in
# the Class-Path of Debian's zookeeper.jar.
zk_tls_server_cmd() {
    local cmd
    cmd=$(zk_java_cmd org.apache.zookeeper.server.ZooKeeperServerMain "$1/zoo.cfg")
    cmd=${cmd/ -cp \/usr\/share\/java\/zookeeper.jar / -cp /usr/share/java/zookeeper.jar:/usr/share/java/netty-codec.jar:/usr/share/java/netty-resolver.jar }
    echo "java -Dzookeeper.serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory" \
        "-Dzookeeper.ssl.keyStore.location=$TLS_DIR/server.p12 -Dzookeeper.ssl.keyStore.password=distlock-tls" \
        "-Dzookeeper.ssl.keyStore.type=PKCS12 -Dzookeeper.ssl.clientAuth=none ${cmd#java }"
}

# zk_tls_serving: srvr straight to the TLS port says standalone (openssl s_client waits for
# the server to close, which it does after a four-letter word's answer).
zk_tls_serving() {
    echo srvr | timeout 3 openssl s_client -quiet -ign_eof -connect "127.0.0.1:$ZK_TLS_PORT" -CAfile "$TLS_DIR/ca.crt" \
        -verify_return_error -verify_ip 127.0.0.1 2>/dev/null | grep -q '^Mode: standalone'
}

zookeeper_tls_member_log() { if [ "$2" = 1 ]; then echo "$1/log"; else echo "$1/tunnel.log"; fi; }
zookeeper_tls_member_ready() {
    if [ "$2" = 1 ]; then zk_tls_serving; else zk_serving "$ZK_TLS_TUNNEL_PORT" standalone; fi
}
zookeeper_tls_member_start() {  # zookeeper_tls_member_start DIR N: start member N in the background
    local dir=$1
    if [ "$2" = 1 ]; then
        # shellcheck disable=SC2046,SC2091  # the command line of zk_tls_server_cmd, run
        $(zk_tls_server_cmd "$dir") </dev/null >>"$dir/log" 2>&1 &
    else
        # nodelay on both sides: with Nagle, each small request waits for the delayed ACK of
        # the previous one (the semaphore tests took 6x as long as without the tunnel).
        socat "TCP-LISTEN:$ZK_TLS_TUNNEL_PORT,bind=127.0.0.1,fork,reuseaddr,nodelay" \
            "OPENSSL:127.0.0.1:$ZK_TLS_PORT,cafile=$TLS_DIR/ca.crt,verify=1,commonname=127.0.0.1,nodelay" \
            </dev/null >>"$dir/tunnel.log" 2>&1 &
    fi
    record_pid zookeeper-tls $! "$2"
}

zookeeper_tls_spawn() {  # zookeeper_tls_spawn DIR [N]
    local dir=$1
    tls_ensure && spawn_members zookeeper-tls 2 60 "$dir" "${2:-}" || return 1
    # The tests' base path, open and persistent (as zookeeper.sh makes it), through the tunnel.
    /usr/share/zookeeper/bin/zkCli.sh -server "127.0.0.1:$ZK_TLS_TUNNEL_PORT" create /distlock-tests </dev/null >/dev/null 2>&1 || true
    cat > "$RUN/zookeeper-tls.env" <<ENV
DISTLOCK_TEST_ZK_TLS_TUNNEL_URL=zk://127.0.0.1:$ZK_TLS_TUNNEL_PORT/distlock-tests?session_timeout=2s
DISTLOCK_TEST_ZK_PLAIN_ON_TLS_URL_MUST_FAIL=zk://127.0.0.1:$ZK_TLS_PORT/distlock-tests?session_timeout=2s
DISTLOCK_TEST_ZK_TLS_4LW=127.0.0.1:$ZK_TLS_TUNNEL_PORT
ENV
}
