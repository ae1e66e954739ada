#include "scheduler.hpp"

#include <mutex>
#include <set>
#include <thread>
#include <unordered_map>
#include <vector>

#include "boundary.hpp"
#include "process.hpp"

namespace distlock::detail {

// Everything the thread touches. The thread holds it (a shared_ptr in its
// lambda), so that a scheduler destroyed from the thread itself, which cannot
// join, leaves nothing behind that the thread still uses.
struct scheduler::state {
    struct entry {
        spi::lock_handle* handle;
        std::chrono::milliseconds interval, lease;
        bool renew;
        clock::time_point due, last_ok;
        lost_fn lost;
        failed_fn failed;
        std::atomic<clock::rep>* valid_until;
        bool in_flight = false;  // a keepalive or callback of it is running
        bool removing = false;   // remove() waits for it: not renewed again
        bool dead = false;       // lost: erased once its callback has run
    };

    state(std::shared_ptr<spi::backend> b, std::shared_ptr<distlock::observer> w, std::string s)
        : backend(std::move(b)), watcher(std::move(w)), scheme(std::move(s)) {}
    void run();
    // An entry's keepalive or callbacks are over: it is due again at e.due,
    // unless remove() waits for it.
    void settle(entry_id id, entry& e) {
        e.in_flight = false;
        if (!e.removing) queue.emplace(e.due, id);
    }

