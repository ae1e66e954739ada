// The seed's optimistic stock update (see optimistic_stock.hpp): the statements,
// the compare-and-set retry and a small connection pool, over the connections
// of optimistic_stock_client.hpp.
#include "optimistic_stock.hpp"

#include <cstdlib>
#include <map>
#include <mutex>
#include <utility>

#if DISTLOCK_TOOL_STOCK_PLUGINS
#include <dlfcn.h>
#include <unistd.h>
#endif

#include "distlock/error.hpp"
#include "distlock/spi/tls.hpp"
#include "distlock/spi/url.hpp"
#include "distlock/version.hpp"
#include "optimistic_stock_client.hpp"

namespace distlock::tool {
namespace stock_client {

bool is_identifier(std::string_view id, std::size_t max) {
    if (id.empty() || id.size() > max) return false;
    auto letter = [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; };
    if (!letter(id[0])) return false;
    for (char c : id)
        if (!letter(c) && !(c >= '0' && c <= '9')) return false;
    return true;
}

endpoint take_endpoint(const spi::url& u, std::string_view backend, std::uint16_t default_port) {
    const std::string b(backend);
    const auto hosts = u.hosts_or_throw(default_port);
    if (hosts.size() != 1) throw_error(errc::invalid_argument, b, b + ":// takes one host");
    endpoint ep{hosts[0].host, hosts[0].port, u.user(), u.password(),
                u.path().empty() ? std::string{} : u.path().substr(1)};
    if (ep.database.empty() || ep.database.find('/') != std::string::npos)
        throw_error(errc::invalid_argument, b, b + ":// needs a database: " + b + "://user:pw@host:port/db");
    if (spi::has_dot_segment(ep.database)) throw_error(errc::invalid_argument, b, "the database cannot be '.' or '..'");
    if (ep.user.empty()) throw_error(errc::invalid_argument, b, b + ":// needs a user: " + b + "://user:pw@host/db");
    return ep;
}

}  // namespace stock_client

namespace {

using namespace stock_client;
using steady = std::chrono::steady_clock;

// Idle connections kept for the next call.
constexpr std::size_t max_idle = 4;

// `text` with every secret of the URL (its password...) as "***", bounded: a
// server's or a client library's message may quote anything.
std::string scrub(std::string text, const std::vector<std::string>& secrets) {
    for (const auto& secret : secrets) {
        if (secret.size() < 3) continue;
        for (auto at = text.find(secret); at != std::string::npos; at = text.find(secret, at + 3))
            text.replace(at, secret.size(), "***");
    }
    if (text.size() > 512) text = text.substr(0, 512) + "...";
    return text;
}

class stock_table final : public optimistic_stock {
public:
    stock_table(std::unique_ptr<database> db, stock_options o, std::vector<std::string> secrets)
        : db_(std::move(db)), options_(std::move(o)), secrets_(std::move(secrets)) {
        const std::string name(db_->name());
        for (const auto* id : {&options_.table, &options_.key_column, &options_.stock_column, &options_.version_column})
            if (!is_identifier(*id, 60))
                throw_error(errc::invalid_argument, name, "'" + *id + "' is not a plain identifier");
        if (options_.tries < 1) throw_error(errc::invalid_argument, name, "tries must be at least 1");
        const std::string t = db_->table(options_.table), k = db_->quote(options_.key_column),
                          s = db_->quote(options_.stock_column), v = db_->quote(options_.version_column);
        auto p = [&](int n) { return db_->placeholder(n); };
        create_ = "CREATE TABLE IF NOT EXISTS " + t + " (" + k + " VARCHAR(255) NOT NULL PRIMARY KEY, " + s +
                  " BIGINT NOT NULL, " + v + " BIGINT NOT NULL DEFAULT 0)";
        read_ = "SELECT " + s + ", " + v + " FROM " + t + " WHERE " + k + " = " + p(1);  // item
        update_ = "UPDATE " + t + " SET " + s + " = " + s + " - " + p(1) + ", " + v + " = " + v + " + 1 WHERE " + k +
                  " = " + p(2) + " AND " + v + " = " + p(3);  // quantity, item, version
        set_ = "UPDATE " + t + " SET " + s + " = " + p(1) + ", " + v + " = " + v + " + 1 WHERE " + k + " = " + p(2);
        insert_ = "INSERT INTO " + t + " (" + k + ", " + s + ", " + v + ") VALUES (" + p(1) + ", " + p(2) + ", 0)";
    }

    void create_table() override {
        try {
            run([&](connection& c) { return c.execute(create_, {}); });
        } catch (const db_error& e) {
            fail(e, "cannot create table " + options_.table);
        }
    }

    void put(std::string_view item, std::int64_t stock) override {
        const std::string key(item);
        try {
            run([&](connection& c) {
                if (c.execute(set_, {stock, key}) == 0) c.execute(insert_, {key, stock});
                return 0;
            });
        } catch (const db_error& e) {
            fail(e, "cannot set the stock of '" + key + "'");
        }
    }

