// file:// (file_backend.cpp), inside: the lock files of a name and what they
// hold: the protocol every process that shares the directory follows.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace distlock::backends::file {

// The files of one name: the mutex's lock file; the read-write lock's data
// file (readers hold it shared, a writer exclusive) and its turnstile (held
// exclusive for a moment by every reader and writer on its way in, and holding
// the read-write lock's counter); the semaphore's slot files and its meta file
// (its size and counter). Names of files in the lock directory.
struct paths {
    std::string mutex, rw_data, rw_turn, sem_meta;
    std::string slot(std::uint32_t i) const { return sem_meta + "-" + std::to_string(i); }
};

// The files of lock name `name` (its bytes encoded into a file name).
paths paths_of(std::string_view name);

// The counter at the start of a lock file (0 when empty or garbage).
std::uint64_t read_counter(int fd);
// "<value>\n", or "<value> <label>\n" with the holder's label (a mutex's lock
// file: provider::inspect reads it back).
void write_counter(int fd, std::uint64_t value, bool sync, std::string_view label = {});
// The label after the counter in a lock file ("" when none: an older distlock's).
std::string read_label(int fd);
// The token after `stored` (a counter of 0: from the wall clock; lock_files.cpp).
std::uint64_t next_token(std::uint64_t stored);

// The semaphore's meta file: "<size> <counter>\n".
struct sem_meta {
    std::uint32_t size = 0;
    std::uint64_t counter = 0;
};
sem_meta read_meta(int fd);
void write_meta(int fd, const sem_meta& m, bool sync);

}  // namespace distlock::backends::file
