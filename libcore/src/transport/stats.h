/*
 * Transport layer: a client's counters (hilock_client_stats) and its trace
 * callback (hilock_client_set_trace), kept in the transport (hl_transport
 * embeds one hl_stats), so that every layer that decides an outcome (the
 * acquire loop, the watchdog, pub/sub, the settler, the router) counts it
 * with one call. Counters are atomics (relaxed: each is exact, the set is
 * not a snapshot); the trace callback is read under its mutex and called
 * with no lock held.
 */
#ifndef HILOCK_STATS_H
#define HILOCK_STATS_H

#include <pthread.h>
#include <stdint.h>

#include "proto.h"

/* One tracked (kind, name) pair of the per-name counters. */
typedef struct hl_name_entry {
    struct hl_name_entry *next; /* its hash chain */
    uint64_t hash;
    hilock_kind kind;
    hilock_kind_stats st;
    char name[];
} hl_name_entry;

/* The opt-in per-name counters (hilock_options.stats_names): a hash of at
 * most max pairs, made as they are first counted, and one "other" entry per
 * kind for the pairs beyond max. The mutex guards the table (the entries'
 * counters are atomics, as the kinds'); entries live until the client is
 * freed, so a pointer found under the mutex stays valid after it. */
typedef struct hl_name_table {
    int max; /* 0: off (set once, before any count) */
    pthread_mutex_t mu;
    int n, cap;             /* tracked pairs, and order's room */
    hl_name_entry **order;  /* in the order first counted */
    hl_name_entry **bucket; /* nbucket chains (a power of 2), n <= nbucket */
    size_t nbucket;
    hilock_kind_stats other[HILOCK_STATS_KINDS];
} hl_name_table;

typedef struct hl_stats {
    hilock_kind_stats kind[HILOCK_STATS_KINDS];
    hl_name_table names;
    uint64_t renewals, renewal_commands, renewal_failures;
    uint64_t settles, reconnects, redirects, replica_ack_failures;
    pthread_mutex_t trace_mu; /* guards trace and trace_data */
    hilock_trace_cb trace;
    void *trace_data;
    int off; /* bench/c/stats_bench's baseline: no acquire or hold figures
                (atomic, relaxed; changed only while the client holds no lock) */
} hl_stats;

enum { HL_GRANT_FIRST = 0, HL_GRANT_WOKEN = 1, HL_GRANT_RETRIED = 2 };
enum { HL_LOSS_EXPIRED = 0, HL_LOSS_GONE = 1, HL_LOSS_DOUBT = 2 };

HL_HIDDEN void hl_stats_init(hl_stats *s);
/* Turn the per-name counters on for at most max pairs (0: off); before any
 * count. */
HL_HIDDEN void hl_stats_names_init(hl_stats *s, int max);
HL_HIDDEN void hl_stats_destroy(hl_stats *s);
/* The log2 millisecond bucket of ms (hilock.h's HILOCK_STATS_BUCKETS). */
HL_HIDDEN int hl_stats_bucket(int64_t ms);
HL_HIDDEN void hl_stats_add(uint64_t *counter, uint64_t n);
/* An acquire call of the lock (kind, name) ended with rc after waited_ms;
 * path (HL_GRANT_*) says how a grant came. Counted for the kind and, when
 * the per-name counters are on, for the pair (name NULL: the kind only). */
HL_HIDDEN void hl_stats_acquired(hl_stats *s, hilock_kind kind, const char *name,
                                 int64_t wait_ms, int rc, int path, int64_t waited_ms);
/* A thread's hold of the lock (kind, name) ended after held_ms. */
HL_HIDDEN void hl_stats_held(hl_stats *s, hilock_kind kind, const char *name, int64_t held_ms);
/* A hold of the lock (kind, name) was lost (HL_LOSS_*): counts it, after
 * its hold's end (release order: hl_stats_copy, which reads with acquire,
 * then finds that end counted too). */
HL_HIDDEN void hl_stats_lost_count(hl_stats *s, hilock_kind kind, const char *name, int cause);
/* Traces the loss of (kind, name, tid) (silent_ms: in doubt, ms without a
 * confirmed renewal). Called once the loss and the hold's end are counted,
 * so that a trace callback reading the counters finds both. */
HL_HIDDEN void hl_stats_lost_trace(hl_stats *s, hilock_kind kind, const char *name, uint64_t tid,
                                   int cause, int64_t silent_ms);
/* Counts a reconnect (HILOCK_TRACE_RECONNECT) or a settle (SETTLE) and
 * traces it with message. */
HL_HIDDEN void hl_stats_event(hl_stats *s, hilock_trace_event ev, const char *message);
HL_HIDDEN void hl_stats_set_trace(hl_stats *s, hilock_trace_cb cb, void *data);
HL_HIDDEN void hl_stats_copy(hl_stats *s, hilock_stats *out);
/* hilock_client_name_stats and hilock_client_each_name_stats on s. */
HL_HIDDEN int hl_stats_name_copy(hl_stats *s, hilock_kind kind, const char *name,
                                 hilock_name_stats *out);
HL_HIDDEN int hl_stats_name_each(hl_stats *s, hilock_name_stats *buf, hilock_name_stats_cb cb,
                                 void *userdata);

/* When each thread's hold of one handle began (for hold_ms): a list the
 * handle keeps under its own mutex. mark: the thread's first grant (a
 * re-entry keeps the first time; no memory: the hold is not timed); take:
 * the hold ended, its start (removed), or -1 when not timed; free: all. */
typedef struct hl_since {
    struct hl_since *next;
    uint64_t tid;
    int64_t at;
} hl_since;
HL_HIDDEN void hl_since_mark(hl_since **head, uint64_t tid, int64_t now);
HL_HIDDEN int64_t hl_since_take(hl_since **head, uint64_t tid);
HL_HIDDEN void hl_since_free(hl_since **head);
/* tid's hold of the lock (kind, name) ended (released, or reported lost):
 * take its start from *head (under mu; NULL: the caller holds it) and, when
 * count is set and it was timed, count its hold time. */
HL_HIDDEN void hl_stats_hold_end(hl_stats *s, pthread_mutex_t *mu, hl_since **head,
                                 hilock_kind kind, const char *name, uint64_t tid, int count);

#endif
