/*
 * hilock_async's multi-lock and Redlock (hilock.h): the parent operation
 * over its members' child operations, the listeners that wake a waiting
 * call, and the multi-lock holds whose loss is reported. The rules are the
 * engine's (hl_ml_*); async.c drives the operations. API layer, like
 * async.c.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"

#include "async_impl.h"

/* ---- multi-lock and Redlock ----
 * The rules are the engine's (hl_ml_*): quorum, validity, success, what a
 * failed attempt gives back, fatal errors, the outcome, how long to wait
 * and on which member's message. Each member's part is an ordinary child
 * operation (an acquire with wait 0, a release) on that member's client,
 * all in flight at once; a waiting multi-lock listens to its members'
 * channels through listener children. */

typedef struct as_mlhold {
    struct as_mlhold *next;
    hilock_multilock *m;
    uint64_t tid;
    int count;
    size_t n, nacquired, nlost;
    unsigned char *acquired, *lostm; /* per member */
    int lost;                        /* reported (hl_ml_hold_lost) */
} as_mlhold;

static void mlhold_free(as_mlhold *h)
{
    free(h->acquired);
    free(h->lostm);
    free(h);
}

enum { ML_START = 0, ML_TRIED, ML_UNDONE, ML_SUBS, ML_RELEASED, ML_LEAVING };

struct as_ml {
    hilock_multilock *m;
    hl_ml_view v;
    int phase;
    size_t pending;     /* children outstanding */
    int *rc;            /* per member: its acquire's (or release's) answer */
    int64_t *ttl;       /* held: the holder's PTTL */
    unsigned char *ready; /* its listener was confirmed before the attempt */
    as_op **listen;
    hl_ml_member *mb;
    int64_t *window;        /* per member: hl_ml_line_window */
    unsigned char *in_line; /* per member: the call may have an entry in its line */
    int fin_rc;             /* ML_LEAVING: the outcome, once the lines are left */
    int64_t fin_value;
    int64_t lease_ms, wait_ms, deadline, vlease, t0, t1;
    int reentry;
    unsigned attempt;
    uint64_t rng;
    size_t ok, busy;
    int first_err, fatal, listening;
};

void hl_as_ml_free(as_ml *ml)
{
    free(ml->rc);
    free(ml->ttl);
    free(ml->ready);
    free(ml->listen);
    free(ml->mb);
    free(ml->window);
    free(ml->in_line);
    free(ml);
}

static as_mlhold *mlhold_find(hilock_async *a, const hilock_multilock *m, uint64_t tid)
{
    for (as_mlhold *h = a->mlholds; h; h = h->next)
        if (h->m == m && h->tid == tid)
            return h;
    return NULL;
}

/* Member lock l of thread tid was lost (or is in doubt): each multi-lock
 * hold of tid with l among its taken members counts it; one that the
 * engine's rule (hl_ml_hold_lost) says is lost by that is reported once. */
void hl_as_ml_member_lost(hilock_async *a, hilock_lock *l, uint64_t tid, int64_t silent_ms)
{
    for (as_mlhold *h = a->mlholds; h; h = h->next) {
        if (h->tid != tid || h->lost)
            continue;
        hl_ml_view v;
        hl_multilock_view(h->m, &v);
        for (size_t i = 0; i < v.n && i < h->n; i++) {
            if (v.locks[i] != l || !h->acquired[i] || h->lostm[i])
                continue;
            h->lostm[i] = 1;
            h->nlost++;
            if (hl_ml_hold_lost(v.redlock, v.n, h->nacquired, h->nlost)) {
                h->lost = 1;
                struct as_lost *e = hl_as_queue_report(a, NULL, h->m, tid, silent_ms);
                if (e)
                    snprintf(e->member, sizeof e->member, "%s", l->names.name);
            }
            break;
        }
    }
}

