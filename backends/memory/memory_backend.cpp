// memory://[space] — in-process locks for users' own unit tests. Every provider
// of the same space in one process shares the lock table, as separate
// connections to one server would.
#include <condition_variable>
#include <map>
#include <mutex>
#include <utility>

#include "distlock/spi/backend.hpp"

namespace distlock::backends::memory {
namespace {

struct slot {
    std::uint64_t grant = 0;    // current grant id, 0 = free
    std::uint64_t counter = 0;  // fencing counter, survives release
    spi::loss_sink lost;        // of the current grant: break_lock reports through it
};

struct table {
    std::mutex mutex;
    std::condition_variable released;
    std::map<std::string, slot, std::less<>> slots;
    std::uint64_t next_grant = 1;
};

table& table_for(const std::string& space) {
    static std::mutex spaces_mutex;
    static std::map<std::string, std::unique_ptr<table>> spaces;  // lives as long as the process
    std::lock_guard lk(spaces_mutex);
    auto& t = spaces[space];
    if (!t) t = std::make_unique<table>();
    return *t;
}

class handle final : public spi::lock_handle {
public:
    handle(table& t, std::string name) : table_(t), name_(std::move(name)) {}

    std::optional<spi::grant> acquire(spi::deadline until, const spi::loss_sink& lost) override {
        std::unique_lock lk(table_.mutex);
        auto& s = table_.slots[name_];
        auto free = [&] { return s.grant == 0; };
        if (until == spi::deadline::max()) table_.released.wait(lk, free);
        else if (!table_.released.wait_until(lk, until, free)) return std::nullopt;
        grant_ = s.grant = table_.next_grant++;
        s.lost = lost;
        return spi::grant{++s.counter, spi::clock::now()};  // no lease
    }

    void release() override {
        std::lock_guard lk(table_.mutex);
        auto& s = table_.slots[name_];
        auto mine = std::exchange(grant_, 0);
        if (s.grant != mine || mine == 0)
            throw_error(errc::not_owner, "memory", "lock '" + name_ + "' is no longer held by this handle");
        s.grant = 0;
        s.lost = {};
        table_.released.notify_all();
    }

private:
    table& table_;
    std::string name_;
    std::uint64_t grant_ = 0;
};

class backend final : public spi::backend {
public:
    explicit backend(table& t) : table_(t) {
        caps_.unsupported = {
            {feature::cross_process, "memory:// is in-process: other processes cannot see it"},
            {feature::crash_release, "in-process: a crash ends every holder with the process"},
            {feature::lease_expiry, "no leases: a grant lasts until unlock()"},
        };
    }
    std::string_view name() const noexcept override { return "memory"; }
    const capabilities& caps() const noexcept override { return caps_; }
    std::unique_ptr<spi::lock_handle> make_lock(const spi::lock_request& r) override {
        return std::make_unique<handle>(table_, r.name);
    }
    void break_lock(std::string_view name) override {
        spi::loss_sink lost;
        {
            std::lock_guard lk(table_.mutex);
            auto it = table_.slots.find(name);
            if (it != table_.slots.end()) {
                it->second.grant = 0;
                lost = std::exchange(it->second.lost, {});
            }
            table_.released.notify_all();
        }
        lost("the lock was broken (testing::break_lock)");
    }

private:
    table& table_;
    capabilities caps_;
};

}  // namespace

void register_backend(spi::registry& r) {
    r.add("memory", [](spi::url& u) -> std::shared_ptr<spi::backend> {
        if (u.hosts().size() > 1 || (!u.path().empty() && u.path() != "/"))
            throw_error(errc::invalid_argument, "memory", "memory:// takes at most a space name: memory://[space]");
        return std::make_shared<backend>(table_for(u.hosts().empty() ? std::string{} : u.hosts()[0].host));
    });
}

}  // namespace distlock::backends::memory
