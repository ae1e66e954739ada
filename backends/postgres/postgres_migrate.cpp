// The PostgreSQL dialect's check of who owns the lock tables and its migration
// of tables of an earlier layout (sql::dialect::migrate). See
// postgres_dialect_impl.hpp.
#include <string>

#include "postgres_dialect_impl.hpp"

namespace distlock::backends::postgres {

// Every table and the sequence distlock uses must be the connecting role's
// own, and the schema the role's, a superuser's or the database owner's
// (checked after CREATE ... IF NOT EXISTS, so that an object another role
// made first, or meanwhile, is seen). A table of another role could carry
// triggers, rules or policies that run as this role, and its owner reads
// and changes every lock; a schema's owner can drop and replace what is in
// it. Refused with access_denied (failure::access_denied), naming the object.
void dialect::refuse_objects_of_others(s::connection& c, const std::string& table) const {
    const std::string me = "(SELECT oid FROM pg_roles WHERE rolname = current_user)";
    const auto r = c.exec(
        {"SELECT x.what, x.name, x.owner, current_user FROM ("
         " SELECT 'schema' AS what, quote_ident(n.nspname) AS name, pg_get_userbyid(n.nspowner) AS owner,"
         " n.nspowner = " +
             me +
             " OR (SELECT rolsuper FROM pg_roles WHERE oid = n.nspowner)"
             " OR n.nspowner = (SELECT datdba FROM pg_database WHERE datname = current_database())"
             " OR pg_get_userbyid(n.nspowner) = 'pg_database_owner' AS ok FROM pg_namespace n WHERE n.nspname = $1"
             " UNION ALL SELECT CASE WHEN c.relkind = 'S' THEN 'sequence' ELSE 'table' END,"
             " quote_ident(n.nspname) || '.' || quote_ident(c.relname), pg_get_userbyid(c.relowner),"
             " c.relowner = " +
             me +
             " FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
             " WHERE n.nspname = $1 AND c.relname IN ($2, $3, $4, $5)) x WHERE NOT COALESCE(x.ok, false) ORDER BY "
             "1, 2 LIMIT 1",
         {0, 1, 2, 3, 4}},
        {ep_.schema, table, table + "_rows", table + "_fence", table + "_permits"});
    if (r.rows.empty() || r.rows[0].size() < 4) return;
    const auto& row = r.rows[0];
    const std::string what = row[0].value_or("?"), name = row[1].value_or("?"), owner = row[2].value_or("?"),
                      me_name = row[3].value_or("?");
    if (what == "schema")
        throw s::sql_error(s::failure::access_denied, 0,
                           "schema " + name + " is owned by role \"" + owner + "\", which is neither \"" + me_name +
                               "\" (the role distlock connects as), a superuser nor the database owner: refused,"
                               " since a schema's owner can drop and replace the lock tables in it (use a schema of"
                               " this role's: schema=)");
    throw s::sql_error(s::failure::access_denied, 0,
                       "the " + what + " " + name + " is owned by role \"" + owner + "\", not by \"" + me_name +
                           "\" (the role distlock connects as): refused, since another role's table can run"
                           " triggers, rules or policies as this role and its owner reads and changes every lock"
                           " (make it this role's, ALTER ... OWNER TO, or use another schema= or table=)");
}

// Tables of the earlier layout kept each name's token in its row's version:
// the sequence is set above the highest one (under a transaction-scoped
// advisory lock, so that two starting clients do not both set it), then the
// rows of locks nobody holds are deleted.
void dialect::migrate(s::connection& c, const std::string& table) const {
    refuse_objects_of_others(c, table);
    const std::string t = object(table), seq = object(table + "_fence");
    c.exec({"BEGIN", {}});
    try {
        const std::string lock_of = ep_.schema == "public" ? table : ep_.schema + "." + table;
        c.exec({"SELECT pg_advisory_xact_lock($1::bigint)", {0}}, {advisory_key("distlock migrate " + lock_of)});
        // A lock table made before holder labels gets its holder_label column,
        // once (looked up first: ALTER TABLE would wait for every statement on
        // the table even when the column is there). Old clients name their
        // columns, so they keep working.
        auto has = c.exec({"SELECT count(*) FROM pg_attribute WHERE attrelid = '" + t +
                               "'::regclass AND attname = 'holder_label' AND NOT attisdropped",
                           {}});
        if (has.rows.empty() || !has.rows[0][0] || *has.rows[0][0] == "0")
            c.exec({"ALTER TABLE " + t + " ADD COLUMN IF NOT EXISTS holder_label bytea", {}});
        c.exec({"SELECT setval('" + seq + "', x.m) FROM (SELECT COALESCE(MAX(version), 0) AS m FROM " + t + ") x, " +
                    seq + " s WHERE x.m > 0 AND x.m >= s.last_value",
                {}});
        c.exec({"DELETE FROM " + t + " WHERE owner IS NULL OR expires_at <= now()", {}});
        c.exec({"DELETE FROM " + object(table + "_permits") + " WHERE expires_at <= now()", {}});
        c.exec({"COMMIT", {}});
    } catch (const s::sql_error& e) {
        if (!e.fatal()) c.exec({"ROLLBACK", {}});
        throw;
    }
}

}  // namespace distlock::backends::postgres
