/* LD_PRELOAD shim for the clock-skew test: shifts the process's wall clock
 * (CLOCK_REALTIME, gettimeofday, time) by DISTLOCK_SKEW_SECONDS. The monotonic
 * clock is left alone. */
#include <dlfcn.h>
#include <stdlib.h>
#include <sys/time.h>
#include <time.h>

extern "C" {

static long skew() {
    const char* s = getenv("DISTLOCK_SKEW_SECONDS");
    return s ? strtol(s, NULL, 10) : 0;
}

int clock_gettime(clockid_t id, struct timespec* ts) noexcept {
    static int (*real)(clockid_t, struct timespec*) = NULL;
    if (!real) real = reinterpret_cast<int (*)(clockid_t, struct timespec*)>(dlsym(RTLD_NEXT, "clock_gettime"));
    int rc = real(id, ts);
    if (rc == 0 && (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE)) ts->tv_sec += skew();
    return rc;
}

int gettimeofday(struct timeval* tv, void* tz) noexcept {
    struct timespec ts;
    int rc = clock_gettime(CLOCK_REALTIME, &ts);
    if (rc == 0 && tv) {
        tv->tv_sec = ts.tv_sec;
        tv->tv_usec = static_cast<suseconds_t>(ts.tv_nsec / 1000);
    }
    (void)tz;
    return rc;
}

time_t time(time_t* out) noexcept {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    if (out) *out = ts.tv_sec;
    return ts.tv_sec;
}
}
