// Direct access to the etcd under test (its JSON gateway), for checks of what
// the backend leaves on the server.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "distlock/spi/url.hpp"
#include "http/http_codec.hpp"
#include "http/http_options.hpp"
#include "http/http_pool.hpp"
#include "http/http_transfer.hpp"

namespace distlock::test {

class etcd_direct {
public:
    explicit etcd_direct(const std::string& url) : client_(options_for(url)) {
        auto u = spi::url::parse(url);
        prefix_ = u.path().empty() || u.path() == "/" ? "/distlock" : u.path();
    }

    nlohmann::json call(const std::string& path, const nlohmann::json& body) {
        backends::http::request r;
        r.method = "POST";
        r.target = path;
        r.body = body.dump();
        auto resp = client_.send(r);
        return nlohmann::json::parse(resp.body);
    }

    // The directory of a lock name: <prefix>/<encoded name>/
    std::string dir(const std::string& name) const { return prefix_ + "/" + backends::http::encode_name(name) + "/"; }

    // Keys under a lock name's directory, oldest (lowest create revision) first.
    nlohmann::json keys(const std::string& name) {
        auto d = dir(name);
        auto end = d;
        end.back() = static_cast<char>(end.back() + 1);
        auto reply =
            call("/v3/kv/range",
                 {{"key", b64(d)}, {"range_end", b64(end)}, {"sort_order", "ASCEND"}, {"sort_target", "CREATE"}});
        return reply.value("kvs", nlohmann::json::array());
    }

    // The read-write lock's directory (read/ and write/ keys) and the
    // semaphore's (permit/ keys and the size key) of a lock name.
    std::string rw_dir(const std::string& name) const {
        return prefix_ + "/" + backends::http::encode_name(name) + ":rw/";
    }
    std::string sem_dir(const std::string& name) const {
        return prefix_ + "/" + backends::http::encode_name(name) + ":sem/";
    }

    // Every key starting with `prefix`, oldest first.
    nlohmann::json under(const std::string& prefix) {
        auto end = prefix;
        end.back() = static_cast<char>(end.back() + 1);
        auto reply =
            call("/v3/kv/range",
                 {{"key", b64(prefix)}, {"range_end", b64(end)}, {"sort_order", "ASCEND"}, {"sort_target", "CREATE"}});
        return reply.value("kvs", nlohmann::json::array());
    }

    // A counter of the member's Prometheus metrics (0 when absent).
    double metric(const std::string& name) {
        backends::http::request r;
        r.method = "GET";
        r.target = "/metrics";
        auto body = client_.send(r).body;
        std::size_t at = 0;
        while ((at = body.find(name + " ", at)) != std::string::npos) {
            if (at == 0 || body[at - 1] == '\n') return std::stod(body.substr(at + name.size() + 1));
            at += name.size();
        }
        return 0;
    }

    static std::string b64(const std::string& s) { return backends::http::base64_encode(s); }
    static std::string unb64(const nlohmann::json& j) {
        return backends::http::base64_decode(j.get<std::string>()).value_or("");
    }
    static long long num(const nlohmann::json& kv, const char* field) {
        auto it = kv.find(field);
        return it == kv.end() ? 0 : std::stoll(it->get<std::string>());
    }
    backends::http::client& client() { return client_; }
    const std::string& prefix() const { return prefix_; }

private:
    static backends::http::options options_for(const std::string& url) {
        auto u = spi::url::parse(url);
        return backends::http::options_from_url(u, "etcd-test", 2379);
    }
    backends::http::client client_;
    std::string prefix_;
};

}  // namespace distlock::test
