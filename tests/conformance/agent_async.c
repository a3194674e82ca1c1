/*
 * Conformance agent for the non-blocking C API (hilock_async) on epoll.
 *
 * One process, one thread, one hilock client and one hilock_async: requests
 * are read from stdin by the same epoll loop that runs hilock (the epoll
 * adapter's descriptor is nested in the agent's own epoll set, as a program
 * with its own loop would do). Every actor is a thread id of its own (1, 2,
 * ... in the order the actors first appear), so its own owner
 * "<client-uuid>:<tid>"; an actor's request starts at once and its answer is
 * printed from the completion callback. The line protocol is the one every
 * conformance agent speaks (tests/conformance/README.md):
 *
 *   request : ACTOR CMD KIND NAME [ARGS...]
 *             KIND r (reentrant) | f (fair) | fenced | read | write,
 *             or sem | pes | latch with their own commands (setp, acquire,
 *             release, avail, countdown, await)
 *   answer  : ACTOR ok [VALUES...]   or   ACTOR err ERRKIND [detail]
 *
 * Usage: agent-c-async URL [key=value ...]
 *   keys: watchdog_lease_ms command_timeout_ms connect_timeout_ms
 *         replica_ack (1/0) replica_ack_timeout_ms
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "hilock.h"
#include "hilock/adapters/epoll.h"
#include "line_agent.h"

#define MAX_ACTORS 64
#define MAX_WORDS 8

/* One request in flight: what its answer needs. */
typedef struct request {
    char actor[64];
    char cmd[16];
    int fenced;
    uint64_t tid;
    char id[HILOCK_PERMIT_ID_SIZE]; /* a permit-expirable acquire's id */
} request;

static hilock_client *client;
static hilock_async *as;
static line_agent_objects objs;
static char *actors[MAX_ACTORS];
static size_t nactors;
static char permit_ids[MAX_ACTORS + 1][HILOCK_PERMIT_ID_SIZE]; /* each actor's last permit */

