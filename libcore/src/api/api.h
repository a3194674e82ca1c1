/*
 * API layer (client.c, lock.c, multilock.c): the structs behind the public
 * opaque handles and what the API files share. Includes the layers below
 * (transport.h, util.h, proto.h). Layers and which header each file may
 * include: docs/architecture.md.
 */
#ifndef HILOCK_API_H
#define HILOCK_API_H

#include <pthread.h>
#include <stdint.h>
#include <sys/types.h>

#include "hilock.h"
#include "proto.h"
#include "transport.h"
#include "util.h"

/* ---- client ---- */
struct hilock_client {
    hl_transport t;        /* connections, threads, identity, options */
    pthread_mutex_t err_mu;
    char errmsg[HL_ERRMSG_MAX];
    int refs;              /* the user's handle + one per lock handle (atomic) */
    /* Acquire attempts whose settling failed every try (hl_acquire
     * unsettled), in the engine's record set (hl_unsettled_*): the grant
     * each may have taken is settled before its owner's next acquire of
     * that lock, through any handle (one is often made per call). Guarded
     * by unsettled_mu. */
    pthread_mutex_t unsettled_mu;
    hl_unsettled unsettled;
    /* The blocking calls' private hilock_async instances (easy.c): the
     * idle ones, and how many exist (at most pool_size); guarded by
     * easy_mu, easy_cv signalled when one is put back. */
    pthread_mutex_t easy_mu;
    pthread_cond_t easy_cv;
    struct hl_easy *easy_idle;
    int easy_count;
};

HL_HIDDEN void hl_client_ref(struct hilock_client *c);
HL_HIDDEN void hl_client_unref(struct hilock_client *c);
/* For bench/c/stats_bench only (it declares this itself: no header outside
 * libcore may be included there): off = 1, c counts no acquire or hold
 * figures (hl_stats.off), the baseline of the counting's cost; 0, as every
 * client. Change it only while c holds no lock (a hold begun uncounted is
 * not timed at its end, and one begun counted would not be forgotten). */
HL_HIDDEN void hl_client_stats_off(struct hilock_client *c, int off);

/* 0, or HILOCK_ECLOSED with a message when closed or used after fork()
 * (hl_transport_check). */
HL_HIDDEN int hl_client_check(struct hilock_client *c, char *err);
HL_HIDDEN void hl_client_set_err(struct hilock_client *c, const char *msg);

/* ---- lock ---- */
/* Thread ids whose loss a handle remembers (the most recent ones). */
#define HL_LOST_MAX 1024
typedef struct hl_lost_state {
    struct hl_lost_state *next;
    uint64_t tid;
} hl_lost_state;

/* One blocking acquire in progress on a lock handle, so that
 * hilock_lock_cancel from another thread can find and wake it. */
typedef struct hl_pending {
    struct hl_pending *next;
    uint64_t tid;
    int cancelled;           /* atomic */
    struct hl_waiter *w;     /* while subscribed (guarded by the lock's mu) */
} hl_pending;

/* The waits in progress on one handle (a lock, a semaphore, a latch): a list
 * guarded by the handle's mutex mu, for the handle's cancel call. A wait adds
 * its entry before it starts and removes it when it ends. */
HL_HIDDEN void hl_pending_add(pthread_mutex_t *mu, hl_pending **head, hl_pending *p,
                              uint64_t tid);
HL_HIDDEN void hl_pending_remove(pthread_mutex_t *mu, hl_pending **head, hl_pending *p);
/* The wait's subscription (w != NULL), or none: about to unsubscribe. */
HL_HIDDEN void hl_pending_set_waiter(pthread_mutex_t *mu, hl_pending *p, struct hl_waiter *w);
HL_HIDDEN int hl_pending_is_cancelled(const hl_pending *p); /* p may be NULL */
/* Marks every wait of thread tid not yet cancelled and wakes it if asleep
 * on its subscription; returns how many it marked. *head is read under mu
 * (waits are added to it concurrently). */