int hilock_async_multilock_is_lost(const hilock_async *a, const hilock_multilock *m,
                                   uint64_t tid)
{
    if (!a || !m)
        return 0;
    for (as_mlhold *h = a->mlholds; h; h = h->next) {
        if (h->m != m || h->tid != tid)
            continue;
        if (h->lost)
            return 1;
        /* asked before the loop has run again (it was blocked): members
         * whose report is overdue count as lost (hilock_async_is_lost) */
        hl_ml_view v;
        hl_multilock_view(h->m, &v);
        size_t nlost = h->nlost;
        for (size_t i = 0; i < v.n && i < h->n; i++)
            if (h->acquired[i] && !h->lostm[i] && hilock_async_is_lost(a, v.locks[i], tid))
                nlost++;
        return nlost > h->nlost && hl_ml_hold_lost(v.redlock, v.n, h->nacquired, nlost);
    }
    return 0;
}

void hilock_async_set_multilock_lost_callback(hilock_async *a, hilock_async_multilock_lost_cb cb,
                                              void *payload)
{
    if (!a)
        return;
    a->ml_lost_cb = cb;
    a->ml_lost_payload = payload;
}

/* Member i's child of parent op, of type, on that member's client (not
 * yet queued: ml_child_queue); NULL with *rc. */
static as_op *ml_child_new(as_op *op, size_t i, int type, int *rc)
{
    as_ml *ml = op->ml;
    hilock_lock *l = ml->v.locks[i];
    as_link *lk = hl_as_link_get(op->a, l->client, rc);
    if (!lk)
        return NULL;
    as_op *ch = hl_as_op_new(op->a, type, l, op->tid, NULL, NULL);
    if (!ch) {
        *rc = HILOCK_ENOMEM;
        return NULL;
    }
    ch->parent = op;
    ch->index = i;
    ch->link = lk;
    ch->timeout_ms = ml->v.member_timeout_ms;
    hl_hold_owner(ch->owner, l->kind, l->client->t.id, op->tid);
    return ch;
}

static void ml_child_queue(as_op *op, as_op *ch)
{
    op->ml->pending++;
    hl_as_op_queue(ch);
}

/* Start member i's child (OP_ACQUIRE wait 0, or OP_RELEASE) of parent op. */
static int ml_child(as_op *op, size_t i, int type)
{
    hilock_async *a = op->a;
    as_ml *ml = op->ml;
    hilock_lock *l = ml->v.locks[i];
    hilock_client *c = l->client;
    int rc = 0;
    as_op *ch = ml_child_new(op, i, type, &rc);
    if (!ch)
        return rc;
    uint64_t seq = __atomic_add_fetch(&c->t.request_seq, 1, __ATOMIC_RELAXED);
    int64_t now = hl_as_now();
    if (type == OP_ACQUIRE) {
        ch->watchdog = ml->lease_ms <= 0;
        ch->lease_ms = ml->lease_ms > 0 ? ml->lease_ms : c->t.opts.watchdog_lease_ms;
        if (hl_acquire_latch_arg(ch->latch, sizeof ch->latch, &l->names, ch->owner,
                                 __atomic_load_n(&c->t.latch_epoch, __ATOMIC_RELAXED), seq) != 0)
            ch->latch[0] = 0;
        if (hl_acquire_init(&ch->acq, l->kind, &l->names, ch->owner, 0, ch->lease_ms,
                            c->t.opts.fair_wait_window_ms, now) != 0)
            goto nomem;
        ch->inited = 1;
        hl_acquire_set_line(&ch->acq, ml->window[i]); /* a held fair member: wait in line */
        ch->wait_ms = 0;
        ch->deadline = now;
        if (hl_acquire_set_latch(&ch->acq, ch->latch, hl_as_latch_ttl(c)) != 0)
            goto nomem;
    } else {
        snprintf(ch->rid, sizeof ch->rid, "%s:%" PRIu64, c->t.id, seq);
        as_hold *h = hl_as_hold_find(a, l, op->tid);
        int64_t lease = h && !h->s.watchdog ? h->s.lease_ms : 0;
        if (hl_release_init(&ch->rel, l->kind, &l->names, ch->owner, lease,
                            c->t.opts.watchdog_lease_ms, ch->rid, c->t.opts.command_timeout_ms,
                            0, now) != 0)
            goto nomem;
        ch->inited = 1;
    }
    ml_child_queue(op, ch);
    return 0;
nomem:
    hl_as_op_drop(ch);
    return HILOCK_ENOMEM;
}

