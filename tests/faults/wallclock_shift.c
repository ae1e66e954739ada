/* distlock-wallclock-shift.so: moves a process's wall clock by an offset read
 * from a file, for the clock-jump-server nemesis on servers that cannot run
 * under libfaketime (tests/faults/README.md, "Clocks").
 *
 * redis-server is built with jemalloc, which reads the clock while it sets
 * itself up; libfaketime's wrapper of clock_gettime() then looks up the real
 * function with dlsym(), which allocates, which calls back into jemalloc, which
 * is not ready: the server never starts. This library does neither: every
 * clock is read with the raw system call, the offset file with open() and
 * read() system calls into a buffer on the stack, and nothing allocates.
 *
 *   LD_PRELOAD=distlock-wallclock-shift.so WALLCLOCK_SHIFT_FILE=FILE server ...
 *
 * FILE holds the offset in milliseconds as a signed decimal ("-5000"); it is
 * read again at most every 100 ms of CLOCK_MONOTONIC (a jump lands within
 * that), and a missing or malformed file is an offset of 0. Only the wall
 * clock moves (CLOCK_REALTIME and its coarse variant, gettimeofday(), time()):
 * the monotonic clocks, which a server's own timers use, are left alone, as an
 * NTP step leaves them. The variable is read once, at the first clock read;
 * its name does not start with DISTLOCK_, which integration/backends.sh's
 * "spawn" clears (a server comes back with the settings it was started with).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

static int raw_clock(clockid_t id, struct timespec* ts) { return (int)syscall(SYS_clock_gettime, id, ts); }

static int64_t mono_ms(void) {
    struct timespec ts;
    raw_clock(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static _Atomic int64_t offset_ms;
static _Atomic int64_t read_at_ms = -1000000; /* long before the first read */

/* The path, copied once (getenv allocates nothing; the copy is static). */
static const char* offset_file(void) {
    static char path[4096];
    static _Atomic int state; /* 0 unread, 1 set, 2 none */
    int s = atomic_load(&state);
    if (s == 0) {
        const char* p = getenv("WALLCLOCK_SHIFT_FILE");
        size_t n = 0;
        if (p != NULL)
            while (p[n] != '\0' && n + 1 < sizeof path) {
                path[n] = p[n];
                ++n;
            }
        path[n] = '\0';
        s = n > 0 ? 1 : 2;
        atomic_store(&state, s);
    }
    return s == 1 ? path : NULL;
}

static int64_t current_offset_ms(void) {
    const int64_t now = mono_ms();
    if (now - atomic_load(&read_at_ms) < 100) return atomic_load(&offset_ms);
    atomic_store(&read_at_ms, now);
    const char* path = offset_file();
    int64_t value = 0;
    if (path != NULL) {
        const int saved = errno;
        const int fd = (int)syscall(SYS_openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC);
        if (fd >= 0) {
            char buf[32];
            const long n = syscall(SYS_read, fd, buf, sizeof buf - 1);
            syscall(SYS_close, fd);
            int sign = 1, digits = 0;
            long i = 0;
            if (n > 0 && (buf[0] == '-' || buf[0] == '+')) sign = buf[i++] == '-' ? -1 : 1;
            for (; i < n && buf[i] >= '0' && buf[i] <= '9' && digits < 15; ++i, ++digits)
                value = value * 10 + (buf[i] - '0');
            if (digits == 0) value = 0;
            value *= sign;
        }
        errno = saved;
    }
    atomic_store(&offset_ms, value);
    return value;
}

static void shift(struct timespec* ts, int64_t ms) {
    int64_t ns = (int64_t)ts->tv_nsec + (ms % 1000) * 1000000;
    time_t sec = ts->tv_sec + (time_t)(ms / 1000);
    if (ns < 0) {
        ns += 1000000000;
        --sec;
    } else if (ns >= 1000000000) {
        ns -= 1000000000;
        ++sec;
    }
    ts->tv_sec = sec;
    ts->tv_nsec = (long)ns;
}

EXPORT int clock_gettime(clockid_t id, struct timespec* ts) {
    const int rc = raw_clock(id, ts);
    if (rc == 0 && (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE)) shift(ts, current_offset_ms());
    return rc;
}

EXPORT int gettimeofday(struct timeval* tv, void* tz) {
    (void)tz;
    struct timespec ts;
    if (clock_gettime(CLOCK_REALTIME, &ts) != 0) return -1;
    tv->tv_sec = ts.tv_sec;
    tv->tv_usec = ts.tv_nsec / 1000;
    return 0;
}

EXPORT time_t time(time_t* out) {
    struct timespec ts;
    if (clock_gettime(CLOCK_REALTIME, &ts) != 0) return (time_t)-1;
    if (out != NULL) *out = ts.tv_sec;
    return ts.tv_sec;
}
