# postgres-tls: PostgreSQL 15 with ssl=on (issue 24), certificates of the throwaway CA of
# integration/tls/make-ca.sh ($RUN/tls). Sourced by integration/backends.sh; uses
# postgres_bin, postgres_install and AS_POSTGRES of postgres.sh (run as "postgres", stopped
# with SIGINT). One initdb; members 2-4 start on copies of that fresh data (no roles: their
# cases fail in the handshake, before any login).
#
# Members (lines of postgres-tls.pids):
#   1  127.0.0.1:15442  ssl=on with server.crt; pg_hba: hostssl scram-sha-256 for every role,
#                       role distlock_cert only with a client certificate of the CA
#                       (clientcert=verify-ca), hostnossl reject (plaintext refused)
#   2  127.0.0.1:15443  ssl=on with expired.crt
#   3  127.0.0.1:15444  ssl=on with wrong-name.crt (DNS wrong.example only)
#   4  127.0.0.1:15445  ssl=off (a plaintext server)
# Roles on member 1: distlock/distlock owns database distlock; distlock_cert/distlock may use it.
# The key files are copied to DIR/tls, owned by postgres, 0600 (the server refuses others).
# Env ($RUN/postgres-tls.env), $CA = $RUN/tls/ca.crt:
#   DISTLOCK_TEST_POSTGRES_TLS_URL              postgres://distlock:distlock@127.0.0.1:15442/distlock?sslmode=verify-full&sslrootcert=$CA&strategy=lease-table&lease=2s
#   DISTLOCK_TEST_POSTGRES_TLS_CLIENT_CERT_URL  postgres://distlock_cert:distlock@...:15442/distlock?sslmode=verify-full&sslrootcert=$CA&sslcert=$RUN/tls/client.crt&sslkey=$RUN/tls/client.key&table=distlock_cert&...
#   DISTLOCK_TEST_POSTGRES_TLS_EXPIRED_URL_MUST_FAIL      ...:15443 verify-full (must fail: expired)
#   DISTLOCK_TEST_POSTGRES_TLS_WRONG_NAME_URL_MUST_FAIL   ...:15444 verify-full (must fail: name)
#   DISTLOCK_TEST_POSTGRES_TLS_ON_PLAIN_URL_MUST_FAIL     ...:15445 verify-full (must fail: plaintext server)
#   DISTLOCK_TEST_POSTGRES_PLAIN_ON_TLS_URL_MUST_FAIL     ...:15442 sslmode=disable (must fail: refused by pg_hba)
PGTLS_PORTS=(15442 15443 15444 15445)  # member N is PGTLS_PORTS[N-1]

postgres_tls_install() { postgres_install; apt_ensure openssl; }
postgres_tls_stop_signal() { echo INT; }

postgres_tls_init() {  # postgres_tls_init DIR: DIR/data-N for each member, DIR/tls
    local dir=$1 bin n f
    tls_ensure || return 1
    bin=$(postgres_bin) || { log "postgres binaries not found"; return 1; }
    chown postgres:postgres "$dir"
    rm -rf "$dir"/data-* "$dir/tls"
    "${AS_POSTGRES[@]}" "$bin/initdb" -D "$dir/data-1" -U postgres --auth-local=trust --auth-host=scram-sha-256 \
        --no-locale --encoding=UTF8 --no-sync >"$dir/initdb.log" 2>&1 || { fail_with_log initdb "$dir/initdb.log"; return 1; }
    cat > "$dir/data-1/pg_hba.conf" <<HBA
local     all  all                          trust
hostssl   all  distlock_cert  127.0.0.1/32  scram-sha-256 clientcert=verify-ca
hostssl   all  all            127.0.0.1/32  scram-sha-256
hostnossl all  all            127.0.0.1/32  reject
HBA
    for n in 2 3 4; do cp -a "$dir/data-1" "$dir/data-$n"; done
    install -d -o postgres -g postgres -m 0700 "$dir/tls"
    for f in ca.crt server.crt server.key expired.crt expired.key wrong-name.crt wrong-name.key; do
        install -o postgres -g postgres -m 0600 "$TLS_DIR/$f" "$dir/tls/$f"
    done
    touch "$dir/setup-pending"
}

