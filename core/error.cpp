#include "distlock/error.hpp"
#include "distlock/options.hpp"

#include <cxxabi.h>

#include <cstdlib>
#include <memory>
#include <new>
#include <string>
#include <typeinfo>

#include "boundary.hpp"

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
            case errc::cancelled: return "cancelled";
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
        case errc::would_deadlock: throw would_deadlock_error(code, std::move(b), message, native_code, std::move(n));
        case errc::cancelled: throw cancelled_error(code, std::move(b), message, native_code, std::move(n));
    }
    throw error(code, std::move(b), message, native_code, std::move(n));
}

namespace detail {

std::string foreign_exception_text(const std::exception& e) {
    const char* mangled = typeid(e).name();
    int status = 0;
    std::unique_ptr<char, void (*)(void*)> name(abi::__cxa_demangle(mangled, nullptr, nullptr, &status), std::free);
    std::string text = "an unexpected " + std::string(status == 0 && name ? name.get() : mangled);
    if (const auto* se = dynamic_cast<const std::system_error*>(&e))
        text += " (" + std::string(se->code().category().name()) + " error " + std::to_string(se->code().value()) + ")";
    return text + " from the backend or a library it uses (its message is not shown: it may quote a secret)";
}

std::string scrub(std::string text, std::span<const std::string> secrets) {
    for (const auto& secret : secrets) {
        if (secret.size() < 3) continue;
        for (auto at = text.find(secret); at != std::string::npos; at = text.find(secret, at + 3))
            text.replace(at, secret.size(), "***");
    }
    return text;
}

void rethrow_as_error(std::string_view backend, std::span<const std::string> secrets, std::string_view doing) {
    try {
        throw;
    } catch (const error& e) {
        auto reason = scrub(e.reason(), secrets);
        auto native = scrub(e.native_message(), secrets);
        if (reason == e.reason() && native == e.native_message()) throw;
        throw_error(e.code_value(), scrub(e.backend(), secrets), reason, e.native_code(), std::move(native));
    } catch (const std::bad_alloc&) {
        throw;
    } catch (const abi::__forced_unwind&) {  // pthread_cancel: must go on unwinding
        throw;
    } catch (const std::exception& e) {
        throw_error(errc::unavailable, std::string(backend),
                    std::string(doing) + " failed: " + foreign_exception_text(e));
    } catch (...) {
        throw_error(
            errc::unavailable, std::string(backend),
            std::string(doing) + " failed: an exception of an unknown type from the backend or a library it uses");
    }
}

}  // namespace detail

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
        case feature::inspect_primitives: return "inspect_primitives";
    }
    return "unknown";
}

}  // namespace distlock
