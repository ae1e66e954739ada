# PostgreSQL 15 for the postgres:// backend tests: port 15432, database
# "distlock", password (scram-sha-256) user distlock/distlock. The server refuses
# to run as root, so it runs as the "postgres" user through setpriv (which execs:
# the recorded PID is the server itself). Stopped with SIGINT (fast shutdown).
# "backends.sh kill postgres" SIGKILLs the postmaster and its children; with fsync=off,
# committed transactions still survive that (they are in the OS's cache), not a
# machine crash. Data in DIR/data; "wipe" runs initdb again, and the next spawn creates
# the role and database again (DIR/setup-pending).
POSTGRES_PORT=${DISTLOCK_POSTGRES_PORT:-15432}

postgres_bin() {
    local d
    for d in /usr/lib/postgresql/15/bin /usr/lib/postgresql/*/bin; do
        [ -x "$d/postgres" ] && { echo "$d"; return 0; }
    done
    return 1
}

postgres_install() { postgres_bin >/dev/null || apt_ensure postgresql-15; }

postgres_stop_signal() { echo INT; }

AS_POSTGRES=(setpriv --reuid=postgres --regid=postgres --init-groups)

# postgres_init DIR: a new DIR/data (DIR is chowned to postgres: the server keeps its
# socket there). The role and database need a running server: the next postgres_spawn
# creates them (DIR/setup-pending says so).
postgres_init() {
    local dir=$1 bin
    bin=$(postgres_bin) || { echo "[backends] postgres binaries not found" >&2; return 1; }
    id postgres >/dev/null 2>&1 || { echo "[backends] the postgres user is missing" >&2; return 1; }
    chown postgres:postgres "$dir"
    rm -rf "$dir/data"
    "${AS_POSTGRES[@]}" "$bin/initdb" -D "$dir/data" -U postgres --auth-local=trust --auth-host=scram-sha-256 \
        --no-locale --encoding=UTF8 --no-sync >"$dir/initdb.log" 2>&1 || { fail_with_log initdb "$dir/initdb.log"; return 1; }
    touch "$dir/setup-pending"
}

postgres_spawn() {
    local dir=$1 bin f old
    bin=$(postgres_bin) || { echo "[backends] postgres binaries not found" >&2; return 1; }
    # After "backends.sh kill", its lock files (postmaster.pid, and the socket's, which
    # "wipe" keeps) name the killed server, maybe still a zombie (PID 1 reaps late), and
    # postgres refuses to start while that PID exists.
    for f in "$dir/data/postmaster.pid" "$dir/.s.PGSQL.$POSTGRES_PORT.lock"; do
        [ -f "$f" ] && read -r old < "$f" && wait_reaped "$old" 10
    done
    "${AS_POSTGRES[@]}" "$bin/postgres" -D "$dir/data" -p "$POSTGRES_PORT" -k "$dir" -c listen_addresses=127.0.0.1 \
        -c fsync=off -c max_connections=300 </dev/null >>"$dir/server.log" 2>&1 &
    record_pid postgres $!
    wait_serving 30 $! "$bin/pg_isready" -q -h 127.0.0.1 -p "$POSTGRES_PORT" || { fail_with_log postgres "$dir/server.log"; return 1; }
    if [ -f "$dir/setup-pending" ]; then
        local psql=("${AS_POSTGRES[@]}" "$bin/psql" -X -q -v ON_ERROR_STOP=1 -h "$dir" -p "$POSTGRES_PORT" -U postgres)
        "${psql[@]}" -d postgres -c "CREATE ROLE distlock LOGIN PASSWORD 'distlock'" >/dev/null &&
            "${psql[@]}" -d postgres -c "CREATE DATABASE distlock OWNER distlock" >/dev/null ||
            { fail_with_log "postgres user setup" "$dir/server.log"; return 1; }
        rm -f "$dir/setup-pending"
    fi
    # A database of its own for the statement-count test, whose transactions
    # pg_stat_database counts apart from every other test's.
    local count_psql=("${AS_POSTGRES[@]}" "$bin/psql" -X -q -At -h "$dir" -p "$POSTGRES_PORT" -U postgres -d postgres)
    if [ "$("${count_psql[@]}" -c "SELECT 1 FROM pg_database WHERE datname = 'distlock_count'")" != 1 ]; then
        "${count_psql[@]}" -c "CREATE DATABASE distlock_count OWNER distlock" >/dev/null ||
            { fail_with_log "postgres count database" "$dir/server.log"; return 1; }
    fi
    # Tenants on one server (the tenant tests in tests/backends/postgres): roles
    # distlock_tenant_a and distlock_tenant_b, and a database distlock_shared in
    # which every role may create objects in public, as before PostgreSQL 15
    # (where one tenant can plant a table for another), a schema of each tenant's
    # own, and tenant_b's schema open to tenant_a (owned by another role: refused).
    "${count_psql[@]}" -v ON_ERROR_STOP=1 -c "DO \$\$ BEGIN
        IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'distlock_tenant_a') THEN
            CREATE ROLE distlock_tenant_a LOGIN PASSWORD 'distlock'; END IF;
        IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'distlock_tenant_b') THEN
            CREATE ROLE distlock_tenant_b LOGIN PASSWORD 'distlock'; END IF;
        END \$\$;" >/dev/null || { fail_with_log "postgres tenant roles" "$dir/server.log"; return 1; }
    if [ "$("${count_psql[@]}" -c "SELECT 1 FROM pg_database WHERE datname = 'distlock_shared'")" != 1 ]; then
        "${count_psql[@]}" -c "CREATE DATABASE distlock_shared" >/dev/null ||
            { fail_with_log "postgres tenant database" "$dir/server.log"; return 1; }
    fi
    "${AS_POSTGRES[@]}" "$bin/psql" -X -q -v ON_ERROR_STOP=1 -h "$dir" -p "$POSTGRES_PORT" -U postgres -d distlock_shared -c "
        SET client_min_messages = warning;
        GRANT CREATE ON SCHEMA public TO PUBLIC;
        CREATE SCHEMA IF NOT EXISTS tenant_a AUTHORIZATION distlock_tenant_a;
        CREATE SCHEMA IF NOT EXISTS tenant_b AUTHORIZATION distlock_tenant_b;
        GRANT USAGE, CREATE ON SCHEMA tenant_b TO distlock_tenant_a;" >/dev/null ||
        { fail_with_log "postgres tenant schemas" "$dir/server.log"; return 1; }
    local base="postgres://distlock:distlock@127.0.0.1:$POSTGRES_PORT/distlock"
    {
        echo "DISTLOCK_TEST_POSTGRES_URL='$base?strategy=lease-table&lease=2s'"
        echo "DISTLOCK_TEST_POSTGRES_FOR_UPDATE_URL='$base?strategy=for-update&lease=2s'"
        echo "DISTLOCK_TEST_POSTGRES_LEASE_TABLE_URL='$base?strategy=lease-table&lease=2s'"
        echo "DISTLOCK_TEST_POSTGRES_OPTIMISTIC_URL='$base?strategy=optimistic&lease=2s'"
        echo "DISTLOCK_TEST_POSTGRES_ADVISORY_URL='$base?strategy=advisory&lease=2s'"
        echo "DISTLOCK_TEST_POSTGRES_COUNT_URL='postgres://distlock:distlock@127.0.0.1:$POSTGRES_PORT/distlock_count'"
    } > "$RUN/postgres.env"
}
