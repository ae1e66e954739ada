// Helpers of the ZooKeeper tests: the test URL's parts and the server's
// four-letter-word commands. (Child processes: child_process.hpp.)
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

namespace zk_test {

// zk://h1:p1,h2:p2/base?params -> "h1:p1,h2:p2" and "/base".
inline std::string hosts_of(const std::string& url) {
    auto start = url.find("://") + 3;
    auto end = url.find_first_of("/?", start);
    return url.substr(start, end == std::string::npos ? std::string::npos : end - start);
}
inline std::string base_of(const std::string& url) {
    auto start = url.find('/', url.find("://") + 3);
    if (start == std::string::npos) return "/distlock";
    auto end = url.find('?', start);
    return url.substr(start, end == std::string::npos ? std::string::npos : end - start);
}

// Sends a four-letter-word command to host:port and returns the whole answer.
inline std::string four_letter(const std::string& host_port, const std::string& cmd) {
    auto colon = host_port.rfind(':');
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(std::stoi(host_port.substr(colon + 1))));
    ::inet_pton(AF_INET, host_port.substr(0, colon).c_str(), &addr.sin_addr);
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return {};
    std::string out;
    if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
        ::write(fd, cmd.data(), cmd.size()) == static_cast<ssize_t>(cmd.size())) {
        char buf[4096];
        for (;;) {
            pollfd p{fd, POLLIN, 0};
            if (::poll(&p, 1, 2000) <= 0) break;
            auto n = ::read(fd, buf, sizeof buf);
            if (n <= 0) break;
            out.append(buf, static_cast<std::size_t>(n));
        }
    }
    ::close(fd);
    return out;
}

// The number after "<key>" in a 4lw answer ("Total watches:12" -> 12), or -1.
inline long number_after(const std::string& text, const std::string& key) {
    auto at = text.find(key);
    if (at == std::string::npos) return -1;
    at += key.size();
    while (at < text.size() && (text[at] == ' ' || text[at] == '\t' || text[at] == ':')) ++at;
    try {
        return std::stol(text.substr(at));
    } catch (...) {
        return -1;
    }
}

}  // namespace zk_test
