/*
 * Base services of libcore (util.c): monotonic time, error messages per
 * thread, wake-up pipes, SIGPIPE blocking, thread start. Below the transport
 * and the API, beside the protocol layer; may include proto.h only.
 * Layers and which header each file may include: docs/architecture.md.
 */
#ifndef HILOCK_UTIL_H
#define HILOCK_UTIL_H

#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#include "proto.h"

#define HL_ERRMSG_MAX 256
_Static_assert(HL_ERRMSG_MAX == HL_URL_ERR_MAX, "one size of error buffers");

HL_HIDDEN int64_t hl_now_mono_ms(void);
HL_HIDDEN void hl_abs_timespec(struct timespec *ts, int64_t ms_from_now); /* CLOCK_MONOTONIC */
HL_HIDDEN void hl_cond_init_mono(pthread_cond_t *cv);
HL_HIDDEN void hl_set_err(char *buf, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
HL_HIDDEN char *hl_strdup(const char *s);
/* Error messages per thread (see util.c): note a failure of the calling
 * thread on handle; forget it after a success on handle; view: the text
 * hilock_*_errmsg return for handle (shared is the handle's own message,
 * guarded by mu). */
HL_HIDDEN void hl_err_note(const void *handle, const char *msg);
HL_HIDDEN void hl_err_forget(const void *handle);
HL_HIDDEN const char *hl_err_view(const void *handle, pthread_mutex_t *mu, const char *shared);
/* Wake-up pipes of the client's threads: non-blocking, close-on-exec.
 * hl_wake_pipe: 0, or -1 with both ends set to -1. */
HL_HIDDEN int hl_wake_pipe(int fd[2]);
/* fd (a connection's socket) is closed in a program the process execs: a
 * child (a server the application starts, a command it runs) must not keep
 * the library's connections open after the library closed them (the server
 * would keep their subscriptions). hiredis opens sockets without
 * SOCK_CLOEXEC, so this follows the connect (hilock_async's connections). */
HL_HIDDEN void hl_fd_cloexec(int fd);
HL_HIDDEN void hl_wake(int fd);       /* write one byte */
HL_HIDDEN void hl_wake_drain(int fd); /* read everything there is */
/* SIGPIPE never reaches the host process (see util.c): a caller's thread
 * runs every stretch that may write to a socket with write(2) (a TLS
 * connection: OpenSSL's socket BIO) between enter and leave; the library's
 * threads are started by hl_thread_create, with SIGPIPE blocked for their
 * whole life. Nesting is fine. hl_nosigpipe_skip marks s as "nothing to
 * do" for a stretch that only writes with send(MSG_NOSIGNAL); leave is
 * then a no-op. */
typedef struct hl_nosigpipe {
    sigset_t old;
    int active;         /* enter masked; leave has work to do */
    int restore;        /* SIGPIPE was not blocked before: unblock at leave */
    int pending_before; /* one was pending already: not ours to consume */
} hl_nosigpipe;
HL_HIDDEN void hl_nosigpipe_enter(hl_nosigpipe *s);
HL_HIDDEN void hl_nosigpipe_skip(hl_nosigpipe *s);
HL_HIDDEN void hl_nosigpipe_leave(hl_nosigpipe *s);

/* Fork detection for one handle, without a system call (see util.c):
 * hl_forkguard_forked is 1 in a child process after fork(). init cannot
 * fail (without a page it falls back to getpid()); free is for the page. */
typedef struct hl_forkguard {
    unsigned char *page; /* MADV_WIPEONFORK page: 1 here, 0 in a child */
    pid_t pid;           /* the opener's pid, when no such page could be had */
} hl_forkguard;
HL_HIDDEN void hl_forkguard_init(hl_forkguard *g);
HL_HIDDEN int hl_forkguard_forked(const hl_forkguard *g);
HL_HIDDEN void hl_forkguard_free(hl_forkguard *g);
HL_HIDDEN int hl_thread_create(pthread_t *t, const pthread_attr_t *attr, void *(*fn)(void *),
                               void *arg);

/* A library thread its owner starts once and stops (the pub/sub listener,
 * the sentinel watcher, the drainer, the watchdog): the thread, whether it
 * runs (guarded as its owner guards its own state), and an optional pipe
 * that wakes it from poll(): wake_fd[0] for the thread, -1 when not open. */
typedef struct hl_worker {
    pthread_t thread;
    int running;
    int wake_fd[2];
} hl_worker;
HL_HIDDEN void hl_worker_init(hl_worker *w); /* not running, no pipe */
/* Opens the wake pipe first if with_pipe and it is not open yet, then
 * starts fn(arg) (hl_thread_create). 0, HILOCK_ECONN (pipe; errno set) or
 * HILOCK_ENOMEM (no thread). */
HL_HIDDEN int hl_worker_start(hl_worker *w, int with_pipe, void *(*fn)(void *), void *arg);
HL_HIDDEN void hl_worker_wake(const hl_worker *w); /* one byte down the pipe, if open */
HL_HIDDEN void hl_worker_join(hl_worker *w);       /* joins it; not running after */
HL_HIDDEN void hl_worker_close(hl_worker *w);      /* closes the pipe, if open */

#endif
