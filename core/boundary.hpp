// The net beneath the public API: what leaves distlock is a distlock::error
// (or std::bad_alloc), never another exception of a backend or of a library it
// uses, and never such an exception's message.
//
// std::bad_alloc passes as it is: it is how C++ reports memory exhaustion, every
// caller already expects it from any allocating call, it carries no secret, and
// turning it into a distlock::error would need the memory that just ran out
// (the message's strings).
#pragma once

#include <exception>
#include <span>
#include <string>
#include <string_view>
#include <utility>

namespace distlock::detail {

// What a message may say of an exception that is not a distlock::error: its
// type, and a std::system_error's code. Never its what(): it may quote a
// secret (nlohmann's type_error quotes a byte of a password it cannot encode,
// a library's parse error the text it could not parse).
std::string foreign_exception_text(const std::exception& e);

// `text` with each of `secrets` (spi::url::secrets) shown as "***": a
// server's or a client library's message may quote a password (a user name
// it did not accept, the argument of a failed AUTH). Secrets shorter than
// three bytes are left: searching for them would garble every message, and a
// password that short is no secret from anyone who tries.
std::string scrub(std::string text, std::span<const std::string> secrets);

// For a catch (...) block: rethrows std::bad_alloc (and a thread's forced
// unwinding) as they are, a distlock::error with `secrets` scrubbed from its
// message, and anything else as an unavailable_error of `backend` saying that
// `doing` failed, with foreign_exception_text().
[[noreturn]] void rethrow_as_error(std::string_view backend, std::span<const std::string> secrets,
                                   std::string_view doing);

// `f()`, with any exception it throws passed through rethrow_as_error().
template <class F>
decltype(auto) guarded(std::string_view backend, std::span<const std::string> secrets, std::string_view doing, F&& f) {
    try {
        return std::forward<F>(f)();
    } catch (...) {
        rethrow_as_error(backend, secrets, doing);
    }
}

// Throws invalid_argument_error: use of a moved-from distlock::`what`.
[[noreturn]] void moved_from(const char* what);

}  // namespace distlock::detail
