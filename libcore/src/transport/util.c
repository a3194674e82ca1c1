/* Small shared helpers: clocks, condition variables, error text. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "util.h"

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

void hl_fd_cloexec(int fd)
{
    int fl = fd >= 0 ? fcntl(fd, F_GETFD) : -1;
    if (fl >= 0 && !(fl & FD_CLOEXEC))
        fcntl(fd, F_SETFD, fl | FD_CLOEXEC);
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

/* ---- SIGPIPE ----
 * A write on a socket whose peer is gone raises SIGPIPE in the writing
 * thread unless it is a send() with MSG_NOSIGNAL. The default action kills
 * the process. Connections write with send(MSG_NOSIGNAL) (plain ones:
 * conn.c, hl_conn_nosignal; TLS ones after the handshake: tls.c), so a
 * caller's call on them needs nothing here. What else writes (a TLS
 * handshake through OpenSSL's socket BIO, which uses write(2); the
 * non-blocking API's connections, which hiredis's async layer writes;
 * every connection of a build with the
 * system's hiredis 0.14) runs with SIGPIPE blocked: the library's own
 * threads for their whole life, callers' threads for the duration of a
 * call. A SIGPIPE raised meanwhile stays
 * pending on the thread and is consumed before the mask is restored; the
 * process's signal dispositions are never touched. */

static void sigpipe_set(sigset_t *set)
{
    sigemptyset(set);
    sigaddset(set, SIGPIPE);
}

void hl_nosigpipe_enter(hl_nosigpipe *s)
{
    sigset_t set;
    sigpipe_set(&set);
    s->active = 0;
    s->restore = 0;
    s->pending_before = 0;
    if (pthread_sigmask(SIG_BLOCK, &set, &s->old) != 0)
        return;
    if (sigismember(&s->old, SIGPIPE)) {
        /* blocked already (by the caller, or an outer call of ours): leave
         * a SIGPIPE that is already pending alone, it is not ours */
        sigset_t pend;
        s->pending_before = sigpending(&pend) == 0 && sigismember(&pend, SIGPIPE);
        s->restore = 0;
    } else {
        s->restore = 1;
    }
    s->active = 1;
}

void hl_nosigpipe_skip(hl_nosigpipe *s)
{
    s->active = 0;
    s->restore = 0;
    s->pending_before = 0;
}

void hl_nosigpipe_leave(hl_nosigpipe *s)
{
    if (!s->active)
        return;
    sigset_t set, pend;
    sigpipe_set(&set);
    if (!s->pending_before && sigpending(&pend) == 0 && sigismember(&pend, SIGPIPE)) {
        struct timespec zero = {0, 0};
        while (sigtimedwait(&set, NULL, &zero) < 0 && errno == EINTR) {
        }
    }
    if (s->restore)
        pthread_sigmask(SIG_SETMASK, &s->old, NULL);
}

/* ---- fork detection ----
 * A handle used in a child after fork() must fail (its connections and
 * threads are the parent's). Asking getpid() on every call costs a system
 * call; instead each handle owns one anonymous page marked MADV_WIPEONFORK
 * (Linux 4.14+), holding 1: the kernel hands a child that page zeroed, so
 * a 0 there means "forked" -- for any fork, whatever called it, with no
 * handler and no state outside the handle. Where the kernel refuses the
 * advice (or under an emulator that does not pass it on), the handle keeps
 * its opener's pid and compares with getpid() as before (also when no
 * page could be mapped: init cannot fail). */
#ifndef MADV_WIPEONFORK
#define MADV_WIPEONFORK 18
#endif

void hl_forkguard_init(hl_forkguard *g)
{
    g->page = NULL;
    g->pid = getpid();
    long psz = sysconf(_SC_PAGESIZE);
    size_t len = psz > 0 ? (size_t)psz : 4096;
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return; /* getpid() it is */
    if (madvise(p, len, MADV_WIPEONFORK) != 0) {
        munmap(p, len);
        return;
    }
    g->page = p;
    g->page[0] = 1;
}

int hl_forkguard_forked(const hl_forkguard *g)
{
    if (g->page)
        return __atomic_load_n(&g->page[0], __ATOMIC_RELAXED) == 0;
    return g->pid != getpid();
}

void hl_forkguard_free(hl_forkguard *g)
{
    if (!g->page)
        return;
    long psz = sysconf(_SC_PAGESIZE);
    munmap(g->page, psz > 0 ? (size_t)psz : 4096);
    g->page = NULL;
}

int hl_thread_create(pthread_t *t, const pthread_attr_t *attr, void *(*fn)(void *), void *arg)
{
    /* the new thread inherits the mask it is created with: SIGPIPE blocked
     * for its whole life (a SIGPIPE it raises stays pending on it, unseen) */
    hl_nosigpipe s;
    hl_nosigpipe_enter(&s);
    int rc = pthread_create(t, attr, fn, arg);
    if (s.restore)
        pthread_sigmask(SIG_SETMASK, &s.old, NULL);
    return rc;
}

/* ---- error messages ----
 * A handle shared by threads keeps one detail message, rewritten by every
 * failure on it (and by the watchdog); handing out that buffer would let a
 * reader see another thread's message, or one being rewritten. So, as
 * libgit2 keeps its last error per thread: every failing call also records
 * its message in the calling thread's own slot, and the errmsg functions
 * answer from the caller's thread: its own last failure when that was on
 * the handle asked about, else a copy of the handle's message taken under
 * the handle's lock. Either way the text lives in the calling thread's
 * storage, valid until that thread's next hilock call. */
typedef struct hl_tls_err {
    const void *handle; /* whose failure msg describes, NULL = none */
    char msg[HL_ERRMSG_MAX];
    char view[HL_ERRMSG_MAX];
} hl_tls_err;

static _Thread_local hl_tls_err tls_err;

void hl_err_note(const void *handle, const char *msg)
{
    tls_err.handle = handle;
    snprintf(tls_err.msg, sizeof tls_err.msg, "%s", msg);
}

void hl_err_forget(const void *handle)
{
    if (tls_err.handle == handle)
        tls_err.handle = NULL;
}

const char *hl_err_view(const void *handle, pthread_mutex_t *mu, const char *shared)
{
    if (tls_err.handle == handle)
        return tls_err.msg;
    pthread_mutex_lock(mu);
    snprintf(tls_err.view, sizeof tls_err.view, "%s", shared);
    pthread_mutex_unlock(mu);
    return tls_err.view;
}

void hl_worker_init(hl_worker *w)
{
    memset(w, 0, sizeof *w);
    w->wake_fd[0] = w->wake_fd[1] = -1;
}

int hl_worker_start(hl_worker *w, int with_pipe, void *(*fn)(void *), void *arg)
{
    if (with_pipe && w->wake_fd[0] < 0 && hl_wake_pipe(w->wake_fd) != 0)
        return HILOCK_ECONN;
    if (hl_thread_create(&w->thread, NULL, fn, arg) != 0)
        return HILOCK_ENOMEM;
    w->running = 1;
    return 0;
}

void hl_worker_wake(const hl_worker *w)
{
    if (w->wake_fd[1] >= 0)
        hl_wake(w->wake_fd[1]);
}

void hl_worker_join(hl_worker *w)
{
    pthread_join(w->thread, NULL);
    w->running = 0;
}

void hl_worker_close(hl_worker *w)
{
    if (w->wake_fd[0] >= 0) {
        close(w->wake_fd[0]);
        close(w->wake_fd[1]);
        w->wake_fd[0] = w->wake_fd[1] = -1;
    }
}
