// The Redis client layer (redis_client.hpp): one command to several servers at
// once (Redlock), every reply awaited under one deadline.
#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>

#include "exchange.hpp"

namespace distlock::backends::redis_client {

using namespace std::chrono_literals;

std::vector<exchange_result> exchange_all(const std::vector<pool*>& pools,
                                          const std::vector<std::vector<std::string_view>>& commands) {
    const std::size_t n = pools.size();
    std::vector<exchange_result> out(n);
    std::vector<std::optional<pool::borrowed>> conns(n);
    auto timeout = 0ms;
    // A node that failed: why; its connection is never reused (a reply may be pending).
    auto fail_node = [&](std::size_t i, const connection_failure& e) {
        out[i].error = e.what();
        out[i].maybe_sent = e.maybe_sent();
        if (e.not_redis()) out[i].code = errc::invalid_argument;
        if (e.denied()) out[i].code = errc::access_denied;
        if (conns[i]) (**conns[i]).poison();
        conns[i].reset();
        pools[i]->clear_idle();
    };
    for (std::size_t i = 0; i < n; ++i) {
        timeout = std::max(timeout, pools[i]->where().command_timeout);
        try {
            conns[i].emplace(pools[i]->get());
            (*conns[i])->append(commands[i]);
            (*conns[i])->flush();
        } catch (const connection_failure& e) {
            fail_node(i, e);
        } catch (const error& e) {
            out[i].error = e.reason();  // the caller names the backend and the category
            out[i].code = e.code_value();
            conns[i].reset();
        }
    }
    const auto until = clock::now() + timeout;
    std::vector<std::size_t> waiting;
    for (std::size_t i = 0; i < n; ++i)
        if (conns[i]) waiting.push_back(i);
    while (!waiting.empty()) {
        std::vector<pollfd> fds;
        for (auto i : waiting) fds.push_back(pollfd{(**conns[i]).fd(), POLLIN, 0});
        const int wait_ms = poll_ms(until);
        if (wait_ms == 0) {
            for (auto i : waiting) {
                out[i].error = "no reply within the command timeout (" + std::to_string(timeout.count()) + " ms) on " +
                               pools[i]->where().label();
                out[i].maybe_sent = true;
                (**conns[i]).poison();
                conns[i].reset();
                pools[i]->clear_idle();
            }
            break;
        }
        int rc = ::poll(fds.data(), fds.size(), wait_ms);
        if (rc < 0 && errno != EINTR) {
            const std::string why = std::string("poll failed: ") + std::strerror(errno);
            for (auto i : waiting) fail_node(i, connection_failure(why, false, true));
            break;
        }
        std::vector<std::size_t> still;
        for (std::size_t k = 0; k < waiting.size(); ++k) {
            auto i = waiting[k];
            if (rc <= 0 || fds[k].revents == 0) {
                still.push_back(i);
                continue;
            }
            try {
                (**conns[i]).receive();
                auto r = (**conns[i]).take_reply();
                if (!r) {
                    still.push_back(i);
                    continue;
                }
                out[i].reply = std::move(r);
                (**conns[i]).mark_used();
            } catch (const connection_failure& e) {
                fail_node(i, e);
            }
        }
        waiting.swap(still);
    }
    return out;
}

}  // namespace distlock::backends::redis_client
