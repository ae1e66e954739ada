// The SQL backend's context (see context.hpp): the texts, the pool and the lock
// tables its handles work with.
#include <thread>
#include <utility>

#include "context.hpp"

namespace distlock::backends::sql {

using namespace std::chrono_literals;

context::context(std::shared_ptr<sql::dialect> d, sql::settings s)
    : dialect_(d),
      settings_(std::move(s)),
      q_(d->texts(settings_.table)),
      lock_rows_{settings_.table, q_.lease_renew, q_.lease_release, q_.lease_clear},
      pool_(d, settings_.max_idle, q_.set_wait, ms(settings_.conn.timeout / 2)),
      name_(d->name()) {}

void context::create_tables() {
    for (int attempt = 0;; ++attempt) {
        try {
            pool_.run([&](connection& c) {
                for (const auto& s : q_.create) c.exec(s);
                dialect_->migrate(c, settings_.table);
                return 0;
            });
            pool_.guard_fences(q_.fence_guard_probe, q_.fence_guard);  // its tables exist now
            return;
        } catch (const sql_error& e) {
            // The first statement of a provider: a connection or login failure is that, not a table problem.
            const bool connecting = e.kind() == failure::cannot_connect || e.kind() == failure::access_denied ||
                                    e.kind() == failure::no_database || e.kind() == failure::wrong_server;
            if (e.fatal() || connecting || attempt >= 2)
                throw_client_error(e, name_, connecting ? "cannot connect" : "cannot create the lock tables");
            std::this_thread::sleep_for(20ms);
        }
    }
}

std::int64_t context::permit_key(std::string_view name) const {
    const std::string d = spi::sha256(dialect_->key_namespace() + std::string(name));
    std::uint64_t k = 0;
    for (std::size_t i = 8; i < 16; ++i) k = (k << 8) | static_cast<unsigned char>(d[i]);
    return static_cast<std::int64_t>(k);
}

release_listener& context::releases() {
    std::lock_guard lk(releases_mutex_);
    if (!releases_) releases_ = std::make_unique<release_listener>(*this);
    return *releases_;
}

}  // namespace distlock::backends::sql
