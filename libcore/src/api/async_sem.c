/*
 * Semaphores, permit-expirable semaphores and count-down latches on the
 * non-blocking driver (hilock_async, hilock.h). A waiting acquire or await
 * is the engine's wait machine (hl_semwait, proto_sem.c) driven through
 * async.c's operations (hl_as_kind, api.h): async.c sends, subscribes,
 * sleeps on the loop's timer and completes; this file feeds the machine and
 * builds the commands with the engine's builders. No decision is taken here.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"

static const char *what(hl_sem_kind kind)
{
    return kind == HL_SEM_LATCH ? "latch" : "semaphore";
}

/* The message of a failure the engine reported for the object named name. */
static void describe(char *err, size_t len, int rc, hl_sem_kind kind, const char *name)
{
    if (rc == HILOCK_EWRONGTYPE)
        snprintf(err, len, "key '%s' holds a value that is not a %s", name, what(kind));
    else if (rc == HILOCK_EINVAL)
        snprintf(err, len, "%s '%s': the count would overflow; nothing changed", what(kind),
                 name);
    else
        err[0] = 0;
}

/* ---- waits: semaphore acquire, permit-expirable acquire, latch await ---- */

typedef struct sem_wait {
    hl_semwait m;
    hilock_client *client;
    hl_sem_kind kind;
    const hl_sem_names *names; /* the handle's */
    uint64_t tid;
    int64_t wait_ms;
    unsigned char ids[HL_PES_ID_BYTES];
    char *id_out; /* permit-expirable: the caller's */
} sem_wait;

static void wait_step(as_op *op, void *self, int64_t now)
{
    sem_wait *w = self;
    for (;;) {
        if (hl_as_cancelled(op))
            hl_semwait_cancel(&w->m, now); /* between actions; idempotent */
        switch (hl_semwait_next(&w->m, now)) {
        case HL_ACT_SEND: {
            int rc = hl_as_send(op, &w->m.cmd);
            if (rc == 0)
                return;
            hl_semwait_on_error(&w->m, rc, now);
            continue;
        }
        case HL_ACT_SUBSCRIBE: {
            int j = hl_as_join(op, w->m.channel, hl_sem_wake_rule(w->kind));
            if (j == 0)
                return; /* on_subscribed follows */
            hl_semwait_on_subscribed(&w->m, j > 0, now);
            continue;
        }
        case HL_ACT_WAIT:
            switch (hl_as_sleep(op, w->m.sleep_ms, now)) {
            case HL_AS_SLEEPING:
                return;
            case HL_AS_RESUBSCRIBE:
                hl_semwait_on_resubscribe(&w->m, now);
                continue;
            default:
                hl_semwait_on_wake(&w->m, now);
                continue;
            }
        case HL_ACT_UNSUBSCRIBE:
            hl_as_leave(op);
            continue;
        case HL_ACT_DONE: {
            int rc = w->m.result;
            char err[HL_ERRMSG_MAX];
            const char *name = w->names->name;
            describe(err, sizeof err, rc, w->kind, name);
            if (rc == HILOCK_ETIMEDOUT && w->kind == HL_SEM_LATCH)
                snprintf(err, sizeof err, "latch '%s' still at %" PRId64 " after %" PRId64 " ms",
                         name, w->m.count, w->wait_ms);
            else if (rc == HILOCK_ETIMEDOUT)
                snprintf(err, sizeof err,
                         "%" PRId64 " permit(s) of semaphore '%s' not free within %" PRId64 " ms",
                         w->m.permits, name, w->wait_ms);
            else if (rc == HILOCK_ECANCELED)
                snprintf(err, sizeof err, "wait on %s '%s' by thread %" PRIu64 " cancelled",
                         what(w->kind), name, w->tid);
            if (rc == 0 && w->id_out)
                hl_pes_id_hex(w->id_out, w->ids);
            hl_as_finish(op, rc, w->kind == HL_SEM_LATCH ? 0 : w->m.permits,
                         err[0] ? err : NULL);
            return;
        }
        }
    }
}

static void wait_on_reply(void *self, const redisReply *r, int64_t now)
{
    hl_semwait_on_reply(&((sem_wait *)self)->m, r, now);
}

static void wait_on_error(void *self, int code, int lost, int64_t now)
{
    sem_wait *w = self;
    if (lost) {
        /* the engine settles the acquire (its permits given back); later
         * calls use another request latch key, as semaphore.c */
        w->m.cmd.reply_lost = 1;
        __atomic_add_fetch(&w->client->t.latch_epoch, 1, __ATOMIC_RELAXED);
    }
    hl_semwait_on_error(&w->m, code, now);
}

