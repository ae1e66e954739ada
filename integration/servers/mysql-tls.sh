# mysql-tls: MariaDB 10.11 with TLS (issue 24), certificates of the throwaway CA of
# integration/tls/make-ca.sh ($RUN/tls). Sourced by integration/backends.sh; uses
# mysql_install and MYSQL_LEAN of mysql.sh. One mariadb-install-db; members 2-4 start on
# copies of that fresh data (no users: their cases fail in the handshake, before any login).
#
# Members (lines of mysql-tls.pids), each with its socket DIR/sock-N:
#   1  127.0.0.1:13316  server.crt, require_secure_transport=ON (plaintext refused);
#                       user distlock/distlock REQUIRE SSL, distlock_cert/distlock REQUIRE X509
#                       (a client certificate of the CA), both on database distlock
#   2  127.0.0.1:13317  expired.crt
#   3  127.0.0.1:13318  wrong-name.crt (DNS wrong.example only)
#   4  127.0.0.1:13319  no TLS (--skip-ssl): a plaintext server
# Env ($RUN/mysql-tls.env), $CA = $RUN/tls/ca.crt:
#   DISTLOCK_TEST_MYSQL_TLS_URL              mysql://distlock:distlock@127.0.0.1:13316/distlock?ssl_mode=verify_identity&ssl_ca=$CA&strategy=lease-table&lease=2s
#   DISTLOCK_TEST_MYSQL_TLS_CLIENT_CERT_URL  mysql://distlock_cert:distlock@...:13316/distlock?...&ssl_cert=$RUN/tls/client.crt&ssl_key=$RUN/tls/client.key&table=distlock_cert&...
#   DISTLOCK_TEST_MYSQL_TLS_EXPIRED_URL_MUST_FAIL      ...:13317 (must fail: expired)
#   DISTLOCK_TEST_MYSQL_TLS_WRONG_NAME_URL_MUST_FAIL   ...:13318 (must fail: name)
#   DISTLOCK_TEST_MYSQL_TLS_ON_PLAIN_URL_MUST_FAIL     ...:13319 (must fail: plaintext server)
#   DISTLOCK_TEST_MYSQL_PLAIN_ON_TLS_URL_MUST_FAIL     ...:13316?ssl_mode=disabled (must fail: refused)
MYTLS_PORTS=(13316 13317 13318 13319)  # member N is MYTLS_PORTS[N-1]

mysql_tls_install() { mysql_install; apt_ensure openssl; }

mysql_tls_init() {  # mysql_tls_init DIR: DIR/data-N for each member
    local dir=$1 n
    tls_ensure || return 1
    rm -rf "$dir"/data-*
    mariadb-install-db --no-defaults --datadir="$dir/data-1" --user=root --auth-root-authentication-method=normal \
        --skip-test-db "${MYSQL_LEAN[@]}" >"$dir/install.log" 2>&1 || { fail_with_log mariadb-install-db "$dir/install.log"; return 1; }
    for n in 2 3 4; do cp -a "$dir/data-1" "$dir/data-$n"; done
    touch "$dir/setup-pending"
}

mysql_tls_member_log() { echo "$1/err-$2.log"; }
# Over the socket: TCP needs TLS (and member 1 refuses root from there anyway).
mysql_tls_member_ready() { mariadb-admin --no-defaults -uroot --socket="$1/sock-$2" ping; }
mysql_tls_member_start() {  # mysql_tls_member_start DIR N: start member N in the background
    local dir=$1 n=$2 cert=server tls=()
    case $n in 1) tls=(--require-secure-transport=ON) ;; 2) cert=expired ;; 3) cert=wrong-name ;; esac
    if [ "$n" = 4 ]; then tls=(--skip-ssl); else
        tls+=(--ssl-cert="$TLS_DIR/$cert.crt" --ssl-key="$TLS_DIR/$cert.key" --ssl-ca="$TLS_DIR/ca.crt"); fi
    mariadbd --no-defaults --datadir="$dir/data-$n" --user=root --port="${MYTLS_PORTS[n-1]}" --bind-address=127.0.0.1 \
        --socket="$dir/sock-$n" --pid-file="$dir/pid-$n" --log-error="$dir/err-$n.log" "${MYSQL_LEAN[@]}" \
        --max-connections=200 --innodb-flush-log-at-trx-commit=2 "${tls[@]}" </dev/null >/dev/null 2>&1 &
    record_pid mysql-tls $! "$n"
}

mysql_tls_spawn() {  # mysql_tls_spawn DIR [N]
    local dir=$1
    tls_ensure && spawn_members mysql-tls ${#MYTLS_PORTS[@]} 30 "$dir" "${2:-}" || return 1
    if [ -f "$dir/setup-pending" ] && [ "${2:-1}" = 1 ]; then
        mariadb --no-defaults -uroot --socket="$dir/sock-1" -e "
            CREATE DATABASE IF NOT EXISTS distlock;
            CREATE USER IF NOT EXISTS 'distlock'@'%' IDENTIFIED BY 'distlock' REQUIRE SSL;
            CREATE USER IF NOT EXISTS 'distlock_cert'@'%' IDENTIFIED BY 'distlock' REQUIRE X509;
            GRANT ALL PRIVILEGES ON distlock.* TO 'distlock'@'%';
            GRANT ALL PRIVILEGES ON distlock.* TO 'distlock_cert'@'%';
            FLUSH PRIVILEGES;" || { fail_with_log "mysql-tls user setup" "$dir/err-1.log"; return 1; }
        rm -f "$dir/setup-pending"
    fi
    local q="ssl_mode=verify_identity&ssl_ca=$TLS_DIR/ca.crt" u="distlock:distlock@127.0.0.1" rest="strategy=lease-table&lease=2s"
    cat > "$RUN/mysql-tls.env" <<ENV
DISTLOCK_TEST_MYSQL_TLS_URL='mysql://$u:${MYTLS_PORTS[0]}/distlock?$q&$rest'
DISTLOCK_TEST_MYSQL_TLS_CLIENT_CERT_URL='mysql://distlock_cert:distlock@127.0.0.1:${MYTLS_PORTS[0]}/distlock?$q&ssl_cert=$TLS_DIR/client.crt&ssl_key=$TLS_DIR/client.key&table=distlock_cert&$rest'
DISTLOCK_TEST_MYSQL_TLS_EXPIRED_URL_MUST_FAIL='mysql://$u:${MYTLS_PORTS[1]}/distlock?$q&$rest'
DISTLOCK_TEST_MYSQL_TLS_WRONG_NAME_URL_MUST_FAIL='mysql://$u:${MYTLS_PORTS[2]}/distlock?$q&$rest'
DISTLOCK_TEST_MYSQL_TLS_ON_PLAIN_URL_MUST_FAIL='mysql://$u:${MYTLS_PORTS[3]}/distlock?$q&$rest'
DISTLOCK_TEST_MYSQL_PLAIN_ON_TLS_URL_MUST_FAIL='mysql://$u:${MYTLS_PORTS[0]}/distlock?ssl_mode=disabled&$rest'
ENV
}
