// A plain session of the ZooKeeper C client, for tests that look at (and tamper
// with) what zk:// and its peers leave on the server.
#pragma once

#include <zookeeper/zookeeper.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <vector>

namespace zk_test {

using namespace std::chrono_literals;

class raw_zk {
public:
    explicit raw_zk(const std::string& hosts) {
        zoo_set_debug_level(ZOO_LOG_LEVEL_ERROR);
        zh_ = zookeeper_init(hosts.c_str(), &raw_zk::watcher, 4000, nullptr, this, 0);
        REQUIRE(zh_ != nullptr);
        std::unique_lock lk(m_);
        REQUIRE(cv_.wait_for(lk, 10s, [&] { return connected_; }));
    }
    ~raw_zk() { zookeeper_close(zh_); }
    std::vector<std::string> children(const std::string& path) {
        String_vector v{};
        std::vector<std::string> out;
        if (zoo_get_children(zh_, path.c_str(), 0, &v) == ZOK) {
            for (int i = 0; i < v.count; ++i) out.emplace_back(v.data[i]);
            deallocate_String_vector(&v);
        }
        return out;
    }
    // The node's data ("" when it has none or is missing).
    std::string data(const std::string& path) {
        char buf[512];
        int len = static_cast<int>(sizeof buf);
        if (zoo_get(zh_, path.c_str(), 0, buf, &len, nullptr) != ZOK || len <= 0) return {};
        return std::string(buf, static_cast<std::size_t>(len));
    }
    int stat(const std::string& path, Stat& st) { return zoo_exists(zh_, path.c_str(), 0, &st); }
    int remove(const std::string& path) { return zoo_delete(zh_, path.c_str(), -1); }
    // Digest authentication ("user:password") for the requests that follow.
    void add_digest(const std::string& credentials) {
        zoo_add_auth(
            zh_, "digest", credentials.data(), static_cast<int>(credentials.size()), [](int, const void*) {}, nullptr);
    }
    int create_persistent(const std::string& path) {
        return zoo_create(zh_, path.c_str(), nullptr, -1, &ZOO_OPEN_ACL_UNSAFE, ZOO_PERSISTENT, nullptr, 0);
    }
    // An EPHEMERAL_SEQUENTIAL node of this session at `prefix` + sequence,
    // with `data` (none when empty); returns its path ("" when it failed).
    std::string create_sequential(const std::string& prefix, const std::string& data) {
        char made[1024] = {};
        int rc = zoo_create(zh_, prefix.c_str(), data.empty() ? nullptr : data.data(),
                            data.empty() ? -1 : static_cast<int>(data.size()), &ZOO_OPEN_ACL_UNSAFE,
                            ZOO_EPHEMERAL_SEQUENTIAL, made, static_cast<int>(sizeof made));
        return rc == ZOK ? std::string(made) : std::string();
    }
    // A persistent node only its (authenticated) creator may use.
    int create_private(const std::string& path) {
        return zoo_create(zh_, path.c_str(), nullptr, -1, &ZOO_CREATOR_ALL_ACL, ZOO_PERSISTENT, nullptr, 0);
    }
    // An EPHEMERAL node of this session (open ACL); the server's return code.
    int create_ephemeral(const std::string& path, const std::string& data = {}) {
        return zoo_create(zh_, path.c_str(), data.empty() ? nullptr : data.data(),
                          data.empty() ? -1 : static_cast<int>(data.size()), &ZOO_OPEN_ACL_UNSAFE, ZOO_EPHEMERAL,
                          nullptr, 0);
    }
    // The return codes of getChildren and getData (what an ACL lets through).
    int list(const std::string& path) {
        String_vector v{};
        int rc = zoo_get_children(zh_, path.c_str(), 0, &v);
        if (rc == ZOK) deallocate_String_vector(&v);
        return rc;
    }
    int read(const std::string& path) {
        char buf[16];
        int len = static_cast<int>(sizeof buf);
        return zoo_get(zh_, path.c_str(), 0, buf, &len, nullptr);
    }
    int write(const std::string& path, const std::string& data) {
        return zoo_set(zh_, path.c_str(), data.data(), static_cast<int>(data.size()), -1);
    }
    // The node's ACL, one "scheme:id:perms" (perms as a number) per entry; empty
    // when it cannot be read.
    std::vector<std::string> acl(const std::string& path) {
        ACL_vector v{};
        Stat st{};
        std::vector<std::string> out;
        if (zoo_get_acl(zh_, path.c_str(), &v, &st) != ZOK) return out;
        for (int i = 0; i < v.count; ++i)
            out.push_back(std::string(v.data[i].id.scheme) + ":" + v.data[i].id.id + ":" +
                          std::to_string(v.data[i].perms));
        deallocate_ACL_vector(&v);
        return out;
    }
    // `n` EPHEMERAL_SEQUENTIAL nodes `prefix`<seq> (open ACL) sent pipelined, as
    // a hostile client floods a directory; returns how many the server made.
    // They go with this session.
    int flood(const std::string& prefix, int n, const std::string& data = {}) {
        struct tally {
            std::mutex m;
            std::condition_variable cv;
            int done = 0, made = 0;
        } t;
        int sent = 0;
        for (int i = 0; i < n; ++i) {
            int rc = zoo_acreate(
                zh_, prefix.c_str(), data.empty() ? nullptr : data.data(),
                data.empty() ? -1 : static_cast<int>(data.size()), &ZOO_OPEN_ACL_UNSAFE, ZOO_EPHEMERAL_SEQUENTIAL,
                [](int rc, const char*, const void* ctx) {
                    auto* t = static_cast<tally*>(const_cast<void*>(ctx));
                    std::lock_guard lk(t->m);
                    ++t->done;
                    if (rc == ZOK) ++t->made;
                    t->cv.notify_all();
                },
                &t);
            if (rc == ZOK) ++sent;
        }
        std::unique_lock lk(t.m);
        t.cv.wait(lk, [&] { return t.done == sent; });
        return t.made;
    }

private:
    static void watcher(zhandle_t*, int type, int state, const char*, void* ctx) {
        auto* self = static_cast<raw_zk*>(ctx);
        if (type != ZOO_SESSION_EVENT) return;
        std::lock_guard lk(self->m_);
        self->connected_ = state == ZOO_CONNECTED_STATE;
        self->cv_.notify_all();
    }
    zhandle_t* zh_ = nullptr;
    std::mutex m_;
    std::condition_variable cv_;
    bool connected_ = false;
};

}  // namespace zk_test
