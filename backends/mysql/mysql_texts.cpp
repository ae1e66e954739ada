// The MySQL / MariaDB dialect's SQL texts (sql_texts, built once per lock
// table) and the batched renewal of lease rows. See mysql_dialect_impl.hpp.
#include <string>
#include <vector>

#include "mysql_dialect_impl.hpp"

namespace distlock::backends::mysql {

s::sql_texts dialect::texts(const std::string& table) const {
    const std::string t = "`" + table + "`", rows = "`" + table + "_rows`", fence = "`" + table + "_fence`";
    const std::string epoch = "`" + table + "_epoch`", boot = "`" + table + "_boot`";
    const std::string expires = "UTC_TIMESTAMP(6) + INTERVAL (? * 1000) MICROSECOND";
    const std::string free = "(expires_at IS NULL OR expires_at <= UTC_TIMESTAMP(6))";
    const std::string free_flag = "(expires_at IS NULL OR expires_at <= UTC_TIMESTAMP(6), 1, 0)";
    // Free, or already ours (a retried acquire). Evaluated before each
    // assignment, left to right: `owner` changes only when it is true, after
    // which it stays true for `expires_at`.
    const std::string take = "(expires_at IS NULL OR expires_at <= UTC_TIMESTAMP(6) OR owner <=> VALUES(owner))";
    // Counter rows: the name's row is bumped first; LAST_INSERT_ID() is then its
    // new value for the rest of the batch. The rows exist from the start
    // (migrate), so the INSERT never happens: it is the form that can take a
    // WHERE (the native lock, which must come first).
    const bool seq = sequence();
    auto bump = [&](const std::string& where) -> s::statement {
        return {"INSERT INTO " + fence + " (slot, version) SELECT ?, LAST_INSERT_ID(1) FROM DUAL" + where +
                    " ON DUPLICATE KEY UPDATE version = LAST_INSERT_ID(version + 1)",
                {3}};
    };
    const std::string draw = seq ? "NEXTVAL(" + fence + ")" : "LAST_INSERT_ID()";
    auto drawn = [&](s::batch steps) {
        if (!seq) steps.insert(steps.begin(), bump(""));
        return steps;
    };
    // The token of a grant: with a sequence, the value NEXTVAL() just drew on
    // this session, when the upsert before changed a row (no table read);
    // with counter rows, the row's version.
    const s::statement mine = seq ? s::statement{"SELECT IF(ROW_COUNT() > 0, LASTVAL(" + fence + "), NULL)", {}}
                                  : s::statement{"SELECT version FROM " + t + " WHERE name = ? AND owner = ?", {0, 1}};
    s::sql_texts q;
    // A MEMORY table's size is bounded by max_heap_table_size when it is made
    // (16 MB by default: about 10,000 rows of this table's fixed-length rows);
    // this session's bound is raised for it to 1 GiB, taken only as rows are.
    q.create = {
        {"CREATE TABLE IF NOT EXISTS " + t +
             " (name VARBINARY(1024) NOT NULL, owner VARCHAR(64) CHARACTER SET ascii NULL,"
             " expires_at DATETIME(6) NULL, version BIGINT NOT NULL DEFAULT 0, holder_label VARBINARY(320) NULL,"
             " PRIMARY KEY (name)) ENGINE=" +
             std::string(engine_ == lock_engine::memory ? "MEMORY" : "InnoDB"),
         {}},
        {"CREATE TABLE IF NOT EXISTS " + rows + " (name VARBINARY(1024) NOT NULL, PRIMARY KEY (name)) ENGINE=InnoDB",
         {}},
        seq ? s::statement{"CREATE SEQUENCE IF NOT EXISTS " + fence + " ENGINE=InnoDB", {}}
            : s::statement{"CREATE TABLE IF NOT EXISTS " + fence +
                               " (slot INT NOT NULL, version BIGINT NOT NULL, PRIMARY KEY (slot)) ENGINE=InnoDB",
                           {}},
    };
    if (seq) {
        // The fence guard's (sql_texts::fence_guard): an InnoDB row whose
        // update makes the guard's commit flush the log, the sequence's move
        // with it; and a MEMORY row, emptied by every server start, that says
        // a guard has run since.
        q.create.push_back({"CREATE TABLE IF NOT EXISTS " + epoch +
                                " (id TINYINT NOT NULL, guards BIGINT NOT NULL, PRIMARY KEY (id)) ENGINE=InnoDB",
                            {}});
        q.create.push_back(
            {"CREATE TABLE IF NOT EXISTS " + boot + " (id TINYINT NOT NULL, PRIMARY KEY (id)) ENGINE=MEMORY", {}});
        q.fence_guard_probe = {"SELECT IF(EXISTS(SELECT 1 FROM " + boot + "), NULL, NEXTVAL(" + fence + "))", {}};
        q.fence_guard = {
            {"SELECT SETVAL(" + fence + ", ?)", {0}},
            {"INSERT INTO " + epoch + " (id, guards) VALUES (1, 1) ON DUPLICATE KEY UPDATE guards = guards + 1", {}},
            {"INSERT IGNORE INTO " + boot + " (id) VALUES (1)", {}}};
    }
    if (engine_ == lock_engine::memory)
        q.create.insert(q.create.begin(), {"SET SESSION max_heap_table_size = 1073741824", {}});
    q.ping = {"SELECT 1", {}};
    q.rollback = {"ROLLBACK", {}};
    q.lease_acquire = drawn({
        {"INSERT INTO " + t + " (name, owner, expires_at, version, holder_label) VALUES (?, ?, " + expires + ", " +
             draw + ", ?) ON DUPLICATE KEY UPDATE version = IF(" + take +
             ", VALUES(version), version),"
             " owner = IF(" +
             take + ", VALUES(owner), owner), expires_at = IF(" + take +
             ", VALUES(expires_at), expires_at), holder_label = IF(" + take + ", VALUES(holder_label), holder_label)",
         {0, 1, 2, 4}},
        mine,
    });
    q.lease_renew = {"UPDATE " + t + " SET expires_at = " + expires + " WHERE name = ? AND owner = ?", {2, 0, 1}};
    q.lease_release = {"DELETE FROM " + t + " WHERE name = ? AND owner = ?", {0, 1}};
    q.lease_clear = {"DELETE FROM " + t + " WHERE name = ?", {0}};
    q.opt_insert = drawn({
        {"INSERT INTO " + t + " (name, owner, expires_at, version, holder_label) VALUES (?, ?, " + expires + ", " +
             draw + ", ?) ON DUPLICATE KEY UPDATE version = version",
         {0, 1, 2, 4}},
        mine,
    });
    q.opt_read = {"SELECT version, IF" + free_flag + " FROM " + t + " WHERE name = ?", {0}};
    q.opt_update = drawn({
        {"UPDATE " + t + " SET owner = ?, expires_at = " + expires + ", version = " + draw +
             ", holder_label = ? WHERE name = ? AND version = ? AND " + free,
         {1, 2, 5, 0, 4}},
        mine,
    });
    q.row_ensure = {"INSERT IGNORE INTO " + rows + " (name) VALUES (?)", {0}};
    // Once the row is locked, its holder takes a named lock of its own, the
    // mark by which holder_of (IS_USED_LOCK) names the holding session without
    // a write. '#' is in no GET_LOCK key of a lock name (docs/backends/sql.md).
    // A holder gives the mark back before the row, so the next one finds it
    // free; a session that ends frees both (the wait of 1 s covers the moment
    // between the two).
    const std::string mark_key =
        "CONCAT('distlock#row:', LEFT(SHA2(CONCAT(" + hex_literal(namespace_) + ", ?), 256), 51))";
    const s::statement mark = {"SELECT IF(FOUND_ROWS() > 0, GET_LOCK(" + mark_key + ", 1), NULL)", {0}};
    q.row_lock = {{"START TRANSACTION", {}}, {"SELECT 1 FROM " + rows + " WHERE name = ? FOR UPDATE", {0}}, mark};
    q.row_lock_nowait = {
        {"START TRANSACTION", {}}, {"SELECT 1 FROM " + rows + " WHERE name = ? FOR UPDATE NOWAIT", {0}}, mark};
    q.row_unlock = {{"SELECT RELEASE_LOCK(" + mark_key + ")", {0}}, {"ROLLBACK", {}}};
    q.set_wait = {"SET SESSION innodb_lock_wait_timeout = GREATEST(1, ? DIV 1000)", {0}};
    if (seq) q.fence = {{"SELECT NEXTVAL(" + fence + ")", {}}};
    else q.fence = {{bump("").text, {0}}, {"SELECT LAST_INSERT_ID()", {}}};
    // break_lock: the holder found and ended in one statement (KILL takes an
    // expression; NULL, nobody, is error 1094 "unknown thread id").
    q.row_break = {"KILL IS_USED_LOCK(" + mark_key + ")", {0}};
    // GET_LOCK first: the token is drawn (and a counter row locked) only once
    // the named lock is held. Counter rows: ROW_COUNT() is 0 when it was not.
    if (seq) {
        q.native_lock = {{"SELECT IF(GET_LOCK(?, ? / 1000) = 1, " + draw + ", NULL)", {0, 1}}};
        q.native_try = {{"SELECT IF(GET_LOCK(?, 0) = 1, " + draw + ", NULL)", {0}}};
    } else {
        const s::statement token = {"SELECT IF(ROW_COUNT() > 0, LAST_INSERT_ID(), NULL)", {}};
        q.native_lock = {{bump(" WHERE GET_LOCK(?, ? / 1000) = 1").text, {2, 0, 1}}, token};
        q.native_try = {{bump(" WHERE GET_LOCK(?, 0) = 1").text, {2, 0}}, token};
    }
    q.native_release = {"SELECT RELEASE_LOCK(?)", {0}};
    q.native_plain = {"SELECT GET_LOCK(?, 0)", {0}};
    // The doorbell: "distlock#bell:" + 50 hex digits of the digest of the name's
    // namespace and name (64 characters); '#' is in no GET_LOCK key of a lock name.
    const std::string bell_key =
        "CONCAT('distlock#bell:', LEFT(SHA2(CONCAT(" + hex_literal(namespace_) + ", ?), 256), 50))";
    q.bell_take = {"SELECT GET_LOCK(" + bell_key + ", ? / 1000)", {0, 5}};
    q.bell_release = {"DO RELEASE_LOCK(" + bell_key + ")", {0}};
    q.lease_acquire_rung = q.lease_acquire;
    q.lease_acquire_rung.insert(q.lease_acquire_rung.begin(), q.bell_take);
    q.lease_release_rung = {q.lease_release, q.bell_release};
    q.native_break = {"KILL IS_USED_LOCK(?)", {0}};
    // inspect: the lease row by the server's clock; the session holding a
    // GET_LOCK key or a for-update row's mark (IS_USED_LOCK). MySQL keeps no
    // label beside a named lock, and counts its waiters only in
    // performance_schema.metadata_locks.
    q.inspect_lease = {
        "SELECT expires_at > UTC_TIMESTAMP(6), HEX(holder_label), version,"
        " TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at), owner FROM " +
            t + " WHERE name = ? AND owner IS NOT NULL",
        {0}};
    q.inspect_native = {"SELECT IS_USED_LOCK(?), NULL, NULL", {0}};
    q.inspect_row = {"SELECT IS_USED_LOCK(" + mark_key + "), NULL, NULL", {0}};
    q.no_session_label = "MySQL keeps no data beside a named lock: the server names only the holding connection";
    q.no_native_waiters =
        "MySQL counts GET_LOCK waiters only in performance_schema.metadata_locks, which distlock does not read"
        " (off by default on MariaDB, and not readable without a grant)";
    q.no_row_waiters =
        "MySQL shows row lock waits only in performance_schema/information_schema InnoDB tables,"
        " which distlock does not read (not readable without a grant)";

    // Semaphores and read-write locks: lease rows of tables of their own.
    // Each statement of a batch commits on its own (autocommit), so a row
    // written by one is seen by the look of any statement that starts after.
    const std::string permits = "`" + table + "_permits`", rw = "`" + table + "_rw`";
    const std::string now = "UTC_TIMESTAMP(6)";
    q.create.push_back(
        {"CREATE TABLE IF NOT EXISTS " + permits +
             " (name VARBINARY(1024) NOT NULL, slot INT UNSIGNED NOT NULL, permits INT UNSIGNED NOT NULL,"
             " owner VARCHAR(64) CHARACTER SET ascii NOT NULL, expires_at DATETIME(6) NOT NULL,"
             " version BIGINT NOT NULL, PRIMARY KEY (name, slot)) ENGINE=InnoDB",
         {}});
    q.create.push_back({"CREATE TABLE IF NOT EXISTS " + rw +
                            " (name VARBINARY(1024) NOT NULL, holder VARCHAR(64) CHARACTER SET ascii NOT NULL,"
                            " owner VARCHAR(64) CHARACTER SET ascii NOT NULL, expires_at DATETIME(6) NOT NULL,"
                            " version BIGINT NOT NULL, PRIMARY KEY (name, holder)) ENGINE=InnoDB",
                        {}});
    auto rows_of = [&](const std::string& name, const std::string& quoted) {
        s::sql_texts::lease_rows r;
        r.table = name;
        r.renew = {"UPDATE " + quoted + " SET expires_at = " + expires + " WHERE name = ? AND owner = ?", {2, 0, 1}};
        r.release = {"DELETE FROM " + quoted + " WHERE name = ? AND owner = ?", {0, 1}};
        r.clear = {"DELETE FROM " + quoted + " WHERE name = ?", {0}};
        return r;
    };
    q.permit_rows = rows_of(table + "_permits", permits);
    q.rw_rows = rows_of(table + "_rw", rw);
    // Semaphore [name, owner, lease_ms, slot, permits]: the size of another
    // holder of the name, and the lowest slot under `permits` that no
    // unexpired row holds; the row in that slot (an expired one taken over);
    // the token, and the size check again after the insert: of two clients
    // asking different sizes at the same moment, at least one sees the other
    // (and gives its permit back).
    const std::string other_size =
        "(SELECT MAX(permits) FROM " + permits + " WHERE name = ? AND permits <> ? AND expires_at > " + now + ")";
    const std::string fresh = "(expires_at <= " + now + " OR owner <=> VALUES(owner))";
    s::batch permit = {
        {"SET @distlock_n = " + other_size +
             ", @distlock_s = (SELECT MIN(c.s) FROM (SELECT 0 AS s UNION ALL"
             " SELECT slot + 1 FROM " +
             permits + " WHERE name = ? AND expires_at > " + now +
             ") c WHERE c.s < ? AND"
             " NOT EXISTS (SELECT 1 FROM " +
             permits + " h WHERE h.name = ? AND h.slot = c.s AND h.expires_at > " + now + "))",
         {0, 4, 0, 4, 0}},
    };
    const std::string can_take = " WHERE @distlock_s IS NOT NULL AND @distlock_n IS NULL";
    if (!seq) permit.push_back({bump(can_take).text, {3}});
    permit.push_back({"INSERT INTO " + permits +
                          " (name, slot, permits, owner, expires_at, version) SELECT ?, @distlock_s, ?, ?, " + expires +
                          ", " + draw + " FROM DUAL" + can_take + " ON DUPLICATE KEY UPDATE version = IF(" + fresh +
                          ", VALUES(version), version),"
                          " permits = IF(" +
                          fresh +
                          ", VALUES(permits), permits),"
                          " owner = IF(" +
                          fresh +
                          ", VALUES(owner), owner),"
                          " expires_at = IF(" +
                          fresh + ", VALUES(expires_at), expires_at)",
                      {0, 4, 1, 2}});
    permit.push_back({"SELECT (SELECT version FROM " + permits +
                          " WHERE name = ? AND owner = ?), COALESCE(@distlock_n, " + other_size + "), @distlock_s",
                      {0, 1, 0, 4}});
    q.permit_acquire = std::move(permit);
    // Read-write lock [name, owner, lease_ms, slot]: a row per reader (holder =
    // its owner token) and one writer row per name (holder 'w'), which a
    // waiting writer holds too (version 0 until granted).
    const std::string writer_row = "name = ? AND holder = 'w'";
    s::batch read = {
        {"INSERT INTO " + rw + " (name, holder, owner, expires_at, version) VALUES (?, ?, ?, " + expires + ", " + draw +
             ") ON DUPLICATE KEY UPDATE expires_at = VALUES(expires_at)",
         {0, 1, 1, 2}},
        {"SET @distlock_w = (SELECT COUNT(*) FROM " + rw + " WHERE " + writer_row + " AND expires_at > " + now + ")",
         {0}},
        {"DELETE FROM " + rw + " WHERE name = ? AND holder = ? AND @distlock_w > 0", {0, 1}},
        {"SELECT version FROM " + rw + " WHERE name = ? AND holder = ?", {0, 1}},
    };
    if (!seq) read.insert(read.begin(), bump(""));
    q.rw_read_acquire = std::move(read);
    s::batch write = {
        {"INSERT INTO " + rw + " (name, holder, owner, expires_at, version) VALUES (?, 'w', ?, " + expires +
             ", 0) ON DUPLICATE KEY UPDATE version = IF(" + fresh +
             ", IF(owner <=> VALUES(owner), version, 0), version),"
             " owner = IF(" +
             fresh + ", VALUES(owner), owner), expires_at = IF(" + fresh + ", VALUES(expires_at), expires_at)",
         {0, 1, 2}},
        {"SET @distlock_r = (SELECT COUNT(*) FROM " + rw + " WHERE name = ? AND holder <> 'w' AND expires_at > " + now +
             ")",
         {0}},
    };
    const std::string mine_waiting = writer_row + " AND owner = ? AND version = 0";
    if (!seq)
        write.push_back({"INSERT INTO " + fence +
                             " (slot, version) SELECT ?, LAST_INSERT_ID(1) FROM DUAL WHERE"
                             " @distlock_r = 0 AND EXISTS (SELECT 1 FROM " +
                             rw + " WHERE " + mine_waiting +
                             ")"
                             " ON DUPLICATE KEY UPDATE version = LAST_INSERT_ID(version + 1)",
                         {3, 0, 1}});
    write.push_back(
        {"UPDATE " + rw + " SET version = " + draw + " WHERE " + mine_waiting + " AND @distlock_r = 0", {0, 1}});
    write.push_back({"SELECT version FROM " + rw + " WHERE " + writer_row + " AND owner = ? AND version <> 0", {0, 1}});
    q.rw_write_acquire = std::move(write);
    q.inspect_permits = {"SELECT permits, version, TIMESTAMPDIFF(MICROSECOND, " + now + ", expires_at) FROM " +
                             permits + " WHERE name = ? AND expires_at > " + now + " ORDER BY slot LIMIT 1001",
                         {0}};
    q.inspect_rw_rows = {"SELECT holder, version, TIMESTAMPDIFF(MICROSECOND, " + now + ", expires_at) FROM " + rw +
                             " WHERE name = ? AND expires_at > " + now + " LIMIT 1002",
                         {0}};
    return q;
}

// `name IN (...) AND owner IN (...)` (the primary key's range, then the
// owners): equivalent to matching the pairs, since owner tokens are unique.
s::dialect::renew_batch dialect::lease_renew_batch(const std::string& table, std::size_t n) const {
    std::string names, owners;
    std::vector<int> pairs;
    for (std::size_t i = 0; i < n; ++i) {
        names += i ? ", ?" : "?";
        owners += i ? ", ?" : "?";
    }
    for (std::size_t i = 0; i < n; ++i) pairs.push_back(static_cast<int>(1 + 2 * i));
    for (std::size_t i = 0; i < n; ++i) pairs.push_back(static_cast<int>(2 + 2 * i));
    const std::string where = " WHERE name IN (" + names + ") AND owner IN (" + owners + ")";
    std::vector<int> update_args{0};
    update_args.insert(update_args.end(), pairs.begin(), pairs.end());
    return {
        {"UPDATE `" + table + "` SET expires_at = UTC_TIMESTAMP(6) + INTERVAL (? * 1000) MICROSECOND" + where,
         update_args},
        {"SELECT owner FROM `" + table + "`" + where, pairs},
    };
}

}  // namespace distlock::backends::mysql