static void say(const char *who, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(const char *who, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    printf("%s ", who);
    vprintf(fmt, ap);
    printf("\n");
    fflush(stdout);
    va_end(ap);
}

/* The actor's thread id: 1, 2, ... by first appearance. */
static uint64_t tid_of(const char *actor)
{
    for (size_t i = 0; i < nactors; i++)
        if (strcmp(actors[i], actor) == 0)
            return i + 1;
    if (nactors == MAX_ACTORS)
        return 0;
    actors[nactors] = strdup(actor);
    return actors[nactors] ? ++nactors : 0;
}

static void answer(hilock_async *a, int rc, int64_t value, void *payload)
{
    request *q = payload;
    if (strcmp(q->cmd, "lock") == 0 && rc == HILOCK_ETIMEDOUT)
        say(q->actor, "ok 0");
    else if (rc)
        say(q->actor, "err %s %s", line_agent_err_kind(rc), hilock_async_errmsg(a));
    else if (strcmp(q->cmd, "lock") == 0 && q->fenced)
        say(q->actor, "ok 1 %" PRId64, value);
    else if (strcmp(q->cmd, "lock") == 0)
        say(q->actor, "ok 1");
    else if (strcmp(q->cmd, "unlock") == 0)
        say(q->actor, "ok");
    else if (strcmp(q->cmd, "force") == 0 || strcmp(q->cmd, "locked") == 0 ||
             strcmp(q->cmd, "held") == 0)
        say(q->actor, "ok %d", value != 0);
    else
        say(q->actor, "ok %" PRId64, value);
    free(q);
}

/* Answers of the sem, pes and latch commands (tests/conformance/README.md). */
static void sem_answer(hilock_async *a, int rc, int64_t value, void *payload)
{
    request *q = payload;
    int wait = strcmp(q->cmd, "acquire") == 0 || strcmp(q->cmd, "await") == 0;
    if (wait && rc == HILOCK_ETIMEDOUT)
        say(q->actor, "ok 0");
    else if (rc)
        say(q->actor, "err %s %s", line_agent_err_kind(rc), hilock_async_errmsg(a));
    else if (wait) {
        if (q->id[0])
            memcpy(permit_ids[q->tid], q->id, sizeof q->id);
        say(q->actor, "ok 1");
    } else if (strcmp(q->cmd, "release") == 0)
        say(q->actor, "ok");
    else
        say(q->actor, "ok %" PRId64, value);
    free(q);
}

static void run_sem(request *q, char **w, int nw)
{
    int rc = 0;
    const char *cmd = w[1], *kind = w[2];
    void *h = line_agent_sem_of(&objs, client, kind, w[3], &rc);
    if (!h) {
        say(q->actor, "err %s %s", line_agent_err_kind(rc), hilock_strerror(rc));
        free(q);
        return;
    }
    int sem = strcmp(kind, "sem") == 0, pes = strcmp(kind, "pes") == 0, latch = !sem && !pes;
    int64_t x = nw > 4 ? strtoll(w[4], NULL, 10) : 0, y = nw > 5 ? strtoll(w[5], NULL, 10) : 0;
    int64_t z = nw > 6 ? strtoll(w[6], NULL, 10) : 0;
    hilock_count_op op = 0;
    if (strcmp(cmd, "setp") == 0 && nw == 5)
        op = HILOCK_COUNT_TRY_SET;
    else if (strcmp(cmd, "avail") == 0)
        op = HILOCK_COUNT_GET;
    if (op)
        rc = sem ? hilock_async_semaphore_count_op(as, h, op, x, sem_answer, q)
             : pes ? hilock_async_permit_semaphore_count_op(as, h, op, x, sem_answer, q)
                   : hilock_async_latch_count_op(as, h, op, x, sem_answer, q);
    else if (strcmp(cmd, "acquire") == 0 && nw == 7 && sem)
        rc = hilock_async_semaphore_acquire(as, h, q->tid, x, y, sem_answer, q);
    else if (strcmp(cmd, "acquire") == 0 && nw == 7 && pes)
        rc = hilock_async_permit_semaphore_acquire(q->id, as, h, q->tid, y, z, sem_answer, q);
    else if (strcmp(cmd, "release") == 0 && nw == 5 && sem)
        rc = hilock_async_semaphore_release(as, h, x, sem_answer, q);
    else if (strcmp(cmd, "release") == 0 && pes)
        rc = hilock_async_permit_semaphore_release(as, h, permit_ids[q->tid], sem_answer, q);
    else if (strcmp(cmd, "countdown") == 0 && latch)
        rc = hilock_async_latch_count_down(as, h, sem_answer, q);
    else if (strcmp(cmd, "await") == 0 && nw == 5 && latch)
        rc = hilock_async_latch_await(as, h, q->tid, x, sem_answer, q);
    else {
        say(q->actor, "err usage unknown command %s for %s", cmd, kind);
        free(q);
        return;
    }
    if (rc) { /* refused at once: no callback comes */
        say(q->actor, "err %s %s", line_agent_err_kind(rc), hilock_async_errmsg(as));
        free(q);
    }
}

static void handle(char *line)
{
    char *w[MAX_WORDS] = {0};
    int nw = 0;
    char *save = NULL;
    for (char *t = strtok_r(line, " \t\r\n", &save); t && nw < MAX_WORDS;
         t = strtok_r(NULL, " \t\r\n", &save))
        w[nw++] = t;
    if (nw == 0)
        return;
    const char *actor = w[0];
    static const char *const kinds[] = {"r", "f", "fenced", "read", "write", NULL};
    int known = 0;
    for (int i = 0; nw >= 4 && kinds[i]; i++)
        known |= strcmp(kinds[i], w[2]) == 0;
    uint64_t tid = tid_of(actor);
    if (nw >= 4 && tid &&
        (!strcmp(w[2], "sem") || !strcmp(w[2], "pes") || !strcmp(w[2], "latch"))) {
        request *q = calloc(1, sizeof *q);
        if (!q) {
            say(actor, "err nomem out of memory");
            return;
        }
        snprintf(q->actor, sizeof q->actor, "%s", actor);
        snprintf(q->cmd, sizeof q->cmd, "%s", w[1]);
        q->tid = tid;
        run_sem(q, w, nw);
        return;
    }
    if (!known || !tid) {
        say(actor, "err usage ACTOR CMD r|f|fenced|read|write NAME ...");
        return;
    }
    int rc = 0;
    hilock_lock *l = line_agent_lock_of(&objs, client, w[2], w[3], &rc);
    if (!l) {
        say(actor, "err %s %s", line_agent_err_kind(rc), hilock_strerror(rc));
        return;
    }
    const char *cmd = w[1];
    if (strcmp(cmd, "lost") == 0) {
        say(actor, "ok %d", hilock_async_is_lost(as, l, tid));
        return;
    }
    request *q = calloc(1, sizeof *q);
    if (!q) {
        say(actor, "err nomem out of memory");
        return;
    }
    snprintf(q->actor, sizeof q->actor, "%s", actor);
    snprintf(q->cmd, sizeof q->cmd, "%s", cmd);
    q->fenced = strcmp(w[2], "fenced") == 0;
    if (strcmp(cmd, "lock") == 0 && nw == 6)
        rc = hilock_async_acquire(as, l, tid, strtoll(w[4], NULL, 10), strtoll(w[5], NULL, 10),
                                  answer, q);
    else if (strcmp(cmd, "unlock") == 0)
        rc = hilock_async_release(as, l, tid, answer, q);
    else if (strcmp(cmd, "force") == 0)
        rc = hilock_async_force_unlock(as, l, answer, q);
    else if (strcmp(cmd, "token") == 0)
        rc = hilock_async_query(as, l, HILOCK_QUERY_TOKEN, tid, answer, q);
    else if (strcmp(cmd, "locked") == 0)
        rc = hilock_async_query(as, l, HILOCK_QUERY_IS_LOCKED, tid, answer, q);
    else if (strcmp(cmd, "held") == 0)
        rc = hilock_async_query(as, l, HILOCK_QUERY_IS_HELD, tid, answer, q);
    else if (strcmp(cmd, "holds") == 0)
        rc = hilock_async_query(as, l, HILOCK_QUERY_HOLD_COUNT, tid, answer, q);
    else if (strcmp(cmd, "ttl") == 0)
        rc = hilock_async_query(as, l, HILOCK_QUERY_REMAINING_MS, tid, answer, q);
    else {
        free(q);
        say(actor, "err usage unknown command %s", cmd);
        return;
    }
    if (rc) { /* refused at once: no callback comes */
        free(q);
        say(actor, "err %s %s", line_agent_err_kind(rc), hilock_async_errmsg(as));
    }
}

int main(int argc, char **argv)
{
    hilock_options opts;
    char err[256] = "";
    if (argc < 2) {
        fprintf(stderr, "usage: %s URL [key=value ...]\n", argv[0]);
        return 2;
    }
    hilock_options_init(&opts, HILOCK_OPTIONS_VERSION);
    for (int i = 2; i < argc; i++)
        if (line_agent_set_option(&opts, argv[i]) != 0) {
            fprintf(stderr, "unknown option %s\n", argv[i]);
            return 2;
        }
    line_agent_objects_init(&objs);
    int rc = hilock_client_open(&client, argv[1], &opts, err, sizeof err);
    if (rc != 0) {
        say("agent", "err %s %s", line_agent_err_kind(rc), err);
        return 1;
    }
    hilock_epoll ep;
    int loopfd = epoll_create1(EPOLL_CLOEXEC);
    if (hilock_epoll_init(&ep) != 0 || loopfd < 0)
        return 1;
    hilock_async_loop loop = hilock_epoll_loop(&ep);
    if (hilock_async_new(&as, &loop) != 0)
        return 1;
    /* the agent's own loop: stdin and hilock's epoll descriptor */
    fcntl(0, F_SETFL, fcntl(0, F_GETFL) | O_NONBLOCK);
    struct epoll_event ev = {.events = EPOLLIN, .data = {.fd = 0}};
    epoll_ctl(loopfd, EPOLL_CTL_ADD, 0, &ev);
    ev.data.fd = ep.epfd;
    epoll_ctl(loopfd, EPOLL_CTL_ADD, ep.epfd, &ev);
    say("agent", "ok ready");

    char buf[8192];
    size_t used = 0;
    for (int open = 1; open;) {
        struct epoll_event evs[4];
        int n = epoll_wait(loopfd, evs, 4, hilock_epoll_timeout(&ep));
        if (n < 0 && errno != EINTR)
            break;
        for (int i = 0; i < n; i++) {
            if (evs[i].data.fd != 0)
                continue;
            ssize_t k;
            while ((k = read(0, buf + used, sizeof buf - 1 - used)) > 0) {
                used += (size_t)k;
                buf[used] = 0;
                char *nl;
                while ((nl = strchr(buf, '\n')) != NULL) {
                    *nl = 0;
                    if (strcmp(buf, "quit") == 0)
                        open = 0;
                    else if (open)
                        handle(buf);
                    used -= (size_t)(nl + 1 - buf);
                    memmove(buf, nl + 1, used + 1);
                }
                if (used == sizeof buf - 1)
                    used = 0; /* a line too long: dropped */
            }
            if (k == 0)
                open = 0; /* EOF */
        }
        hilock_epoll_run_once(&ep, as, 0); /* hilock's ready descriptors and timer */
    }
    hilock_async_free(as); /* pending requests answer "err closed" */
    hilock_epoll_close(&ep);
    close(loopfd);
    line_agent_objects_free(&objs);
    for (size_t i = 0; i < nactors; i++)
        free(actors[i]);
    hilock_client_close(client);
    return 0;
}
