/* A client's counters and trace callback (stats.h). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stats.h"
#include "util.h"

void hl_stats_init(hl_stats *s)
{
    memset(s, 0, sizeof *s);
    pthread_mutex_init(&s->trace_mu, NULL);
    pthread_mutex_init(&s->names.mu, NULL);
}

void hl_stats_names_init(hl_stats *s, int max)
{
    s->names.max = max > HILOCK_STATS_NAMES_MAX ? HILOCK_STATS_NAMES_MAX : max < 0 ? 0 : max;
}

void hl_stats_destroy(hl_stats *s)
{
    hl_name_table *t = &s->names;
    for (int i = 0; i < t->n; i++)
        free(t->order[i]);
    free(t->order);
    free(t->bucket);
    pthread_mutex_destroy(&t->mu);
    pthread_mutex_destroy(&s->trace_mu);
}

/* FNV-1a of (kind, name). */
static uint64_t name_hash(hilock_kind kind, const char *name)
{
    uint64_t h = 14695981039346656037ULL ^ (uint64_t)(unsigned)kind;
    h *= 1099511628211ULL;
    for (const unsigned char *p = (const unsigned char *)name; *p; p++) {
        h ^= *p;
        h *= 1099511628211ULL;
    }
    return h;
}

/* The tracked entry of (kind, name), or NULL; under t->mu. */
static hl_name_entry *name_find(hl_name_table *t, hilock_kind kind, const char *name, uint64_t h)
{
    if (!t->nbucket)
        return NULL;
    for (hl_name_entry *e = t->bucket[h & (t->nbucket - 1)]; e; e = e->next)
        if (e->hash == h && e->kind == kind && strcmp(e->name, name) == 0)
            return e;
    return NULL;
}

/* Room for one more entry in order and bucket (doubling both); under t->mu.
 * 0, or -1 out of memory (nothing changed). */
static int name_room(hl_name_table *t)
{
    if (t->n == t->cap) {
        int cap = t->cap ? t->cap * 2 : 16;
        if (cap > t->max)
            cap = t->max;
        hl_name_entry **o = realloc(t->order, (size_t)cap * sizeof *o);
        if (!o)
            return -1;
        t->order = o;
        t->cap = cap;
    }
    if ((size_t)t->n + 1 > t->nbucket) {
        size_t nb = t->nbucket ? t->nbucket * 2 : 16;
        hl_name_entry **b = calloc(nb, sizeof *b);
        if (!b)
            return -1;
        for (int i = 0; i < t->n; i++) { /* rechain every entry */
            hl_name_entry *e = t->order[i];
            e->next = b[e->hash & (nb - 1)];
            b[e->hash & (nb - 1)] = e;
        }
        free(t->bucket);
        t->bucket = b;
        t->nbucket = nb;
    }
    return 0;
}

/* Where the counts of (kind, name) go besides the kind's: its tracked entry
 * (made on its first count while fewer than max are tracked), else its
 * kind's "other" entry; NULL when per-name counters are off. */
static hilock_kind_stats *name_slot(hl_stats *s, hilock_kind kind, const char *name)
{
    hl_name_table *t = &s->names;
    if (!t->max || (unsigned)kind >= HILOCK_STATS_KINDS)
        return NULL;
    if (!name)
        return &t->other[kind];
    uint64_t h = name_hash(kind, name);
    pthread_mutex_lock(&t->mu);
    hl_name_entry *e = name_find(t, kind, name, h);
    if (!e && t->n < t->max && name_room(t) == 0) {
        size_t len = strlen(name);
        e = calloc(1, sizeof *e + len + 1);
        if (e) {
            e->hash = h;
            e->kind = kind;
            memcpy(e->name, name, len + 1);
            e->next = t->bucket[h & (t->nbucket - 1)];
            t->bucket[h & (t->nbucket - 1)] = e;
            t->order[t->n++] = e;
        }
    }
    pthread_mutex_unlock(&t->mu);
    return e ? &e->st : &t->other[kind];
}

int hl_stats_bucket(int64_t ms)
{
    if (ms < 1)
        return 0;
    int b = 1;
    while (b < HILOCK_STATS_BUCKETS - 1 && ms >= ((int64_t)1 << b))
        b++;
    return b;
}

void hl_stats_add(uint64_t *counter, uint64_t n)
{
    __atomic_add_fetch(counter, n, __ATOMIC_RELAXED);
}

static hilock_kind_stats *of_kind(hl_stats *s, hilock_kind kind)
{
    return &s->kind[(unsigned)kind < HILOCK_STATS_KINDS ? (unsigned)kind : 0];
}

