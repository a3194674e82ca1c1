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
}

void hl_stats_destroy(hl_stats *s)
{
    pthread_mutex_destroy(&s->trace_mu);
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

void hl_stats_acquired(hl_stats *s, hilock_kind kind, int64_t wait_ms, int rc, int path,
                       int64_t waited_ms)
{
    if (__atomic_load_n(&s->off, __ATOMIC_RELAXED))
        return;
    hilock_kind_stats *k = of_kind(s, kind);
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

void hl_stats_held(hl_stats *s, hilock_kind kind, int64_t held_ms)
{
    hl_stats_add(&of_kind(s, kind)->hold_ms[hl_stats_bucket(held_ms)], 1);
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

void hl_stats_lost_count(hl_stats *s, hilock_kind kind, int cause)
{
    hilock_kind_stats *k = of_kind(s, kind);
    __atomic_add_fetch(cause == HL_LOSS_EXPIRED ? &k->lost_expired
                       : cause == HL_LOSS_GONE  ? &k->lost_gone
                                                : &k->lost_in_doubt,
                       1, __ATOMIC_RELEASE);
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

void hl_stats_copy(hl_stats *s, hilock_stats *out)
{
    for (int i = 0; i < HILOCK_STATS_KINDS; i++) {
        const hilock_kind_stats *k = &s->kind[i];
        hilock_kind_stats *o = &out->kind[i];
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
    out->renewals = get(&s->renewals);
    out->renewal_commands = get(&s->renewal_commands);
    out->renewal_failures = get(&s->renewal_failures);
    out->settles = get(&s->settles);
    out->reconnects = get(&s->reconnects);
    out->redirects = get(&s->redirects);
    out->replica_ack_failures = get(&s->replica_ack_failures);
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
                       uint64_t tid, int count)
{
    if (__atomic_load_n(&s->off, __ATOMIC_RELAXED))
        return; /* nothing was marked (hl_since_mark's caller checks off) */
    if (mu)
        pthread_mutex_lock(mu);
    int64_t at = hl_since_take(head, tid);
    if (mu)
        pthread_mutex_unlock(mu);
    if (count && at >= 0)
        hl_stats_held(s, kind, hl_now_mono_ms() - at);
}
