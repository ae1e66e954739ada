// mysql://user:pw@host:port/db?strategy=... — MySQL 8 / MariaDB 10.6+ through
// mysql-connector-c++ 1.1 (Debian's libmysqlcppconn). This file supplies only
// the MySQL dialect of the SQL strategy layer (backends/sql): a connection
// wrapper, the SQL texts and the GET_LOCK key of a name.
#include <cppconn/driver.h>
#include <cppconn/exception.h>
#include <cppconn/prepared_statement.h>
#include <cppconn/resultset.h>
#include <cppconn/resultset_metadata.h>
#include <cppconn/statement.h>
#include <mysql_connection.h>
#include <mysql_driver.h>

#include <atomic>
#include <map>
#include <mutex>
#include <sstream>

#include "mysql_dialect.hpp"

namespace distlock::backends::mysql {
namespace {

namespace s = distlock::backends::sql;
using namespace std::chrono_literals;

s::failure classify(int code, bool connecting) {
    switch (code) {
        case 1044: case 1045: case 1142: case 1143: case 1227: case 1698: case 1370:
            return s::failure::access_denied;
        case 1049: return s::failure::no_database;
        case 1146: return s::failure::no_table;  // ER_NO_SUCH_TABLE
        case 1205:  // lock wait timeout (also MariaDB's NOWAIT)
        case 3572:  // MySQL 8 NOWAIT
            return s::failure::lock_timeout;
        case 1213: return s::failure::deadlock;
        case 2002: case 2003: case 2005: case 2026:
            return s::failure::cannot_connect;
        case 1053: case 1927: case 2006: case 2013: case 2055: case 4031:
            return connecting ? s::failure::cannot_connect : s::failure::connection_lost;
        default:
            // Client-side errors (2000-2999) mean the connection cannot be trusted.
            if (code >= 2000 && code < 3000) return connecting ? s::failure::cannot_connect : s::failure::connection_lost;
            return s::failure::other;
    }
}

int seconds_at_least_1(std::chrono::milliseconds d) {
    return static_cast<int>(std::max<long long>(1, (d.count() + 999) / 1000));
}

struct endpoint {
    std::string host, user, password, schema;
    std::uint16_t port = 3306;
};

class connection final : public s::connection {
public:
    connection(const endpoint& ep, const s::conn_settings& cs) {
        static std::once_flag once;
        static ::sql::mysql::MySQL_Driver* driver = nullptr;
        std::call_once(once, [] { driver = ::sql::mysql::get_mysql_driver_instance(); });
        ::sql::ConnectOptionsMap opts;
        const bool v6 = ep.host.find(':') != std::string::npos;
        opts["hostName"] = ::sql::SQLString("tcp://" + (v6 ? "[" + ep.host + "]" : ep.host) + ":" + std::to_string(ep.port));
        opts["userName"] = ::sql::SQLString(ep.user);
        opts["password"] = ::sql::SQLString(ep.password);
        opts["schema"] = ::sql::SQLString(ep.schema);
        opts["OPT_CONNECT_TIMEOUT"] = seconds_at_least_1(cs.connect_timeout);
        opts["OPT_READ_TIMEOUT"] = seconds_at_least_1(cs.timeout);
        opts["OPT_WRITE_TIMEOUT"] = seconds_at_least_1(cs.timeout);
        opts["OPT_RECONNECT"] = false;          // a reconnect would silently drop a held lock
        opts["CLIENT_FOUND_ROWS"] = true;       // affected rows = matched rows
        opts["OPT_CHARSET_NAME"] = ::sql::SQLString("utf8mb4");
        try {
            conn_.reset(driver->connect(opts));
            plain_.reset(conn_->createStatement());
            plain_->execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED");
            std::unique_ptr<::sql::ResultSet> rs(plain_->executeQuery("SELECT CONNECTION_ID(), VERSION()"));
            if (rs->next()) {
                id_ = rs->getInt64(1);
                version_ = rs->getString(2);
            }
        } catch (const ::sql::SQLException& e) {
            const int code = e.getErrorCode();
            std::string msg = e.what();
            const std::string where = ep.host + ":" + std::to_string(ep.port);
            if (code == 2027)  // malformed packet: another kind of server answered
                throw s::sql_error(s::failure::wrong_server, code, msg + " (is " + where + " a MySQL or MariaDB server?)");
            if (code == 2013 && msg.find("initial communication packet") != std::string::npos)
                msg += " (no greeting: is " + where + " a MySQL or MariaDB server?)";  // or a stuck one: retry
            throw s::sql_error(classify(code, true), code, msg);
        }
    }

