// Helper process of the SQL tests (run with the clock-skew shim preloaded):
//   sql-lock-probe URL NAME try            one try_lock; prints "locked <token>" or "busy"
//   sql-lock-probe URL NAME hold-no-renew  try_lock with auto_renew off; prints "locked <token>", then sleeps
//   sql-lock-probe URL NAME sigpipe        SIGPIPE at its default first; one try_lock, then prints
//                                          "sigpipe default" or "sigpipe changed" (the disposition)
// Every line starts with the process's wall-clock time in seconds, so that the
// test can check that the skew is in effect.
#include <signal.h>

#include <chrono>
#include <ctime>
#include <iostream>
#include <string>
#include <thread>

#include "distlock/distlock.hpp"

int main(int argc, char** argv) {
    if (argc != 4) {
        std::cerr << "usage: sql-lock-probe URL NAME try|hold-no-renew|sigpipe\n";
        return 2;
    }
    const std::string mode = argv[3];
    if (mode == "sigpipe") {
        ::signal(SIGPIPE, SIG_DFL);  // an ignored signal would have come through exec
        int rc = 0;
        try {
            auto p = distlock::connect(argv[1]);
            auto m = p.mutex(argv[2]);
            if (m.try_lock()) m.unlock();
        } catch (const std::exception& e) {
            std::cout << "error " << e.what() << std::endl;
            rc = 1;
        }
        struct sigaction now {};
        ::sigaction(SIGPIPE, nullptr, &now);
        std::cout << (now.sa_handler == SIG_DFL ? "sigpipe default" : "sigpipe changed") << std::endl;
        return rc;
    }
    try {
        auto p = distlock::connect(argv[1]);
        distlock::lock_options o;
        o.auto_renew = mode != "hold-no-renew";
        auto m = p.mutex(argv[2], o);
        const bool got = m.try_lock();
        std::cout << std::time(nullptr) << (got ? " locked " + std::to_string(m.token()) : std::string(" busy"))
                  << std::endl;
        if (got && mode == "hold-no-renew") std::this_thread::sleep_for(std::chrono::minutes(5));
        if (got) m.unlock();
        return 0;
    } catch (const std::exception& e) {
        std::cout << std::time(nullptr) << " error " << e.what() << std::endl;
        return 1;
    }
}
