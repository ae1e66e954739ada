// zk:// backend::keepalive_batch: whether the held grants of the recipes
// (zk_queue.hpp) still stand, first from the session's own view (zk_held.hpp),
// then with one pipelined exists (with a watch) per held node.
#include <vector>

#include "zk_lock.hpp"
#include "zk_queue.hpp"

namespace distlock::backends::zookeeper {

void keepalive_locks(session_manager& zk, std::span<spi::lock_handle* const> handles,
                     std::span<spi::keepalive_result> results) {
    // Ask the server about every held node at once (pipelined), then collect.
    struct pending {
        std::size_t index;
        op_ptr o;
        std::uint64_t czxid;
        std::shared_ptr<session> s;
    };
    std::vector<pending> asked;
    for (std::size_t i = 0; i < handles.size(); ++i) {
        const auto h = static_cast<const recipe_handle&>(*handles[i]).grant();
        std::shared_ptr<session> s;
        std::string node;
        std::uint64_t czxid = 0;
        if (auto r = zk.local_check(h, s, node, czxid)) {
            if (r->state == spi::keepalive_result::status::lost) zk.mark_lost(h);
            results[i] = *r;
            continue;
        }
        auto o = zk_exists_watch_async(s->zh, node);
        asked.push_back({i, std::move(o), czxid, std::move(s)});
    }
    for (auto& p : asked) {
        wait_op(p.o);
        const auto h = static_cast<const recipe_handle&>(*handles[p.index]).grant();
        int rc = p.o->rc;
        if (rc == ZOK && static_cast<std::uint64_t>(p.o->stat.czxid) == p.czxid) {
            zk.touch(*p.s);
            results[p.index] = spi::keepalive_result::ok();
        } else if (rc == ZOK || rc == ZNONODE) {
            zk.mark_lost(h);
            results[p.index] = spi::keepalive_result::lost("the lock node is gone from the server");
        } else if (is_session_gone(rc)) {
            zk.mark_lost(h);
            results[p.index] = spi::keepalive_result::lost(std::string("the ZooKeeper session is gone: ") + zerror(rc));
        } else {
            results[p.index] = spi::keepalive_result::failed(std::string("exists failed: ") + zerror(rc));
        }
    }
}

}  // namespace distlock::backends::zookeeper
