// mysql:// for the optimistic stock helper (optimistic_stock_client.hpp), over
// the client library the mysql:// backend uses: mysql-connector-c++ 1.1
// (Debian's libmysqlcppconn, over MariaDB Connector/C). Each statement is a
// server-side prepared statement with '?' parameters, prepared once per
// session. The connect is bounded by the URL's connect_timeout, each read and
// write on the socket by its timeout (the client library's own timeouts, in
// whole seconds).
#include <cppconn/driver.h>
#include <cppconn/exception.h>
#include <cppconn/prepared_statement.h>
#include <cppconn/resultset.h>
#include <cppconn/resultset_metadata.h>
#include <cppconn/statement.h>
#include <mysql_connection.h>
#include <mysql_driver.h>

#include <algorithm>
#include <map>
#include <optional>

#include "distlock/spi/tls.hpp"
#include "optimistic_stock_client.hpp"

namespace distlock::tool::stock_client {
namespace {

constexpr const char* backend = "mysql";

using settings = mysql_settings;

// A server error code as what to do next.
errc failure(int code) {
    switch (code) {
        case 1044:
        case 1045:
        case 1142:
        case 1143:
        case 1227:
        case 1370:
        case 1698:  // denied
            return errc::access_denied;
        case 1049: return errc::invalid_argument;  // no such database
        default: return errc::unavailable;
    }
}

// Whether the session is gone after this error: the client library's own
// errors (2000-2999: the server gone, the connection lost or timed out) and
// the server's shutdown and kill notices.
bool session_gone(int code) { return (code >= 2000 && code < 3000) || code == 1053 || code == 1927 || code == 4031; }

int seconds_at_least_1(std::chrono::milliseconds d) {
    return static_cast<int>(std::max<long long>(1, (d.count() + 999) / 1000));
}

::sql::mysql::MySQL_Driver* driver() {
    // The client library sets SIGPIPE to SIG_IGN for the process when it starts;
    // the CLI ignores it from its start anyway (main.cpp), and `run` gives its
    // command the default disposition (process_tree.cpp).
    static ::sql::mysql::MySQL_Driver* d = ::sql::mysql::get_mysql_driver_instance();
    return d;
}

class my_connection final : public connection {
public:
    explicit my_connection(const settings& s) {
        ::sql::ConnectOptionsMap opts;
        const bool v6 = s.ep.host.find(':') != std::string::npos;
        const std::string where = (v6 ? "[" + s.ep.host + "]" : s.ep.host) + ":" + std::to_string(s.ep.port);
        opts["hostName"] = ::sql::SQLString("tcp://" + where);
        opts["userName"] = ::sql::SQLString(s.ep.user);
        opts["password"] = ::sql::SQLString(s.ep.password);
        opts["schema"] = ::sql::SQLString(s.ep.database);
        opts["OPT_CONNECT_TIMEOUT"] = seconds_at_least_1(s.t.connect);
        opts["OPT_READ_TIMEOUT"] = seconds_at_least_1(s.t.call);
        opts["OPT_WRITE_TIMEOUT"] = seconds_at_least_1(s.t.call);
        opts["OPT_RECONNECT"] = false;  // a reconnect would hide a lost session
        opts["OPT_CHARSET_NAME"] = ::sql::SQLString("utf8mb4");
        // A server (or anything on the path, without TLS) may answer any query
        // with a request for a file of the client's: it is not offered.
        opts["OPT_LOCAL_INFILE"] = 0;
        if (s.tls) {
            // MYSQL_OPT_SSL_ENFORCE and MYSQL_OPT_SSL_VERIFY_SERVER_CERT: with
            // both, a server that does not offer TLS is refused before the login.
            opts["sslEnforce"] = true;
            opts["sslVerify"] = true;
            if (!s.tls_ca.empty()) opts["sslCA"] = ::sql::SQLString(s.tls_ca);
            if (!s.tls_cert.empty()) opts["sslCert"] = ::sql::SQLString(s.tls_cert);
            if (!s.tls_key.empty()) opts["sslKey"] = ::sql::SQLString(s.tls_key);
        }
        try {
            conn_.reset(driver()->connect(opts));
            std::unique_ptr<::sql::Statement> st(conn_->createStatement());
            // No row lock wait outlasts a call.
            st->execute("SET SESSION innodb_lock_wait_timeout = " + std::to_string(seconds_at_least_1(lock_wait)));
        } catch (const ::sql::SQLException& e) {
            const int code = e.getErrorCode();
            std::string msg = e.what();
            errc c = failure(code);
            if (code == 2026 && spi::mariadb_tls_refused(msg)) c = errc::access_denied;
            if (code == 2027) {  // a malformed packet: another kind of server answered
                c = errc::invalid_argument;
                msg += " (is " + where + " a MySQL or MariaDB server?)";
            }
            throw db_error(c, msg.empty() ? "cannot connect to " + where : msg, code, true);
        }
    }

