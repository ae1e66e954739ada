#include "http_multi.hpp"

#include <algorithm>
#include <new>
#include <stdexcept>
#include <utility>

#include "http_easy.hpp"
#include "http_pool.hpp"

namespace distlock::backends::http {

using namespace detail;  // the easy-handle helpers of http_easy.hpp

struct loop::transfer {
    id which = 0;
    request req;
    line_fn on_line;
    done_fn on_done;
    CURL* easy = nullptr;
    curl_slist* headers = nullptr;
    response resp;
    sink s;
    char errbuf[CURL_ERROR_SIZE] = {};
    std::chrono::steady_clock::time_point due;
    bool cancelled = false;

    ~transfer() {
        if (easy != nullptr) curl_easy_cleanup(easy);
        curl_slist_free_all(headers);
    }
};

loop::loop(client& c) : client_(c) {
    global_init();
    multi_ = new_multi();
    if (multi_ == nullptr) throw std::bad_alloc();
    thread_ = std::thread([this] { run(); });
    thread_id_ = thread_.get_id();
}

loop::~loop() {
    {
        std::lock_guard lk(mutex_);
        stop_ = true;
    }
    curl_multi_wakeup(static_cast<CURLM*>(multi_));
    if (thread_.joinable()) thread_.join();
    for (auto& [k, t] : active_) curl_multi_remove_handle(static_cast<CURLM*>(multi_), t->easy);
    active_.clear();
    pending_.clear();
    curl_multi_cleanup(static_cast<CURLM*>(multi_));
}

loop::id loop::start(request r, line_fn on_line, done_fn on_done, std::chrono::milliseconds delay) {
    auto t = std::make_unique<transfer>();
    t->req = std::move(r);
    t->on_line = std::move(on_line);
    t->on_done = std::move(on_done);
    t->due = std::chrono::steady_clock::now() + delay;
    id which;
    {
        std::lock_guard lk(mutex_);
        which = next_id_++;
        t->which = which;
        pending_.emplace(which, std::move(t));
    }
    curl_multi_wakeup(static_cast<CURLM*>(multi_));
    return which;
}

void loop::cancel(id which) {
    std::unique_lock lk(mutex_);
    if (std::this_thread::get_id() == thread_id_) {
        // From a callback: mark it so no callback of it runs; removed next turn.
        if (auto it = pending_.find(which); it != pending_.end()) pending_.erase(it);
        if (auto it = active_.find(which); it != active_.end()) it->second->cancelled = true;
        cancels_.push_back(which);
        return;
    }
    if (pending_.erase(which) > 0 && running_callback_ != which) return;
    if (active_.find(which) == active_.end() && running_callback_ != which) return;
    cancels_.push_back(which);
    lk.unlock();
    curl_multi_wakeup(static_cast<CURLM*>(multi_));
    lk.lock();
    cv_.wait(lk, [&] {
        return stop_ ||
               (running_callback_ != which && std::find(cancels_.begin(), cancels_.end(), which) == cancels_.end());
    });
}

std::vector<transfer_result> loop::run_all(const std::vector<request>& requests) {
    std::vector<transfer_result> results(requests.size());
    std::mutex m;
    std::condition_variable cv;
    std::size_t left = requests.size();
    std::vector<id> ids;
    for (std::size_t i = 0; i < requests.size(); ++i) {
        ids.push_back(start(requests[i], nullptr, [&, i](transfer_result r) {
            std::lock_guard lk(m);
            results[i] = std::move(r);
            if (--left == 0) cv.notify_all();
        }));
    }
    std::unique_lock lk(m);
    cv.wait(lk, [&] { return left == 0; });
    return results;
}

void loop::finish(transfer& t, transfer_result res) {
    if (t.cancelled || !t.on_done) return;
    try {
        t.on_done(std::move(res));
    } catch (...) {}
}

void loop::run() {
    CURLM* multi = static_cast<CURLM*>(multi_);
    std::unique_lock lk(mutex_);
    while (!stop_) {
        // Cancellations.
        if (!cancels_.empty()) {
            for (id which : cancels_) {
                pending_.erase(which);
                if (auto it = active_.find(which); it != active_.end()) {
                    curl_multi_remove_handle(multi, it->second->easy);
                    active_.erase(it);
                }
            }
            cancels_.clear();
            cv_.notify_all();
        }
        // Start the transfers that are due.
        auto now = std::chrono::steady_clock::now();
        auto next_due = now + std::chrono::seconds(1);
        for (auto it = pending_.begin(); it != pending_.end();) {
            if (it->second->due > now) {
                next_due = std::min(next_due, it->second->due);
                ++it;
                continue;
            }
            auto t = std::move(it->second);
            it = pending_.erase(it);
            try {
                t->easy = curl_easy_init();
                if (t->easy == nullptr) throw std::bad_alloc();
                std::string endpoint = client_.current_endpoint();
                t->resp.endpoint = endpoint;
                t->headers = static_cast<curl_slist*>(client_.build_headers(t->req));
                client_.prepare(t->easy, t->req, endpoint, t->headers);
                t->s.resp = &t->resp;
                t->s.on_line = t->on_line ? &t->on_line : nullptr;
                t->s.cancelled = &t->cancelled;
                t->s.limit = client_.opts().max_reply_bytes;
                curl_easy_setopt(t->easy, CURLOPT_ERRORBUFFER, t->errbuf);
                curl_easy_setopt(t->easy, CURLOPT_WRITEFUNCTION, &write_cb);
                curl_easy_setopt(t->easy, CURLOPT_WRITEDATA, &t->s);
                curl_easy_setopt(t->easy, CURLOPT_HEADERFUNCTION, &header_cb);
                curl_easy_setopt(t->easy, CURLOPT_HEADERDATA, &t->s);
                curl_easy_setopt(t->easy, CURLOPT_PRIVATE,
                                 reinterpret_cast<void*>(static_cast<std::uintptr_t>(t->which)));
                if (curl_multi_add_handle(multi, t->easy) != CURLM_OK)
                    throw std::runtime_error("curl_multi_add_handle failed");
                active_.emplace(t->which, std::move(t));
            } catch (const std::exception& e) {
                transfer_result res;
                res.how = outcome::failed;
                res.error = e.what();
                running_callback_ = t->which;
                lk.unlock();
                finish(*t, std::move(res));
                lk.lock();
                running_callback_ = 0;
                cv_.notify_all();
            }
        }
        lk.unlock();
        int running = 0;
        curl_multi_perform(multi, &running);
        int left = 0;
        while (CURLMsg* msg = curl_multi_info_read(multi, &left)) {
            if (msg->msg != CURLMSG_DONE) continue;
            void* priv = nullptr;
            curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, &priv);
            const id which = static_cast<id>(reinterpret_cast<std::uintptr_t>(priv));
            CURLcode rc = msg->data.result;
            lk.lock();
            auto it = active_.find(which);
            if (it == active_.end()) {
                lk.unlock();
                continue;
            }
            auto t = std::move(it->second);
            active_.erase(it);
            curl_multi_remove_handle(multi, t->easy);
            curl_easy_getinfo(t->easy, CURLINFO_RESPONSE_CODE, &t->resp.status);
            running_callback_ = which;
            lk.unlock();
            finish(*t, result_of(rc, t->s, t->errbuf, std::move(t->resp)));
            lk.lock();
            running_callback_ = 0;
            cv_.notify_all();
            lk.unlock();
        }
        auto wait_ms =
            std::chrono::duration_cast<std::chrono::milliseconds>(next_due - std::chrono::steady_clock::now());
        int timeout = static_cast<int>(std::clamp<long long>(wait_ms.count(), 0, 1000));
        curl_multi_poll(multi, nullptr, 0, timeout, nullptr);
        lk.lock();
    }
    cv_.notify_all();
}

}  // namespace distlock::backends::http