void hl_as_ml_child_done(as_op *child)
{
    as_op *op = child->parent;
    as_ml *ml = op->ml;
    if (child->type == OP_ACQUIRE || child->type == OP_RELEASE) {
        ml->rc[child->index] = child->rc;
        ml->ttl[child->index] = child->type == OP_ACQUIRE ? child->acq.last_ttl : 0;
    }
    if (ml->pending > 0 && --ml->pending == 0) {
        ml->t1 = hl_as_now();
        hl_as_op_queue(op);
    }
}

/* Listeners: member i's channel wakes its parent (engine: hl_ml_wakes_on). */
void hl_as_ml_listener_signal(as_op *listener)
{
    as_op *op = listener->parent;
    as_ml *ml = op ? op->ml : NULL;
    size_t i = listener->index;
    if (ml && op->waiting && ml->phase == ML_START && hl_ml_wakes_on(&ml->mb[i])) {
        op->waiting = 0;
        hl_as_op_queue(op);
        return;
    }
    /* not ours to use (our own take-back publishes there too): pass it on */
    as_chan *ch = listener->chan;
    for (as_op *o = ch ? listener->chan_next : NULL; o; o = o->chan_next)
        if (o->type != OP_LISTEN && !o->signaled) {
            hl_as_op_signal(o);
            break;
        }
}

void hl_as_ml_listener_subscribed(as_op *listener, int ok)
{
    listener->confirmed = ok;
    as_op *op = listener->parent;
    if (!op || op->ml->phase != ML_SUBS)
        return;
    for (size_t i = 0; i < op->ml->v.n; i++)
        if (op->ml->listen[i] && op->ml->listen[i]->sub_pending)
            return;
    op->waiting = 0; /* every subscription answered: try again now */
    hl_as_op_queue(op);
}

static void ml_stop_listening(as_op *op)
{
    as_ml *ml = op->ml;
    for (size_t i = 0; ml && i < ml->v.n; i++) {
        as_op *ls = ml->listen[i];
        if (!ls)
            continue;
        ml->listen[i] = NULL;
        hl_as_leave(ls);
        hl_as_op_drop(ls);
    }
}

static void ml_start_listening(as_op *op)
{
    as_ml *ml = op->ml;
    hilock_async *a = op->a;
    for (size_t i = 0; i < ml->v.n; i++) {
        hilock_lock *l = ml->v.locks[i];
        /* a fair member: our own waiter channel, which its unlock uses
         * once we head the line we joined (hl_ml_line_window) */
        int rc = 0;
        as_link *lk = hl_as_link_get(a, l->client, &rc);
        as_op *ls = lk ? hl_as_op_new(a, OP_LISTEN, l, op->tid, NULL, NULL) : NULL;
        if (!ls)
            continue;
        ls->parent = op;
        ls->index = i;
        ls->link = lk;
        char owner[HL_OWNER_MAX];
        hl_hold_owner(owner, l->kind, l->client->t.id, op->tid);
        char *chname = hl_wait_channel(l->kind, &l->names, owner);
        int j = chname ? hl_as_chan_join(ls, chname, HL_WAKE_LOCK) : -1;
        free(chname);
        if (j < 0) {
            hl_as_op_drop(ls);
            continue;
        }
        /* 1: subscribed already; 0: pending (hl_as_ml_listener_subscribed
         * says). A listener is never parked (2): hl_as_route_channel does
         * not park OP_LISTEN, a member whose topology is unknown just does
         * not wake it (its wait stays bounded by the engine's rule). */
        ls->confirmed = j == 1;
        ml->listen[i] = ls;
    }
}

