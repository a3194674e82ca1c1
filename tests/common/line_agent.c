/* See line_agent.h. */
#define _POSIX_C_SOURCE 200809L
#include "line_agent.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_ACTORS 1024

typedef struct request {
    char *line;
    struct request *next;
} request;

typedef struct actor {
    char name[48];
    pthread_mutex_t mu;
    pthread_cond_t cv;
    request *head, *tail;
    line_agent_fn fn;
    void *ctx;
    void *data;
} actor;

static pthread_mutex_t out_mu = PTHREAD_MUTEX_INITIALIZER;

void line_agent_say(const char *who, const char *fmt, ...)
{
    va_list ap;
    pthread_mutex_lock(&out_mu);
    fputs(who, stdout);
    fputc(' ', stdout);
    va_start(ap, fmt);
    vfprintf(stdout, fmt, ap);
    va_end(ap);
    fputc('\n', stdout);
    fflush(stdout);
    pthread_mutex_unlock(&out_mu);
}

static void *actor_main(void *p)
{
    actor *a = p;
    for (;;) {
        pthread_mutex_lock(&a->mu);
        while (!a->head)
            pthread_cond_wait(&a->cv, &a->mu);
        request *r = a->head;
        a->head = r->next;
        if (!a->head)
            a->tail = NULL;
        pthread_mutex_unlock(&a->mu);
        a->fn(a->ctx, a->name, r->line, &a->data);
        free(r->line);
        free(r);
    }
    return NULL;
}

static actor *actor_new(const char *name, line_agent_fn fn, void *ctx)
{
    actor *a = calloc(1, sizeof *a);
    pthread_t th;
    if (!a || strlen(name) >= sizeof a->name) {
        free(a);
        return NULL;
    }
    strcpy(a->name, name);
    a->fn = fn;
    a->ctx = ctx;
    pthread_mutex_init(&a->mu, NULL);
    pthread_cond_init(&a->cv, NULL);
    if (pthread_create(&th, NULL, actor_main, a) != 0) {
        free(a);
        return NULL;
    }
    pthread_detach(th);
    return a;
}