static void wait_on_subscribed(void *self, int ok, int64_t now)
{
    hl_semwait_on_subscribed(&((sem_wait *)self)->m, ok, now);
}

static void wait_on_wake(void *self, int64_t now)
{
    hl_semwait_on_wake(&((sem_wait *)self)->m, now);
}

static void wait_free(void *self)
{
    sem_wait *w = self;
    hl_semwait_free(&w->m);
    free(w);
}

static const hl_as_kind wait_kind = {wait_step, wait_on_reply, wait_on_error,
                                     wait_on_subscribed, wait_on_wake, wait_free};

static int start_wait(hilock_async *a, const void *h, hl_sem_kind kind, uint64_t tid,
                      int64_t permits, int64_t lease_ms, int64_t wait_ms, char *id_out,
                      hilock_async_cb cb, void *payload)
{
    if (!h)
        return HILOCK_EINVAL;
    hl_sem_view v;
    hl_sem_view_of(h, &v);
    int rc = hl_as_check(a, v.client, cb);
    if (rc)
        return rc;
    sem_wait *w = calloc(1, sizeof *w);
    if (!w)
        return HILOCK_ENOMEM;
    w->client = v.client;
    w->kind = kind;
    w->names = v.names;
    w->tid = tid;
    w->wait_ms = wait_ms;
    w->id_out = id_out;
    if (kind == HL_SEM_PERMIT && hl_pes_random_id(w->ids) != 0) {
        free(w);
        hl_as_set_err(a, "no random bytes for a permit id");
        return HILOCK_EPROTO;
    }
    if (hl_semwait_init(&w->m, kind, v.names, permits, lease_ms,
                        kind == HL_SEM_PERMIT ? w->ids : NULL, wait_ms, hl_now_mono_ms()) != 0) {
        free(w);
        hl_as_set_err(a, "permits must be 1..2147483647, wait -1, 0 or a positive ms count");
        return HILOCK_EINVAL;
    }
    if (kind == HL_SEM_SEMAPHORE && (rc = hl_sem_wait_latch(&w->m, v.client, tid)) != 0) {
        wait_free(w);
        hl_as_set_err(a, "request latch");
        return rc == HILOCK_ENOMEM ? rc : HILOCK_EINVAL;
    }
    return hl_as_start(a, v.client, &wait_kind, w, h, tid, cb, payload);
}

/* ---- one command and its answer ---- */

enum { ANS_VALUE = 0, ANS_FLAG, ANS_PES_RELEASE, ANS_PES_UPDATE, ANS_NONE };

typedef struct sem_call {
    hl_cmd cmd;
    hl_sem_kind kind;
    const hl_sem_names *names;
    int (*decode)(const redisReply *, int64_t *);
    int answer; /* ANS_*: what the decoded number means */
    int sent, rc;
    int64_t value;
    unsigned char id[HL_PES_ID_BYTES]; /* the command's id argument */
} sem_call;

static void call_step(as_op *op, void *self, int64_t now)
{
    (void)now;
    sem_call *k = self;
    if (!k->sent) {
        k->sent = 1;
        int rc = hl_as_send(op, &k->cmd);
        if (rc == 0)
            return;
        k->rc = rc;
    }
    char err[HL_ERRMSG_MAX];
    describe(err, sizeof err, k->rc, k->kind, k->names->name);
    int64_t v = k->value;
    if (k->rc == 0 && k->answer == ANS_FLAG)
        v = v == 1;
    if (k->rc == 0 && k->answer == ANS_NONE)
        v = 0;
    if (k->rc == 0 && (k->answer == ANS_PES_RELEASE || k->answer == ANS_PES_UPDATE)) {
        k->rc = k->answer == ANS_PES_RELEASE ? hl_pes_release_code(v) : hl_pes_update_code(v);
        char hex[2 * HL_PES_ID_BYTES + 1];
        hl_pes_id_hex(hex, k->id);
        if (k->rc && k->answer == ANS_PES_RELEASE && v < 0)
            snprintf(err, sizeof err,
                     "the lease of permit %s of semaphore '%s' had ended (given back now)", hex,
                     k->names->name);
        else if (k->rc && k->answer == ANS_PES_RELEASE)
            snprintf(err, sizeof err,
                     "permit %s of semaphore '%s' is not taken (released before?)", hex,
                     k->names->name);
        else if (k->rc)
            snprintf(err, sizeof err, "permit %s of semaphore '%s' is not taken (released, or "
                     "its lease ended)", hex, k->names->name);
        v = 0;
    }
    hl_as_finish(op, k->rc, v, err[0] ? err : NULL);
}