    std::optional<std::int64_t> stock(std::string_view item) override {
        const std::string key(item);
        try {
            const auto rows = run([&](connection& c) { return c.query(read_, {key}); });
            if (rows.empty() || rows[0].empty()) return std::nullopt;
            return rows[0][0];
        } catch (const db_error& e) {
            fail(e, "cannot read the stock of '" + key + "'");
        }
    }

    stock_result take(std::string_view item, std::int64_t quantity) override {
        const std::string key(item);
        stock_result out;
        const auto start = steady::now();
        try {
            auto c = take_connection();
            // A lost race is retried at once: at most `tries` compare-and-sets,
            // and again only within `window` of the start (the first always runs).
            for (int i = 0; i < options_.tries && (i == 0 || steady::now() - start < options_.window); ++i) {
                const auto rows = c->query(read_, {key});
                if (rows.empty() || rows[0].size() < 2 || !rows[0][0] || !rows[0][1])
                    throw_error(errc::invalid_argument, std::string(db_->name()), "no stock row for '" + key + "'");
                const std::int64_t stock = *rows[0][0], version = *rows[0][1];
                out.remaining = stock;
                if (stock < quantity) {
                    out.outcome = stock_outcome::sold_out;
                    return out;
                }
                ++out.attempts;
                if (c->execute(update_, {quantity, key, version}) == 1) {
                    out.remaining = stock - quantity;
                    out.outcome = stock_outcome::taken;
                    return out;
                }
            }
            out.outcome = stock_outcome::conflict;
        } catch (const db_error& e) {
            fail(e, "stock update of '" + key + "' failed");
        }
        return out;
    }

private:
    // A connection of the pool, given back when done unless it broke.
    class lease {
    public:
        lease(stock_table& owner, std::unique_ptr<connection> c, bool reused)
            : owner_(&owner), conn_(std::move(c)), reused_(reused) {}
        lease(lease&&) noexcept = default;
        lease& operator=(lease&&) = delete;
        ~lease() {
            if (conn_ && !conn_->broken()) owner_->give_back(std::move(conn_));
        }
        connection* operator->() const noexcept { return conn_.get(); }
        connection& operator*() const noexcept { return *conn_; }
        bool reused() const noexcept { return reused_; }

    private:
        stock_table* owner_;
        std::unique_ptr<connection> conn_;
        bool reused_;
    };

    lease take_connection() {
        {
            std::lock_guard lk(mutex_);
            if (!idle_.empty()) {
                auto c = std::move(idle_.back());
                idle_.pop_back();
                return lease(*this, std::move(c), true);
            }
        }
        return lease(*this, db_->connect(), false);
    }

    void give_back(std::unique_ptr<connection> c) noexcept {
        std::lock_guard lk(mutex_);
        if (idle_.size() < max_idle) idle_.push_back(std::move(c));
    }

    // f(connection&) on a pooled connection; an idle one that turns out dead
    // (closed by the server meanwhile) is replaced once.
    template <class F>
    auto run(F&& f) -> decltype(f(std::declval<connection&>())) {
        for (int attempt = 0;; ++attempt) {
            auto c = take_connection();
            try {
                return f(*c);
            } catch (const db_error& e) {
                if (!e.connection_lost() || !c.reused() || attempt > 0) throw;
            }
        }
    }

    [[noreturn]] void fail(const db_error& e, const std::string& doing) const {
        const std::string said = scrub(e.what(), secrets_);
        throw_error(e.code(), std::string(db_->name()), doing + ": " + said, e.native(), said);
    }

