/*
 * The hilock (C) side of the interoperability suite: one process, one
 * hilock client, driven by line commands on stdin. Same protocol as the
 * Redisson agent (src/main/java/hilock/interop/Agent.java):
 *
 *   request : ACTOR COMMAND ARGS...
 *   answer  : ACTOR ok VALUES...   or   ACTOR err REASON...
 *   event   : ! lost NAME TID      (the watchdog found a hold gone)
 *
 * Every actor is its own thread (tests/common/line_agent.c), created the
 * first time its name is used, running its commands in order; the plain
 * (calling-thread) hilock calls are used, so each actor is a distinct owner
 * "<client-uuid>:<os-tid>".
 *
 * KIND: r reentrant, f fair, R / W the read / write side of a read-write lock,
 * F fenced; flock NAME WAIT LEASE -> ok TOKEN|0 EPOCH_US, token NAME -> ok TOKEN.
 *
 * Usage: hilock-interop-driver HOST PORT WATCHDOG_LEASE_MS
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "hilock.h"
#include "line_agent.h"

#define MAX_LOCKS 256
#define MAX_WORDS 8

typedef struct lock_slot {
    char kind;
    char *name;
    hilock_lock *lock;
} lock_slot;

static hilock_client *g_client;
static const char *g_host;
static int g_port;
static pthread_mutex_t g_locks_mu = PTHREAD_MUTEX_INITIALIZER;
static lock_slot g_locks[MAX_LOCKS];
static size_t g_nlocks;

static int64_t epoch_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void on_lost(hilock_lock *l, uint64_t tid, void *payload)
{
    (void)payload;
    line_agent_say("!", "lost %s %" PRIu64, hilock_lock_name(l), tid);
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
            hilock_rwlock *rw = NULL; /* R / W: a side of a read-write lock (kept) */
            if (kind == 'R' || kind == 'W') {
                *rc = hilock_rwlock_new(&rw, g_client, name);
                if (*rc == 0)
                    found = kind == 'R' ? hilock_rwlock_read_lock(rw) : hilock_rwlock_write_lock(rw);
            } else {
                *rc = kind == 'f'   ? hilock_fair_lock_new(&found, g_client, name)
                      : kind == 'F' ? hilock_fenced_lock_new(&found, g_client, name)
                                    : hilock_lock_new(&found, g_client, name);
            }
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

static void fail(const char *who, hilock_lock *l, int rc)
{
    line_agent_say(who, "err %s: %s", hilock_strerror(rc), l ? hilock_lock_errmsg(l) : "");
}

/* Counter scenario: N locked, deliberately non-atomic read-modify-writes. */
static void counter(const char *who, redisContext **redis, hilock_lock *l, const char *key,
                    int64_t n, int64_t lease)
{
    if (!*redis) {
        *redis = redisConnect(g_host, g_port);
        if (!*redis || (*redis)->err) {
            line_agent_say(who, "err cannot connect for the counter");
            return;
        }
    }
    for (int64_t i = 0; i < n; i++) {
        int rc = hilock_lock_acquire(l, HILOCK_WAIT_FOREVER, lease);
        if (rc != 0) {
            fail(who, l, rc);
            return;
        }
        redisReply *r = redisCommand(*redis, "GET %s", key);
        if (!r) {
            line_agent_say(who, "err GET failed");
            return;
        }
        long long v = r->type == REDIS_REPLY_STRING ? strtoll(r->str, NULL, 10) : 0;
        freeReplyObject(r);
        sched_yield();
        r = redisCommand(*redis, "SET %s %lld", key, v + 1);
        if (!r) {
            line_agent_say(who, "err SET failed");
            return;
        }
        freeReplyObject(r);
        rc = hilock_lock_release(l);
        if (rc != 0) {
            fail(who, l, rc);
            return;
        }
    }
    line_agent_say(who, "ok %" PRId64, n);
}

/* ---- semaphores and latch (same commands as the Redisson agent) ---- */