    ~my_connection() override {
        prepared_.clear();
        try {
            if (conn_) conn_->close();
        } catch (...) {}
    }

    std::vector<row> query(const std::string& text, const std::vector<param>& args) override {
        return guarded([&] {
            auto& ps = prepared(text, args);
            std::unique_ptr<::sql::ResultSet> rs(ps.executeQuery());
            std::vector<row> rows;
            const unsigned cols = rs ? rs->getMetaData()->getColumnCount() : 0;
            while (rs && rs->next()) {
                row cells;
                for (unsigned c = 1; c <= cols; ++c) {
                    if (rs->isNull(c)) cells.emplace_back(std::nullopt);
                    else cells.emplace_back(rs->getInt64(c));
                }
                rows.push_back(std::move(cells));
            }
            return rows;
        });
    }

    std::uint64_t execute(const std::string& text, const std::vector<param>& args) override {
        return guarded([&]() -> std::uint64_t {
            int n = 0;
            if (args.empty()) {  // CREATE TABLE: not as a prepared statement
                std::unique_ptr<::sql::Statement> st(conn_->createStatement());
                n = st->executeUpdate(text);
            } else {
                n = prepared(text, args).executeUpdate();
            }
            return n > 0 ? static_cast<std::uint64_t>(n) : 0;
        });
    }

    bool broken() const noexcept override { return broken_; }

private:
    // The statement of `text`, prepared on this session's first use, with `args` bound.
    ::sql::PreparedStatement& prepared(const std::string& text, const std::vector<param>& args) {
        auto it = prepared_.find(text);
        if (it == prepared_.end())
            it =
                prepared_.emplace(text, std::unique_ptr<::sql::PreparedStatement>(conn_->prepareStatement(text))).first;
        auto& ps = *it->second;
        for (unsigned i = 0; i < args.size(); ++i) {
            if (const auto* s = std::get_if<std::string>(&args[i])) ps.setString(i + 1, ::sql::SQLString(*s));
            else ps.setInt64(i + 1, std::get<std::int64_t>(args[i]));
        }
        return ps;
    }

    template <class F>
    auto guarded(F&& f) -> decltype(f()) {
        if (broken_) throw db_error(errc::unavailable, "the connection is already broken", 2006, true);
        try {
            return f();
        } catch (const ::sql::SQLException& e) {
            const int code = e.getErrorCode();
            if (session_gone(code)) broken_ = true;
            throw db_error(failure(code), e.what(), code, broken_);
        }
    }

    std::unique_ptr<::sql::Connection> conn_;
    std::map<std::string, std::unique_ptr<::sql::PreparedStatement>> prepared_;  // by text; closed before conn_
    bool broken_ = false;
};

class my_database final : public database {
public:
    explicit my_database(settings s) : s_(std::move(s)) {}
    std::string_view name() const noexcept override { return backend; }
    std::string quote(std::string_view id) const override { return "`" + std::string(id) + "`"; }
    std::string placeholder(int) const override { return "?"; }
    std::unique_ptr<connection> connect() override { return std::make_unique<my_connection>(s_); }

private:
    settings s_;
};

}  // namespace

std::unique_ptr<database> mysql_database(const mysql_settings& s) { return std::make_unique<my_database>(s); }

}  // namespace distlock::tool::stock_client

#if DISTLOCK_TOOL_STOCK_PLUGIN
DISTLOCK_TOOL_STOCK_PLUGIN_ENTRY(mysql_settings, mysql_database, "mysql")
#endif
