// The SQL layer: one LISTEN session per provider, shared by every asynchronous
// waiter of its lease rows (lock_handle::watch_releases), where the server
// notifies releases (PostgreSQL LISTEN/NOTIFY: sql_texts::listen). One thread
// reads the session's notifications and wakes the waiters of each name it
// names: one connection and one thread however many waiters. Made on first use
// by context::releases().
#pragma once

#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "sql.hpp"

namespace distlock::backends::sql {

class context;

class release_listener {
public:
    explicit release_listener(context& ctx);
    ~release_listener();
    release_listener(const release_listener&) = delete;
    release_listener& operator=(const release_listener&) = delete;

    // Calls `wake` for each notification of `payload` (the lowercase hex
    // SHA-256 of a name), and once whenever the session LISTENs again after it
    // broke (notifications may have been missed), until the subscription is
    // destroyed (its destructor returns after any call under way). Waits, a
    // command timeout at most, for the session to LISTEN before returning.
    std::unique_ptr<spi::wake_subscription> watch(std::string payload, spi::wake_sink wake);

    // Waiters watching now, whether the session LISTENs now, and how many
    // wake-ups it has given (each call of a waiter's sink).
    std::size_t watchers();
    bool listening();
    std::uint64_t wakes();

    // How long the session is kept after its last waiter left.
    static constexpr std::chrono::milliseconds linger{1000};

private:
    class subscription;
    void unwatch(const std::string& payload, std::uint64_t id);
    void run();
    // Opens the session and LISTENs (lock not held); null when it failed.
    std::unique_ptr<connection> open() noexcept;
    void dispatch(const std::vector<std::string>& payloads);  // mutex_ held
    void wake_all();                                          // mutex_ held

    context& ctx_;
    std::mutex mutex_;
    std::condition_variable cv_;
    std::map<std::string, std::map<std::uint64_t, spi::wake_sink>, std::less<>> waiters_;
    std::size_t count_ = 0;  // entries of waiters_'s maps
    std::uint64_t next_id_ = 0;
    std::uint64_t wakes_ = 0;
    bool listening_ = false;
    bool missed_ = false;  // a watch() returned before the session LISTENed
    bool stop_ = false;
    std::thread thread_;  // started by the first watch()
};

}  // namespace distlock::backends::sql
