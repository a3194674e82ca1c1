/*
 * The hilock (C) side of the interoperability suite: one process, one
 * hilock client, driven by line commands on stdin. Same protocol as the
 * Redisson agent (src/main/java/hilock/interop/Agent.java):
 *
 *   request : ACTOR COMMAND ARGS...
 *   answer  : ACTOR ok VALUES...   or   ACTOR err REASON...
 *   event   : ! lost NAME TID      (the watchdog found a hold gone)
 *
 * Every actor is its own pthread, created the first time its name is used,
 * and runs its commands in order; the plain (calling-thread) hilock calls
 * are used, so each actor is a distinct owner "<client-uuid>:<os-tid>".
 *
 * Usage: hilock-interop-driver HOST PORT WATCHDOG_LEASE_MS
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "hilock.h"

#define MAX_ACTORS 1024
#define MAX_LOCKS 256
#define MAX_WORDS 8

typedef struct job {
    char *line;
    struct job *next;
} job;

typedef struct actor {
    char name[48];
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    job *head, *tail;
    redisContext *redis; /* for the counter scenario, opened on first use */
} actor;

typedef struct lock_slot {
    char kind;
    char *name;
    hilock_lock *lock;
} lock_slot;

static hilock_client *g_client;
static const char *g_host;
static int g_port;
static pthread_mutex_t g_out_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t g_locks_mu = PTHREAD_MUTEX_INITIALIZER;
static lock_slot g_locks[MAX_LOCKS];
static size_t g_nlocks;
static actor *g_actors[MAX_ACTORS];
static size_t g_nactors;