HL_HIDDEN int hl_pending_cancel(pthread_mutex_t *mu, hl_pending **head, uint64_t tid);
/* The subscription of one blocking wait, for the SUBSCRIBE, WAIT and
 * UNSUBSCRIBE actions of its machine (the acquire machine in lock.c, the
 * semaphore and latch wait in semaphore.c):
 *   hl_wait_sub_init(&s, transport, &handle->mu, p);   p may be NULL
 *   SUBSCRIBE:   ok = hl_wait_sub_subscribe(&s, channel, wake_rule, deadline)
 *                (waits for the server's confirmation up to the command
 *                timeout or the deadline; from then on a cancel of p wakes
 *                the wait);
 *   WAIT:        moved = hl_wait_sub_sleep(&s, ms): until a message, a
 *                cancel or ms (-1: no limit); without a subscription a
 *                plain sleep; 1 when the channel's slot moved;
 *   UNSUBSCRIBE: hl_wait_sub_unsubscribe(&s).
 * The caller also calls hl_wait_sub_unsubscribe when the wait ends (it is
 * idempotent): a subscription the server never confirmed is still
 * registered, and a machine only asks to drop one it was told works. */
typedef struct hl_wait_sub {
    hl_transport *t;
    pthread_mutex_t *mu; /* the handle's: guards p->w */
    hl_pending *p;
    hl_waiter w;
} hl_wait_sub;
HL_HIDDEN void hl_wait_sub_init(hl_wait_sub *s, hl_transport *t, pthread_mutex_t *mu,
                                hl_pending *p);
HL_HIDDEN int hl_wait_sub_subscribe(hl_wait_sub *s, const char *channel, int wake_rule,
                                    int64_t deadline);
HL_HIDDEN int hl_wait_sub_sleep(hl_wait_sub *s, int64_t ms);
HL_HIDDEN void hl_wait_sub_unsubscribe(hl_wait_sub *s);
/* Milliseconds until a monotonic deadline (>= 0), or -1 for none (< 0). */
HL_HIDDEN int64_t hl_ms_left(int64_t deadline);

struct hilock_lock {
    struct hilock_client *client;
    hilock_kind kind;
    hl_names names;
    pthread_mutex_t mu;        /* guards the fields below */
    hl_lost_state *lost;       /* thread ids whose hold was found lost */
    int64_t last_lease_ms;     /* lease of the last acquire, re-applied by partial unlocks */
    hilock_lost_cb lost_cb;
    void *lost_payload;
    hl_pending *pending;       /* blocking acquires in progress */
    hl_since *since;           /* when each thread's hold began (stats.h) */
    /* loss hooks of the multi-locks built over this handle; called by the
     * watchdog thread with hook_mu held, so removing a hook waits for a
     * call of it in progress */
    pthread_mutex_t hook_mu;
    struct hl_lost_hook *hooks;
    char errmsg[HL_ERRMSG_MAX];
    int freeing;               /* atomic: freed from a lost callback, free deferred */
    hl_deferred free_later;
    int rw_side;               /* a side of a hilock_rwlock: freed with it only */
};

struct hilock_rwlock {
    struct hilock_lock *read, *write;
};

typedef void (*hl_lost_hook_fn)(struct hilock_lock *l, uint64_t tid, void *payload);
typedef struct hl_lost_hook {
    struct hl_lost_hook *next;
    hl_lost_hook_fn fn;
    void *payload;
} hl_lost_hook;

/* Add/remove a loss hook (multi-locks). Removal returns once no call of
 * that hook is running. A hook must not add or remove hooks of the same
 * lock. add: 0 or HILOCK_ENOMEM. */
HL_HIDDEN int hl_lock_add_lost_hook(struct hilock_lock *l, hl_lost_hook_fn fn, void *payload);
HL_HIDDEN void hl_lock_remove_lost_hook(struct hilock_lock *l, hl_lost_hook_fn fn,
                                        void *payload);

