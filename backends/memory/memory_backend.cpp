// memory://[space] — in-process locks for users' own unit tests. Every provider
// of the same space in one process shares the lock table, as separate
// connections to one server would.
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "distlock/spi/backend.hpp"
#include "memory_backend.hpp"

namespace distlock::backends::memory {
namespace {

constexpr const char* kBackend = "memory";
constexpr const char* no_leases = "memory:// has no leases: a grant lasts until unlock()";

// One lock: a mutex, a read-write lock or a semaphore (each primitive of a name
// is a slot of its own, as separate keys on a server would be). A slot lives
// only while it is held or waited for: a service that locks a new name per
// request leaves nothing behind.
// A read grant or a permit.
struct shared_grant {
    spi::loss_sink lost;  // break_lock reports through it
    std::string holder;   // its label
};

struct slot {
    std::uint64_t grant = 0;                       // the exclusive grant (mutex, writer) and its token, 0 = none
    std::map<std::uint64_t, shared_grant> shared;  // readers or permits, by grant (= token)
    int writers_waiting = 0;                       // a waiting writer holds back readers that come later
    std::uint32_t limit = 0;                       // the semaphore's size while it has holders
    spi::loss_sink lost;                           // of the exclusive grant: break_lock reports through it
    std::string holder;                            // the exclusive grant's label
    std::uint32_t waiting = 0;                     // threads inside acquire() and asynchronous waiters

    bool unused() const noexcept { return grant == 0 && shared.empty() && waiting == 0 && writers_waiting == 0; }
};

using slot_map = std::map<std::string, slot, std::less<>>;

// Every grant of every space draws its token (which is also its grant id) from
// this one counter, always under its table's mutex: each name's tokens
// increase although its slot, or its whole space, was freed and made again.
std::atomic<std::uint64_t> next_token{1};

struct table {
    std::mutex mutex;
    std::condition_variable released;
    slot_map slots;
    // The asynchronous waiters' wake-ups, by slot key (lock_handle::watch_releases).
    std::multimap<std::string, const spi::wake_sink*, std::less<>> watchers;

