// memory://[space] — in-process locks for users' own unit tests. Every provider
// of the same space in one process shares the lock table, as separate
// connections to one server would.
#include <condition_variable>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "distlock/spi/backend.hpp"

namespace distlock::backends::memory {
namespace {

// One lock: a mutex, a read-write lock or a semaphore (each primitive of a name
// is a slot of its own, as separate keys on a server would be).
struct slot {
    std::uint64_t grant = 0;    // the exclusive grant (mutex, writer), 0 = none
    std::map<std::uint64_t, spi::loss_sink> shared;  // readers or permits, by grant id
    int writers_waiting = 0;    // a waiting writer holds back readers that come later
    std::uint32_t limit = 0;    // the semaphore's size while it has holders
    std::uint64_t counter = 0;  // fencing counter, survives release
    spi::loss_sink lost;        // of the exclusive grant: break_lock reports through it
    std::string holder;         // the exclusive grant's label
    std::uint32_t waiting = 0;  // threads inside acquire() waiting for it
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

// The slot's key: the primitive's letter, then the name.
char letter_of(spi::lock_kind kind) {
    switch (kind) {
        case spi::lock_kind::exclusive:
        case spi::lock_kind::leader: return 'm';  // not asked: no feature::election
        case spi::lock_kind::read:
        case spi::lock_kind::write: return 'r';
        case spi::lock_kind::permit: return 's';
    }
    return 'm';
}

class handle final : public spi::lock_handle {
public:
    handle(table& t, const spi::lock_request& r)
        : table_(t),
          key_(letter_of(r.kind) + r.name),
          name_(r.name),
          holder_(r.holder),
          kind_(r.kind),
          permits_(r.permits) {}

    std::optional<spi::grant> acquire(spi::deadline until, const spi::loss_sink& lost) override {
        std::unique_lock lk(table_.mutex);
        auto& s = table_.slots[key_];
        auto free = [&] {
            switch (kind_) {
                case spi::lock_kind::exclusive:
                case spi::lock_kind::leader: return s.grant == 0;
                case spi::lock_kind::write: return s.grant == 0 && s.shared.empty();
                case spi::lock_kind::read: return s.grant == 0 && s.writers_waiting == 0;
                case spi::lock_kind::permit:
                    if (!s.shared.empty() && s.limit != permits_)
                        throw_error(errc::invalid_argument, "memory",
                                    "semaphore '" + name_ + "' is held with " + std::to_string(s.limit) +
                                        " permits; this one asks for " + std::to_string(permits_));
                    return s.shared.size() < permits_;
            }
            return false;
        };
        const bool writer = kind_ == spi::lock_kind::write;
        const bool waited = !free();
        if (writer) ++s.writers_waiting;
        if (waited) ++s.waiting;
        bool ok = true;
        try {
            if (until == spi::deadline::max()) table_.released.wait(lk, free);
            else ok = table_.released.wait_until(lk, until, free);
        } catch (...) {
            if (writer) --s.writers_waiting;
            if (waited) --s.waiting;
            throw;
        }
        if (waited) --s.waiting;
        if (writer && --s.writers_waiting == 0 && !ok) table_.released.notify_all();  // readers held back by it
        if (!ok) return std::nullopt;
        grant_ = table_.next_grant++;
        if (kind_ == spi::lock_kind::read || kind_ == spi::lock_kind::permit) {
            s.shared.emplace(grant_, lost);
            s.limit = permits_;
        } else {
            s.grant = grant_;
            s.lost = lost;
            s.holder = holder_;
        }
        return spi::grant{++s.counter, spi::clock::now(), waited};  // no lease
    }

    void release() override {
        std::lock_guard lk(table_.mutex);
        auto& s = table_.slots[key_];
        auto mine = std::exchange(grant_, 0);
        const bool had = mine != 0 && (s.grant == mine || s.shared.erase(mine) == 1);
        if (!had) throw_error(errc::not_owner, "memory", "lock '" + name_ + "' is no longer held by this handle");
        if (s.grant == mine) {
            s.grant = 0;
            s.lost = {};
        }
        table_.released.notify_all();
    }

private:
    table& table_;
    std::string key_, name_, holder_;
    spi::lock_kind kind_;
    std::uint32_t permits_;
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
        caps_.implements = {feature::read_write, feature::semaphore, feature::permit_limit, feature::inspect};
    }
    std::string_view name() const noexcept override { return "memory"; }
    const capabilities& caps() const noexcept override { return caps_; }
    std::unique_ptr<spi::lock_handle> make_lock(const spi::lock_request& r) override {
        return std::make_unique<handle>(table_, r);
    }
    lock_info inspect(std::string_view name, spi::lock_kind kind) override {
        lock_info info;
        std::lock_guard lk(table_.mutex);
        auto it = table_.slots.find(letter_of(kind) + std::string(name));
        const bool held = it != table_.slots.end() && it->second.grant != 0;
        info.held = held;
        info.waiters = it == table_.slots.end() ? 0 : it->second.waiting;
        if (held) {
            info.holder = it->second.holder;
            info.token = it->second.counter;
            info.unknown.emplace("remaining", "memory:// has no leases: a grant lasts until unlock()");
        }
        return info;
    }

    void break_lock(std::string_view name) override {
        // Every primitive of the name: its exclusive grant and its shared ones.
        std::vector<spi::loss_sink> lost;
        {
            std::lock_guard lk(table_.mutex);
            for (char letter : {'m', 'r', 's'}) {
                auto it = table_.slots.find(letter + std::string(name));
                if (it == table_.slots.end()) continue;
                auto& s = it->second;
                if (s.grant != 0) lost.push_back(std::exchange(s.lost, {}));
                s.grant = 0;
                for (auto& [id, sink] : s.shared) lost.push_back(std::move(sink));
                s.shared.clear();
            }
            table_.released.notify_all();
        }
        for (const auto& l : lost) l("the lock was broken (testing::break_lock)");
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
