// The SQL lock backend (backend.cpp): the URL's settings, the lock tables,
// the strategy chosen per lock, batched renewal, break_lock and inspect. Its
// handles (handles.hpp) get its context (context.hpp), never the backend.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <span>
#include <string_view>

#include "context.hpp"
#include "handles.hpp"
#include "sql.hpp"

namespace distlock::backends::sql {

class backend final : public spi::backend {
public:
    backend(std::shared_ptr<dialect> d, settings s);

    std::string_view name() const noexcept override { return ctx_.name(); }
    const capabilities& caps() const noexcept override { return caps_; }
    std::unique_ptr<spi::lock_handle> make_lock(const spi::lock_request& r) override;
    void keepalive_batch(std::span<spi::lock_handle* const> handles, std::span<spi::keepalive_result> results) override;
    std::optional<std::chrono::nanoseconds> round_trip() override;
    std::optional<std::chrono::nanoseconds> native_cycle() override;
    void break_lock(std::string_view lock_name) override;
    lock_info inspect(std::string_view lock_name, spi::lock_kind kind) override;
    // One statement each: the live rows of the read-write lock (MySQL) or the
    // session locks that hold and wait for it (PostgreSQL); the live permit rows.
    read_write_info inspect_read_write(std::string_view lock_name) override;
    semaphore_info inspect_semaphore(std::string_view lock_name) override;

    // What its handles share (for the tests: the release listener's counts).
    context& shared_context() noexcept { return ctx_; }

private:
    // Gives the backend its first connection and makes the tables.
    friend std::shared_ptr<spi::backend> make_backend(std::shared_ptr<dialect> d, const settings& s);

    context ctx_;  // all its handles use of it
    capabilities caps_;
};

}  // namespace distlock::backends::sql
