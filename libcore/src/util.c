/* Small shared helpers: clocks, condition variables, error text. */
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

int64_t hl_now_mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void hl_abs_timespec(struct timespec *ts, int64_t ms_from_now)
{
    clock_gettime(CLOCK_MONOTONIC, ts);
    if (ms_from_now < 0)
        ms_from_now = 0;
    ts->tv_sec += (time_t)(ms_from_now / 1000);
    ts->tv_nsec += (long)(ms_from_now % 1000) * 1000000L;
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec += 1;
        ts->tv_nsec -= 1000000000L;
    }
}

void hl_cond_init_mono(pthread_cond_t *cv)
{
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(cv, &attr);
    pthread_condattr_destroy(&attr);
}

void hl_set_err(char *buf, const char *fmt, ...)
{
    if (!buf)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, HL_ERRMSG_MAX, fmt, ap);
    va_end(ap);
}

char *hl_strdup(const char *s)
{
    if (!s)
        return NULL;
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d)
        memcpy(d, s, n);
    return d;
}

int hl_wake_pipe(int fd[2])
{
    if (pipe(fd) != 0) {
        fd[0] = fd[1] = -1;
        return -1;
    }
    for (int i = 0; i < 2; i++) {
        fcntl(fd[i], F_SETFL, fcntl(fd[i], F_GETFL) | O_NONBLOCK);
        fcntl(fd[i], F_SETFD, FD_CLOEXEC);
    }
    return 0;
}

void hl_wake(int fd)
{
    char b = 1;
    ssize_t n = write(fd, &b, 1);
    (void)n; /* a full pipe already means "wake up" */
}

void hl_wake_drain(int fd)
{
    char buf[64];
    while (read(fd, buf, sizeof buf) > 0) {
    }
}