static void ml_finish(as_op *op, int rc, int64_t value, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Member i's child that leaves its fair line (fair_cancel.lua). */
static void ml_leave_line(as_op *op, size_t i)
{
    int rc = 0;
    as_op *ch = ml_child_new(op, i, OP_SIMPLE, &rc);
    if (!ch)
        return; /* best effort: the line drops a silent waiter at its deadline */
    hl_cmd_fair_cancel(&ch->cmd, &op->ml->v.locks[i]->names, ch->owner, op->ml->window[i]);
    ch->decode = hl_decode_int;
    ml_child_queue(op, ch);
}

/* The call is over: leave every line it may still be in (all in flight at
 * once, ML_LEAVING), then finish with rc and value. */
static void ml_finish(as_op *op, int rc, int64_t value, const char *fmt, ...)
{
    as_ml *ml = op->ml;
    ml_stop_listening(op);
    if (fmt) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(op->err, sizeof op->err, fmt, ap);
        va_end(ap);
    }
    for (size_t i = 0; ml->in_line && i < ml->v.n; i++) {
        if (!ml->in_line[i])
            continue;
        ml->in_line[i] = 0;
        ml_leave_line(op, i);
    }
    if (ml->pending) {
        ml->phase = ML_LEAVING;
        ml->fin_rc = rc;
        ml->fin_value = value;
        return;
    }
    hl_as_op_finish(op, rc, value);
}

static const char *ml_kind(const as_ml *ml)
{
    return ml->v.redlock ? "redlock" : "multi-lock";
}

/* The caller cancelled the acquire (taken between its steps): finish it
 * with HILOCK_ECANCELED; 1 when it did. */
static int ml_cancelled(as_op *op)
{
    if (!op->cancel_req)
        return 0;
    ml_finish(op, HILOCK_ECANCELED, 0, "%s: acquire by thread %" PRIu64 " cancelled",
              ml_kind(op->ml), op->tid);
    return 1;
}

