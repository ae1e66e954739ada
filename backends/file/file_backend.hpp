// file:// (file_backend.cpp), inside: the backend (inspect.cpp and
// break_lock.cpp hold two of its operations).
#pragma once

#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "handle.hpp"

namespace distlock::backends::file {

class backend final : public spi::backend {
public:
    explicit backend(settings s);
    std::string_view name() const noexcept override { return kBackend; }
    const capabilities& caps() const noexcept override { return caps_; }
    std::unique_ptr<spi::lock_handle> make_lock(const spi::lock_request& r) override;
    void keepalive_batch(std::span<spi::lock_handle* const> handles, std::span<spi::keepalive_result> results) override;
    // The mutex's lock file: held when a shared flock of it conflicts; the
    // holder's label and token are what it wrote there.
    lock_info inspect(std::string_view name, spi::lock_kind) override;
    // The read-write lock's data file and the semaphore's slot files: who
    // holds a flock of them, from /proc/locks (nothing is taken); the size
    // and the last token from what the files hold.
    read_write_info inspect_read_write(std::string_view name) override;
    semaphore_info inspect_semaphore(std::string_view name) override;

    // Replaces the lock files of every primitive of `name` by fresh ones that keep
    // their counters, so that holders (still locking the old inodes) learn of
    // the loss and tokens keep increasing. Only files of the directory, vetted:
    // a planted one is refused, not replaced.
    void break_lock(std::string_view name) override;

private:
    bool replace(const std::string& file, bool counter_inside);

    settings settings_;
    capabilities caps_;
};

}  // namespace distlock::backends::file