    ~connection() override {
        prepared_.clear();
        plain_.reset();
        try {
            if (conn_) conn_->close();
        } catch (...) {
        }
    }

    s::result exec(const s::statement& st, std::span<const s::value> args) override {
        if (broken_) throw s::sql_error(s::failure::connection_lost, 2006, "the connection is already broken");
        try {
            s::result out;
            if (st.args.empty()) {
                if (plain_->execute(st.text)) read(std::unique_ptr<::sql::ResultSet>(plain_->getResultSet()), out);
                else out.affected = plain_->getUpdateCount();
                return out;
            }
            auto& ps = prepared(st.text);
            std::vector<std::unique_ptr<std::istringstream>> blobs;  // alive until execute() returns
            for (std::size_t i = 0; i < st.args.size(); ++i) {
                const auto idx = static_cast<unsigned>(i + 1);
                const auto& v = args[static_cast<std::size_t>(st.args[i])];
                if (std::holds_alternative<std::nullptr_t>(v)) ps.setNull(idx, 0);
                else if (auto n = std::get_if<std::int64_t>(&v)) ps.setInt64(idx, *n);
                else if (auto t = std::get_if<std::string>(&v)) ps.setString(idx, ::sql::SQLString(*t));
                else {
                    // Bytes go as a binary blob: never reinterpreted in the connection's charset.
                    blobs.push_back(std::make_unique<std::istringstream>(std::get<s::bytes>(v).data));
                    ps.setBlob(idx, blobs.back().get());
                }
            }
            // Connector 1.1 has no getUpdateCount() for prepared statements: the
            // kind of statement decides how it runs.
            if (st.text.rfind("SELECT", 0) == 0) read(std::unique_ptr<::sql::ResultSet>(ps.executeQuery()), out);
            else out.affected = static_cast<std::uint64_t>(ps.executeUpdate());
            return out;
        } catch (const ::sql::SQLException& e) {
            auto kind = classify(e.getErrorCode(), false);
            if (kind == s::failure::connection_lost) broken_ = true;
            throw s::sql_error(kind, e.getErrorCode(), e.what());
        }
    }

    std::int64_t session_id() const noexcept override { return id_; }
    bool broken() const noexcept override { return broken_; }
    const std::string& server_version() const noexcept { return version_; }

private:
    // Prepared once per session and kept; the server limits prepared statements
    // (max_prepared_stmt_count), so the cache is bounded (batched renewals of
    // many sizes would otherwise grow it).
    ::sql::PreparedStatement& prepared(const std::string& text) {
        if (prepared_.size() >= 64 && prepared_.find(text) == prepared_.end()) prepared_.clear();
        auto& slot = prepared_[text];
        if (!slot) slot.reset(conn_->prepareStatement(text));
        return *slot;
    }

    static void read(std::unique_ptr<::sql::ResultSet> rs, s::result& out) {
        if (!rs) return;
        const unsigned cols = rs->getMetaData()->getColumnCount();
        while (rs->next()) {
            s::row r;
            r.reserve(cols);
            for (unsigned c = 1; c <= cols; ++c) {
                if (rs->isNull(c)) r.emplace_back(std::nullopt);
                else r.emplace_back(static_cast<const std::string&>(rs->getString(c)));
            }
            out.rows.push_back(std::move(r));
        }
    }

