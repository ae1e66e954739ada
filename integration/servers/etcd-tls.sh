# etcd-tls: etcd 3.4 over https (issue 24), certificates of the throwaway CA of
# integration/tls/make-ca.sh ($RUN/tls). Sourced by integration/backends.sh; uses etcd_cmd
# and etcd_install of etcd.sh (one member each, fast elections; peers on plain http,
# loopback). Data in DIR/mN/data: a spawned member restarts on it.
#
# Members (lines of etcd-tls.pids), client port / peer port:
#   1  12679 / 12680  https with server.crt
#   2  12681 / 12682  https, requires a client certificate of the CA (--client-cert-auth)
#   3  12683 / 12684  https with expired.crt
#   4  12685 / 12686  https with wrong-name.crt (DNS wrong.example only)
#   5  12687 / 12688  plain http
# Env ($RUN/etcd-tls.env), $CA = $RUN/tls/ca.crt:
#   DISTLOCK_TEST_ETCD_TLS_URL              etcd://127.0.0.1:12679/distlock-tests?tls=true&tls_ca=$CA&lease=2s
#   DISTLOCK_TEST_ETCD_TLS_CLIENT_CERT_URL  ...:12681...&tls_cert=$RUN/tls/client.crt&tls_key=$RUN/tls/client.key&lease=2s
#   DISTLOCK_TEST_ETCD_TLS_EXPIRED_URL_MUST_FAIL      ...:12683 (must fail: expired)
#   DISTLOCK_TEST_ETCD_TLS_WRONG_NAME_URL_MUST_FAIL   ...:12685 (must fail: name)
#   DISTLOCK_TEST_ETCD_TLS_ON_PLAIN_URL_MUST_FAIL     ...:12687 tls=true (must fail: plaintext server)
#   DISTLOCK_TEST_ETCD_PLAIN_ON_TLS_URL_MUST_FAIL     etcd://127.0.0.1:12679/distlock-tests?lease=2s (must fail: https server)
ETCD_TLS_BASE=12677  # member N: client port BASE + 2N, peer port BASE + 2N + 1

etcd_tls_install() { etcd_install; }
etcd_tls_init() { tls_ensure && rm -rf "$1"/m*; }  # etcd creates its data dir when it starts

etcd_tls_port() { echo $((ETCD_TLS_BASE + 2 * $1)); }

# etcd_tls_curl N PATH [CURL ARGS...]: a request to member N's client port, verifying where its certificate is good
etcd_tls_curl() {
    local n=$1 port opts=(--cacert "$TLS_DIR/ca.crt") scheme=https
    port=$(etcd_tls_port "$n")
    case $n in
      2) opts+=(--cert "$TLS_DIR/client.crt" --key "$TLS_DIR/client.key") ;;
      3|4) opts=(-k) ;;
      5) opts=() scheme=http ;;
    esac
    curl -sf --max-time 2 "${opts[@]}" "$scheme://127.0.0.1:$port$2" "${@:3}"
}
# etcd_tls_healthy N: member N answers /health, and its v3 API (the HTTP gateway to gRPC, which
# dials the server with its own certificate) answers too.
etcd_tls_healthy() {
    etcd_tls_curl "$1" /health | grep -q '"health":"true"' &&
        etcd_tls_curl "$1" /v3/maintenance/status -XPOST -d '{}' | grep -q '"version"'
}

etcd_tls_member_log() { echo "$1/m$2/log"; }
etcd_tls_member_ready() { etcd_tls_healthy "$2"; }
etcd_tls_member_start() {  # etcd_tls_member_start DIR N: start member N in the background
    local dir=$1 n=$2 port peer cmd cert=server tls=()
    port=$(etcd_tls_port "$n") peer=$(( $(etcd_tls_port "$n") + 1 ))
    cmd=$(etcd_cmd "m$n" "$dir/m$n/data" "$port" "$peer" "m$n=http://127.0.0.1:$peer")
    case $n in 2) tls=(--client-cert-auth --trusted-ca-file "$TLS_DIR/ca.crt") ;; 3) cert=expired ;; 4) cert=wrong-name ;; esac
    if [ "$n" != 5 ]; then
        cmd=${cmd//http:\/\/127.0.0.1:$port/https://127.0.0.1:$port}
        tls+=(--cert-file "$TLS_DIR/$cert.crt" --key-file "$TLS_DIR/$cert.key")
    fi
    mkdir -p "$dir/m$n"
    # shellcheck disable=SC2086  # etcd_cmd's words
    $cmd "${tls[@]}" </dev/null >>"$dir/m$n/log" 2>&1 &
    record_pid etcd-tls $! "$n"
}

etcd_tls_spawn() {  # etcd_tls_spawn DIR [N]
    local dir=$1
    tls_ensure && spawn_members etcd-tls 5 30 "$dir" "${2:-}" || return 1
    local base=etcd://127.0.0.1 q="distlock-tests?tls=true&tls_ca=$TLS_DIR/ca.crt"
    cat > "$RUN/etcd-tls.env" <<ENV
DISTLOCK_TEST_ETCD_TLS_URL='$base:$(etcd_tls_port 1)/$q&lease=2s'
DISTLOCK_TEST_ETCD_TLS_CLIENT_CERT_URL='$base:$(etcd_tls_port 2)/$q&tls_cert=$TLS_DIR/client.crt&tls_key=$TLS_DIR/client.key&lease=2s'
DISTLOCK_TEST_ETCD_TLS_EXPIRED_URL_MUST_FAIL='$base:$(etcd_tls_port 3)/$q&lease=2s'
DISTLOCK_TEST_ETCD_TLS_WRONG_NAME_URL_MUST_FAIL='$base:$(etcd_tls_port 4)/$q&lease=2s'
DISTLOCK_TEST_ETCD_TLS_ON_PLAIN_URL_MUST_FAIL='$base:$(etcd_tls_port 5)/$q&lease=2s'
DISTLOCK_TEST_ETCD_PLAIN_ON_TLS_URL_MUST_FAIL='$base:$(etcd_tls_port 1)/distlock-tests?lease=2s'
ENV
}
