// Uses only the installed public headers and library.
#include <distlock/distlock.hpp>

#include <chrono>
#include <iostream>
#include <mutex>

int main() {
    auto locks = distlock::connect("memory://package-test");
    auto m = locks.mutex("stock:product_01");
    std::uint64_t first = 0;
    {
        std::unique_lock lk(m, std::chrono::seconds(1));
        if (!lk) return 1;
        first = m.token();
    }
    std::lock_guard again(m);
    if (m.token() <= first) return 2;
    if (distlock::version() != DISTLOCK_VERSION_STRING) return 3;  // the library is the headers' version
    std::cout << "distlock " << distlock::version() << " consumer: tokens " << first << " < " << m.token() << "\n";
    return 0;
}