static void call_on_reply(void *self, const redisReply *r, int64_t now)
{
    (void)now;
    sem_call *k = self;
    k->rc = k->decode(r, &k->value);
}

static void call_on_error(void *self, int code, int lost, int64_t now)
{
    (void)lost;
    (void)now;
    ((sem_call *)self)->rc = code ? code : HILOCK_EPROTO;
}

static void call_ignore_sub(void *self, int ok, int64_t now)
{
    (void)self, (void)ok, (void)now;
}

static void call_ignore_wake(void *self, int64_t now)
{
    (void)self, (void)now;
}

static const hl_as_kind call_kind = {call_step, call_on_reply, call_on_error, call_ignore_sub,
                                     call_ignore_wake, free};

/* A sem_call for handle h, checked; NULL with *rc set. */
static sem_call *call_new(hilock_async *a, const void *h, hl_sem_kind kind, hilock_async_cb cb,
                          hl_sem_view *v, int *rc)
{
    if (!h) {
        *rc = HILOCK_EINVAL;
        return NULL;
    }
    hl_sem_view_of(h, v);
    if ((*rc = hl_as_check(a, v->client, cb)) != 0)
        return NULL;
    sem_call *k = calloc(1, sizeof *k);
    if (!k) {
        *rc = HILOCK_ENOMEM;
        return NULL;
    }
    k->kind = kind;
    k->names = v->names;
    k->decode = hl_sem_decode_int;
    return k;
}

static int call_start(hilock_async *a, sem_call *k, const hl_sem_view *v, hilock_async_cb cb,
                      void *payload)
{
    return hl_as_start(a, v->client, &call_kind, k, NULL, 0, cb, payload);
}

static int refuse(hilock_async *a, sem_call *k, const char *msg)
{
    free(k);
    hl_as_set_err(a, msg);
    return HILOCK_EINVAL;
}

static int count_op(hilock_async *a, const void *h, hl_sem_kind kind, hilock_count_op op,
                    int64_t arg, hilock_async_cb cb, void *payload)
{
    hl_sem_view v;
    int rc;
    sem_call *k = call_new(a, h, kind, cb, &v, &rc);
    if (!k)
        return rc;
    switch (op) {
    case HILOCK_COUNT_TRY_SET:
        if (kind == HL_SEM_LATCH ? hl_sem_check_count(arg) : hl_sem_check_permits(arg))
            return refuse(a, k, kind == HL_SEM_LATCH ? "count must be 1..999999999999999"
                                                     : "permits must be 1..2147483647");
        hl_sem_cmd_try_set(&k->cmd, kind, v.names, arg);
        k->answer = ANS_FLAG;
        break;
    case HILOCK_COUNT_GET:
        hl_sem_cmd_count(&k->cmd, kind, v.names);
        k->decode = hl_sem_decode_count;
        break;
    case HILOCK_COUNT_ADD:
    case HILOCK_COUNT_SET: {
        int set = op == HILOCK_COUNT_SET;
        if (kind == HL_SEM_LATCH || (set && kind != HL_SEM_SEMAPHORE))
            return refuse(a, k, "not an operation of this kind");
        if (set ? (arg < 0 || arg > HL_SEM_COUNT_MAX)
                : (arg < -HL_SEM_COUNT_MAX || arg > HL_SEM_COUNT_MAX))
            return refuse(a, k, "permits out of range");
        hl_sem_cmd_add(&k->cmd, v.names, arg, set);
        k->answer = ANS_NONE;
        break;
    }
    case HILOCK_COUNT_DRAIN:
        if (kind != HL_SEM_SEMAPHORE)
            return refuse(a, k, "not an operation of this kind");
        hl_sem_cmd_drain(&k->cmd, v.names);
        break;
    case HILOCK_COUNT_DELETE:
        hl_sem_cmd_delete(&k->cmd, kind, v.names);
        k->answer = ANS_FLAG;
        break;
    default:
        return refuse(a, k, "unknown count operation");
    }
    return call_start(a, k, &v, cb, payload);
}

/* ---- semaphore ---- */

int hilock_async_semaphore_acquire(hilock_async *a, hilock_semaphore *s, uint64_t tid,
                                   int64_t permits, int64_t wait_ms, hilock_async_cb cb,
                                   void *payload)
{
    return start_wait(a, s, HL_SEM_SEMAPHORE, tid, permits, 0, wait_ms, NULL, cb, payload);
}

int hilock_async_semaphore_release(hilock_async *a, hilock_semaphore *s, int64_t permits,
                                   hilock_async_cb cb, void *payload)
{
    hl_sem_view v;
    int rc;
    sem_call *k = call_new(a, s, HL_SEM_SEMAPHORE, cb, &v, &rc);
    if (!k)
        return rc;
    if (hl_sem_check_permits(permits))
        return refuse(a, k, "permits must be 1..2147483647");
    hl_sem_cmd_release(&k->cmd, v.names, permits);
    k->answer = ANS_NONE;
    return call_start(a, k, &v, cb, payload);
}