/* The transport's loss sink (hl_sinks.lost, holder = a struct hilock_lock):
 * (l, tid) was found gone, or (cause HL_LOSS_DOUBT) no renewal was
 * confirmed for lease - margin. The hold's end is counted, then the loss
 * (a reader who sees the loss counted sees the hold's end too), then the
 * trace event goes out, then the lost callback and hooks run. A handle
 * being freed from a lost callback hears no more (the loss is still
 * counted and traced). */
HL_HIDDEN void hl_lock_lost_sink(void *holder, uint64_t tid, int cause, int64_t silent_ms);
/* The same for a kept semaphore permit (holder = its record in
 * semaphore.c, hilock_permit_semaphore_keep): found gone or in doubt; its
 * lost callback runs once. */
HL_HIDDEN void hl_permit_lost_sink(void *holder);

/* For multi-locks, one member's attempt in steps, so that the members'
 * requests can be in flight at once (hl_exec_fan):
 *   hl_lock_try_begin   checks and builds t->cmd (0, or an error code);
 *                       line_window_ms: a fair lock's attempt joins its line
 *                       with this window (hl_ml_line_window), -1: no line;
 *   send t->cmd (hl_exec or hl_exec_fan), then
 *   hl_lock_try_end     with that outcome (rc, reply: taken over, err):
 *                       settles a lost reply, decodes, starts the watchdog.
 * Returns as hl_lock_try_once. t must not move between the two. */
#define HL_LATCH_MAX (4096 + HL_OWNER_MAX + 96)
typedef struct hl_try {
    hl_cmd cmd;
    char owner[HL_OWNER_MAX];
    char latch[HL_LATCH_MAX];
    int64_t lease;
    int64_t sent_at;
} hl_try;
HL_HIDDEN int hl_lock_try_begin(struct hilock_lock *l, uint64_t tid, int64_t lease_ms,
                                int64_t line_window_ms, hl_try *t);
HL_HIDDEN int hl_lock_try_end(struct hilock_lock *l, uint64_t tid, int64_t lease_ms,
                              int64_t timeout_ms, hl_try *t, int rc, redisReply *reply,
                              const char *err, int64_t *ttl_ms);

/* A release in steps (multi-locks, as above):
 *   hl_lock_release_begin (0, or an error code: nothing to send);
 *   while (hl_lock_release_next(l, r)) { send r->m.cmd bounded by
 *       r->m.timeout_ms; hl_lock_release_feed(l, r, rc, reply, err); }
 *   hl_lock_release_end   returns what hl_lock_release_tid would. */
typedef struct hl_rel {
    hl_release m;
    uint64_t tid;
    char owner[HL_OWNER_MAX];
    char rid[HL_OWNER_MAX + 48]; /* hl_release_request_id */
    char err[HL_ERRMSG_MAX];
    int64_t confirmed_at;
    int64_t release_sent;
    int stopped;
    int begun;
    int rc;
} hl_rel;
HL_HIDDEN int hl_lock_release_begin(struct hilock_lock *l, uint64_t tid, int64_t timeout_ms,
                                    hl_rel *r);
HL_HIDDEN int hl_lock_release_next(struct hilock_lock *l, hl_rel *r);
HL_HIDDEN void hl_lock_release_feed(struct hilock_lock *l, hl_rel *r, int rc,
                                    redisReply *reply, const char *err);
HL_HIDDEN int hl_lock_release_end(struct hilock_lock *l, hl_rel *r);
/* Releases that got no answer to any try (renewal stopped): the session's
 * rule (proto_session.h, hl_unsettled_rel_*), in the client's hl_unsettled
 * (c->unsettled, under c->unsettled_mu), for both C drivers: the blocking
 * one (lock.c) and hilock_async (async.c).
 * hl_lock_unsettled_put: tid's release under rid got no answer; its hold
 * has ended by until (monotonic ms) at the latest.
 * hl_lock_unsettled_next: before tid's acquire: 0 (nothing: acquire),
 * 1 (send the release under the id copied to rid again first, with
 * hl_lock_release_begin_again, then hl_lock_unsettled_end and ask again),
 * or an error code with its message in err (HILOCK_ECONN: releases that
 * may still be pending could not all be kept: not entered).
 * hl_lock_unsettled_end: what the re-sent release rid answered (0, HILOCK_
 * ENOTOWNER, or another code). */