static void count_acquired(hilock_kind_stats *k, int64_t wait_ms, int rc, int path,
                           int64_t waited_ms)
{
    if (rc == HILOCK_ETIMEDOUT && wait_ms == 0) { /* a try, not a wait */
        hl_stats_add(&k->busy, 1);
        return;
    }
    uint64_t *outcome = rc == 0                    ? &k->granted
                        : rc == HILOCK_ETIMEDOUT   ? &k->timed_out
                        : rc == HILOCK_ECANCELED   ? &k->cancelled
                                                   : NULL;
    if (!outcome)
        return; /* an error: the call's code says it, no wait to measure */
    hl_stats_add(outcome, 1);
    if (rc == 0)
        hl_stats_add(path == HL_GRANT_FIRST   ? &k->granted_first_try
                     : path == HL_GRANT_WOKEN ? &k->granted_woken
                                              : &k->granted_retried,
                     1);
    hl_stats_add(&k->wait_ms[hl_stats_bucket(waited_ms)], 1);
}

void hl_stats_acquired(hl_stats *s, hilock_kind kind, const char *name, int64_t wait_ms, int rc,
                       int path, int64_t waited_ms)
{
    if (__atomic_load_n(&s->off, __ATOMIC_RELAXED))
        return;
    count_acquired(of_kind(s, kind), wait_ms, rc, path, waited_ms);
    hilock_kind_stats *n = name_slot(s, kind, name);
    if (n)
        count_acquired(n, wait_ms, rc, path, waited_ms);
}

void hl_stats_held(hl_stats *s, hilock_kind kind, const char *name, int64_t held_ms)
{
    int b = hl_stats_bucket(held_ms);
    hl_stats_add(&of_kind(s, kind)->hold_ms[b], 1);
    hilock_kind_stats *n = name_slot(s, kind, name);
    if (n)
        hl_stats_add(&n->hold_ms[b], 1);
}

static void trace(hl_stats *s, const hilock_trace_info *info)
{
    pthread_mutex_lock(&s->trace_mu);
    hilock_trace_cb cb = s->trace;
    void *data = s->trace_data;
    pthread_mutex_unlock(&s->trace_mu);
    if (cb)
        cb(info, data);
}

static void count_lost(hilock_kind_stats *k, int cause)
{
    __atomic_add_fetch(cause == HL_LOSS_EXPIRED ? &k->lost_expired
                       : cause == HL_LOSS_GONE  ? &k->lost_gone
                                                : &k->lost_in_doubt,
                       1, __ATOMIC_RELEASE);
}

void hl_stats_lost_count(hl_stats *s, hilock_kind kind, const char *name, int cause)
{
    count_lost(of_kind(s, kind), cause);
    hilock_kind_stats *n = name_slot(s, kind, name);
    if (n)
        count_lost(n, cause);
}

void hl_stats_lost_trace(hl_stats *s, hilock_kind kind, const char *name, uint64_t tid, int cause,
                         int64_t silent_ms)
{
    char msg[320];
    if (cause == HL_LOSS_DOUBT)
        snprintf(msg, sizeof msg,
                 "lock '%.200s' lost (in doubt): no renewal confirmed for %" PRId64
                 " ms; thread %" PRIu64 " must stop using it",
                 name, silent_ms, tid);
    else
        snprintf(msg, sizeof msg, "lock '%.200s' lost: %s; it was held by thread %" PRIu64,
                 name,
                 cause == HL_LOSS_EXPIRED ? "its lease ran out while renewals went unconfirmed"
                                          : "removed on the server (force unlock or deleted)",
                 tid);
    hilock_trace_info info = {cause == HL_LOSS_DOUBT ? HILOCK_TRACE_IN_DOUBT : HILOCK_TRACE_LOST,
                              kind, name, tid, cause == HL_LOSS_DOUBT ? silent_ms : 0, msg};
    trace(s, &info);
}

void hl_stats_event(hl_stats *s, hilock_trace_event ev, const char *message)
{
    if (ev == HILOCK_TRACE_RECONNECT)
        hl_stats_add(&s->reconnects, 1);
    else if (ev == HILOCK_TRACE_SETTLE)
        hl_stats_add(&s->settles, 1);
    hilock_trace_info info = {ev, (hilock_kind)0, NULL, 0, 0, message};
    trace(s, &info);
}

void hl_stats_set_trace(hl_stats *s, hilock_trace_cb cb, void *data)
{
    pthread_mutex_lock(&s->trace_mu);
    s->trace = cb;
    s->trace_data = data;
    pthread_mutex_unlock(&s->trace_mu);
}

static uint64_t get(const uint64_t *counter)
{
    /* acquire: a loss seen counted comes with its hold's end (hl_stats_lost_count) */
    return __atomic_load_n(counter, __ATOMIC_ACQUIRE);
}

static void copy_kind(const hilock_kind_stats *k, hilock_kind_stats *o)
{
    /* the losses first: each comes with its hold's end, read after */
    o->lost_expired = get(&k->lost_expired);
    o->lost_gone = get(&k->lost_gone);
    o->lost_in_doubt = get(&k->lost_in_doubt);
    o->granted = get(&k->granted);
    o->timed_out = get(&k->timed_out);
    o->cancelled = get(&k->cancelled);
    o->busy = get(&k->busy);
    o->granted_first_try = get(&k->granted_first_try);
    o->granted_woken = get(&k->granted_woken);
    o->granted_retried = get(&k->granted_retried);
    for (int b = 0; b < HILOCK_STATS_BUCKETS; b++) {
        o->wait_ms[b] = get(&k->wait_ms[b]);
        o->hold_ms[b] = get(&k->hold_ms[b]);
    }
}

