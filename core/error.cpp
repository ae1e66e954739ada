#include "distlock/error.hpp"
#include "distlock/options.hpp"

#include <string>

namespace distlock {
namespace {

class category_impl final : public std::error_category {
public:
    const char* name() const noexcept override { return "distlock"; }
    std::string message(int value) const override {
        switch (static_cast<errc>(value)) {
            case errc::unavailable: return "backend unavailable (retry later)";
            case errc::lock_lost: return "lock lost (stop the critical section)";
            case errc::not_owner: return "not the owner of the lock";
            case errc::in_doubt: return "outcome in doubt";
            case errc::invalid_argument: return "invalid argument";
            case errc::unsupported: return "not supported by this backend";
            case errc::access_denied: return "access denied";
            case errc::would_deadlock: return "would deadlock";
        }
        return "unknown distlock error";
    }
};

std::string compose(const std::string& backend, const std::string& message, long long native_code,
                    const std::string& native_message) {
    std::string text = backend.empty() ? message : backend + ": " + message;
    // The native message only when it adds to the text (messages often quote it).
    const bool shown = native_message.empty() || message.find(native_message) != std::string::npos;
    if (native_code != 0 || !shown) {
        text += " [";
        if (native_code != 0) text += std::to_string(native_code);
        if (native_code != 0 && !shown) text += ' ';
        if (!shown) text += native_message;
        text += ']';
    }
    return text;
}

}  // namespace

const std::error_category& category() noexcept {
    static const category_impl instance;
    return instance;
}

std::error_code make_error_code(errc e) noexcept { return {static_cast<int>(e), category()}; }

error::error(errc code, std::string backend, const std::string& message, long long native_code,
             std::string native_message)
    : std::system_error(make_error_code(code), compose(backend, message, native_code, native_message)),
      backend_(std::move(backend)),
      reason_(message),
      native_code_(native_code),
      native_message_(std::move(native_message)) {}

void throw_error(errc code, std::string backend, const std::string& message, long long native_code,
                 std::string native_message) {
    auto b = std::move(backend);
    auto n = std::move(native_message);
    switch (code) {
        case errc::unavailable: throw unavailable_error(code, std::move(b), message, native_code, std::move(n));
        case errc::lock_lost: throw lock_lost_error(code, std::move(b), message, native_code, std::move(n));
        case errc::not_owner: throw not_owner_error(code, std::move(b), message, native_code, std::move(n));
        case errc::in_doubt: throw in_doubt_error(code, std::move(b), message, native_code, std::move(n));
        case errc::invalid_argument:
            throw invalid_argument_error(code, std::move(b), message, native_code, std::move(n));
        case errc::unsupported: throw unsupported_error(code, std::move(b), message, native_code, std::move(n));
        case errc::access_denied: throw access_denied_error(code, std::move(b), message, native_code, std::move(n));
        case errc::would_deadlock:
            throw would_deadlock_error(code, std::move(b), message, native_code, std::move(n));
    }
    throw error(code, std::move(b), message, native_code, std::move(n));
}

std::string_view to_string(feature f) noexcept {
    switch (f) {
        case feature::cross_process: return "cross_process";
        case feature::crash_release: return "crash_release";
        case feature::lease_expiry: return "lease_expiry";
        case feature::loss_detection: return "loss_detection";
        case feature::fencing: return "fencing";
        case feature::notified_wakeup: return "notified_wakeup";
        case feature::break_lock: return "break_lock";
        case feature::read_write: return "read_write";
        case feature::semaphore: return "semaphore";
        case feature::permit_limit: return "permit_limit";
        case feature::election: return "election";
        case feature::inspect: return "inspect";
    }
    return "unknown";
}

}  // namespace distlock