void hl_as_ml_step_acquire(as_op *op)
{
    hilock_async *a = op->a;
    as_ml *ml = op->ml;
    const size_t n = ml->v.n;
    if (ml->pending)
        return;
    for (;;) {
        int64_t now = hl_as_now();
        switch (ml->phase) {
        case ML_SUBS:
        case ML_START: {
            if (ml_cancelled(op))
                return;
            for (size_t i = 0; i < n; i++)
                ml->ready[i] = ml->listen[i] && ml->listen[i]->confirmed;
            ml->phase = ML_TRIED;
            ml->t0 = now;
            for (size_t i = 0; i < n; i++) {
                int rc = ml_child(op, i, OP_ACQUIRE);
                if (rc)
                    ml->rc[i] = rc, ml->ttl[i] = 0;
            }
            if (ml->pending)
                return;
            ml->t1 = hl_as_now();
            continue;
        }
        case ML_LEAVING:
            hl_as_op_finish(op, ml->fin_rc, ml->fin_value);
            return;
        case ML_TRIED: {
            ml->ok = ml->busy = 0;
            ml->first_err = ml->fatal = 0;
            for (size_t i = 0; i < n; i++) {
                int rc = ml->rc[i];
                ml->in_line[i] = (unsigned char)hl_ml_in_line(ml->window[i], rc);
                if (rc == 0)
                    ml->ok++;
                else if (rc == HILOCK_ETIMEDOUT)
                    ml->busy++;
                else {
                    if (!ml->first_err)
                        ml->first_err = rc;
                    if (hl_ml_fatal(ml->v.redlock, rc) && !ml->fatal)
                        ml->fatal = rc;
                }
            }
            int64_t validity = hl_ml_validity(ml->vlease, ml->t0, ml->t1);
            if (hl_ml_success(ml->v.redlock, n, ml->ok, ml->fatal, validity)) {
                as_mlhold *h = mlhold_find(a, ml->m, op->tid);
                if (!h && (h = calloc(1, sizeof *h)) != NULL) {
                    h->m = ml->m;
                    h->tid = op->tid;
                    h->n = n;
                    h->acquired = calloc(n, 1);
                    h->lostm = calloc(n, 1);
                    if (!h->acquired || !h->lostm) {
                        mlhold_free(h);
                        h = NULL;
                    } else {
                        h->next = a->mlholds;
                        a->mlholds = h;
                    }
                }
                if (h) {
                    /* the members this grant took (a re-entry: held again) */
                    h->count++;
                    h->nacquired = h->nlost = 0;
                    for (size_t i = 0; i < n; i++) {
                        if (ml->rc[i] == 0)
                            h->acquired[i] = 1, h->lostm[i] = 0;
                        h->nacquired += h->acquired[i];
                        h->nlost += h->lostm[i];
                    }
                    h->lost = 0;
                }
                ml_finish(op, 0, ml->lease_ms > 0 ? validity : -1, NULL);
                return;
            }
            /* give back what this attempt may have taken (engine's rule) */
            ml->phase = ML_UNDONE;
            for (size_t i = 0; i < n; i++)
                if (hl_ml_take_back(ml->v.redlock, ml->reentry, ml->rc[i]))
                    ml_child(op, i, OP_RELEASE); /* its answer does not matter */
            if (ml->pending)
                return;
            continue;
        }
        case ML_UNDONE: {
            if (ml->fatal) {
                ml_finish(op, ml->fatal, 0, "%s: %zu of %zu taken: %s", ml_kind(ml), ml->ok, n,
                          hilock_strerror(ml->fatal));
                return;
            }
            if (ml_cancelled(op))
                return;
            if (ml->wait_ms == 0 || (ml->deadline >= 0 && now >= ml->deadline)) {
                ml_finish(op, hl_ml_fail_code(ml->v.redlock, n, ml->ok, ml->busy, ml->first_err),
                          0, "%s: %zu of %zu taken (need %zu)", ml_kind(ml), ml->ok, n,
                          hl_ml_quorum(ml->v.redlock, n));
                return;
            }
            int64_t left = ml->deadline < 0 ? -1 : ml->deadline - now;
            if (!ml->listening) {
                /* the first failure: listen to the members' unlock messages,
                 * then try again once the subscriptions answered */
                ml->listening = 1;
                ml_start_listening(op);
                ml->phase = ML_SUBS;
                int pending = 0;
                for (size_t i = 0; i < n; i++)
                    pending |= ml->listen[i] && ml->listen[i]->sub_pending;
                if (!pending)
                    continue;
                int64_t limit = ml->v.member_timeout_ms > 0
                                    ? ml->v.member_timeout_ms
                                    : ml->v.locks[0]->client->t.opts.command_timeout_ms;
                if (left >= 0 && left < limit)
                    limit = left;
                op->waiting = 1;
                op->wake_at = now + limit;
                return;
            }
            ml->rng = ml->rng * 6364136223846793005ULL + 1442695040888963407ULL;
            int64_t backoff = hl_ml_backoff(ml->attempt++, ml->rng >> 17);
            for (size_t i = 0; i < n; i++) {
                ml->mb[i].rc = ml->rc[i];
                ml->mb[i].ttl_ms = ml->ttl[i];
                ml->mb[i].wakeable = ml->ready[i];
                ml->mb[i].line_window_ms = ml->in_line[i] ? ml->window[i] : -1;
            }
            int64_t s = hl_ml_wait_ms(ml->v.redlock, ml->mb, n,
                                      ml->v.redlock && ml->ok >= hl_ml_quorum(1, n), backoff, left);
            ml->phase = ML_START;
            if (s == 0)
                continue;
            op->waiting = 1;
            op->wake_at = s < 0 ? -1 : now + s;
            return;
        }
        default:
            return;
        }
    }
}

void hl_as_ml_step_release(as_op *op)
{
    hilock_async *a = op->a;
    as_ml *ml = op->ml;
    const size_t n = ml->v.n;
    if (ml->pending)
        return;
    if (ml->phase == ML_START) {
        ml->phase = ML_RELEASED;
        for (size_t i = 0; i < n; i++) {
            int rc = ml_child(op, i, OP_RELEASE);
            if (rc)
                ml->rc[i] = rc;
        }
        if (ml->pending)
            return;
    }
    size_t ok = 0, notowner = 0;
    int first_err = 0;
    for (size_t i = 0; i < n; i++) {
        if (ml->rc[i] == 0)
            ok++;
        else if (ml->rc[i] == HILOCK_ENOTOWNER)
            notowner++;
        else if (!first_err)
            first_err = ml->rc[i];
    }
    as_mlhold *h = mlhold_find(a, ml->m, op->tid);
    if (h && --h->count <= 0) {
        for (as_mlhold **pp = &a->mlholds; *pp; pp = &(*pp)->next)
            if (*pp == h) {
                *pp = h->next;
                break;
            }
        mlhold_free(h);
    }
    int rc = hl_ml_release_code(ml->v.redlock, n, ok, notowner, first_err);
    ml_finish(op, rc, (int64_t)ok, rc ? "%s release: %zu of %zu released" : NULL, ml_kind(ml),
              ok, n);
}

