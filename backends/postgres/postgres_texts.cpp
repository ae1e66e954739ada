// The PostgreSQL dialect's SQL texts (sql_texts, built once per lock table)
// and the batched renewal of lease rows. See postgres_dialect_impl.hpp.
#include <string>
#include <vector>

#include "postgres_dialect_impl.hpp"

namespace distlock::backends::postgres {

s::sql_texts dialect::texts(const std::string& table) const {
    const std::string t = object(table), rows = object(table + "_rows");
    const std::string expires = "now() + $3::bigint * interval '1 millisecond'";
    const std::string free = "(expires_at IS NULL OR expires_at <= now())";
    // The fence counter: a sequence. nextval() is never rolled back, and a
    // committed one survives a crash (PostgreSQL's documentation, "Sequence
    // Manipulation Functions").
    const std::string next = "nextval('" + object(table + "_fence") + "')";
    s::sql_texts q;
    q.create = {
        {"CREATE TABLE IF NOT EXISTS " + t +
             " (name bytea PRIMARY KEY, owner text, expires_at timestamptz, version bigint NOT NULL DEFAULT 0,"
             " holder_label bytea)",
         {}},
        {"CREATE TABLE IF NOT EXISTS " + rows + " (name bytea PRIMARY KEY)", {}},
        {"CREATE SEQUENCE IF NOT EXISTS " + object(table + "_fence"), {}},
    };
    q.ping = {"SELECT 1", {}};
    q.rollback = {"ROLLBACK", {}};
    q.lease_acquire = {
        {"INSERT INTO " + t + " AS t (name, owner, expires_at, version, holder_label) VALUES ($1, $2, " + expires +
             ", " + next +
             ", $4) ON CONFLICT (name) DO UPDATE SET owner = EXCLUDED.owner, expires_at = EXCLUDED.expires_at,"
             " version = EXCLUDED.version, holder_label = EXCLUDED.holder_label"
             " WHERE t.expires_at IS NULL OR t.expires_at <= now()"
             " OR t.owner = EXCLUDED.owner RETURNING version",
         {0, 1, 2, 4}}};
    q.lease_renew = {"UPDATE " + t + " SET expires_at = " + expires + " WHERE name = $1 AND owner = $2", {0, 1, 2}};
    // Release and break wake the waiters of the name (one row = released).
    const std::string notify = ") SELECT pg_notify('" + channel(table) + "', encode(sha256(name), 'hex')) FROM done";
    q.lease_release = {"WITH done AS (DELETE FROM " + t + " WHERE name = $1 AND owner = $2 RETURNING name" + notify,
                       {0, 1}};
    q.lease_clear = {"WITH done AS (DELETE FROM " + t + " WHERE name = $1 RETURNING name" + notify, {0}};
    q.listen = {"LISTEN " + quote(channel(table)), {}};
    q.opt_insert = {{"INSERT INTO " + t + " (name, owner, expires_at, version, holder_label) VALUES ($1, $2, " +
                         expires + ", " + next + ", $4) ON CONFLICT (name) DO NOTHING RETURNING version",
                     {0, 1, 2, 4}}};
    q.opt_read = {"SELECT version, CASE WHEN " + free + " THEN 1 ELSE 0 END FROM " + t + " WHERE name = $1", {0}};
    q.opt_update = {{"UPDATE " + t + " SET owner = $2, expires_at = " + expires + ", version = " + next +
                         ", holder_label = $5 WHERE name = $1 AND version = $4 AND " + free + " RETURNING version",
                     {0, 1, 2, 4, 5}}};
    q.row_ensure = {"INSERT INTO " + rows + " (name) VALUES ($1) ON CONFLICT (name) DO NOTHING", {0}};
    // The holding session's application_name carries the holder's label
    // (docs/backends/sql.md, "Inspect"): set inside the locking transaction,
    // so that its ROLLBACK (release, or a failed try) sets it back.
    const std::string row_label = " AND set_config('application_name', $2, false) IS NOT NULL";
    q.row_lock = {{"BEGIN", {}}, {"SELECT 1 FROM " + rows + " WHERE name = $1" + row_label + " FOR UPDATE", {0, 1}}};
    q.row_lock_nowait = {{"BEGIN", {}},
                         {"SELECT 1 FROM " + rows + " WHERE name = $1" + row_label + " FOR UPDATE NOWAIT", {0, 1}}};
    q.row_unlock = {{"ROLLBACK", {}}};
    q.set_wait = {"SELECT set_config('lock_timeout', $1::bigint || 'ms', false)", {0}};
    q.fence = {{"SELECT " + next, {}}};
    // A row locked FOR UPDATE carries the locking transaction's id in xmax;
    // that transaction, while it runs, holds the lock on its own id, which
    // names its session: found and ended in one statement.
    q.row_break = {"SELECT pg_terminate_backend(l.pid) FROM " + rows +
                       " r JOIN pg_locks l ON l.locktype ="
                       " 'transactionid' AND l.transactionid = r.xmax AND l.mode = 'ExclusiveLock' AND l.granted"
                       " WHERE r.name = $1",
                   {0}};
    // The token is drawn once the lock is held, in the same statement, which
    // also names the holding session after the grant: application_name
    // 'distlock #<token>' and ' <label>' ($2, empty when the label is not
    // printable ASCII) when the whole fits the 63 bytes PostgreSQL keeps.
    const std::string name_session =
        " SELECT v FROM t WHERE set_config('application_name', CASE WHEN octet_length('distlock #' || v || $2) <= "
        "63"
        " THEN 'distlock #' || v || $2 ELSE 'distlock #' || v END, false) IS NOT NULL";
    q.native_lock = {
        {"WITH t AS MATERIALIZED (SELECT " + next + " AS v FROM pg_advisory_lock($1::bigint))" + name_session, {0, 3}}};
    q.native_try = {
        {"WITH l AS MATERIALIZED (SELECT pg_try_advisory_lock($1::bigint) AS ok), t AS MATERIALIZED"
         " (SELECT " +
             next + " AS v FROM l WHERE l.ok)" + name_session,
         {0, 3}}};
    // The release gives the session its name from the connection back.
    q.native_release = {
        "SELECT CASE WHEN pg_advisory_unlock($1::bigint) THEN 1 ELSE 0 END,"
        " set_config('application_name', 'distlock', false)",
        {0}};
    q.native_plain = {"SELECT pg_advisory_lock($1::bigint)", {0}};
    // A bigint advisory key shows in pg_locks as classid = high half, objid = low half, objsubid = 1.
    q.native_break = {
        "SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' AND granted"
        " AND objsubid = 1 AND database = (SELECT oid FROM pg_database WHERE datname ="
        " current_database()) AND classid = (($1::bigint >> 32) & 4294967295)::oid"
        " AND objid = ($1::bigint & 4294967295)::oid",
        {0}};
    // inspect: one statement each. Advisory: the granted lock of the key in
    // this database, its session's application_name, and the sessions
    // queued for it (ungranted). for-update: the row's xmax is the locking
    // transaction, whose lock on its own id names its session; the first
    // waiter waits on that id (holding the row's tuple lock), later ones on
    // the tuple lock.
    const std::string this_db = "database = (SELECT oid FROM pg_database WHERE datname = current_database())";
    const std::string key_is =
        " AND classid = (($1::bigint >> 32) & 4294967295)::oid"
        " AND objid = ($1::bigint & 4294967295)::oid";
    q.inspect_native = {
        "SELECT h.pid, (SELECT a.application_name FROM pg_stat_activity a WHERE a.pid = h.pid),"
        " (SELECT count(DISTINCT pid) FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 1 AND " +
            this_db + key_is +
            " AND NOT granted)"
            " FROM (SELECT 1) one LEFT JOIN (SELECT pid FROM pg_locks WHERE locktype = 'advisory'"
            " AND objsubid = 1 AND " +
            this_db + key_is + " AND granted) h ON true",
        {0}};
    q.inspect_lease = {
        "SELECT CASE WHEN expires_at > now() THEN 1 ELSE 0 END, encode(holder_label, 'hex'), version,"
        " (extract(epoch FROM expires_at - now()) * 1000000)::bigint, owner FROM " +
            t + " WHERE name = $1 AND owner IS NOT NULL",
        {0}};
    q.no_session_label = "";  // application_name
    q.no_native_waiters = "";
    q.no_row_waiters = "";
    q.inspect_row = {
        "SELECT l.pid, (SELECT a.application_name FROM pg_stat_activity a WHERE a.pid = l.pid),"
        " CASE WHEN l.pid IS NULL THEN 0 ELSE (SELECT count(DISTINCT w.pid) FROM pg_locks w WHERE NOT w.granted"
        " AND ((w.locktype = 'transactionid' AND w.transactionid = r.xmax) OR (w.locktype = 'tuple' AND w." +
            this_db + " AND w.relation = '" + rows +
            "'::regclass AND w.page = (r.ctid::text::point)[0] AND w.tuple = (r.ctid::text::point)[1])))"
            " END FROM (SELECT 1) one LEFT JOIN " +
            rows +
            " r ON r.name = $1 LEFT JOIN pg_locks l"
            " ON l.locktype = 'transactionid' AND l.transactionid = r.xmax AND l.mode = 'ExclusiveLock'"
            " AND l.granted",
        {0}};

    // Semaphores: a row per permit held. The acquisitions of a name are
    // serialized by a transaction-scoped advisory lock on the name's permit
    // key (the pipeline is one implicit transaction, so it is held until the
    // upsert has committed), so that the look for a free slot and the size
    // check see every permit taken before.
    const std::string permits = object(table + "_permits");
    q.create.push_back({"CREATE TABLE IF NOT EXISTS " + permits +
                            " (name bytea NOT NULL, slot bigint NOT NULL, permits bigint NOT NULL, owner text NOT NULL,"
                            " expires_at timestamptz NOT NULL, version bigint NOT NULL, PRIMARY KEY (name, slot))",
                        {}});
    q.permit_rows.table = table + "_permits";
    q.permit_rows.renew = {"UPDATE " + permits + " SET expires_at = " + expires + " WHERE name = $1 AND owner = $2",
                           {0, 1, 2}};
    q.permit_rows.release = {
        "WITH done AS (DELETE FROM " + permits + " WHERE name = $1 AND owner = $2 RETURNING name" + notify, {0, 1}};
    q.permit_rows.clear = {"WITH done AS (DELETE FROM " + permits + " WHERE name = $1 RETURNING name" + notify, {0}};
    // [name, owner, lease_ms, slot, permits, key]; the upsert's $3 = permits, $4 = lease_ms.
    q.permit_acquire = {
        {"SELECT pg_advisory_xact_lock($1::bigint)", {5}},
        {"WITH held AS (SELECT slot, permits FROM " + permits +
             " WHERE name = $1 AND expires_at > now()),"
             " other AS (SELECT max(permits) AS n FROM held WHERE permits <> $3),"
             " pick AS (SELECT min(c.s) AS s FROM (SELECT 0::bigint AS s UNION ALL SELECT slot + 1 FROM held) c"
             " WHERE c.s < $3 AND NOT EXISTS (SELECT 1 FROM held h WHERE h.slot = c.s)),"
             " ins AS (INSERT INTO " +
             permits +
             " AS t (name, slot, permits, owner, expires_at, version)"
             " SELECT $1, pick.s, $3, $2, now() + $4::bigint * interval '1 millisecond', " +
             next +
             " FROM pick, other WHERE pick.s IS NOT NULL AND other.n IS NULL"
             " ON CONFLICT (name, slot) DO UPDATE SET permits = EXCLUDED.permits, owner = EXCLUDED.owner,"
             " expires_at = EXCLUDED.expires_at, version = EXCLUDED.version"
             " WHERE t.expires_at <= now() OR t.owner = EXCLUDED.owner RETURNING version)"
             " SELECT (SELECT version FROM ins), (SELECT n FROM other), NULL",
         {0, 1, 4, 2}},
    };

    // Read-write locks: the advisory lock of two int4 keys, the high and the
    // low half of the name's advisory key (so pg_locks shows the same
    // classid and objid as the mutex's, with objsubid 2: a lock apart from
    // the mutex of the same name), shared for readers, exclusive for
    // writers. The token is drawn once the lock is held, as for the mutex.
    const std::string halves = "($1::bigint >> 32)::int, (($1::bigint << 32) >> 32)::int";
    q.rw_read_lock = {{"SELECT " + next + " FROM pg_advisory_lock_shared(" + halves + ")", {0}}};
    q.rw_read_try = {{"WITH l AS MATERIALIZED (SELECT pg_try_advisory_lock_shared(" + halves + ") AS ok) SELECT " +
                          next + " FROM l WHERE l.ok",
                      {0}}};
    q.rw_write_lock = {{"SELECT " + next + " FROM pg_advisory_lock(" + halves + ")", {0}}};
    q.rw_write_try = {{"WITH l AS MATERIALIZED (SELECT pg_try_advisory_lock(" + halves + ") AS ok) SELECT " + next +
                           " FROM l WHERE l.ok",
                       {0}}};
    q.rw_read_release = {"SELECT CASE WHEN pg_advisory_unlock_shared(" + halves + ") THEN 1 ELSE 0 END", {0}};
    q.rw_write_release = {"SELECT CASE WHEN pg_advisory_unlock(" + halves + ") THEN 1 ELSE 0 END", {0}};
    q.inspect_permits = {"SELECT permits, version, (extract(epoch FROM expires_at - now()) * 1000000)::bigint FROM " +
                             permits + " WHERE name = $1 AND expires_at > now() ORDER BY slot LIMIT 1001",
                         {0}};
    q.inspect_rw_locks = {
        "SELECT l.mode, CASE WHEN l.granted THEN 1 ELSE 0 END,"
        " (SELECT a.application_name FROM pg_stat_activity a WHERE a.pid = l.pid) FROM pg_locks l"
        " WHERE l.locktype = 'advisory' AND l.objsubid = 2 AND l." +
            this_db +
            " AND l.classid = (($1::bigint >> 32) & 4294967295)::oid AND l.objid = ($1::bigint & 4294967295)::oid"
            " LIMIT 1002",
        {0}};
    q.rw_break = {
        "SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' AND granted"
        " AND objsubid = 2 AND database = (SELECT oid FROM pg_database WHERE datname ="
        " current_database()) AND classid = (($1::bigint >> 32) & 4294967295)::oid"
        " AND objid = ($1::bigint & 4294967295)::oid",
        {0}};
    return q;
}

// `name IN (...) AND owner IN (...)`: equivalent to matching the pairs, since
// owner tokens are unique.
s::dialect::renew_batch dialect::lease_renew_batch(const std::string& table, std::size_t n) const {
    std::string names, owners;
    std::vector<int> args{0};
    for (std::size_t i = 0; i < n; ++i) {
        names += (i ? ", $" : "$") + std::to_string(2 + 2 * i);
        owners += (i ? ", $" : "$") + std::to_string(3 + 2 * i);
        args.push_back(static_cast<int>(1 + 2 * i));
        args.push_back(static_cast<int>(2 + 2 * i));
    }
    return {{"UPDATE " + object(table) +
                 " SET expires_at = now() + $1::bigint * interval '1 millisecond'"
                 " WHERE name IN (" +
                 names + ") AND owner IN (" + owners + ") RETURNING owner",
             args},
            {}};
}

}  // namespace distlock::backends::postgres