    std::unique_ptr<::sql::Connection> conn_;
    std::unique_ptr<::sql::Statement> plain_;
    std::map<std::string, std::unique_ptr<::sql::PreparedStatement>> prepared_;
    std::int64_t id_ = 0;
    std::string version_;
    bool broken_ = false;
};

// GET_LOCK names: a name of at most 64 bytes from [a-z0-9_.:/-] (lower case,
// since servers differ in case sensitivity) that does not start with
// "distlock:" is used as it is; any other name becomes "distlock:" + the first
// 55 hex digits of SHA-256(name) (64 characters in all).
std::string get_lock_key(std::string_view name) {
    auto plain = [](unsigned char c) {
        return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '.' || c == ':' || c == '/' ||
               c == '-';
    };
    bool ok = !name.empty() && name.size() <= 64 && name.rfind("distlock:", 0) != 0;
    for (unsigned char c : name) ok = ok && plain(c);
    return ok ? std::string(name) : "distlock:" + spi::sha256_hex(name).substr(0, 55);
}

class dialect final : public s::dialect {
public:
    dialect(endpoint ep, s::conn_settings cs) : ep_(std::move(ep)), cs_(cs) {}

    std::string_view name() const noexcept override { return "mysql"; }
    std::string_view native_strategy() const noexcept override { return "get-lock"; }

    std::unique_ptr<s::connection> connect() override {
        auto c = std::make_unique<connection>(ep_, cs_);
        mariadb_ = c->server_version().find("MariaDB") != std::string::npos;
        return c;
    }

    s::sql_texts texts(const std::string& table) const override {
        const std::string t = "`" + table + "`", rows = "`" + table + "_rows`";
        const std::string expires = "UTC_TIMESTAMP(6) + INTERVAL (? * 1000) MICROSECOND";
        const std::string free = "(expires_at IS NULL OR expires_at <= UTC_TIMESTAMP(6))";
        const std::string free_flag = "(expires_at IS NULL OR expires_at <= UTC_TIMESTAMP(6), 1, 0)";
        // Free, or already ours (a retried acquire). Evaluated before each
        // assignment, left to right: `owner` changes only when it is true, after
        // which it stays true for `expires_at`.
        const std::string take = "(expires_at IS NULL OR expires_at <= UTC_TIMESTAMP(6) OR owner <=> VALUES(owner))";
        s::sql_texts q;
        q.create = {
            {"CREATE TABLE IF NOT EXISTS " + t +
                 " (name VARBINARY(1024) NOT NULL, owner VARCHAR(64) CHARACTER SET ascii NULL,"
                 " expires_at DATETIME(6) NULL, version BIGINT NOT NULL DEFAULT 0, holder BIGINT NULL,"
                 " PRIMARY KEY (name)) ENGINE=InnoDB",
             {}},
            {"CREATE TABLE IF NOT EXISTS " + rows + " (name VARBINARY(1024) NOT NULL, PRIMARY KEY (name)) ENGINE=InnoDB",
             {}},
        };
        q.ping = {"SELECT 1", {}};
        q.begin = {"START TRANSACTION", {}};
        q.rollback = {"ROLLBACK", {}};
        q.lease_acquire = {
            {"INSERT INTO " + t + " (name, owner, expires_at, version) VALUES (?, ?, " + expires +
                 ", 1) ON DUPLICATE KEY UPDATE version = IF(" + take + ", version + 1, version), owner = IF(" + take +
                 ", VALUES(owner), owner), expires_at = IF(" + take + ", VALUES(expires_at), expires_at)",
             {0, 1, 2}},
            {"SELECT version FROM " + t + " WHERE name = ? AND owner = ?", {0, 1}},
        };
        q.lease_renew = {"UPDATE " + t + " SET expires_at = " + expires + " WHERE name = ? AND owner = ?", {2, 0, 1}};
        q.lease_release = {"UPDATE " + t + " SET owner = NULL, expires_at = NULL WHERE name = ? AND owner = ?", {0, 1}};
        q.lease_clear = {"UPDATE " + t + " SET owner = NULL, expires_at = NULL WHERE name = ?", {0}};
        q.opt_read = {"SELECT version, IF" + free_flag + " FROM " + t + " WHERE name = ?", {0}};
        q.opt_insert = {"INSERT IGNORE INTO " + t + " (name, owner, expires_at, version) VALUES (?, ?, " + expires + ", 1)",
                        {0, 1, 2}};
        q.opt_update = {"UPDATE " + t + " SET owner = ?, expires_at = " + expires +
                            ", version = version + 1 WHERE name = ? AND version = ? AND " + free,
                        {1, 2, 0, 3}};
        q.row_ensure = {"INSERT IGNORE INTO " + rows + " (name) VALUES (?)", {0}};
        q.row_lock = {"SELECT 1 FROM " + rows + " WHERE name = ? FOR UPDATE", {0}};
        q.row_lock_nowait = {"SELECT 1 FROM " + rows + " WHERE name = ? FOR UPDATE NOWAIT", {0}};
        q.set_wait = {"SET SESSION innodb_lock_wait_timeout = GREATEST(1, ? DIV 1000)", {0}};
        q.native_lock = {"SELECT GET_LOCK(?, ? / 1000)", {0, 1}};
        q.native_try = {"SELECT GET_LOCK(?, 0)", {0}};
        q.native_release = {"SELECT RELEASE_LOCK(?)", {0}};
        q.native_holder = {"SELECT IS_USED_LOCK(?)", {0}};
        q.fence_bump = {
            {"INSERT INTO " + t +
                 " (name, version, holder) VALUES (?, LAST_INSERT_ID(1), ?) ON DUPLICATE KEY UPDATE"
                 " version = LAST_INSERT_ID(version + 1), holder = VALUES(holder)",
             {0, 1}},
            {"SELECT LAST_INSERT_ID()", {}},
        };
        q.holder_of = {"SELECT holder FROM " + t + " WHERE name = ?", {0}};
        q.kill = {"KILL ?", {0}};
        return q;
    }

