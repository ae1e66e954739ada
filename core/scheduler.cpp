#include "scheduler.hpp"

#include <vector>

namespace distlock::detail {

scheduler::~scheduler() {
    {
        std::lock_guard lk(mutex_);
        stop_ = true;
    }
    wake_.notify_all();
    if (thread_.joinable()) {
        if (std::this_thread::get_id() == thread_id_) thread_.detach();  // destroyed from one of its callbacks
        else thread_.join();
    }
}

scheduler::entry_id scheduler::add(watch w) {
    std::lock_guard lk(mutex_);
    if (!thread_.joinable()) {
        thread_ = std::thread([this] { run(); });
        thread_id_ = thread_.get_id();
    }
    entry_id id = next_id_++;
    ++adds_;
    auto first = w.renew ? w.interval : w.lease;
    idle_wait_ = std::min<clock::duration>(idle_wait_, std::max<clock::duration>(first / 2, std::chrono::milliseconds{10}));
    const auto due = w.since + first;
    entries_.emplace(id, entry{w.handle, w.interval, w.lease, w.renew, due, w.since, std::move(w.lost),
                               std::move(w.failed), w.valid_until});
    // Wake the thread only when the entry falls due before it would wake anyway:
    // a lock taken and released within half an interval costs no wake-up.
    if (due < sleeping_until_) wake_.notify_all();
    return id;
}

void scheduler::remove(entry_id id) {
    std::unique_lock lk(mutex_);
    if (std::this_thread::get_id() != thread_id_)
        done_.wait(lk, [&] {
            auto i = entries_.find(id);
            return i == entries_.end() || !i->second.in_flight;
        });
    entries_.erase(id);
}

// An entry stays in the map, marked in_flight, while its keepalive or one of its
// callbacks runs, so that remove() (from unlock) waits for them: the callbacks
// point into the mutex that owns the entry.
void scheduler::run() {
    using st = spi::keepalive_result::status;
    std::unique_lock lk(mutex_);
    std::vector<entry_id> batch;
    std::vector<spi::lock_handle*> handles;
    std::vector<spi::keepalive_result> results;
    std::vector<std::pair<entry_id, std::function<void()>>> calls;
    while (!stop_) {
        auto now = clock::now();
        auto next = clock::time_point::max();
        batch.clear();
        handles.clear();
        calls.clear();
        // Entries falling due within a short window of each other go out in one
        // batch (one round trip for backends that batch renewals).
        bool any_due = false;
        for (const auto& [id, e] : entries_) any_due = any_due || (!e.in_flight && e.renew && e.due <= now);
        for (auto& [id, e] : entries_) {
            if (e.in_flight) continue;
            const auto window = e.renew && any_due
                                    ? std::min<clock::duration>(e.interval / 4, std::chrono::milliseconds{100})
                                    : clock::duration::zero();
            if (e.due > now + window) {
                next = std::min(next, e.due);
                continue;
            }
            e.in_flight = true;
            if (e.renew) {
                batch.push_back(id);
                handles.push_back(e.handle);
            } else {
                e.dead = true;
                calls.emplace_back(id, [lost = e.lost] { lost("lease expired (auto_renew is off)"); });
            }
        }
        if (batch.empty() && calls.empty()) {
            // With nothing due, wake up now and then all the same, so that add()
            // need not wake the thread; while nothing is added the sleeps grow
            // back, so that a short lease seen once does not keep the thread
            // waking every few milliseconds for ever.
            const auto adds_before = adds_;
            sleeping_until_ = std::min(next, now + idle_wait_);
            wake_.wait_until(lk, sleeping_until_);
            sleeping_until_ = clock::time_point::min();
            ++wakeups_;
            if (adds_ == adds_before) idle_wait_ = std::min(idle_wait_ * 2, max_idle_wait);
            continue;
        }
        if (!batch.empty()) {
            results.assign(handles.size(), spi::keepalive_result::ok());
            const auto sent = clock::now();  // a renewal extends the lease from when the server got it, at best
            lk.unlock();
            try {
                backend_.keepalive_batch(handles, results);
            } catch (const std::exception& ex) {
                for (auto& r : results) r = spi::keepalive_result::failed(ex.what());
            } catch (...) {
                for (auto& r : results) r = spi::keepalive_result::failed("keepalive failed");
            }
            auto after = clock::now();
            if (watcher_ != nullptr) {
                renewal_event ev{scheme_, handles.size(), 0, 0, 0, after - sent};
                for (const auto& r : results)
                    ++(r.state == st::ok ? ev.ok : r.state == st::lost ? ev.lost : ev.failed);
                try {
                    watcher_->renewed(ev);
                } catch (...) {
                }
            }
            lk.lock();
            for (std::size_t k = 0; k < batch.size(); ++k) {
                auto it = entries_.find(batch[k]);
                if (it == entries_.end()) continue;
                auto& e = it->second;
                const auto& r = results[k];
                if (r.state == st::ok) {
                    e.in_flight = false;
                    e.last_ok = sent;
                    e.due = sent + e.interval;
                    if (e.valid_until) e.valid_until->store((sent + e.lease).time_since_epoch().count());
                } else if (r.state == st::lost || after - e.last_ok >= e.lease) {
                    std::string why =
                        r.state == st::lost ? r.message : "no successful renewal for a whole lease (" + r.message + ")";
                    e.dead = true;
                    calls.emplace_back(batch[k], [lost = e.lost, why] { lost(why); });
                } else {
                    // Could not tell: try again sooner, and tell the user.
                    e.due = after + std::max(std::chrono::milliseconds{20}, e.interval / 4);
                    if (e.failed) calls.emplace_back(batch[k], [failed = e.failed, m = r.message] { failed(m); });
                    else e.in_flight = false;
                }
            }
            done_.notify_all();
        }
        if (calls.empty()) continue;
        lk.unlock();
        for (auto& c : calls) {
            try {
                c.second();
            } catch (...) {
            }
        }
        lk.lock();
        for (auto& c : calls) {
            auto it = entries_.find(c.first);
            if (it == entries_.end()) continue;
            if (it->second.dead) entries_.erase(it);
            else it->second.in_flight = false;
        }
        done_.notify_all();
    }
}

}  // namespace distlock::detail