postgres_tls_member_log() { echo "$1/server-$2.log"; }
postgres_tls_member_ready() { "$(postgres_bin)/pg_isready" -q -h 127.0.0.1 -p "${PGTLS_PORTS[$2-1]}"; }
postgres_tls_member_start() {  # postgres_tls_member_start DIR N: start member N in the background
    local dir=$1 n=$2 bin cert=server ssl=(-c ssl=on) f old
    bin=$(postgres_bin) || return 1
    case $n in 2) cert=expired ;; 3) cert=wrong-name ;; 4) ssl=(-c ssl=off) ;; esac
    [ "$n" = 4 ] || ssl+=(-c "ssl_cert_file=$dir/tls/$cert.crt" -c "ssl_key_file=$dir/tls/$cert.key" -c "ssl_ca_file=$dir/tls/ca.crt")
    for f in "$dir/data-$n/postmaster.pid" "$dir/.s.PGSQL.${PGTLS_PORTS[n-1]}.lock"; do
        [ -f "$f" ] && read -r old < "$f" && wait_reaped "$old" 10
    done
    "${AS_POSTGRES[@]}" "$bin/postgres" -D "$dir/data-$n" -p "${PGTLS_PORTS[n-1]}" -k "$dir" -c listen_addresses=127.0.0.1 \
        -c fsync=off -c max_connections=100 "${ssl[@]}" </dev/null >>"$dir/server-$n.log" 2>&1 &
    record_pid postgres-tls $! "$n"
}

postgres_tls_spawn() {  # postgres_tls_spawn DIR [N]
    local dir=$1 bin
    bin=$(postgres_bin) || { log "postgres binaries not found"; return 1; }
    tls_ensure && spawn_members postgres-tls ${#PGTLS_PORTS[@]} 30 "$dir" "${2:-}" || return 1
    if [ -f "$dir/setup-pending" ] && [ "${2:-1}" = 1 ]; then
        "${AS_POSTGRES[@]}" "$bin/psql" -X -q -v ON_ERROR_STOP=1 -h "$dir" -p "${PGTLS_PORTS[0]}" -U postgres -d postgres \
            -c "CREATE ROLE distlock LOGIN PASSWORD 'distlock'" -c "CREATE ROLE distlock_cert LOGIN PASSWORD 'distlock'" \
            -c "CREATE DATABASE distlock OWNER distlock" -c "GRANT ALL ON DATABASE distlock TO distlock_cert" >/dev/null &&
        "${AS_POSTGRES[@]}" "$bin/psql" -X -q -v ON_ERROR_STOP=1 -h "$dir" -p "${PGTLS_PORTS[0]}" -U postgres -d distlock \
            -c "GRANT ALL ON SCHEMA public TO distlock_cert" >/dev/null ||
            { fail_with_log "postgres-tls user setup" "$dir/server-1.log"; return 1; }
        rm -f "$dir/setup-pending"
    fi
    local ca="sslrootcert=$TLS_DIR/ca.crt" vf="sslmode=verify-full" u="distlock:distlock@127.0.0.1" rest="strategy=lease-table&lease=2s"
    cat > "$RUN/postgres-tls.env" <<ENV
DISTLOCK_TEST_POSTGRES_TLS_URL='postgres://$u:${PGTLS_PORTS[0]}/distlock?$vf&$ca&$rest'
DISTLOCK_TEST_POSTGRES_TLS_CLIENT_CERT_URL='postgres://distlock_cert:distlock@127.0.0.1:${PGTLS_PORTS[0]}/distlock?$vf&$ca&sslcert=$TLS_DIR/client.crt&sslkey=$TLS_DIR/client.key&table=distlock_cert&$rest'
DISTLOCK_TEST_POSTGRES_TLS_EXPIRED_URL_MUST_FAIL='postgres://$u:${PGTLS_PORTS[1]}/distlock?$vf&$ca&$rest'
DISTLOCK_TEST_POSTGRES_TLS_WRONG_NAME_URL_MUST_FAIL='postgres://$u:${PGTLS_PORTS[2]}/distlock?$vf&$ca&$rest'
DISTLOCK_TEST_POSTGRES_TLS_ON_PLAIN_URL_MUST_FAIL='postgres://$u:${PGTLS_PORTS[3]}/distlock?$vf&$ca&$rest'
DISTLOCK_TEST_POSTGRES_PLAIN_ON_TLS_URL_MUST_FAIL='postgres://$u:${PGTLS_PORTS[0]}/distlock?sslmode=disable&$rest'
ENV
}