    void drop_if_unused(slot_map::iterator it) {
        if (it->second.unused()) slots.erase(it);
    }
    // A grant of `key` went (under `mutex`): blocked threads and asynchronous
    // waiters of it try again. The sinks only queue an attempt.
    void announce(std::string_view key) {
        released.notify_all();
        for (auto [it, end] = watchers.equal_range(key); it != end; ++it) (*it->second)();
    }
};

// One asynchronous waiter's wake-ups and its place, for its whole wait (its
// one-attempt acquire() calls come and go): it counts among the slot's waiters
// (inspect) and, for a writer, among the waiting writers that hold back the
// readers that come later, as a blocked thread does. Registered in its table
// until destroyed (under the table's mutex, so that no wake-up comes after).
class watch final : public spi::wake_subscription {
public:
    watch(std::shared_ptr<table> t, const std::string& key, bool writer, spi::wake_sink wake)
        : table_(std::move(t)), key_(key), writer_(writer), wake_(std::move(wake)) {
        std::lock_guard lk(table_->mutex);
        auto& s = table_->slots.try_emplace(key_).first->second;
        ++s.waiting;
        if (writer_) ++s.writers_waiting;
        entry_ = table_->watchers.emplace(key_, &wake_);
    }
    ~watch() override {
        std::lock_guard lk(table_->mutex);
        table_->watchers.erase(entry_);
        const auto it = table_->slots.find(key_);  // kept by the counts below
        if (it == table_->slots.end()) return;
        --it->second.waiting;
        const bool readers_held_back = writer_ && --it->second.writers_waiting == 0;
        table_->drop_if_unused(it);
        if (readers_held_back) table_->announce(key_);
    }

private:
    std::shared_ptr<table> table_;
    std::string key_;
    bool writer_;
    spi::wake_sink wake_;
    decltype(table::watchers)::iterator entry_;
};

// The tables of the spaces some provider or lock still uses, by space name: a
// space goes with its last user. Never destroyed itself, since a table may go
// after static destruction began (a provider kept in a static).
struct spaces {
    std::mutex mutex;
    std::map<std::string, std::weak_ptr<table>, std::less<>> tables;
};

spaces& all_spaces() {
    static auto* all = new spaces;
    return *all;
}

std::shared_ptr<table> table_for(const std::string& space) {
    auto& all = all_spaces();
    std::lock_guard lk(all.mutex);
    auto& entry = all.tables[space];
    if (auto t = entry.lock()) return t;
    std::shared_ptr<table> t(new table, [space](table* gone) {
        delete gone;
        auto& all = all_spaces();
        std::lock_guard lk(all.mutex);
        // Unless the space was made again meanwhile.
        if (auto it = all.tables.find(space); it != all.tables.end() && it->second.expired()) all.tables.erase(it);
    });
    entry = t;
    return t;
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
    handle(std::shared_ptr<table> t, const spi::lock_request& r)
        : table_(std::move(t)),
          key_(letter_of(r.kind) + r.name),
          name_(r.name),
          holder_(r.holder),
          kind_(r.kind),
          permits_(r.permits) {}

    std::optional<spi::grant> acquire(spi::deadline until, const spi::loss_sink& lost) override {
        std::unique_lock lk(table_->mutex);
        const auto it = table_->slots.try_emplace(key_).first;
        // Still under the lock, however this returns: a slot that nobody holds
        // or waits for goes (a timeout, a refused semaphore size).
        struct drop_unless_used {
            table& t;
            slot_map::iterator it;
            ~drop_unless_used() { t.drop_if_unused(it); }
        } drop{*table_, it};
        auto& s = it->second;
        auto free = [&] {
            switch (kind_) {
                case spi::lock_kind::exclusive:
                case spi::lock_kind::leader: return s.grant == 0;
                case spi::lock_kind::write: return s.grant == 0 && s.shared.empty();
                case spi::lock_kind::read: return s.grant == 0 && s.writers_waiting == 0;
                case spi::lock_kind::permit:
                    if (!s.shared.empty() && s.limit != permits_)
                        throw_error(errc::invalid_argument, kBackend,
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
            if (until == spi::deadline::max()) table_->released.wait(lk, free);
            else ok = table_->released.wait_until(lk, until, free);
        } catch (...) {
            if (writer) --s.writers_waiting;
            if (waited) --s.waiting;
            throw;
        }
        if (waited) --s.waiting;
        if (writer && --s.writers_waiting == 0 && !ok) table_->announce(key_);  // readers held back by it
        if (!ok) return std::nullopt;
        grant_ = next_token++;
        if (kind_ == spi::lock_kind::read || kind_ == spi::lock_kind::permit) {
            s.shared.emplace(grant_, shared_grant{lost, holder_});
            s.limit = permits_;
        } else {
            s.grant = grant_;
            s.lost = lost;
            s.holder = holder_;
        }
        return spi::grant{grant_, spi::clock::now(), waited};  // no lease
    }

    void release() override {
        std::lock_guard lk(table_->mutex);
        const auto mine = std::exchange(grant_, 0);
        const auto it = table_->slots.find(key_);
        if (mine == 0 || it == table_->slots.end() || (it->second.grant != mine && it->second.shared.erase(mine) == 0))
            throw_error(errc::not_owner, kBackend, "lock '" + name_ + "' is no longer held by this handle");
        auto& s = it->second;
        if (s.grant == mine) {
            s.grant = 0;
            s.lost = {};
            s.holder.clear();
        }
        table_->drop_if_unused(it);
        table_->announce(key_);
    }

    std::unique_ptr<spi::wake_subscription> watch_releases(spi::wake_sink wake) override {
        return std::make_unique<watch>(table_, key_, kind_ == spi::lock_kind::write, std::move(wake));
    }

private:
    std::shared_ptr<table> table_;  // the space lives as long as a lock of it
    std::string key_, name_, holder_;
    spi::lock_kind kind_;
    std::uint32_t permits_;
    std::uint64_t grant_ = 0;
};

class backend final : public spi::backend {
public:
    explicit backend(std::shared_ptr<table> t) : table_(std::move(t)) {
        caps_.unsupported = {
            {feature::cross_process, "memory:// is in-process: other processes cannot see it"},
            {feature::crash_release, "in-process: a crash ends every holder with the process"},
            {feature::lease_expiry, "no leases: a grant lasts until unlock()"},
        };
        caps_.implements = {feature::read_write, feature::semaphore, feature::permit_limit, feature::inspect,
                            feature::inspect_primitives};
    }
    std::string_view name() const noexcept override { return kBackend; }
    const capabilities& caps() const noexcept override { return caps_; }
    std::unique_ptr<spi::lock_handle> make_lock(const spi::lock_request& r) override {
        return std::make_unique<handle>(table_, r);
    }
    lock_info inspect(std::string_view name, spi::lock_kind kind) override {
        lock_info info;
        std::lock_guard lk(table_->mutex);
        auto it = table_->slots.find(letter_of(kind) + std::string(name));
        const bool held = it != table_->slots.end() && it->second.grant != 0;
        info.held = held;
        info.waiters = it == table_->slots.end() ? 0 : it->second.waiting;
        if (held) {
            info.holder = it->second.holder;
            info.token = it->second.grant;
            info.unknown.emplace("remaining", no_leases);
        }
        return info;
    }

    read_write_info inspect_read_write(std::string_view name) override {
        read_write_info info;
        std::lock_guard lk(table_->mutex);
        const auto it = table_->slots.find('r' + std::string(name));  // both sides' slot
        const bool held = it != table_->slots.end() && it->second.grant != 0;
        info.write_held = held;
        if (held) {
            info.writer = grant_info{it->second.holder, it->second.grant, std::nullopt};
            info.unknown.emplace("writer.remaining", no_leases);
        }
        info.readers.emplace();
        info.writers_waiting = 0;
        if (it == table_->slots.end()) return info;
        for (const auto& [token, g] : it->second.shared) info.readers->push_back({g.holder, token, {}});
        if (!info.readers->empty()) info.unknown.emplace("readers.remaining", no_leases);
        info.writers_waiting = static_cast<std::uint32_t>(it->second.writers_waiting);
        return info;
    }

    semaphore_info inspect_semaphore(std::string_view name) override {
        semaphore_info info;
        std::lock_guard lk(table_->mutex);
        const auto it = table_->slots.find('s' + std::string(name));
        info.permits.emplace();
        if (it == table_->slots.end() || it->second.shared.empty()) {
            info.unknown.emplace("size", "memory:// keeps a semaphore's size only while a permit of it is held");
            info.unknown.emplace("free", "the size is not known while no permit is held");
            return info;
        }
        for (const auto& [token, g] : it->second.shared) info.permits->push_back({g.holder, token, {}});
        info.size = it->second.limit;
        info.free = it->second.limit - static_cast<std::uint32_t>(info.permits->size());
        info.unknown.emplace("permits.remaining", no_leases);
        return info;
    }

    void break_lock(std::string_view name) override {
        // Every primitive of the name: its exclusive grant and its shared ones.
        std::vector<spi::loss_sink> lost;
        {
            std::lock_guard lk(table_->mutex);
            for (char letter : {'m', 'r', 's'}) {
                const auto key = letter + std::string(name);
                auto it = table_->slots.find(key);
                if (it == table_->slots.end()) continue;
                auto& s = it->second;
                if (s.grant != 0) lost.push_back(std::exchange(s.lost, {}));
                s.grant = 0;
                s.holder.clear();
                for (auto& [id, g] : s.shared) lost.push_back(std::move(g.lost));
                s.shared.clear();
                table_->drop_if_unused(it);
                table_->announce(key);
            }
        }
        for (const auto& l : lost) l("the lock was broken (testing::break_lock)");
    }

private:
    std::shared_ptr<table> table_;
    capabilities caps_;
};

}  // namespace

std::size_t slot_count(std::string_view space) {
    std::shared_ptr<table> t;  // released after the spaces' mutex: it may be the last user
    {
        auto& all = all_spaces();
        std::lock_guard lk(all.mutex);
        if (auto it = all.tables.find(space); it != all.tables.end()) t = it->second.lock();
    }
    if (!t) return 0;
    std::lock_guard lk(t->mutex);
    return t->slots.size();
}

std::size_t space_count() {
    auto& all = all_spaces();
    std::lock_guard lk(all.mutex);
    return static_cast<std::size_t>(
        std::count_if(all.tables.begin(), all.tables.end(), [](const auto& e) { return !e.second.expired(); }));
}

void register_backend(spi::registry& r) {
    r.add("memory", [](spi::url& u) -> std::shared_ptr<spi::backend> {
        if (u.hosts().size() > 1 || (!u.path().empty() && u.path() != "/"))
            throw_error(errc::invalid_argument, kBackend, "memory:// takes at most a space name: memory://[space]");
        return std::make_shared<backend>(table_for(u.hosts().empty() ? std::string{} : u.hosts()[0].host));
    });
}

}  // namespace distlock::backends::memory
