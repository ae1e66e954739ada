// The installed <distlock/asio.hpp> from a consumer (standalone Asio, Debian's
// libasio-dev): one coroutine on a single-threaded io_context takes a
// memory:// lock with asio::use_awaitable, sees a second object's zero-timeout
// attempt refused while it is held and granted once it is released. Exits
// non-zero on any failure, including a coroutine that never finished.
#include <asio.hpp>
#include <distlock/asio.hpp>
#include <distlock/distlock.hpp>

#include <chrono>
#include <exception>
#include <iostream>

using namespace std::chrono_literals;

namespace {

int failed(const char* what) {
    std::cerr << "asio consumer: " << what << "\n";
    return 1;
}

// 0 when every step went as expected, else the step's number.
asio::awaitable<int> lock_twice(distlock::provider& locks) {
    auto holder = locks.mutex("stock:asio");
    auto other = locks.mutex("stock:asio");
    if (!co_await distlock::async_lock(holder, 5s, asio::use_awaitable)) co_return 1;
    if (co_await distlock::async_lock(other, 0s, asio::use_awaitable)) co_return 2;  // held: refused
    co_await distlock::async_unlock(holder, asio::use_awaitable);
    if (!co_await distlock::async_lock(other, 0s, asio::use_awaitable)) co_return 3;  // released: granted
    co_await distlock::async_unlock(other, asio::use_awaitable);
    co_return 0;
}

}  // namespace

int main() {
    auto locks = distlock::connect("memory://package-asio-test");
    asio::io_context io;
    int step = -1;  // stays -1 unless the coroutine returns
    std::exception_ptr error;
    asio::co_spawn(io, lock_twice(locks), [&](std::exception_ptr e, int s) {
        error = e;
        step = s;
    });
    io.run();
    if (error) {
        try {
            std::rethrow_exception(error);
        } catch (const std::exception& e) {
            return failed(e.what());
        }
    }
    if (step == -1) return failed("the coroutine did not finish");
    if (step == 1) return failed("the first async_lock was not granted");
    if (step == 2) return failed("a zero-timeout async_lock was granted while the lock was held");
    if (step == 3) return failed("a zero-timeout async_lock was refused after the release");
    std::cout << "distlock " << distlock::version() << " asio consumer: granted, refused while held, granted after\n";
    return 0;
}