void hl_stats_copy(hl_stats *s, hilock_stats *out)
{
    for (int i = 0; i < HILOCK_STATS_KINDS; i++)
        copy_kind(&s->kind[i], &out->kind[i]);
    out->renewals = get(&s->renewals);
    out->renewal_commands = get(&s->renewal_commands);
    out->renewal_failures = get(&s->renewal_failures);
    out->settles = get(&s->settles);
    out->reconnects = get(&s->reconnects);
    out->redirects = get(&s->redirects);
    out->replica_ack_failures = get(&s->replica_ack_failures);
}

int hl_stats_name_copy(hl_stats *s, hilock_kind kind, const char *name, hilock_name_stats *out)
{
    hl_name_table *t = &s->names;
    if (!out || out->version > HILOCK_NAME_STATS_VERSION || !t->max || (unsigned)kind == 0 ||
        (unsigned)kind >= HILOCK_STATS_KINDS)
        return HILOCK_EINVAL;
    /* version 1 is the whole struct */
    memset(out, 0, sizeof *out);
    out->version = HILOCK_NAME_STATS_VERSION;
    const hilock_kind_stats *k = &t->other[kind];
    if (name) {
        pthread_mutex_lock(&t->mu);
        hl_name_entry *e = name_find(t, kind, name, name_hash(kind, name));
        pthread_mutex_unlock(&t->mu);
        if (!e)
            return 0;
        k = &e->st; /* lives until the client is freed */
    }
    copy_kind(k, &out->figures);
    return 1;
}

static int counted(const hilock_kind_stats *k)
{
    const uint64_t *w = (const uint64_t *)k;
    for (size_t i = 0; i < sizeof *k / sizeof *w; i++)
        if (__atomic_load_n(&w[i], __ATOMIC_RELAXED))
            return 1;
    return 0;
}

int hl_stats_name_each(hl_stats *s, hilock_name_stats *buf, hilock_name_stats_cb cb,
                       void *userdata)
{
    hl_name_table *t = &s->names;
    if (!buf || !cb || buf->version > HILOCK_NAME_STATS_VERSION || !t->max)
        return HILOCK_EINVAL;
    /* a copy of the list, so that cb runs with no lock held */
    pthread_mutex_lock(&t->mu);
    int n = t->n;
    hl_name_entry **list = n ? malloc((size_t)n * sizeof *list) : NULL;
    if (list)
        memcpy(list, t->order, (size_t)n * sizeof *list);
    pthread_mutex_unlock(&t->mu);
    if (n && !list)
        return HILOCK_ENOMEM;
    int rc = 0;
    for (int i = 0; i < n && !rc; i++) {
        memset(buf, 0, sizeof *buf);
        buf->version = HILOCK_NAME_STATS_VERSION;
        copy_kind(&list[i]->st, &buf->figures);
        rc = cb(list[i]->kind, list[i]->name, buf, userdata);
    }
    free(list);
    for (int k = 1; k < HILOCK_STATS_KINDS && !rc; k++) {
        if (!counted(&t->other[k]))
            continue;
        memset(buf, 0, sizeof *buf);
        buf->version = HILOCK_NAME_STATS_VERSION;
        copy_kind(&t->other[k], &buf->figures);
        rc = cb((hilock_kind)k, NULL, buf, userdata);
    }
    return rc;
}

void hl_since_mark(hl_since **head, uint64_t tid, int64_t now)
{
    for (hl_since *h = *head; h; h = h->next)
        if (h->tid == tid)
            return;
    hl_since *h = malloc(sizeof *h);
    if (!h)
        return;
    h->tid = tid;
    h->at = now;
    h->next = *head;
    *head = h;
}

int64_t hl_since_take(hl_since **head, uint64_t tid)
{
    for (hl_since **pp = head; *pp; pp = &(*pp)->next)
        if ((*pp)->tid == tid) {
            hl_since *h = *pp;
            int64_t at = h->at;
            *pp = h->next;
            free(h);
            return at;
        }
    return -1;
}

void hl_since_free(hl_since **head)
{
    while (*head) {
        hl_since *h = *head;
        *head = h->next;
        free(h);
    }
}

void hl_stats_hold_end(hl_stats *s, pthread_mutex_t *mu, hl_since **head, hilock_kind kind,
                       const char *name, uint64_t tid, int count)
{
    if (__atomic_load_n(&s->off, __ATOMIC_RELAXED))
        return; /* nothing was marked (hl_since_mark's caller checks off) */
    if (mu)
        pthread_mutex_lock(mu);
    int64_t at = hl_since_take(head, tid);
    if (mu)
        pthread_mutex_unlock(mu);
    if (count && at >= 0)
        hl_stats_held(s, kind, name, hl_now_mono_ms() - at);
}
