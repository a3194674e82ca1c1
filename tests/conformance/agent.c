/*
 * Conformance agent for the blocking C client (libhilock).
 *
 * One process, one hilock client opened with the options on the command
 * line; every actor named in a request is its own pthread (so its own owner
 * "<client-uuid>:<os-thread-id>"), created on first use, running its requests
 * in order. The line protocol is the one every conformance agent speaks
 * (tests/conformance/README.md):
 *
 *   request : ACTOR CMD KIND NAME [ARGS...]     KIND r (reentrant) | f (fair)
 *   answer  : ACTOR ok [VALUES...]   or   ACTOR err ERRKIND [detail]
 *
 * Usage: conformance-agent URL [key=value ...]
 *   keys: watchdog_lease_ms command_timeout_ms connect_timeout_ms
 *         replica_ack (1/0) replica_ack_timeout_ms
 */
#define _POSIX_C_SOURCE 200809L
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hilock.h"

#define MAX_ACTORS 64
#define MAX_LOCKS 64
#define MAX_WORDS 8

typedef struct request {
    char *line;
    struct request *next;
} request;

typedef struct actor {
    char name[32];
    pthread_mutex_t mu;
    pthread_cond_t cv;
    request *head, *tail;
} actor;

typedef struct lock_entry {
    char kind;
    char *name;
    hilock_lock *lock;
} lock_entry;

/* Everything the agent shares between its threads (one instance, in main). */
typedef struct agent {
    hilock_client *client;
    pthread_mutex_t out_mu, locks_mu;
    lock_entry locks[MAX_LOCKS];
    size_t nlocks;
} agent;

typedef struct actor_arg {
    agent *ag;
    actor *a;
} actor_arg;

