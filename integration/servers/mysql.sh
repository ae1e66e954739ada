# MariaDB 10.11 (MySQL protocol) for the mysql:// backend tests: port 13306,
# database "distlock", password user distlock/distlock. Sourced by
# integration/backends.sh, which provides apt_ensure, wait_serving, record_pid and
# fail_with_log. Like the PostgreSQL test server (fsync=off), it does not flush
# its redo log at every commit (innodb_flush_log_at_trx_commit=2): these are test
# servers, and docs/benchmarks/sql.md says so. The log is written to the OS at every
# commit, so a SIGKILL of the server ("backends.sh kill mysql") loses no committed
# transaction (a machine crash could). Data in DIR/data; "wipe" runs install-db again,
# and the next spawn creates the database and user again (DIR/setup-pending).
MYSQL_PORT=${DISTLOCK_MYSQL_PORT:-13306}

MYSQL_LEAN=(--innodb-buffer-pool-size=16M --innodb-log-file-size=8M --performance-schema=OFF --skip-name-resolve)

mysql_install() { apt_ensure mariadb-server mariadb-client; }

# mysql_init DIR: a new DIR/data. The database and user need a running server: the next
# mysql_spawn creates them (DIR/setup-pending says so).
mysql_init() {
    local dir=$1
    rm -rf "$dir/data"
    mariadb-install-db --no-defaults --datadir="$dir/data" --user=root --auth-root-authentication-method=normal \
        --skip-test-db "${MYSQL_LEAN[@]}" >"$dir/install.log" 2>&1 || { fail_with_log mariadb-install-db "$dir/install.log"; return 1; }
    touch "$dir/setup-pending"
}

mysql_spawn() {
    local dir=$1
    mariadbd --no-defaults --datadir="$dir/data" --user=root --port="$MYSQL_PORT" --bind-address=127.0.0.1 \
        --socket="$dir/sock" --pid-file="$dir/pid" --log-error="$dir/err.log" "${MYSQL_LEAN[@]}" \
        --max-connections=500 --innodb-flush-log-at-trx-commit=2 --userstat=1 </dev/null >/dev/null 2>&1 &
    record_pid mysql $!
    wait_serving 30 $! mariadb-admin --no-defaults -uroot -h127.0.0.1 -P"$MYSQL_PORT" ping || { fail_with_log mariadbd "$dir/err.log"; return 1; }
    if [ -f "$dir/setup-pending" ]; then
        mariadb --no-defaults -uroot --socket="$dir/sock" -e "
            CREATE DATABASE IF NOT EXISTS distlock;
            CREATE USER IF NOT EXISTS 'distlock'@'%' IDENTIFIED BY 'distlock';
            GRANT ALL PRIVILEGES ON distlock.* TO 'distlock'@'%';
            FLUSH PRIVILEGES;" || { fail_with_log "mariadb user setup" "$dir/err.log"; return 1; }
        rm -f "$dir/setup-pending"
    fi
    # A user of its own for the statement-count test, whose statements
    # information_schema.USER_STATISTICS (--userstat) counts apart from every other
    # test's; reading them takes PROCESS.
    mariadb --no-defaults -uroot --socket="$dir/sock" -e "
        CREATE USER IF NOT EXISTS 'distlock_count'@'%' IDENTIFIED BY 'distlock';
        GRANT ALL PRIVILEGES ON distlock.* TO 'distlock_count'@'%';
        GRANT PROCESS ON *.* TO 'distlock'@'%';" || { fail_with_log "mariadb count user" "$dir/err.log"; return 1; }
    # A second tenant on the same server (the tenant tests in tests/backends/mysql):
    # database distlock_b, which its user distlock_b may use alone, and which the
    # main user distlock may use too (one user, two databases: their GET_LOCK
    # names and for-update marks must not meet, nor break_lock end the other's holder).
    mariadb --no-defaults -uroot --socket="$dir/sock" -e "
        CREATE DATABASE IF NOT EXISTS distlock_b;
        CREATE USER IF NOT EXISTS 'distlock_b'@'%' IDENTIFIED BY 'distlock';
        GRANT ALL PRIVILEGES ON distlock_b.* TO 'distlock_b'@'%';
        GRANT ALL PRIVILEGES ON distlock_b.* TO 'distlock'@'%';" || { fail_with_log "mariadb tenant setup" "$dir/err.log"; return 1; }
    local base="mysql://distlock:distlock@127.0.0.1:$MYSQL_PORT/distlock"
    {
        echo "DISTLOCK_TEST_MYSQL_URL='$base?strategy=lease-table&lease=2s'"
        echo "DISTLOCK_TEST_MYSQL_FOR_UPDATE_URL='$base?strategy=for-update&lease=2s'"
        echo "DISTLOCK_TEST_MYSQL_LEASE_TABLE_URL='$base?strategy=lease-table&lease=2s'"
        echo "DISTLOCK_TEST_MYSQL_OPTIMISTIC_URL='$base?strategy=optimistic&lease=2s'"
        echo "DISTLOCK_TEST_MYSQL_GET_LOCK_URL='$base?strategy=get-lock&lease=2s'"
        # Lease-table waiters on the holder's doorbell instead of polling.
        echo "DISTLOCK_TEST_MYSQL_LEASE_TABLE_BELL_URL='$base?strategy=lease-table&lease=2s&wake=bell'"
        # ... on a lock table of the MEMORY engine (leases never written to disk).
        echo "DISTLOCK_TEST_MYSQL_MEMORY_BELL_URL='$base?strategy=lease-table&lease=2s&wake=bell&engine=memory&table=distlock_memory'"
        echo "DISTLOCK_TEST_MYSQL_COUNT_URL='mysql://distlock_count:distlock@127.0.0.1:$MYSQL_PORT/distlock'"
        # MySQL 8's fence counter (rows instead of MariaDB's sequence), on a table of its own.
        local st
        for st in for-update lease-table optimistic get-lock; do
            echo "DISTLOCK_TEST_MYSQL_FENCE_TABLE_$(echo "$st" | tr 'a-z-' 'A-Z_')_URL='$base?strategy=$st&lease=2s&fence=table&table=distlock_fence_rows'"
        done
    } > "$RUN/mysql.env"
}