HL_HIDDEN void hl_lock_unsettled_put(struct hilock_lock *l, uint64_t tid, const char *rid,
                                     int64_t until);
HL_HIDDEN int hl_lock_unsettled_next(struct hilock_lock *l, uint64_t tid, char *rid,
                                     size_t rid_len, char *err, size_t err_len);
HL_HIDDEN void hl_lock_unsettled_end(struct hilock_lock *l, uint64_t tid, const char *rid,
                                     int rc);
/* hl_lock_release_begin for a release sent again under its own request id
 * rid (from hl_lock_unsettled_next). */
HL_HIDDEN int hl_lock_release_begin_again(struct hilock_lock *l, uint64_t tid,
                                          int64_t timeout_ms, const char *rid, hl_rel *r);

/* For multi-locks: one attempt (no waiting), with a time limit on the
 * round trip (connect + command), timeout_ms <= 0 = client defaults.
 * lease <= 0 = watchdog. Returns 0 acquired, HILOCK_ETIMEDOUT held by someone
 * else (*ttl_ms = holder's PTTL, may be NULL), or an error. */
HL_HIDDEN int hl_lock_try_once(struct hilock_lock *l, uint64_t tid, int64_t lease_ms,
                               int64_t timeout_ms, int64_t *ttl_ms);
/* Release one hold with a time limit; as hilock_lock_release_tid. */
HL_HIDDEN int hl_lock_release_timeout(struct hilock_lock *l, uint64_t tid,
                                      int64_t timeout_ms);

/* What a driver of its own (the non-blocking one, async.c) needs of a
 * multi-lock: its members and rules, read once per operation. */
typedef struct hl_ml_view {
    struct hilock_lock *const *locks;
    size_t n;
    int redlock;
    int64_t member_timeout_ms; /* 0: each client's command timeout */
    int64_t watchdog_lease_ms; /* the members' shortest */
} hl_ml_view;
HL_HIDDEN void hl_multilock_view(struct hilock_multilock *m, hl_ml_view *v);

/* What the non-blocking driver (async_sem.c) needs of a semaphore,
 * permit-expirable semaphore or latch handle (h of that kind). */
typedef struct hl_sem_view {
    struct hilock_client *client;
    const hl_sem_names *names;
} hl_sem_view;
HL_HIDDEN void hl_sem_view_of(const void *h, hl_sem_view *v);
/* A plain semaphore wait's request latch for thread id tid of c (every
 * driver of hl_semwait in C sets it): 0, HILOCK_EINVAL or HILOCK_ENOMEM. */
HL_HIDDEN int hl_sem_wait_latch(hl_semwait *m, struct hilock_client *c, uint64_t tid);
/* 16 random bytes for a permit id (Redisson's generateId): 0 or -1. */
HL_HIDDEN int hl_pes_random_id(unsigned char id[HL_PES_ID_BYTES]);

/*
 * Operations of hilock_async whose machine lives outside async.c
 * (async_sem.c). async.c sends their commands on the client's command
 * connection (NOSCRIPT handled), keeps their subscriptions (messages counted
 * by the channel's wake rule), timers, cancel and completion; the kind's
 * functions only feed its engine machine. All on the loop's thread.
 */