static void answer(agent *ag, const char *who, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void answer(agent *ag, const char *who, const char *fmt, ...)
{
    va_list ap;
    pthread_mutex_lock(&ag->out_mu);
    printf("%s ", who);
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    putchar('\n');
    fflush(stdout);
    pthread_mutex_unlock(&ag->out_mu);
}

/* The conformance error kinds (the same words every agent uses). */
static const char *err_kind(int rc)
{
    switch (rc) {
    case HILOCK_ETIMEDOUT: return "timeout";
    case HILOCK_ENOTOWNER: return "notowner";
    case HILOCK_ELOST: return "lost";
    case HILOCK_ECONN: return "connection";
    case HILOCK_EPROTO: return "protocol";
    case HILOCK_EAUTH: return "auth";
    case HILOCK_EWRONGTYPE: return "wrongtype";
    case HILOCK_ECLOSED: return "closed";
    case HILOCK_ENOMEM: return "nomem";
    case HILOCK_EINVAL: return "invalid";
    default: return "other";
    }
}

/* The handle for (kind, name), made once and shared by every actor: a
 * handle acts for the calling thread. */
static hilock_lock *lock_of(agent *ag, char kind, const char *name, int *rc)
{
    hilock_lock *found = NULL;
    pthread_mutex_lock(&ag->locks_mu);
    for (size_t i = 0; i < ag->nlocks && !found; i++)
        if (ag->locks[i].kind == kind && strcmp(ag->locks[i].name, name) == 0)
            found = ag->locks[i].lock;
    if (!found) {
        char *copy = ag->nlocks < MAX_LOCKS ? strdup(name) : NULL;
        if (!copy) {
            *rc = HILOCK_ENOMEM;
        } else {
            *rc = kind == 'f' ? hilock_fair_lock_new(&found, ag->client, name)
                              : hilock_lock_new(&found, ag->client, name);
            if (*rc == 0) {
                ag->locks[ag->nlocks].kind = kind;
                ag->locks[ag->nlocks].name = copy;
                ag->locks[ag->nlocks].lock = found;
                ag->nlocks++;
            } else {
                free(copy);
            }
        }
    }
    pthread_mutex_unlock(&ag->locks_mu);
    return found;
}

static void run(agent *ag, actor *a, char *line)
{
    char *w[MAX_WORDS] = {0};
    int nw = 0;
    char *save = NULL;
    for (char *t = strtok_r(line, " \t\r\n", &save); t && nw < MAX_WORDS;
         t = strtok_r(NULL, " \t\r\n", &save))
        w[nw++] = t;
    if (nw < 4 || (strcmp(w[2], "r") != 0 && strcmp(w[2], "f") != 0)) {
        answer(ag, a->name, "err usage ACTOR CMD r|f NAME ...");
        return;
    }
    const char *cmd = w[1];
    int rc = 0;
    hilock_lock *l = lock_of(ag, w[2][0], w[3], &rc);
    if (!l) {
        answer(ag, a->name, "err %s %s", err_kind(rc), hilock_strerror(rc));
        return;
    }
    int flag = 0;
    int64_t n = 0;
    if (strcmp(cmd, "lock") == 0 && nw == 6) {
        rc = hilock_lock_acquire(l, strtoll(w[4], NULL, 10), strtoll(w[5], NULL, 10));
        if (rc == HILOCK_ETIMEDOUT) {
            answer(ag, a->name, "ok 0");
            return;
        }
        flag = 1;
    } else if (strcmp(cmd, "unlock") == 0) {
        rc = hilock_lock_release(l);
        if (rc == 0) {
            answer(ag, a->name, "ok");
            return;
        }
    } else if (strcmp(cmd, "force") == 0) {
        rc = hilock_lock_force_unlock(&flag, l);
    } else if (strcmp(cmd, "locked") == 0) {
        rc = hilock_lock_is_locked(&flag, l);
    } else if (strcmp(cmd, "held") == 0) {
        rc = hilock_lock_is_held(&flag, l);
    } else if (strcmp(cmd, "lost") == 0) {
        flag = hilock_lock_is_lost(l) ? 1 : 0;
    } else if (strcmp(cmd, "holds") == 0 || strcmp(cmd, "ttl") == 0) {
        rc = cmd[0] == 'h' ? hilock_lock_hold_count(&n, l) : hilock_lock_remaining_ms(&n, l);
        if (rc == 0) {
            answer(ag, a->name, "ok %" PRId64, n);
            return;
        }
    } else {
        answer(ag, a->name, "err usage unknown command %s", cmd);
        return;
    }
    if (rc == 0)
        answer(ag, a->name, "ok %d", flag != 0);
    else
        answer(ag, a->name, "err %s %s", err_kind(rc), hilock_strerror(rc));
}

static void *actor_main(void *p)
{
    actor_arg *arg = p;
    actor *a = arg->a;
    for (;;) {
        pthread_mutex_lock(&a->mu);
        while (!a->head)
            pthread_cond_wait(&a->cv, &a->mu);
        request *r = a->head;
        a->head = r->next;
        if (!a->head)
            a->tail = NULL;
        pthread_mutex_unlock(&a->mu);
        run(arg->ag, a, r->line);
        free(r->line);
        free(r);
    }
    return NULL;
}

static actor *actor_of(agent *ag, actor **actors, size_t *n, const char *name)
{
    for (size_t i = 0; i < *n; i++)
        if (strcmp(actors[i]->name, name) == 0)
            return actors[i];
    if (*n == MAX_ACTORS || strlen(name) >= sizeof actors[0]->name)
        return NULL;
    actor *a = calloc(1, sizeof *a);
    actor_arg *arg = calloc(1, sizeof *arg);
    pthread_t th;
    if (!a || !arg) {
        free(a);
        free(arg);
        return NULL;
    }
    strcpy(a->name, name);
    pthread_mutex_init(&a->mu, NULL);
    pthread_cond_init(&a->cv, NULL);
    arg->ag = ag;
    arg->a = a;
    if (pthread_create(&th, NULL, actor_main, arg) != 0) {
        free(a);
        free(arg);
        return NULL;
    }
    pthread_detach(th);
    actors[(*n)++] = a;
    return a;
}

static int set_option(hilock_options *o, const char *kv)
{
    const char *eq = strchr(kv, '=');
    if (!eq)
        return -1;
    size_t klen = (size_t)(eq - kv);
    int64_t v = strtoll(eq + 1, NULL, 10);
    if (klen == 17 && strncmp(kv, "watchdog_lease_ms", klen) == 0)
        o->watchdog_lease_ms = v;
    else if (klen == 18 && strncmp(kv, "command_timeout_ms", klen) == 0)
        o->command_timeout_ms = v;
    else if (klen == 18 && strncmp(kv, "connect_timeout_ms", klen) == 0)
        o->connect_timeout_ms = v;
    else if (klen == 11 && strncmp(kv, "replica_ack", klen) == 0)
        o->replica_ack = v ? 1 : -1;
    else if (klen == 22 && strncmp(kv, "replica_ack_timeout_ms", klen) == 0)
        o->replica_ack_timeout_ms = v;
    else
        return -1;
    return 0;
}

int main(int argc, char **argv)
{
    static agent ag = {.out_mu = PTHREAD_MUTEX_INITIALIZER,
                       .locks_mu = PTHREAD_MUTEX_INITIALIZER};
    actor *actors[MAX_ACTORS];
    size_t nactors = 0;
    hilock_options opts;
    char err[256] = "";

    if (argc < 2) {
        fprintf(stderr, "usage: %s URL [key=value ...]\n", argv[0]);
        return 2;
    }
    hilock_options_init(&opts, HILOCK_OPTIONS_VERSION);
    for (int i = 2; i < argc; i++) {
        if (set_option(&opts, argv[i]) != 0) {
            fprintf(stderr, "unknown option %s\n", argv[i]);
            return 2;
        }
    }
    int rc = hilock_client_open(&ag.client, argv[1], &opts, err, sizeof err);
    if (rc != 0) {
        answer(&ag, "agent", "err %s %s", err_kind(rc), err);
        return 1;
    }
    answer(&ag, "agent", "ok ready");

    char *line = NULL;
    size_t cap = 0;
    while (getline(&line, &cap, stdin) > 0) {
        char name[32];
        if (sscanf(line, "%31s", name) != 1)
            continue;
        if (strcmp(name, "quit") == 0)
            break;
        actor *a = actor_of(&ag, actors, &nactors, name);
        request *r = a ? calloc(1, sizeof *r) : NULL;
        if (!r || !(r->line = strdup(line))) {
            free(r);
            answer(&ag, name, "err other cannot start actor");
            continue;
        }
        pthread_mutex_lock(&a->mu);
        if (a->tail)
            a->tail->next = r;
        else
            a->head = r;
        a->tail = r;
        pthread_cond_signal(&a->cv);
        pthread_mutex_unlock(&a->mu);
    }
    free(line);
    /* Actors may still be blocked in an acquire: leave without tearing the
     * client down under them (the harness's servers outlive us). */
    fflush(stdout);
    _exit(0);
}