/* A parent operation of type on m; its checks as op_check's. */
static int ml_op_new(as_op **out, hilock_async *a, hilock_multilock *m, int type, uint64_t tid,
                     hilock_async_cb cb, void *payload)
{
    *out = NULL;
    if (!a || !m || !cb)
        return HILOCK_EINVAL;
    if (a->free_later)
        return HILOCK_ECLOSED;
    as_ml *ml = calloc(1, sizeof *ml);
    if (!ml)
        return HILOCK_ENOMEM;
    ml->m = m;
    hl_multilock_view(m, &ml->v);
    size_t n = ml->v.n;
    for (size_t i = 0; i < n; i++) {
        char err[HL_ERRMSG_MAX];
        int rc = hl_client_check(ml->v.locks[i]->client, err);
        if (!rc && !hl_as_link_get(a, ml->v.locks[i]->client, &rc))
            rc = rc ? rc : HILOCK_ENOMEM;
        if (rc) {
            free(ml);
            return rc;
        }
    }
    ml->rc = calloc(n, sizeof *ml->rc);
    ml->ttl = calloc(n, sizeof *ml->ttl);
    ml->ready = calloc(n, 1);
    ml->listen = calloc(n, sizeof *ml->listen);
    ml->mb = calloc(n, sizeof *ml->mb);
    ml->window = calloc(n, sizeof *ml->window);
    ml->in_line = calloc(n, 1);
    as_op *op = ml->rc && ml->ttl && ml->ready && ml->listen && ml->mb && ml->window &&
                        ml->in_line
                    ? hl_as_op_new(a, type, NULL, tid, cb, payload)
                    : NULL;
    if (!op) {
        hl_as_ml_free(ml);
        return HILOCK_ENOMEM;
    }
    op->ml = ml;
    op->target = m; /* what hilock_async_multilock_cancel matches */
    ml->rng = (uint64_t)hl_as_now() * 0x9E3779B97F4A7C15ULL ^ tid ^ (uint64_t)(uintptr_t)op;
    *out = op;
    return 0;
}

int hilock_async_multilock_acquire(hilock_async *a, hilock_multilock *m, uint64_t tid,
                                   int64_t wait_ms, int64_t lease_ms, hilock_async_cb cb,
                                   void *payload)
{
    if (hl_check_wait(wait_ms) || hl_check_lease(lease_ms))
        return HILOCK_EINVAL;
    as_op *op;
    int rc = ml_op_new(&op, a, m, OP_ML_ACQUIRE, tid, cb, payload);
    if (rc)
        return rc;
    as_ml *ml = op->ml;
    ml->wait_ms = wait_ms;
    ml->lease_ms = lease_ms > 0 ? lease_ms : 0;
    ml->deadline = wait_ms < 0 ? -1 : hl_as_now() + wait_ms;
    ml->vlease = lease_ms > 0 ? lease_ms : ml->v.watchdog_lease_ms;
    ml->reentry = mlhold_find(a, m, tid) != NULL;
    for (size_t i = 0; i < ml->v.n; i++)
        ml->window[i] = hl_ml_line_window(ml->v.locks[i]->kind, wait_ms,
                                          ml->v.locks[i]->client->t.opts.fair_wait_window_ms);
    return hl_as_op_start(op);
}

int hilock_async_multilock_release(hilock_async *a, hilock_multilock *m, uint64_t tid,
                                   hilock_async_cb cb, void *payload)
{
    as_op *op;
    int rc = ml_op_new(&op, a, m, OP_ML_RELEASE, tid, cb, payload);
    return rc ? rc : hl_as_op_start(op);
}

int hilock_async_multilock_cancel(int *cancelled, hilock_async *a, hilock_multilock *m,
                                  uint64_t tid)
{
    return hl_as_cancel_ops(cancelled, a, OP_ML_ACQUIRE, m, tid);
}

void hl_as_mlholds_free(hilock_async *a)
{
    while (a->mlholds) {
        as_mlhold *h = a->mlholds;
        a->mlholds = h->next;
        mlhold_free(h);
    }
}