typedef struct as_op as_op;
typedef struct hl_as_kind {
    /* Work the machine: return once hl_as_send / hl_as_join (pending) /
     * hl_as_sleep (sleeping) has something under way, or hl_as_finish. */
    void (*step)(as_op *op, void *self, int64_t now);
    void (*on_reply)(void *self, const redisReply *r, int64_t now);
    /* lost: the command was sent and its reply will never come (the server
     * may have run it) */
    void (*on_error)(void *self, int code, int lost, int64_t now);
    void (*on_subscribed)(void *self, int ok, int64_t now);
    void (*on_wake)(void *self, int64_t now); /* its sleep ended on time */
    void (*free)(void *self);
} hl_as_kind;
/* Checks of every start (a, c usable, cb given): 0 or the error (then
 * hilock_async_errmsg says why). */
HL_HIDDEN int hl_as_check(hilock_async *a, struct hilock_client *c, hilock_async_cb cb);
/* Start an operation on c's connections; self belongs to it from here on
 * (kind->free at its end, also when this fails). target and tid are what
 * hl_as_cancel matches. 0 started (cb follows), or an error (no cb). */
HL_HIDDEN int hl_as_start(hilock_async *a, struct hilock_client *c, const hl_as_kind *kind,
                          void *self, const void *target, uint64_t tid, hilock_async_cb cb,
                          void *payload);
/* From step: send cmd (it must live until its reply): 0, or an error
 * code (nothing sent). */
HL_HIDDEN int hl_as_send(as_op *op, hl_cmd *cmd);
/* From step: listen on channel: 1 subscribed, 0 pending (on_subscribed
 * follows), -1 failed. */
HL_HIDDEN int hl_as_join(as_op *op, const char *channel, hl_wake_rule rule);
HL_HIDDEN void hl_as_leave(as_op *op);
enum { HL_AS_SLEEPING = 0, HL_AS_WOKEN = 1, HL_AS_RESUBSCRIBE = 2 };
/* From step: sleep up to ms (-1: until a message). HL_AS_SLEEPING: return
 * (step comes again when woken); HL_AS_WOKEN: a message came already;
 * HL_AS_RESUBSCRIBE: the subscription was lost with its connection. */
HL_HIDDEN int hl_as_sleep(as_op *op, int64_t ms, int64_t now);
HL_HIDDEN int hl_as_cancelled(const as_op *op);
/* err: the detail for hilock_async_errmsg (NULL: the server's error, or
 * hilock_strerror(rc)). */
HL_HIDDEN void hl_as_finish(as_op *op, int rc, int64_t value, const char *err);
/* Cancel the pending operations on (target, tid) (as hilock_async_cancel). */
HL_HIDDEN int hl_as_cancel(int *cancelled, hilock_async *a, const void *target, uint64_t tid);
HL_HIDDEN void hl_as_set_err(hilock_async *a, const char *msg);

/* ---- easy.c: the blocking calls driven over hilock_async ----
 * A blocking call of the API takes one of the client's private
 * hilock_async instances, starts the operation on it and runs its poll()
 * loop on the calling thread until the completion (libcurl's
 * easy-over-multi: no thread hop). At most pool_size instances exist per
 * client; a call waits for one as for a pooled connection. */
typedef struct hl_easy hl_easy;
/* Start the operation on a with (cb, payload), as the hilock_async_* call
 * does: 0 started, or an error (no callback). */
typedef int (*hl_easy_start)(hilock_async *a, void *arg, hilock_async_cb cb, void *payload);
/* Runs start(arg) to its completion: its rc (0 or HILOCK_E*), *value (may
 * be NULL) the completion's value, err its message (HL_ERRMSG_MAX; "" on 0).
 * Operations that end within the command timeout only: a call holds its
 * instance until then. */
HL_HIDDEN int hl_easy_run(struct hilock_client *c, hl_easy_start start, void *arg,
                          int64_t *value, char *err);
/* Frees the idle instances (client close; forked: a child after fork(),
 * no mutex is taken and only memory and descriptors go). */
HL_HIDDEN void hl_easy_close_all(struct hilock_client *c, int forked);

/* hilock_client_close's work; from_watchdog: run by the watchdog thread
 * itself (it is detached instead of joined). */
HL_HIDDEN void hl_client_close_now(struct hilock_client *c, int from_watchdog);

#endif