#define MAX_OBJS 256
typedef struct obj_slot {
    char kind; /* 's' semaphore, 'p' permit-expirable, 'l' latch */
    char *name;
    void *h;
} obj_slot;
static obj_slot g_objs[MAX_OBJS];
static size_t g_nobjs;

static void *obj_of(char kind, const char *name)
{
    void *found = NULL;
    pthread_mutex_lock(&g_locks_mu);
    for (size_t i = 0; i < g_nobjs && !found; i++)
        if (g_objs[i].kind == kind && strcmp(g_objs[i].name, name) == 0)
            found = g_objs[i].h;
    if (!found && g_nobjs < MAX_OBJS) {
        int rc = kind == 's' ? hilock_semaphore_new((hilock_semaphore **)&found, g_client, name)
                 : kind == 'p'
                     ? hilock_permit_semaphore_new((hilock_permit_semaphore **)&found, g_client,
                                                   name)
                     : hilock_latch_new((hilock_latch **)&found, g_client, name);
        if (rc == 0) {
            g_objs[g_nobjs].kind = kind;
            g_objs[g_nobjs].name = strdup(name);
            g_objs[g_nobjs].h = found;
            g_nobjs++;
        }
    }
    pthread_mutex_unlock(&g_locks_mu);
    return found;
}

/* semloop: N rounds of acquire 1, INCR KEY (INCR KEY:over above PERMITS),
 * DECR KEY, release 1. */
static void semloop(const char *who, redisContext **redis, hilock_semaphore *s, const char *key,
                    int64_t n, int64_t permits)
{
    if (!*redis) {
        *redis = redisConnect(g_host, g_port);
        if (!*redis || (*redis)->err) {
            line_agent_say(who, "err cannot connect for semloop");
            return;
        }
    }
    for (int64_t i = 0; i < n; i++) {
        int rc = hilock_semaphore_acquire(s, 1, HILOCK_WAIT_FOREVER);
        if (rc != 0) {
            line_agent_say(who, "err %s: %s", hilock_strerror(rc), hilock_semaphore_errmsg(s));
            return;
        }
        redisReply *r = redisCommand(*redis, "INCR %s", key);
        long long in = r && r->type == REDIS_REPLY_INTEGER ? r->integer : -1;
        freeReplyObject(r);
        if (in > permits || in < 0)
            freeReplyObject(redisCommand(*redis, "INCR %s:over", key));
        struct timespec ms = {0, 1000000};
        nanosleep(&ms, NULL);
        freeReplyObject(redisCommand(*redis, "DECR %s", key));
        if ((rc = hilock_semaphore_release(s, 1)) != 0) {
            line_agent_say(who, "err %s: %s", hilock_strerror(rc), hilock_semaphore_errmsg(s));
            return;
        }
    }
    line_agent_say(who, "ok %" PRId64, n);
}

