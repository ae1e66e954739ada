// distlock: typed errors.
//
// Every error thrown by distlock is a distlock::error (a std::system_error whose
// code is in distlock::category()). The subclasses say what the caller should do
// next; catch the base class when the answer is the same for all of them.
#pragma once

#include <string>
#include <system_error>

#include "distlock/export.hpp"

namespace distlock {

// What went wrong, phrased as what to do next.
enum class errc {
    unavailable = 1,   // server unreachable, timed out or overloaded: retry the call later
    lock_lost,         // the lock is no longer held: stop the critical section
    not_owner,         // the caller does not own the lock it tried to release or renew
    in_doubt,          // the outcome is unknown (e.g. a release whose reply was lost)
    invalid_argument,  // bad URL, option or lock name: do not retry until fixed
    unsupported,       // the backend cannot do this at all
    access_denied,     // authentication or authorisation failed: do not retry until fixed
    would_deadlock,    // this thread already holds the lock through another handle
    cancelled,         // an asynchronous acquisition was cancelled before it was granted: nothing is held
};

DISTLOCK_API const std::error_category& category() noexcept;
DISTLOCK_API std::error_code make_error_code(errc e) noexcept;

// Base of every distlock exception. backend() names the backend ("redis",
// "file", ...), empty for an error of the library itself (a URL that cannot be
// parsed, an unknown scheme, a bad duration, a moved-from mutex);
// native_code()/native_message() carry the server's or the client
// library's own error when there is one (0 / empty otherwise); reason() is the
// message alone, as what() shows it between the backend's name and the native
// code (for a caller that composes a message of its own).
class DISTLOCK_API error : public std::system_error {
public:
    error(errc code, std::string backend, const std::string& message, long long native_code = 0,
          std::string native_message = {});

    errc code_value() const noexcept { return static_cast<errc>(code().value()); }
    const std::string& backend() const noexcept { return backend_; }
    long long native_code() const noexcept { return native_code_; }
    const std::string& native_message() const noexcept { return native_message_; }
    const std::string& reason() const noexcept { return reason_; }

private:
    std::string backend_;
    std::string reason_;
    long long native_code_;
    std::string native_message_;
};

class DISTLOCK_API unavailable_error : public error {
public:
    using error::error;
};
class DISTLOCK_API lock_lost_error : public error {
public:
    using error::error;
};
class DISTLOCK_API not_owner_error : public error {
public:
    using error::error;
};
class DISTLOCK_API in_doubt_error : public error {
public:
    using error::error;
};
class DISTLOCK_API invalid_argument_error : public error {
public:
    using error::error;
};
class DISTLOCK_API unsupported_error : public error {
public:
    using error::error;
};
class DISTLOCK_API access_denied_error : public error {
public:
    using error::error;
};
class DISTLOCK_API would_deadlock_error : public error {
public:
    using error::error;
};
class DISTLOCK_API cancelled_error : public error {
public:
    using error::error;
};

// Throws the subclass matching `code`.
[[noreturn]] DISTLOCK_API void throw_error(errc code, std::string backend, const std::string& message,
                                           long long native_code = 0, std::string native_message = {});

}  // namespace distlock

template <>
struct std::is_error_code_enum<distlock::errc> : std::true_type {};