    // `name IN (...) AND owner IN (...)` (the primary key's range, then the
    // owners): equivalent to matching the pairs, since owner tokens are unique.
    std::vector<s::statement> lease_renew_batch(const std::string& table, std::size_t n) const override {
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

    s::value native_key(std::string_view name) const override { return get_lock_key(name); }
    std::chrono::milliseconds row_wait_resolution() const noexcept override { return 1000ms; }  // whole seconds
    // MariaDB's GET_LOCK takes fractions of a second; MySQL's is documented in seconds.
    std::chrono::milliseconds native_wait_resolution() const noexcept override { return mariadb_ ? 1ms : 1000ms; }
    bool native_wait_in_call() const noexcept override { return true; }
    std::string quote(std::string_view id) const override { return "`" + std::string(id) + "`"; }
    std::string placeholder(int) const override { return "?"; }

private:
    endpoint ep_;
    s::conn_settings cs_;
    std::atomic<bool> mariadb_{false};
};

}  // namespace

std::shared_ptr<s::dialect> make_dialect(spi::url& u, const s::conn_settings& cs) {
    endpoint ep;
    auto hosts = u.hosts_or_throw(3306);
    if (hosts.size() != 1) throw_error(errc::invalid_argument, "mysql", "mysql:// takes one host");
    ep.host = hosts[0].host;
    ep.port = hosts[0].port;
    ep.user = u.user();
    ep.password = u.password();
    ep.schema = u.path().empty() ? std::string{} : u.path().substr(1);
    if (ep.schema.empty() || ep.schema.find('/') != std::string::npos)
        throw_error(errc::invalid_argument, "mysql", "mysql:// needs a database: mysql://user:pw@host:port/db");
    if (ep.user.empty()) throw_error(errc::invalid_argument, "mysql", "mysql:// needs a user: mysql://user:pw@host/db");
    return std::make_shared<dialect>(std::move(ep), cs);
}

void register_backend(spi::registry& r) {
    r.add("mysql", [](spi::url& u) -> std::shared_ptr<spi::backend> {
        auto settings = s::take_settings(u, "mysql", "get-lock");
        return s::make_backend(make_dialect(u, settings.conn), settings);
    });
}

}  // namespace distlock::backends::mysql
