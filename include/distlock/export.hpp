// DISTLOCK_API marks what libdistlock exports. The library is built with
// hidden visibility (-fvisibility=hidden, -fvisibility-inlines-hidden): only
// the classes and functions of include/distlock/ (the public API and the
// backend-author interface, spi/) marked with it are visible to programs and
// plugins; everything else (core/, backends/) stays inside the library, as
// libpqxx keeps include/pqxx/internal/. tests/package/check_exports.py
// holds the shared library's exported symbols to that.
#pragma once

#if defined(__GNUC__) || defined(__clang__)
#define DISTLOCK_API __attribute__((visibility("default")))
#else
#define DISTLOCK_API
#endif