    const std::shared_ptr<spi::backend> backend;
    const std::shared_ptr<distlock::observer> watcher;
    const std::string scheme;
    const unsigned generation = fork_generation();  // of the process that made it
    std::mutex mutex;
    std::condition_variable wake, done;
    std::unordered_map<entry_id, entry> entries;
    // The entries not in flight, by due time: a wake-up looks at the ones due
    // and not at every held lock (100,000 of them scanned twice a wake-up were
    // most of the thread's time).
    std::set<std::pair<clock::time_point, entry_id>> queue;
    entry_id next_id = 1;
    bool stop = false;
    clock::time_point sleeping_until = clock::time_point::min();  // when the thread waits, until when
    // Longest sleep with nothing due: half the shortest first interval added, so
    // that add() need not wake the thread while locks come and go; it grows back
    // (doubling, up to max_idle_wait) while nothing is added.
    static constexpr clock::duration max_idle_wait = std::chrono::seconds{1};
    clock::duration idle_wait = max_idle_wait;
    std::uint64_t adds = 0;
    std::atomic<std::uint64_t> wakeups{0};
    std::thread thread;
    std::thread::id thread_id;
};

scheduler::scheduler(std::shared_ptr<spi::backend> backend, std::shared_ptr<distlock::observer> watcher,
                     std::string scheme)
    : state_(std::make_shared<state>(std::move(backend), std::move(watcher), std::move(scheme))) {}

scheduler::~scheduler() { stop_worker(std::move(state_)); }

std::uint64_t scheduler::wakeups() const noexcept { return state_->wakeups.load(); }

scheduler::entry_id scheduler::add(watch w) {
    auto& st = *state_;
    std::lock_guard lk(st.mutex);
    if (!st.thread.joinable()) {
        st.thread = std::thread([s = state_] { s->run(); });
        st.thread_id = st.thread.get_id();
    }
    entry_id id = st.next_id++;
    ++st.adds;
    auto first = w.renew ? w.interval : w.lease;
    st.idle_wait =
        std::min<clock::duration>(st.idle_wait, std::max<clock::duration>(first / 2, std::chrono::milliseconds{10}));
    const auto due = w.since + first;
    st.entries.emplace(id, state::entry{w.handle, w.interval, w.lease, w.renew, due, w.since, std::move(w.lost),
                                        std::move(w.failed), w.valid_until});
    st.queue.emplace(due, id);
    // Wake the thread only when the entry falls due before it would wake anyway:
    // a lock taken and released within half an interval costs no wake-up.
    if (due < st.sleeping_until) st.wake.notify_all();
    return id;
}

void scheduler::remove(entry_id id) {
    auto& st = *state_;
    std::unique_lock lk(st.mutex);
    auto i = st.entries.find(id);
    if (i == st.entries.end()) return;
    // Out of the queue at once: a renewal under way is waited for, but the
    // thread does not take the entry again meanwhile (with every lock late,
    // it would start the next batch before a waiting unlock() got the lock).
    if (!i->second.in_flight && !i->second.removing) st.queue.erase({i->second.due, id});
    i->second.removing = true;
    if (std::this_thread::get_id() != st.thread_id)
        st.done.wait(lk, [&] {
            i = st.entries.find(id);
            return i == st.entries.end() || !i->second.in_flight;
        });
    if (i != st.entries.end()) st.entries.erase(i);
}

// An entry stays in the map, marked in_flight, while its keepalive or one of its
// callbacks runs, so that remove() (from unlock) waits for them: the callbacks
// point into the mutex that owns the entry.
void scheduler::state::run() {
    using st = spi::keepalive_result::status;
    std::unique_lock lk(mutex);
    std::vector<entry_id> batch;
    std::vector<spi::lock_handle*> handles;
    std::vector<spi::keepalive_result> results;
    std::vector<std::pair<entry_id, std::function<void()>>> calls;
    while (!stop) {
        auto now = clock::now();
        auto next = clock::time_point::max();
        batch.clear();
        handles.clear();
        calls.clear();
        auto first_due = clock::time_point::max(), least_left = clock::time_point::max();
        // Entries falling due within a short window of each other go out in one
        // batch (one round trip for backends that batch renewals).
        constexpr clock::duration max_window = std::chrono::milliseconds{100};
        bool any_due = false;
        for (auto it = queue.begin(); !any_due && it != queue.end() && it->first <= now; ++it)
            any_due = entries.at(it->second).renew;
        const auto horizon = now + (any_due ? max_window : clock::duration::zero());
        for (auto it = queue.begin(); it != queue.end() && it->first <= horizon;) {
            const auto id = it->second;
            auto& e = entries.at(id);
            const auto window =
                e.renew && any_due ? std::min<clock::duration>(e.interval / 4, max_window) : clock::duration::zero();
            if (e.due > now + window) {
                ++it;
                continue;
            }
            it = queue.erase(it);
            e.in_flight = true;
            if (e.renew) {
                batch.push_back(id);
                handles.push_back(e.handle);
                first_due = std::min(first_due, e.due);
                least_left = std::min(least_left, e.last_ok + e.lease);
            } else {
                e.dead = true;
                calls.emplace_back(id, [lost = e.lost] { lost("lease expired (auto_renew is off)"); });
            }
        }
        if (!queue.empty()) next = queue.begin()->first;
        if (batch.empty() && calls.empty()) {
            // With nothing due, wake up now and then all the same, so that add()
            // need not wake the thread; while nothing is added the sleeps grow
            // back, so that a short lease seen once does not keep the thread
            // waking every few milliseconds for ever.
            const auto adds_before = adds;
            sleeping_until = std::min(next, now + idle_wait);
            wake.wait_until(lk, sleeping_until);
            sleeping_until = clock::time_point::min();
            ++wakeups;
            if (adds == adds_before) idle_wait = std::min(idle_wait * 2, max_idle_wait);
            continue;
        }
        if (!batch.empty()) {
            results.assign(handles.size(), spi::keepalive_result::ok());
            const auto sent = clock::now();  // a renewal extends the lease from when the server got it, at best
            lk.unlock();
            try {
                backend->keepalive_batch(handles, results);
            } catch (const error& ex) {
                for (auto& r : results) r = spi::keepalive_result::failed(ex.what());
            } catch (const std::exception& ex) {  // its message may quote a secret: not shown
                for (auto& r : results) r = spi::keepalive_result::failed(foreign_exception_text(ex));
            } catch (...) {
                for (auto& r : results) r = spi::keepalive_result::failed("keepalive failed");
            }
            auto after = clock::now();
            if (watcher != nullptr) {
                renewal_event ev{scheme, handles.size(), 0, 0, 0, after - sent, sent - first_due, least_left - sent};
                for (const auto& r : results) ++(r.state == st::ok ? ev.ok : r.state == st::lost ? ev.lost : ev.failed);
                try {
                    watcher->renewed(ev);
                } catch (...) {}
            }
            lk.lock();
            for (std::size_t k = 0; k < batch.size(); ++k) {
                auto it = entries.find(batch[k]);
                if (it == entries.end()) continue;
                auto& e = it->second;
                const auto& r = results[k];
                if (r.state == st::ok) {
                    e.last_ok = sent;
                    e.due = sent + e.interval;
                    settle(batch[k], e);
                    if (e.valid_until) e.valid_until->store((sent + e.lease).time_since_epoch().count());
                } else if (r.state == st::lost || after - e.last_ok >= e.lease) {
                    std::string why =
                        r.state == st::lost ? r.message : "no successful renewal for a whole lease (" + r.message + ")";
                    e.dead = true;
                    calls.emplace_back(batch[k], [lost = e.lost, why] { lost(why); });
                } else {
                    // Could not tell: try again sooner, and tell the user.
                    e.due = after + std::max(std::chrono::milliseconds{20}, e.interval / 4);
                    if (e.failed) {
                        calls.emplace_back(batch[k], [failed = e.failed, m = r.message] { failed(m); });
                    } else {
                        settle(batch[k], e);
                    }
                }
            }
            done.notify_all();
        }
        if (calls.empty()) continue;
        lk.unlock();
        for (auto& c : calls) {
            try {
                c.second();
            } catch (...) {}
        }
        lk.lock();
        for (auto& c : calls) {
            auto it = entries.find(c.first);
            if (it == entries.end()) continue;
            if (it->second.dead) {
                entries.erase(it);
            } else {
                settle(c.first, it->second);
            }
        }
        done.notify_all();
    }
}

}  // namespace distlock::detail