    std::unique_ptr<database> db_;
    stock_options options_;
    std::vector<std::string> secrets_;
    std::string create_, read_, update_, set_, insert_;
    std::mutex mutex_;
    std::vector<std::unique_ptr<connection>> idle_;
};

#if !DISTLOCK_TOOL_POSTGRES || !DISTLOCK_TOOL_MYSQL
[[noreturn]] void no_client(const std::string& scheme, const char* library) {
    throw_error(errc::unsupported, scheme,
                "this build of the distlock CLI has no " + std::string(library) + " for " + scheme + "://");
}
#endif

#if DISTLOCK_TOOL_STOCK_PLUGINS
// The plugin distlock-tool-<name>.so (optimistic_stock_client.hpp), from
// <the tool's directory>/../<libdir>/distlock/tools, as installed, or
// ../lib/distlock/tools, the build tree's: the directories the tool's own
// RUNPATH gives for libdistlock, and no others (no variable moves them).
// Loaded once, never unloaded.
std::unique_ptr<database> from_plugin(const std::string& name, const void* settings) {
    static std::mutex mutex;
    static std::map<std::string, std::pair<std::string, plugin_entry>> loaded;  // by name: its path, its entry
    const std::string file = "distlock-tool-" + name + ".so", package = "distlock-tools-" + name;
    std::lock_guard lk(mutex);
    auto it = loaded.find(name);
    if (it == loaded.end()) {
        std::string bin;
        if (char* exe = ::realpath("/proc/self/exe", nullptr)) {
            bin = exe;
            std::free(exe);
            bin.erase(bin.rfind('/'));
        }
        std::vector<std::string> dirs;
        if (!bin.empty()) {
            dirs.push_back(bin + "/../" + DISTLOCK_TOOL_LIBDIR + "/distlock/tools");
            if (std::string_view(DISTLOCK_TOOL_LIBDIR) != "lib") dirs.push_back(bin + "/../lib/distlock/tools");
        }
        std::string path, where;
        for (const auto& d : dirs) {
            where += (where.empty() ? "" : ", ") + d;
            if (path.empty() && ::access((d + "/" + file).c_str(), F_OK) == 0) path = d + "/" + file;
        }
        if (path.empty())
            throw_error(errc::unsupported, name,
                        "the optimistic stock update over " + name + ":// is the tool's plugin " + file +
                            ", which is not installed (looked in " + (where.empty() ? "no directory" : where) +
                            "): install the package " + package);
        void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
        if (handle == nullptr) {
            const char* why = ::dlerror();
            throw_error(errc::unsupported, name,
                        "cannot load " + path + ": " + (why ? why : "dlopen failed") + " (reinstall " + package + ")");
        }
        auto entry = reinterpret_cast<plugin_entry>(::dlsym(handle, plugin_entry_symbol));
        if (entry == nullptr)
            throw_error(errc::unsupported, name,
                        path + " is not a plugin of the distlock tool: it has no " + plugin_entry_symbol + "()");
        it = loaded.emplace(name, std::pair{path, entry}).first;
    }
    database* db = it->second.second(DISTLOCK_VERSION_STRING, name.c_str(), settings);
    if (db == nullptr)
        throw_error(errc::unsupported, name,
                    it->second.first + " is not the plugin for " + name + ":// of this distlock tool's version (" +
                        DISTLOCK_VERSION_STRING + "): install the package " + package + " of that version");
    return std::unique_ptr<database>(db);
}
#endif

postgres_settings postgres_settings_of(spi::url& u, const timeouts& t) {
    constexpr const char* backend = "postgres";
    postgres_settings s;
    s.ep = take_endpoint(u, backend, 5432);
    s.t = t;
    if (auto v = u.take("schema")) s.schema = *v;
    if (!is_identifier(s.schema, 63))
        throw_error(
            errc::invalid_argument, backend,
            "schema '" + s.schema + "' is not a plain identifier ([A-Za-z_][A-Za-z0-9_]*, at most 63 characters)");
    // The URL's TLS parameters as the postgres:// backend reads them (spi/tls.hpp).
    s.tls = spi::take_libpq_tls(u, backend, s.ep.host);
    return s;
}

mysql_settings mysql_settings_of(spi::url& u, const timeouts& t) {
    constexpr const char* backend = "mysql";
    mysql_settings s;
    s.ep = take_endpoint(u, backend, 3306);
    s.t = t;
    // The URL's TLS parameters as the mysql:// backend reads them (spi/tls.hpp).
    auto tls = spi::take_mariadb_tls(u, backend);
    s.tls = tls.tls == spi::mariadb_tls::mode::verify_identity;
    s.tls_ca = std::move(tls.ca);
    s.tls_cert = std::move(tls.cert);
    s.tls_key = std::move(tls.key);
    return s;
}

}  // namespace

std::unique_ptr<optimistic_stock> open_optimistic_stock(std::string_view text, stock_options options) {
    auto u = spi::url::parse(text);
    const std::string scheme = u.scheme() == "postgresql" ? "postgres" : u.scheme();
    if (scheme != "mysql" && scheme != "postgres")
        throw_error(errc::invalid_argument, "sql", "the optimistic stock helper needs a mysql:// or postgres:// URL");
    // The lock backend's parameters may be present: tries/window and the
    // connection's apply, the lock-only ones are ignored.
    for (const char* ignored : {"strategy", "lease", "holder", "table", "pool"}) (void)u.take(ignored);
    if (scheme == "mysql") (void)u.take("fence");
    timeouts t;
    if (auto v = u.take_duration("connect_timeout")) t.connect = *v;
    if (auto v = u.take_duration("timeout")) t.call = *v;
    if (auto v = u.take_int("tries", 1, 1000)) options.tries = static_cast<int>(*v);
    if (auto v = u.take_duration("window")) options.window = *v;
    std::unique_ptr<database> db;
    if (scheme == "postgres") {
        const auto s = postgres_settings_of(u, t);
#if DISTLOCK_TOOL_POSTGRES && DISTLOCK_TOOL_STOCK_PLUGINS
        db = from_plugin(scheme, &s);
#elif DISTLOCK_TOOL_POSTGRES
        db = postgres_database(s);
#else
        no_client(scheme, "PostgreSQL client library (libpq)");
#endif
    } else {
        const auto s = mysql_settings_of(u, t);
#if DISTLOCK_TOOL_MYSQL && DISTLOCK_TOOL_STOCK_PLUGINS
        db = from_plugin(scheme, &s);
#elif DISTLOCK_TOOL_MYSQL
        db = mysql_database(s);
#else
        no_client(scheme, "MySQL client library (mysql-connector-c++)");
#endif
    }
    u.expect_all_taken();
    return std::make_unique<stock_table>(std::move(db), std::move(options), u.secrets());
}

}  // namespace distlock::tool