static int64_t epoch_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void say(const char *who, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(const char *who, const char *fmt, ...)
{
    va_list ap;
    pthread_mutex_lock(&g_out_mu);
    fputs(who, stdout);
    fputc(' ', stdout);
    va_start(ap, fmt);
    vfprintf(stdout, fmt, ap);
    va_end(ap);
    fputc('\n', stdout);
    fflush(stdout);
    pthread_mutex_unlock(&g_out_mu);
}

static void on_lost(hilock_lock *l, uint64_t tid, void *payload)
{
    (void)payload;
    say("!", "lost %s %" PRIu64, hilock_lock_name(l), tid);
}

/* The handle for (kind, name), made once and shared by all actors. */
static hilock_lock *lock_of(char kind, const char *name, int *rc)
{
    hilock_lock *found = NULL;
    pthread_mutex_lock(&g_locks_mu);
    for (size_t i = 0; i < g_nlocks; i++) {
        if (g_locks[i].kind == kind && strcmp(g_locks[i].name, name) == 0) {
            found = g_locks[i].lock;
            break;
        }
    }
    if (!found) {
        if (g_nlocks == MAX_LOCKS) {
            *rc = HILOCK_ENOMEM;
        } else {
            *rc = kind == 'f' ? hilock_fair_lock_new(&found, g_client, name)
                              : hilock_lock_new(&found, g_client, name);
            if (*rc == 0) {
                hilock_lock_set_lost_callback(found, on_lost, NULL);
                g_locks[g_nlocks].kind = kind;
                g_locks[g_nlocks].name = strdup(name);
                g_locks[g_nlocks].lock = found;
                g_nlocks++;
            }
        }
    }
    pthread_mutex_unlock(&g_locks_mu);
    return found;
}

static int64_t num(const char *s)
{
    return s ? strtoll(s, NULL, 10) : 0;
}

static void fail(actor *a, hilock_lock *l, int rc)
{
    say(a->name, "err %s: %s", hilock_strerror(rc), l ? hilock_lock_errmsg(l) : "");
}

/* Counter scenario: N locked, deliberately non-atomic read-modify-writes. */
static void counter(actor *a, hilock_lock *l, const char *key, int64_t n, int64_t lease)
{
    if (!a->redis) {
        a->redis = redisConnect(g_host, g_port);
        if (!a->redis || a->redis->err) {
            say(a->name, "err cannot connect for the counter");
            return;
        }
    }
    for (int64_t i = 0; i < n; i++) {
        int rc = hilock_lock_acquire(l, HILOCK_WAIT_FOREVER, lease);
        if (rc != 0) {
            fail(a, l, rc);
            return;
        }
        redisReply *r = redisCommand(a->redis, "GET %s", key);
        if (!r) {
            say(a->name, "err GET failed");
            return;
        }
        long long v = r->type == REDIS_REPLY_STRING ? strtoll(r->str, NULL, 10) : 0;
        freeReplyObject(r);
        sched_yield();
        r = redisCommand(a->redis, "SET %s %lld", key, v + 1);
        if (!r) {
            say(a->name, "err SET failed");
            return;
        }
        freeReplyObject(r);
        rc = hilock_lock_release(l);
        if (rc != 0) {
            fail(a, l, rc);
            return;
        }
    }
    say(a->name, "ok %" PRId64, n);
}

static void run(actor *a, char *line)
{
    char *w[MAX_WORDS] = {0};
    int nw = 0;
    char *save = NULL;
    for (char *t = strtok_r(line, " \t\r\n", &save); t && nw < MAX_WORDS;
         t = strtok_r(NULL, " \t\r\n", &save))
        w[nw++] = t;
    const char *cmd = w[1];
    char owner[80];

    if (strcmp(cmd, "id") == 0) {
        say(a->name, "ok %s", hilock_client_id(g_client));
        return;
    }
    if (strcmp(cmd, "tid") == 0) {
        say(a->name, "ok %" PRIu64, hilock_thread_id());
        return;
    }
    if (strcmp(cmd, "owner") == 0) {
        hilock_client_owner(g_client, hilock_thread_id(), owner, sizeof owner);
        say(a->name, "ok %s", owner);
        return;
    }
    if (nw < 4 || (strcmp(w[2], "r") != 0 && strcmp(w[2], "f") != 0)) {
        say(a->name, "err usage: %s KIND NAME ...", cmd);
        return;
    }
    int rc = 0;
    hilock_lock *l = lock_of(w[2][0], w[3], &rc);
    if (!l) {
        fail(a, NULL, rc);
        return;
    }
    if (strcmp(cmd, "lock") == 0 && nw >= 6) {
        rc = hilock_lock_acquire(l, num(w[4]), num(w[5]));
        int64_t at = epoch_us();
        if (rc == 0 || rc == HILOCK_ETIMEDOUT)
            say(a->name, "ok %d %" PRId64, rc == 0, at);
        else
            fail(a, l, rc);
    } else if (strcmp(cmd, "unlock") == 0) {
        int64_t before = epoch_us();
        rc = hilock_lock_release(l);
        if (rc == 0)
            say(a->name, "ok %" PRId64, before);
        else if (rc == HILOCK_ENOTOWNER)
            say(a->name, "err notowner");
        else
            fail(a, l, rc);
    } else if (strcmp(cmd, "force") == 0) {
        int deleted = 0;
        int64_t before = epoch_us();
        rc = hilock_lock_force_unlock(&deleted, l);
        if (rc == 0)
            say(a->name, "ok %d %" PRId64, deleted, before);
        else
            fail(a, l, rc);
    } else if (strcmp(cmd, "islocked") == 0 || strcmp(cmd, "held") == 0) {
        int v = 0;
        rc = cmd[0] == 'i' ? hilock_lock_is_locked(&v, l) : hilock_lock_is_held(&v, l);
        if (rc == 0)
            say(a->name, "ok %d", v);
        else
            fail(a, l, rc);
    } else if (strcmp(cmd, "holds") == 0 || strcmp(cmd, "ttl") == 0) {
        int64_t v = 0;
        rc = cmd[0] == 'h' ? hilock_lock_hold_count(&v, l) : hilock_lock_remaining_ms(&v, l);
        if (rc == 0)
            say(a->name, "ok %" PRId64, v);
        else
            fail(a, l, rc);
    } else if (strcmp(cmd, "lost") == 0) {
        say(a->name, "ok %d", hilock_lock_is_lost(l));
    } else if (strcmp(cmd, "counter") == 0 && nw >= 7) {
        counter(a, l, w[4], num(w[5]), num(w[6]));
    } else {
        say(a->name, "err unknown command %s", cmd);
    }
}

static void *actor_main(void *arg)
{
    actor *a = arg;
    for (;;) {
        pthread_mutex_lock(&a->mu);
        while (!a->head)
            pthread_cond_wait(&a->cv, &a->mu);
        job *j = a->head;
        a->head = j->next;
        if (!a->head)
            a->tail = NULL;
        pthread_mutex_unlock(&a->mu);
        run(a, j->line);
        free(j->line);
        free(j);
    }
    return NULL;
}

static actor *actor_of(const char *name)
{
    for (size_t i = 0; i < g_nactors; i++)
        if (strcmp(g_actors[i]->name, name) == 0)
            return g_actors[i];
    if (g_nactors == MAX_ACTORS || strlen(name) >= sizeof g_actors[0]->name)
        return NULL;
    actor *a = calloc(1, sizeof *a);
    if (!a)
        return NULL;
    strcpy(a->name, name);
    pthread_mutex_init(&a->mu, NULL);
    pthread_cond_init(&a->cv, NULL);
    if (pthread_create(&a->thread, NULL, actor_main, a) != 0) {
        free(a);
        return NULL;
    }
    pthread_detach(a->thread);
    g_actors[g_nactors++] = a;
    return a;
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: %s HOST PORT WATCHDOG_LEASE_MS\n", argv[0]);
        return 2;
    }
    g_host = argv[1];
    g_port = atoi(argv[2]);
    char url[256], err[256] = "";
    snprintf(url, sizeof url, "redis://%s:%d", g_host, g_port);
    hilock_options opts = HILOCK_OPTIONS_INIT;
    opts.watchdog_lease_ms = strtoll(argv[3], NULL, 10);
    int rc = hilock_client_open(&g_client, url, &opts, err, sizeof err);
    if (rc != 0) {
        fprintf(stderr, "hilock_client_open: %s: %s\n", hilock_strerror(rc), err);
        return 1;
    }
    say("agent", "ok ready %s", hilock_client_id(g_client));

    char *line = NULL;
    size_t cap = 0;
    while (getline(&line, &cap, stdin) > 0) {
        char name[64];
        if (sscanf(line, "%63s", name) != 1)
            continue;
        if (strcmp(name, "quit") == 0)
            break;
        actor *a = actor_of(name);
        job *j = a ? calloc(1, sizeof *j) : NULL;
        if (!j || !(j->line = strdup(line))) {
            free(j);
            say(name, "err cannot start actor");
            continue;
        }
        pthread_mutex_lock(&a->mu);
        if (a->tail)
            a->tail->next = j;
        else
            a->head = j;
        a->tail = j;
        pthread_cond_signal(&a->cv);
        pthread_mutex_unlock(&a->mu);
    }
    free(line);
    /* Actors may still be blocked in an acquire: leave without tearing the
     * client down under them; the throwaway server goes away with the run. */
    fflush(stdout);
    _exit(0);
}