/* 1 when cmd was one of the semaphore / latch commands (answered). */
static int run_sem(const char *who, char **w, int nw, void **actor_data)
{
    const char *cmd = w[1];
    if (nw < 3 || (strncmp(cmd, "sem", 3) && strncmp(cmd, "pes", 3) && strncmp(cmd, "latch", 5)))
        return 0;
    char kind = cmd[0] == 's' ? 's' : cmd[0] == 'p' ? 'p' : 'l';
    void *h = obj_of(kind, w[2]);
    if (!h) {
        line_agent_say(who, "err cannot make a handle for %s", w[2]);
        return 1;
    }
    hilock_semaphore *s = h;
    hilock_permit_semaphore *p = h;
    hilock_latch *l = h;
    int rc = 0, v = 0;
    int64_t n = 0, at;
    if (!strcmp(cmd, "semset") && nw >= 4) {
        if ((rc = hilock_semaphore_try_set_permits(&v, s, num(w[3]))) == 0)
            line_agent_say(who, "ok %d", v);
    } else if (!strcmp(cmd, "semacq") && nw >= 5) {
        rc = hilock_semaphore_acquire(s, num(w[3]), num(w[4]));
        at = epoch_us();
        if (rc == 0 || rc == HILOCK_ETIMEDOUT) {
            line_agent_say(who, "ok %d %" PRId64, rc == 0, at);
            rc = 0;
        }
    } else if (!strcmp(cmd, "semrel") && nw >= 4) {
        at = epoch_us();
        if ((rc = hilock_semaphore_release(s, num(w[3]))) == 0)
            line_agent_say(who, "ok %" PRId64, at);
    } else if (!strcmp(cmd, "semavail")) {
        if ((rc = hilock_semaphore_available(&n, s)) == 0)
            line_agent_say(who, "ok %" PRId64, n);
    } else if (!strcmp(cmd, "semloop") && nw >= 6) {
        semloop(who, (redisContext **)actor_data, s, w[3], num(w[4]), num(w[5]));
    } else if (!strcmp(cmd, "pesacq") && nw >= 5) {
        char id[HILOCK_PERMIT_ID_SIZE];
        rc = hilock_permit_semaphore_acquire(id, p, num(w[3]), num(w[4]));
        at = epoch_us();
        if (rc == 0 || rc == HILOCK_ETIMEDOUT) {
            line_agent_say(who, "ok %s %" PRId64, rc == 0 ? id : "-", at);
            rc = 0;
        }
    } else if (!strcmp(cmd, "pesrel") && nw >= 4) {
        rc = hilock_permit_semaphore_release(p, w[3]);
        if (rc == 0)
            line_agent_say(who, "ok 1");
        else if (rc == HILOCK_ENOTOWNER) {
            line_agent_say(who, "err notowner");
            rc = 0;
        }
    } else if (!strcmp(cmd, "latchset") && nw >= 4) {
        if ((rc = hilock_latch_try_set_count(&v, l, num(w[3]))) == 0)
            line_agent_say(who, "ok %d", v);
    } else if (!strcmp(cmd, "latchdown")) {
        at = epoch_us();
        if ((rc = hilock_latch_count_down(NULL, l)) == 0)
            line_agent_say(who, "ok %" PRId64, at);
    } else if (!strcmp(cmd, "latchawait") && nw >= 4) {
        rc = hilock_latch_await(l, num(w[3]));
        at = epoch_us();
        if (rc == 0 || rc == HILOCK_ETIMEDOUT) {
            line_agent_say(who, "ok %d %" PRId64, rc == 0, at);
            rc = 0;
        }
    } else if (!strcmp(cmd, "latchcount")) {
        if ((rc = hilock_latch_count(&n, l)) == 0)
            line_agent_say(who, "ok %" PRId64, n);
    } else {
        line_agent_say(who, "err usage: %s NAME ...", cmd);
    }
    if (rc)
        line_agent_say(who, "err %s: %s", hilock_strerror(rc),
                       kind == 's'   ? hilock_semaphore_errmsg(s)
                       : kind == 'p' ? hilock_permit_semaphore_errmsg(p)
                                     : hilock_latch_errmsg(l));
    return 1;
}