int hilock_async_semaphore_cancel(int *cancelled, hilock_async *a, hilock_semaphore *s,
                                  uint64_t tid)
{
    return hl_as_cancel(cancelled, a, s, tid);
}

int hilock_async_semaphore_count_op(hilock_async *a, hilock_semaphore *s, hilock_count_op op,
                                    int64_t arg, hilock_async_cb cb, void *payload)
{
    return count_op(a, s, HL_SEM_SEMAPHORE, op, arg, cb, payload);
}

/* ---- permit-expirable semaphore ---- */

int hilock_async_permit_semaphore_acquire(char *id, hilock_async *a, hilock_permit_semaphore *s,
                                          uint64_t tid, int64_t wait_ms, int64_t lease_ms,
                                          hilock_async_cb cb, void *payload)
{
    if (id)
        id[0] = 0;
    if (!id)
        return HILOCK_EINVAL;
    if (lease_ms < 0)
        lease_ms = 0;
    return start_wait(a, s, HL_SEM_PERMIT, tid, 1, lease_ms, wait_ms, id, cb, payload);
}

/* A release or lease update of permit id. */
static int pes_id_call(hilock_async *a, hilock_permit_semaphore *s, const char *id,
                       int64_t lease_ms, int update, hilock_async_cb cb, void *payload)
{
    hl_sem_view v;
    int rc;
    sem_call *k = call_new(a, s, HL_SEM_PERMIT, cb, &v, &rc);
    if (!k)
        return rc;
    if (hl_pes_id_parse(k->id, id) != 0)
        return refuse(a, k, "a permit id is 32 hex characters");
    if (update && (lease_ms <= 0 || hl_check_lease(lease_ms)))
        return refuse(a, k, "lease must be > 0 ms");
    if (update)
        hl_pes_cmd_update(&k->cmd, v.names, k->id, lease_ms);
    else
        hl_pes_cmd_release(&k->cmd, v.names, k->id);
    k->answer = update ? ANS_PES_UPDATE : ANS_PES_RELEASE;
    return call_start(a, k, &v, cb, payload);
}

int hilock_async_permit_semaphore_release(hilock_async *a, hilock_permit_semaphore *s,
                                          const char *id, hilock_async_cb cb, void *payload)
{
    return pes_id_call(a, s, id, 0, 0, cb, payload);
}

int hilock_async_permit_semaphore_update_lease(hilock_async *a, hilock_permit_semaphore *s,
                                               const char *id, int64_t lease_ms,
                                               hilock_async_cb cb, void *payload)
{
    return pes_id_call(a, s, id, lease_ms, 1, cb, payload);
}

int hilock_async_permit_semaphore_cancel(int *cancelled, hilock_async *a,
                                         hilock_permit_semaphore *s, uint64_t tid)
{
    return hl_as_cancel(cancelled, a, s, tid);
}

int hilock_async_permit_semaphore_count_op(hilock_async *a, hilock_permit_semaphore *s,
                                           hilock_count_op op, int64_t arg, hilock_async_cb cb,
                                           void *payload)
{
    return count_op(a, s, HL_SEM_PERMIT, op, arg, cb, payload);
}

/* ---- count-down latch ---- */

int hilock_async_latch_await(hilock_async *a, hilock_latch *l, uint64_t tid, int64_t wait_ms,
                             hilock_async_cb cb, void *payload)
{
    return start_wait(a, l, HL_SEM_LATCH, tid, 1, 0, wait_ms, NULL, cb, payload);
}

int hilock_async_latch_count_down(hilock_async *a, hilock_latch *l, hilock_async_cb cb,
                                  void *payload)
{
    hl_sem_view v;
    int rc;
    sem_call *k = call_new(a, l, HL_SEM_LATCH, cb, &v, &rc);
    if (!k)
        return rc;
    hl_latch_cmd_count_down(&k->cmd, v.names);
    return call_start(a, k, &v, cb, payload);
}

int hilock_async_latch_cancel(int *cancelled, hilock_async *a, hilock_latch *l, uint64_t tid)
{
    return hl_as_cancel(cancelled, a, l, tid);
}

int hilock_async_latch_count_op(hilock_async *a, hilock_latch *l, hilock_count_op op,
                                int64_t arg, hilock_async_cb cb, void *payload)
{
    return count_op(a, l, HL_SEM_LATCH, op, arg, cb, payload);
}