void line_agent_serve(line_agent_fn fn, void *ctx)
{
    static actor *actors[MAX_ACTORS];
    size_t nactors = 0;
    char *line = NULL;
    size_t cap = 0;
    while (getline(&line, &cap, stdin) > 0) {
        char name[64];
        if (sscanf(line, "%63s", name) != 1)
            continue;
        if (strcmp(name, "quit") == 0)
            break;
        actor *a = NULL;
        for (size_t i = 0; i < nactors && !a; i++)
            if (strcmp(actors[i]->name, name) == 0)
                a = actors[i];
        if (!a && nactors < MAX_ACTORS && (a = actor_new(name, fn, ctx)) != NULL)
            actors[nactors++] = a;
        request *r = a ? calloc(1, sizeof *r) : NULL;
        if (!r || !(r->line = strdup(line))) {
            free(r);
            line_agent_say(name, "err other cannot start actor");
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
    fflush(stdout);
    _exit(0);
}

void line_agent_objects_init(line_agent_objects *t)
{
    memset(t, 0, sizeof *t);
    pthread_mutex_init(&t->mu, NULL);
}

/* One of the table's objects for (kind, name), made by make the first time. */
static void *object_of(line_agent_objects *t, int sems, hilock_client *c, const char *kind,
                       const char *name, int *rc)
{
    line_agent_object *all = sems ? t->sems : t->locks;
    size_t *n = sems ? &t->nsems : &t->nlocks;
    void *found = NULL;
    pthread_mutex_lock(&t->mu);
    for (size_t i = 0; i < *n && !found; i++)
        if (strcmp(all[i].kind, kind) == 0 && strcmp(all[i].name, name) == 0)
            found = all[i].h;
    if (!found) {
        char *copy = *n < LINE_AGENT_MAX_OBJECTS ? strdup(name) : NULL;
        hilock_rwlock *rw = NULL;
        if (!copy) {
            *rc = HILOCK_ENOMEM;
        } else {
            hilock_lock *l = NULL;
            *rc = sems ? line_agent_new_sem(&found, c, kind, name)
                       : line_agent_new_lock(&l, &rw, c, kind, name);
            if (!sems)
                found = *rc == 0 ? l : NULL;
            if (*rc == 0) {
                line_agent_object *o = &all[(*n)++];
                snprintf(o->kind, sizeof o->kind, "%s", kind);
                o->name = copy;
                o->h = found;
                o->rw = rw;
            } else {
                found = NULL;
                free(copy);
            }
        }
    }
    pthread_mutex_unlock(&t->mu);
    return found;
}

hilock_lock *line_agent_lock_of(line_agent_objects *t, hilock_client *c, const char *kind,
                                const char *name, int *rc)
{
    return object_of(t, 0, c, kind, name, rc);
}

void *line_agent_sem_of(line_agent_objects *t, hilock_client *c, const char *kind,
                        const char *name, int *rc)
{
    return object_of(t, 1, c, kind, name, rc);
}

void line_agent_objects_free(line_agent_objects *t)
{
    for (size_t i = 0; i < t->nlocks; i++) {
        if (t->locks[i].rw)
            hilock_rwlock_free(t->locks[i].rw);
        else
            hilock_lock_free(t->locks[i].h);
        free(t->locks[i].name);
    }
    for (size_t i = 0; i < t->nsems; i++) {
        if (strcmp(t->sems[i].kind, "sem") == 0)
            hilock_semaphore_free(t->sems[i].h);
        else if (strcmp(t->sems[i].kind, "pes") == 0)
            hilock_permit_semaphore_free(t->sems[i].h);
        else
            hilock_latch_free(t->sems[i].h);
        free(t->sems[i].name);
    }
    t->nlocks = t->nsems = 0;
    pthread_mutex_destroy(&t->mu);
}

/* The conformance error kinds (the same words every agent uses). */
int line_agent_new_lock(hilock_lock **out, hilock_rwlock **rw, hilock_client *c, const char *kind,
                        const char *name)
{
    if (strcmp(kind, "f") == 0)
        return hilock_fair_lock_new(out, c, name);
    if (strcmp(kind, "fenced") == 0)
        return hilock_fenced_lock_new(out, c, name);
    if (strcmp(kind, "read") == 0 || strcmp(kind, "write") == 0) {
        int rc = hilock_rwlock_new(rw, c, name);
        if (rc == 0)
            *out = kind[0] == 'r' ? hilock_rwlock_read_lock(*rw) : hilock_rwlock_write_lock(*rw);
        return rc;
    }
    return hilock_lock_new(out, c, name);
}

int line_agent_new_sem(void **out, hilock_client *c, const char *kind, const char *name)
{
    if (strcmp(kind, "sem") == 0)
        return hilock_semaphore_new((hilock_semaphore **)out, c, name);
    if (strcmp(kind, "pes") == 0)
        return hilock_permit_semaphore_new((hilock_permit_semaphore **)out, c, name);
    return hilock_latch_new((hilock_latch **)out, c, name);
}

const char *line_agent_err_kind(int rc)
{
    switch (rc) {
    case HILOCK_ETIMEDOUT: return "timeout";
    case HILOCK_ENOTOWNER: return "notowner";
    case HILOCK_ELOST: return "lost";
    case HILOCK_ECONN: return "connection";
    case HILOCK_EUNACKED: return "unacked";
    case HILOCK_EPROTO: return "protocol";
    case HILOCK_EAUTH: return "auth";
    case HILOCK_EWRONGTYPE: return "wrongtype";
    case HILOCK_ECLOSED: return "closed";
    case HILOCK_ENOMEM: return "nomem";
    case HILOCK_EINVAL: return "invalid";
    default: return "other";
    }
}

int line_agent_set_option(hilock_options *o, const char *kv)
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