static void run(void *ctx, const char *who, char *line, void **actor_data)
{
    (void)ctx;
    char *w[MAX_WORDS] = {0};
    int nw = 0;
    char *save = NULL;
    for (char *t = strtok_r(line, " \t\r\n", &save); t && nw < MAX_WORDS;
         t = strtok_r(NULL, " \t\r\n", &save))
        w[nw++] = t;
    const char *cmd = w[1];
    char owner[80];

    if (strcmp(cmd, "id") == 0) {
        line_agent_say(who, "ok %s", hilock_client_id(g_client));
        return;
    }
    if (strcmp(cmd, "tid") == 0) {
        line_agent_say(who, "ok %" PRIu64, hilock_thread_id());
        return;
    }
    if (strcmp(cmd, "owner") == 0) {
        hilock_client_owner(g_client, hilock_thread_id(), owner, sizeof owner);
        line_agent_say(who, "ok %s", owner);
        return;
    }
    if (run_sem(who, w, nw, actor_data))
        return;
    if ((strcmp(cmd, "flock") == 0 && nw >= 5) || (strcmp(cmd, "token") == 0 && nw >= 3)) {
        int frc = 0;
        hilock_lock *fl = lock_of('F', w[2], &frc);
        int64_t token = 0;
        if (!fl) {
            fail(who, NULL, frc);
        } else if (cmd[0] == 'f') {
            frc = hilock_lock_acquire_token(&token, fl, num(w[3]), num(w[4]));
            int64_t at = epoch_us();
            if (frc == 0 || frc == HILOCK_ETIMEDOUT)
                line_agent_say(who, "ok %" PRId64 " %" PRId64, token, at);
            else
                fail(who, fl, frc);
        } else if ((frc = hilock_lock_token(&token, fl)) == 0) {
            line_agent_say(who, "ok %" PRId64, token);
        } else {
            fail(who, fl, frc);
        }
        return;
    }
    if (nw < 4 || w[2][1] || !strchr("rfRWF", w[2][0])) {
        line_agent_say(who, "err usage: %s KIND NAME ...", cmd);
        return;
    }
    int rc = 0;
    hilock_lock *l = lock_of(w[2][0], w[3], &rc);
    if (!l) {
        fail(who, NULL, rc);
        return;
    }
    if (strcmp(cmd, "lock") == 0 && nw >= 6) {
        rc = hilock_lock_acquire(l, num(w[4]), num(w[5]));
        int64_t at = epoch_us();
        if (rc == 0 || rc == HILOCK_ETIMEDOUT)
            line_agent_say(who, "ok %d %" PRId64, rc == 0, at);
        else
            fail(who, l, rc);
    } else if (strcmp(cmd, "unlock") == 0) {
        int64_t before = epoch_us();
        rc = hilock_lock_release(l);
        if (rc == 0)
            line_agent_say(who, "ok %" PRId64, before);
        else if (rc == HILOCK_ENOTOWNER)
            line_agent_say(who, "err notowner");
        else
            fail(who, l, rc);
    } else if (strcmp(cmd, "force") == 0) {
        int deleted = 0;
        int64_t before = epoch_us();
        rc = hilock_lock_force_unlock(&deleted, l);
        if (rc == 0)
            line_agent_say(who, "ok %d %" PRId64, deleted, before);
        else
            fail(who, l, rc);
    } else if (strcmp(cmd, "islocked") == 0 || strcmp(cmd, "held") == 0) {
        int v = 0;
        rc = cmd[0] == 'i' ? hilock_lock_is_locked(&v, l) : hilock_lock_is_held(&v, l);
        if (rc == 0)
            line_agent_say(who, "ok %d", v);
        else
            fail(who, l, rc);
    } else if (strcmp(cmd, "holds") == 0 || strcmp(cmd, "ttl") == 0) {
        int64_t v = 0;
        rc = cmd[0] == 'h' ? hilock_lock_hold_count(&v, l) : hilock_lock_remaining_ms(&v, l);
        if (rc == 0)
            line_agent_say(who, "ok %" PRId64, v);
        else
            fail(who, l, rc);
    } else if (strcmp(cmd, "lost") == 0) {
        line_agent_say(who, "ok %d", hilock_lock_is_lost(l));
    } else if (strcmp(cmd, "counter") == 0 && nw >= 7) {
        counter(who, (redisContext **)actor_data, l, w[4], num(w[5]), num(w[6]));
    } else {
        line_agent_say(who, "err unknown command %s", cmd);
    }
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
    line_agent_say("agent", "ok ready %s", hilock_client_id(g_client));

    /* ends the process; actors may still be blocked in an acquire, so the
     * client is not torn down under them (the throwaway server goes away
     * with the run) */
    line_agent_serve(run, NULL);
}
