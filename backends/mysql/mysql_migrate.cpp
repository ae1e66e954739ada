// The MySQL / MariaDB dialect's migration of lock tables of an earlier layout
// (sql::dialect::migrate). See mysql_dialect_impl.hpp.
#include <string>

#include "mysql_dialect_impl.hpp"

namespace distlock::backends::mysql {

// Tables of the earlier layout: the counter is raised to the highest version
// a lease row holds (its token: SETVAL never lowers a sequence; counter rows
// are raised, never lowered); then the rows of locks nobody holds are deleted.
void dialect::migrate(s::connection& c, const std::string& table) const {
    const std::string t = "`" + table + "`", fence = "`" + table + "_fence`";
    // Every client of a lock table must agree on its engine: leases that
    // vanish with the server (MEMORY) are another guarantee, never taken silently.
    auto engine = c.exec({"SELECT ENGINE FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE()"
                          " AND TABLE_NAME = ?",
                          {0}},
                         {std::string(table)});
    if (!engine.rows.empty() && engine.rows[0][0]) {
        const bool memory = *engine.rows[0][0] == "MEMORY";
        if (memory != (engine_ == lock_engine::memory))
            throw_error(errc::invalid_argument, kBackend,
                        "the lock table '" + table + "' is " + (memory ? "MEMORY" : "not MEMORY") + ", and this URL " +
                            (memory ? "does not say engine=memory" : "says engine=memory") +
                            ": every client of a table must use one engine (use a table= of its own)");
    }
    // A lock table made before holder labels gets its holder_label column
    // (an instant ADD COLUMN on InnoDB; old clients name their columns, so
    // they keep working). Two clients starting together may both add it:
    // the second finds it there (1060, duplicate column), which is fine.
    auto has = c.exec({"SELECT COUNT(*) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE()"
                       " AND TABLE_NAME = ? AND COLUMN_NAME = 'holder_label'",
                       {0}},
                      {std::string(table)});
    if (has.rows.empty() || !has.rows[0][0] || *has.rows[0][0] == "0") {
        try {
            c.exec({"ALTER TABLE " + t + " ADD COLUMN holder_label VARBINARY(320) NULL", {}});
        } catch (const s::sql_error& e) {
            if (e.code() != 1060) throw;  // ER_DUP_FIELDNAME: added meanwhile by another client
        }
    }
    if (sequence()) {
        auto m = c.exec({"SELECT COALESCE(MAX(version), 0) FROM " + t, {}});
        const auto top = m.rows.empty() || !m.rows[0][0] ? 0 : s::to_int64(*m.rows[0][0]);
        if (top > 0) c.exec({"SELECT SETVAL(" + fence + ", ?)", {0}}, {static_cast<std::int64_t>(top)});
    } else {
        std::string slots;
        for (int i = 0; i < 1024; ++i) slots += (i ? ", (" : "(") + std::to_string(i) + ", 0)";
        c.exec({"INSERT IGNORE INTO " + fence + " (slot, version) VALUES " + slots, {}});
        c.exec({"UPDATE " + fence + " f JOIN (SELECT COALESCE(MAX(version), 0) AS m FROM " + t +
                    ") x SET f.version = x.m WHERE f.version < x.m",
                {}});
    }
    c.exec({"DELETE FROM " + t + " WHERE owner IS NULL OR expires_at <= UTC_TIMESTAMP(6)", {}});
    for (const char* rows : {"_permits", "_rw"})
        c.exec({"DELETE FROM `" + table + rows + "` WHERE expires_at <= UTC_TIMESTAMP(6)", {}});
}

}  // namespace distlock::backends::mysql
