/* Reentrant and fair lock handles: the API over the acquire machine, the
 * pool, the pub/sub listener and the watchdog. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "api.h"


static void lock_set_err(hilock_lock *l, const char *msg)
{
    pthread_mutex_lock(&l->mu);
    snprintf(l->errmsg, sizeof l->errmsg, "%s", msg);
    pthread_mutex_unlock(&l->mu);
    hl_err_note(l, msg);
}

/* Record rc with its detail on the handle; returns rc. */
static int lock_fail(hilock_lock *l, int rc, const char *detail)
{
    if (rc && l)
        lock_set_err(l, detail && *detail ? detail : hilock_strerror(rc));
    return rc;
}

int hilock_name_check(const char *name, char *why, size_t len)
{
    return hl_name_check(name, name ? strlen(name) : 0, why, len);
}

static int lock_new(hilock_lock **out, hilock_client *c, const char *name, hilock_kind kind)
{
    if (!out)
        return HILOCK_EINVAL;
    *out = NULL;
    if (!c)
        return HILOCK_EINVAL;
    char err[HL_ERRMSG_MAX];
    if (hl_name_check(name, name ? strlen(name) : 0, err, sizeof err)) {
        hl_client_set_err(c, err); /* why, for hilock_client_errmsg */
        return HILOCK_EINVAL;
    }
    int rc = hl_client_check(c, err);
    if (rc)
        return rc;
    hilock_lock *l = calloc(1, sizeof *l);
    if (!l)
        return HILOCK_ENOMEM;
    if ((rc = hl_names_init(&l->names, name)) != 0) {
        free(l);
        return rc;
    }
    if (c->t.ep.cluster && !hl_names_one_slot(&l->names)) {
        /* the lock could be taken but never released (CROSSSLOT) */
        hl_client_set_err(c, "lock name has an empty or unclosed hash tag ('{}', 'x{y'): "
                             "on a cluster its companion keys would land in another slot");
        hl_names_free(&l->names);
        free(l);
        return HILOCK_EINVAL;
    }
    if (c->t.ep.cluster)
        l->names.publish = "spublish"; /* sharded pub/sub, as Redisson on Redis 7 */
    pthread_mutex_init(&l->mu, NULL);
    pthread_mutex_init(&l->hook_mu, NULL);
    l->client = c;
    l->kind = kind;
    hl_client_ref(c);
    hl_err_forget(l); /* a freed handle's message here, at the same address */
    *out = l;
    return 0;
}

int hilock_lock_new(hilock_lock **out, hilock_client *c, const char *name)
{
    return lock_new(out, c, name, HILOCK_KIND_REENTRANT);
}

int hilock_fair_lock_new(hilock_lock **out, hilock_client *c, const char *name)
{
    return lock_new(out, c, name, HILOCK_KIND_FAIR);
}

int hilock_fenced_lock_new(hilock_lock **out, hilock_client *c, const char *name)
{
    return lock_new(out, c, name, HILOCK_KIND_FENCED);
}

static void lock_free_now(void *arg)
{
    hilock_lock *l = arg;
    hl_err_forget(l);
    hilock_client *c = l->client;
    if (!hl_transport_forked(&c->t) && !__atomic_load_n(&c->t.closed, __ATOMIC_ACQUIRE))
        hl_wd_forget_lock(&c->t, l);
    while (l->lost) {
        hl_lost_state *s = l->lost;
        l->lost = s->next;
        free(s);
    }
    while (l->hooks) { /* multi-locks still built over this handle */
        hl_lost_hook *h = l->hooks;
        l->hooks = h->next;
        free(h);
    }
    hl_since_free(&l->since);
    hl_names_free(&l->names);
    if (!hl_transport_forked(&c->t)) { /* a child after fork() only frees memory */
        pthread_mutex_destroy(&l->mu);
        pthread_mutex_destroy(&l->hook_mu);
    }
    free(l);
    hl_client_unref(c);
}

static void lock_free(hilock_lock *l);

void hilock_lock_free(hilock_lock *l)
{
    if (!l || l->rw_side) /* a read-write lock's side: hilock_rwlock_free */
        return;
    lock_free(l);
}

static void lock_free(hilock_lock *l)
{
    hilock_client *c = l->client;
    if (!hl_transport_forked(&c->t) && hl_wd_on_thread(&c->t)) {
        /* from a lost callback: the report in progress may be about this
         * very handle (and the watchdog would wait for itself); the
         * watchdog frees it when the pass's reports are over */
        __atomic_store_n(&l->freeing, 1, __ATOMIC_RELEASE);
        l->free_later.fn = lock_free_now;
        l->free_later.arg = l;
        hl_wd_defer(&c->t, &l->free_later);
        return;
    }
    /* a multi-lock freed from a lost callback may still be about to let
     * go of this member (its free runs after the callbacks) */
    if (!hl_transport_forked(&c->t))
        hl_wd_wait_deferred(&c->t);
    lock_free_now(l);
}

/* ---- read-write lock: two lock handles of kinds READ and WRITE ---- */

int hilock_rwlock_new(hilock_rwlock **out, hilock_client *c, const char *name)
{
    if (!out)
        return HILOCK_EINVAL;
    *out = NULL;
    hilock_rwlock *rw = calloc(1, sizeof *rw);
    if (!rw)
        return HILOCK_ENOMEM;
    int rc = lock_new(&rw->read, c, name, HILOCK_KIND_READ);
    if (rc == 0)
        rc = lock_new(&rw->write, c, name, HILOCK_KIND_WRITE);
    if (rc) {
        if (rw->read)
            lock_free(rw->read);
        free(rw);
        return rc;
    }
    rw->read->rw_side = rw->write->rw_side = 1;
    *out = rw;
    return 0;
}

void hilock_rwlock_free(hilock_rwlock *rw)
{
    if (!rw)
        return;
    lock_free(rw->read);
    lock_free(rw->write);
    free(rw);
}

hilock_lock *hilock_rwlock_read_lock(hilock_rwlock *rw)
{
    return rw ? rw->read : NULL;
}

hilock_lock *hilock_rwlock_write_lock(hilock_rwlock *rw)
{
    return rw ? rw->write : NULL;
}

const char *hilock_lock_name(const hilock_lock *l)
{
    return l ? l->names.name : NULL;
}

hilock_kind hilock_lock_kind(const hilock_lock *l)
{
    return l ? l->kind : (hilock_kind)0;
}

hilock_client *hilock_lock_client(const hilock_lock *l)
{
    return l ? l->client : NULL;
}

const char *hilock_lock_errmsg(const hilock_lock *l)
{
    if (!l)
        return "lock is NULL";
    hilock_lock *m = (hilock_lock *)l; /* its mutex guards the message */
    return hl_err_view(l, &m->mu, m->errmsg);
}

/* ---- lost state ---- */

static void clear_lost(hilock_lock *l, uint64_t tid)
{
    pthread_mutex_lock(&l->mu);
    for (hl_lost_state **pp = &l->lost; *pp; pp = &(*pp)->next) {
        if ((*pp)->tid == tid) {
            hl_lost_state *s = *pp;
            *pp = s->next;
            free(s);
            break;
        }
    }
    pthread_mutex_unlock(&l->mu);
}

static void hl_lock_mark_lost(hilock_lock *l, uint64_t tid, int cause, int64_t silent_ms)
{
    int unconfirmed = cause == HL_LOSS_DOUBT;
    pthread_mutex_lock(&l->mu);
    int known = 0;
    for (hl_lost_state *s = l->lost; s; s = s->next)
        known |= s->tid == tid;
    if (!known) {
        hl_lost_state *s = calloc(1, sizeof *s);
        if (s) {
            s->tid = tid;
            s->next = l->lost;
            l->lost = s;
        }
        /* newest first; the oldest beyond HL_LOST_MAX are forgotten (a
         * thread pool hands out ever new thread ids) */
        int kept = 0;
        for (hl_lost_state **pp = &l->lost; *pp;) {
            if (++kept > HL_LOST_MAX) {
                hl_lost_state *old = *pp;
                *pp = old->next;
                free(old);
            } else {
                pp = &(*pp)->next;
            }
        }
    }
    if (unconfirmed)
        snprintf(l->errmsg, sizeof l->errmsg,
                 "lock '%s' lost (in doubt): no renewal confirmed by the server for %" PRId64
                 " ms, so its lease may have run out there; thread %" PRIu64
                 " must stop using it",
                 l->names.name, silent_ms, tid);
    else
        snprintf(l->errmsg, sizeof l->errmsg,
                 "lock '%s' lost: the watchdog found it no longer held by thread %" PRIu64,
                 l->names.name, tid);
    hilock_lost_cb cb = l->lost_cb;
    void *payload = l->lost_payload;
    hl_stats_hold_end(&l->client->t.stats, NULL, &l->since, l->kind, l->names.name, tid, 1); /* mu held */
    pthread_mutex_unlock(&l->mu);
    /* after the hold's end: a reader who sees the loss counted, or a trace
     * callback reading the counters, finds the hold's end counted too */
    hl_stats_lost_count(&l->client->t.stats, l->kind, l->names.name, cause);
    hl_stats_lost_trace(&l->client->t.stats, l->kind, l->names.name, tid, cause, silent_ms);
    if (cb)
        cb(l, tid, payload);
    pthread_mutex_lock(&l->hook_mu);
    for (hl_lost_hook *h = l->hooks; h; h = h->next)
        h->fn(l, tid, h->payload);
    pthread_mutex_unlock(&l->hook_mu);
}

void hl_lock_lost_sink(void *holder, uint64_t tid, int cause, int64_t silent_ms)
{
    hilock_lock *l = holder;
    /* a handle freed by an earlier callback of this pass hears no more */
    if (!__atomic_load_n(&l->freeing, __ATOMIC_ACQUIRE))
        hl_lock_mark_lost(l, tid, cause, silent_ms);
    else {
        hl_stats_lost_count(&l->client->t.stats, l->kind, l->names.name, cause);
        hl_stats_lost_trace(&l->client->t.stats, l->kind, l->names.name, tid, cause, silent_ms);
    }
}

int hl_lock_add_lost_hook(hilock_lock *l, hl_lost_hook_fn fn, void *payload)
{
    hl_lost_hook *h = calloc(1, sizeof *h);
    if (!h)
        return HILOCK_ENOMEM;
    h->fn = fn;
    h->payload = payload;
    pthread_mutex_lock(&l->hook_mu);
    h->next = l->hooks;
    l->hooks = h;
    pthread_mutex_unlock(&l->hook_mu);
    return 0;
}

void hl_lock_remove_lost_hook(hilock_lock *l, hl_lost_hook_fn fn, void *payload)
{
    pthread_mutex_lock(&l->hook_mu);
    for (hl_lost_hook **pp = &l->hooks; *pp; pp = &(*pp)->next) {
        if ((*pp)->fn == fn && (*pp)->payload == payload) {
            hl_lost_hook *h = *pp;
            *pp = h->next;
            free(h);
            break;
        }
    }
    pthread_mutex_unlock(&l->hook_mu);
}

/* Asked before the watchdog thread reported it (the process was stopped,
 * or that thread not scheduled yet, past the hold's doubt deadline): the
 * session's rule at this moment says whether the hold is lost or in doubt,
 * as hilock_async_is_lost does. */
static int wd_says_lost(hilock_lock *l, uint64_t tid, int any_tid)
{
    hl_transport *t = &l->client->t;
    return !hl_transport_forked(t) && hl_wd_is_lost(t, l, tid, any_tid, hl_now_mono_ms());
}

int hilock_lock_is_lost_tid(const hilock_lock *l, uint64_t tid)
{
    if (!l)
        return 0;
    hilock_lock *m = (hilock_lock *)l;
    pthread_mutex_lock(&m->mu);
    int found = 0;
    for (hl_lost_state *s = m->lost; s; s = s->next)
        found |= s->tid == tid;
    pthread_mutex_unlock(&m->mu);
    return found || wd_says_lost(m, tid, 0);
}

int hilock_lock_is_lost(const hilock_lock *l)
{
    if (!l)
        return 0;
    hilock_lock *m = (hilock_lock *)l;
    pthread_mutex_lock(&m->mu);
    int any = m->lost != NULL;
    pthread_mutex_unlock(&m->mu);
    return any || wd_says_lost(m, 0, 1);
}

void hilock_lock_set_lost_callback(hilock_lock *l, hilock_lost_cb cb, void *payload)
{
    if (!l)
        return;
    pthread_mutex_lock(&l->mu);
    l->lost_cb = cb;
    l->lost_payload = payload;
    pthread_mutex_unlock(&l->mu);
}

/* ---- acquire ---- */

static int check_lock(hilock_lock *l)
{
    if (!l)
        return HILOCK_EINVAL;
    char err[HL_ERRMSG_MAX];
    int rc = hl_client_check(l->client, err);
    return lock_fail(l, rc, err);
}

/* (l, tid) was just granted with this lease: forget an earlier loss, keep
 * the lease for partial unlocks, and keep the hold in the transport's
 * watchdog: renewed when the caller gave no lease, and either way listening
 * on its lock's channel (a fixed lease until it ends), so that a force
 * unlock is reported at once. */
static int granted(hilock_lock *l, uint64_t tid, int64_t lease, int watchdog, int64_t sent_at)
{
    clear_lost(l, tid);
    pthread_mutex_lock(&l->mu);
    l->errmsg[0] = 0;
    l->last_lease_ms = lease;
    if (!__atomic_load_n(&l->client->t.stats.off, __ATOMIC_RELAXED))
        hl_since_mark(&l->since, tid, hl_now_mono_ms());
    pthread_mutex_unlock(&l->mu);
    hl_err_forget(l);
    int rc = hl_wd_add(&l->client->t, l, l->kind, &l->names, tid, watchdog, lease, sent_at);
    return rc ? lock_fail(l, rc, "cannot start the watchdog") : 0;
}

static int release(hilock_lock *l, uint64_t tid, int64_t timeout_ms);
static int release_again(hilock_lock *l, uint64_t tid, const char *rid);

/* How long a latch (acquire or unlock) answers a request sent again: longer
 * than a retry after a lost reply can take (reconnect + command, twice). */
static int64_t latch_ttl(const hilock_client *c)
{
    return hl_acquire_latch_ttl(c->t.opts.command_timeout_ms, c->t.opts.connect_timeout_ms);
}

/* The acquire latch argument of one acquire call: "<key>:<seq>". The key is
 * one per owner (and latch epoch), the seq unique to the call, so the
 * owner's calls overwrite one latch instead of each creating a key the
 * server must later expire (lock.lua). */
static void latch_key(char *buf, size_t len, hilock_client *c, const hl_names *n,
                      const char *owner)
{
    uint64_t seq = __atomic_add_fetch(&c->t.request_seq, 1, __ATOMIC_RELAXED);
    uint64_t epoch = __atomic_load_n(&c->t.latch_epoch, __ATOMIC_RELAXED);
    if (hl_acquire_latch_arg(buf, len, n, owner, epoch, seq) != 0)
        buf[0] = 0; /* cannot happen: buf has room for the longest name */
}

/* An attempt's or a release's reply was lost (resent, settled or left to
 * the drain): a late copy of it may still reach the server. Later acquires
 * use another acquire latch key, so they cannot overwrite the answer (or the
 * "given up" mark) that copy must find. (The unlock latch is one per owner
 * whatever the epoch: its seq order refuses a late release copy.) */
static void latch_move_on(hilock_client *c, const hl_cmd *cmd)
{
    if (cmd->reply_lost || cmd->drained)
        __atomic_add_fetch(&c->t.latch_epoch, 1, __ATOMIC_RELAXED);
}

/* The acquire latch's lifetime in acquire_once: the latch outlives any hold
 * its grant made (lease), so that a settle sent after the call gave up on it
 * (resettle) still learns what the attempt took. */
static int64_t acquire_latch_ttl(const hilock_client *c, int64_t lease)
{
    int64_t ttl = latch_ttl(c);
    return lease > ttl ? lease : ttl;
}

/* Record an attempt of owner on name whose settling failed every try (the
 * session's rule, hl_unsettled_put): settled before the owner's next
 * acquire of the lock. No memory: it ends with its lease, as before. */
static void unsettled_acq_put(hilock_client *c, const char *name, const char *owner,
                              const char *latch, int64_t latch_ttl_ms, int64_t lease_ms)
{
    pthread_mutex_lock(&c->unsettled_mu);
    hl_unsettled_put(&c->unsettled, name, owner, latch, latch_ttl_ms, lease_ms, 0,
                     hl_now_mono_ms());
    pthread_mutex_unlock(&c->unsettled_mu);
}

/* Settle owner's earlier attempt u on l whose call gave up settling it
 * (hl_acquire_resettle): a grant it took is given back before the owner
 * enters again. u is marked settling (hl_unsettled_next), so nothing else
 * frees it meanwhile. 0, or an error (u stays recorded). */
static int resettle(hilock_lock *l, hl_unsettled_acq *u)
{
    hilock_client *c = l->client;
    hl_acquire a;
    int rc = hl_acquire_init(&a, l->kind, &l->names, u->owner, 0, u->lease_ms,
                             c->t.opts.fair_wait_window_ms, hl_now_mono_ms());
    if (rc == 0)
        rc = hl_acquire_set_latch(&a, u->latch, u->latch_ttl_ms);
    if (rc == 0) {
        hl_acquire_resettle(&a);
        while (hl_acquire_next(&a, hl_now_mono_ms()) == HL_ACT_SEND) {
            redisReply *reply = NULL;
            char err[HL_ERRMSG_MAX] = "";
            int erc = hl_exec(&c->t, &a.cmd, &reply, 0, err);
            if (erc && a.cmd.reply_lost)
                hl_acquire_on_reply_lost(&a, erc, hl_now_mono_ms());
            else if (erc)
                hl_acquire_on_error(&a, erc, hl_now_mono_ms());
            else {
                hl_acquire_on_reply(&a, reply, hl_now_mono_ms());
                freeReplyObject(reply);
            }
        }
        if (a.unsettled)
            rc = HILOCK_ECONN;
    }
    hl_acquire_free(&a);
    pthread_mutex_lock(&c->unsettled_mu);
    hl_unsettled_settle_end(&c->unsettled, u, rc == 0, hl_now_mono_ms());
    pthread_mutex_unlock(&c->unsettled_mu);
    if (rc == HILOCK_ECONN)
        lock_set_err(l, "an earlier acquire attempt of this thread on this lock could "
                        "not be settled (connection errors); not entered again");
    else if (rc)
        lock_set_err(l, "no memory to settle an earlier acquire attempt of this thread on "
                        "this lock; not entered again");
    return rc;
}

/* Before owner's acquire of l: every earlier attempt of theirs on it that
 * may have been granted and is not settled is settled first (the session
 * says which: hl_unsettled_next). 0, or an error with its message set. */
static int settle_earlier(hilock_lock *l, const char *owner)
{
    hilock_client *c = l->client;
    for (;;) {
        hl_unsettled_acq *u = NULL;
        pthread_mutex_lock(&c->unsettled_mu);
        hl_unsettled_step st =
            hl_unsettled_next(&c->unsettled, l->names.name, owner, hl_now_mono_ms(), &u);
        pthread_mutex_unlock(&c->unsettled_mu);
        if (st == HL_UNSETTLED_NONE)
            return 0;
        if (st == HL_UNSETTLED_WAIT) { /* the same thread id in two threads at once */
            lock_set_err(l, "an earlier acquire attempt of this thread id on this lock is "
                            "being settled by another call; not entered");
            return HILOCK_ECONN;
        }
        int rc = resettle(l, u);
        if (rc)
            return rc;
    }
}

int hilock_lock_cancel(int *cancelled, hilock_lock *l, uint64_t tid)
{
    if (cancelled)
        *cancelled = 0;
    if (!l)
        return HILOCK_EINVAL;
    int n = hl_pending_cancel(&l->mu, &l->pending, tid);
    if (cancelled)
        *cancelled = n > 0;
    return 0;
}

/* One run of the acquire machine; *acked tells whether the last attempt
 * was acknowledged by a replica (when the client asks for that). p (may be
 * NULL) is this call's entry for hilock_lock_cancel. */
static int acquire_once(hilock_lock *l, const char *owner, int64_t wait_ms, int64_t lease,
                        int *acked, char *err, int64_t *token, hl_pending *p,
                        int64_t *sent_at, int *path)
{
    int attempts = 0, woken = 0; /* for *path (HL_GRANT_*) */
    hilock_client *c = l->client;
    hl_acquire a;
    char latch[HL_NAME_MAX + HL_OWNER_MAX + 96];
    latch_key(latch, sizeof latch, c, &l->names, owner);
    if (hl_acquire_init(&a, l->kind, &l->names, owner, wait_ms, lease,
                        c->t.opts.fair_wait_window_ms, hl_now_mono_ms()) != 0)
        return HILOCK_ENOMEM;
    /* every kind, every topology: the latch is a declared KEY in the lock's
     * slot, so a migrating slot redirects (ASK) or answers TRYAGAIN before
     * the script runs, and the router handles both */
    if (hl_acquire_set_latch(&a, latch, acquire_latch_ttl(c, lease)) != 0) {
        hl_acquire_free(&a);
        return HILOCK_ENOMEM;
    }
    hl_wait_sub ws;
    hl_wait_sub_init(&ws, &c->t, &l->mu, p);
    for (int done = 0; !done;) {
        if (hl_pending_is_cancelled(p))
            hl_acquire_cancel(&a, hl_now_mono_ms()); /* idempotent */
        switch (hl_acquire_next(&a, hl_now_mono_ms())) {
        case HL_ACT_SEND: {
            redisReply *reply = NULL;
            int attempt = hl_cmd_is_attempt(&a.cmd);
            char serr[HL_ERRMSG_MAX];
            int settling = a.result != HILOCK_ETIMEDOUT && !attempt; /* keep the first error */
            if (attempt)
                *sent_at = hl_now_mono_ms();
            attempts += attempt;
            int erc = hl_exec_acked(&c->t, &a.cmd, &reply, 0, settling ? serr : err,
                                    attempt ? acked : NULL);
            if (attempt)
                latch_move_on(c, &a.cmd);
            if (erc && a.cmd.drained)
                hl_acquire_on_unknown(&a, erc, hl_now_mono_ms());
            else if (erc && a.cmd.reply_lost)
                hl_acquire_on_reply_lost(&a, erc, hl_now_mono_ms());
            else if (erc)
                hl_acquire_on_error(&a, erc, hl_now_mono_ms());
            else {
                if (!settling && reply->type == REDIS_REPLY_ERROR)
                    snprintf(err, HL_ERRMSG_MAX, "server error: %s", reply->str);
                hl_acquire_on_reply(&a, reply, hl_now_mono_ms());
                freeReplyObject(reply);
            }
            break;
        }
        case HL_ACT_SUBSCRIBE: {
            int ok = hl_wait_sub_subscribe(&ws, a.channel, HL_WAKE_LOCK, a.deadline);
            hl_acquire_on_subscribed(&a, ok, hl_now_mono_ms());
            break;
        }
        case HL_ACT_WAIT: {
            int64_t slept_from = hl_now_mono_ms();
            int moved = hl_wait_sub_sleep(&ws, a.sleep_ms);
            /* woken before its time: a message (or a cancel) ended the sleep */
            woken = a.sleep_ms < 0 || hl_now_mono_ms() - slept_from < a.sleep_ms;
            if (moved)
                hl_acquire_on_resubscribe(&a, hl_now_mono_ms());
            else
                hl_acquire_on_wake(&a, hl_now_mono_ms());
            break;
        }
        case HL_ACT_UNSUBSCRIBE:
            hl_wait_sub_unsubscribe(&ws);
            break;
        case HL_ACT_DONE:
            done = 1;
            break;
        }
    }
    hl_wait_sub_unsubscribe(&ws); /* no-op: the machine unsubscribed */
    if (a.unsettled)
        unsettled_acq_put(c, l->names.name, owner, latch, a.latch_ttl_ms, lease);
    int rc = a.result;
    *path = attempts <= 1 ? HL_GRANT_FIRST : woken ? HL_GRANT_WOKEN : HL_GRANT_RETRIED;
    *token = rc == 0 ? a.token : 0;
    hl_acquire_free(&a);
    return rc;
}

/* The session's rule for releases that got no answer (api.h,
 * proto_session.h hl_unsettled_rel_*): the client's record set, keyed by
 * the lock's name and the owner. */
void hl_lock_unsettled_put(hilock_lock *l, uint64_t tid, const char *rid, int64_t until)
{
    hilock_client *c = l->client;
    char owner[HL_OWNER_MAX];
    hl_hold_owner(owner, l->kind, c->t.id, tid);
    pthread_mutex_lock(&c->unsettled_mu);
    hl_unsettled_rel_put(&c->unsettled, l->names.name, owner, rid, until, hl_now_mono_ms());
    pthread_mutex_unlock(&c->unsettled_mu);
}

int hl_lock_unsettled_next(hilock_lock *l, uint64_t tid, char *rid, size_t rid_len, char *err,
                           size_t err_len)
{
    hilock_client *c = l->client;
    char owner[HL_OWNER_MAX];
    hl_hold_owner(owner, l->kind, c->t.id, tid);
    const char *r = NULL;
    int64_t until = 0, now = hl_now_mono_ms();
    pthread_mutex_lock(&c->unsettled_mu);
    hl_unsettled_step st = hl_unsettled_rel_next(&c->unsettled, l->names.name, owner, now, &r,
                                                 &until);
    int fits = st == HL_UNSETTLED_SETTLE && strlen(r) < rid_len;
    if (fits)
        memcpy(rid, r, strlen(r) + 1);
    pthread_mutex_unlock(&c->unsettled_mu);
    if (st == HL_UNSETTLED_NONE)
        return 0;
    if (fits)
        return 1;
    snprintf(err, err_len,
             "releases of lock '%.60s' by thread %" PRIu64 " got no answer and not all could be "
             "kept to be sent again; not entered until their lease ends (in %lld ms)",
             l->names.name, tid, (long long)(until > now ? until - now : 0));
    return HILOCK_ECONN;
}

void hl_lock_unsettled_end(hilock_lock *l, uint64_t tid, const char *rid, int rc)
{
    hilock_client *c = l->client;
    char owner[HL_OWNER_MAX];
    hl_hold_owner(owner, l->kind, c->t.id, tid);
    pthread_mutex_lock(&c->unsettled_mu);
    hl_unsettled_rel_end(&c->unsettled, l->names.name, owner, rid,
                         rc == 0 ? 1 : rc == HILOCK_ENOTOWNER ? 0 : -1, hl_now_mono_ms());
    pthread_mutex_unlock(&c->unsettled_mu);
}

static int acquire(hilock_lock *l, uint64_t tid, int64_t wait_ms, int64_t lease_ms,
                   int64_t *token_out)
{
    int64_t token = 0;
    if (token_out)
        *token_out = 0;
    int rc = check_lock(l);
    if (rc)
        return rc;
    if (hl_check_wait(wait_ms) || hl_check_lease(lease_ms))
        return lock_fail(l, HILOCK_EINVAL,
                         "wait must be -1, 0 or a positive ms count and lease -1, 0 or "
                         "positive, both at most HILOCK_MAX_TIME_MS");
    hilock_client *c = l->client;
    char again[HL_OWNER_MAX + 48], why[HL_ERRMSG_MAX];
    while ((rc = hl_lock_unsettled_next(l, tid, again, sizeof again, why, sizeof why)) == 1) {
        /* Re-entering now would stack a new hold on one that may still be
         * there (and the watchdog would renew both): each release that got
         * no answer first, under its own id (one that ran changes nothing).
         * Not owner = the holds are gone (released, or expired). */
        rc = release_again(l, tid, again);
        hl_lock_unsettled_end(l, tid, again, rc);
        if (rc != 0 && rc != HILOCK_ENOTOWNER)
            return rc; /* its message stands; the session keeps them all */
    }
    if (rc != 0)
        return lock_fail(l, rc, why); /* refused by the session */
    char owner[HL_OWNER_MAX];
    hl_hold_owner(owner, l->kind, c->t.id, tid);
    if ((rc = settle_earlier(l, owner)) != 0)
        return rc; /* its message is set */
    int64_t lease = lease_ms > 0 ? lease_ms : c->t.opts.watchdog_lease_ms;
    int64_t deadline = wait_ms < 0 ? -1 : hl_now_mono_ms() + wait_ms;
    char err[HL_ERRMSG_MAX] = "";
    int64_t sent_at = hl_now_mono_ms(), started = sent_at;
    int path = HL_GRANT_FIRST;
    hl_pending pend, *p = NULL;
    if (wait_ms != 0) { /* only a wait can be cancelled */
        p = &pend;
        hl_pending_add(&l->mu, &l->pending, p, tid);
    }
    for (;;) {
        int acked = 1;
        rc = acquire_once(l, owner, wait_ms < 0 ? -1 : hl_ms_left(deadline), lease, &acked,
                          err, &token, p, &sent_at, &path);
        if (rc != 0 || acked)
            break;
        hl_stats_add(&c->t.stats.replica_ack_failures, 1);
        /* Nobody replicated it, so a failover now would forget it: give it
         * back. A caller who may still wait tries again (right after a
         * failover the replicas need a moment to resynchronise). */
        pthread_mutex_lock(&l->mu);
        l->last_lease_ms = lease;
        pthread_mutex_unlock(&l->mu);
        release(l, tid, 0);
        snprintf(err, sizeof err,
                 "lock '%s' released again: no replica acknowledged it within %lld ms",
                 l->names.name, (long long)c->t.opts.replica_ack_timeout_ms);
        int64_t pause;
        if (!hl_ack_retry(wait_ms, deadline, hl_now_mono_ms(), &pause)) {
            if (p)
                hl_pending_remove(&l->mu, &l->pending, p);
            return lock_fail(l, HILOCK_EUNACKED, err);
        }
        if (hl_pending_is_cancelled(p)) {
            rc = HILOCK_ECANCELED;
            break;
        }
        struct timespec ts = {(time_t)(pause / 1000), (long)(pause % 1000) * 1000000L};
        nanosleep(&ts, NULL);
    }
    if (p)
        hl_pending_remove(&l->mu, &l->pending, p);
    hl_stats_acquired(&c->t.stats, l->kind, l->names.name, wait_ms, rc, path,
                      hl_now_mono_ms() - started);
    if (rc == 0) {
        rc = granted(l, tid, lease, lease_ms <= 0, sent_at);
        if (rc == 0 && token_out)
            *token_out = token;
        return rc;
    }
    if (rc == HILOCK_ETIMEDOUT)
        snprintf(err, sizeof err, "lock '%s' not acquired within %" PRId64 " ms", l->names.name,
                 wait_ms);
    else if (rc == HILOCK_EWRONGTYPE)
        snprintf(err, sizeof err, "key '%s' holds a value that is not a lock", l->names.name);
    else if (rc == HILOCK_ECANCELED)
        snprintf(err, sizeof err, "acquire of lock '%s' by thread %" PRIu64 " cancelled",
                 l->names.name, tid);
    return lock_fail(l, rc, err);
}

int hilock_lock_acquire(hilock_lock *l, int64_t wait_ms, int64_t lease_ms)
{
    return acquire(l, hilock_thread_id(), wait_ms, lease_ms, NULL);
}

int hilock_lock_acquire_tid(hilock_lock *l, uint64_t tid, int64_t wait_ms, int64_t lease_ms)
{
    return acquire(l, tid, wait_ms, lease_ms, NULL);
}

int hilock_lock_acquire_token(int64_t *token, hilock_lock *l, int64_t wait_ms, int64_t lease_ms)
{
    return acquire(l, hilock_thread_id(), wait_ms, lease_ms, token);
}

int hilock_lock_acquire_token_tid(int64_t *token, hilock_lock *l, uint64_t tid, int64_t wait_ms,
                                  int64_t lease_ms)
{
    return acquire(l, tid, wait_ms, lease_ms, token);
}

int hl_lock_try_begin(hilock_lock *l, uint64_t tid, int64_t lease_ms, int64_t line_window_ms,
                      hl_try *t)
{
    int rc = check_lock(l);
    if (rc)
        return rc;
    if (hl_check_lease(lease_ms))
        return lock_fail(l, HILOCK_EINVAL, "bad lease");
    hilock_client *c = l->client;
    hl_hold_owner(t->owner, l->kind, c->t.id, tid);
    t->lease = lease_ms > 0 ? lease_ms : c->t.opts.watchdog_lease_ms;
    latch_key(t->latch, sizeof t->latch, c, &l->names, t->owner);
    hl_cmd_acquire_latched(&t->cmd, l->kind, &l->names, t->owner, t->lease, line_window_ms,
                           t->latch, latch_ttl(c)); /* see acquire_once */
    t->sent_at = hl_now_mono_ms();
    return 0;
}

int hl_lock_try_end(hilock_lock *l, uint64_t tid, int64_t lease_ms, int64_t timeout_ms,
                    hl_try *t, int rc, redisReply *reply, const char *err_in, int64_t *ttl_ms)
{
    hilock_client *c = l->client;
    char err[HL_ERRMSG_MAX];
    snprintf(err, sizeof err, "%s", err_in ? err_in : "");
    latch_move_on(c, &t->cmd);
    if (rc == HILOCK_ECONN && t->cmd.reply_lost && !t->cmd.drained) {
        /* the connection died: the attempt may have run and its reply been
         * lost. Settle it (idempotent: tried a few times) */
        for (int k = 0; k < HL_SETTLE_TRIES; k++) {
            hl_cmd settle;
            char serr[HL_ERRMSG_MAX];
            hl_cmd_acquire_settle(&settle, t->latch, latch_ttl(c));
            redisReply *sr = NULL;
            int granted = 0, src = hl_exec(&c->t, &settle, &sr, timeout_ms, serr);
            if (src == 0 && hl_decode_acquire_settle(sr, &granted) == 0 && granted) {
                pthread_mutex_lock(&l->mu);
                l->last_lease_ms = t->lease;
                pthread_mutex_unlock(&l->mu);
                release(l, tid, timeout_ms);
            }
            if (sr)
                freeReplyObject(sr);
            if (src == 0)
                break;
        }
    }
    if (rc) {
        if (reply)
            freeReplyObject(reply);
        return lock_fail(l, rc, err);
    }
    hl_acquire_result res;
    rc = hl_decode_acquire_kind(l->kind, reply, &res);
    if (rc && reply->type == REDIS_REPLY_ERROR)
        snprintf(err, sizeof err, "server error: %s", reply->str);
    freeReplyObject(reply);
    if (rc)
        return lock_fail(l, rc, err);
    if (!res.acquired) {
        if (ttl_ms)
            *ttl_ms = res.ttl_ms;
        return HILOCK_ETIMEDOUT;
    }
    return granted(l, tid, t->lease, lease_ms <= 0, t->sent_at);
}

int hl_lock_try_once(hilock_lock *l, uint64_t tid, int64_t lease_ms, int64_t timeout_ms,
                     int64_t *ttl_ms)
{
    hl_try t;
    int rc = hl_lock_try_begin(l, tid, lease_ms, -1, &t);
    if (rc)
        return rc;
    char err[HL_ERRMSG_MAX] = "";
    redisReply *reply = NULL;
    rc = hl_exec(&l->client->t, &t.cmd, &reply, timeout_ms, err);
    return hl_lock_try_end(l, tid, lease_ms, timeout_ms, &t, rc, reply, err, ttl_ms);
}

/* ---- release ---- */

static int release_begin(hilock_lock *l, uint64_t tid, int64_t timeout_ms, const char *again,
                         hl_rel *r);

int hl_lock_release_begin(hilock_lock *l, uint64_t tid, int64_t timeout_ms, hl_rel *r)
{
    return release_begin(l, tid, timeout_ms, NULL, r);
}

int hl_lock_release_begin_again(hilock_lock *l, uint64_t tid, int64_t timeout_ms,
                                const char *rid, hl_rel *r)
{
    return release_begin(l, tid, timeout_ms, rid, r);
}

/* again NULL: a new release (a new request id); else the id of one sent
 * again */
static int release_begin(hilock_lock *l, uint64_t tid, int64_t timeout_ms, const char *again,
                         hl_rel *r)
{
    r->stopped = 0;
    r->begun = 0;
    r->tid = tid;
    r->err[0] = 0;
    r->rc = check_lock(l);
    if (r->rc)
        return r->rc;
    r->begun = 1;
    hilock_client *c = l->client;
    hl_hold_owner(r->owner, l->kind, c->t.id, tid);
    /* Stop renewing first (and wait out a renewal in flight), so that no
     * renewal can follow the final unlock. */
    r->confirmed_at = 0;
    r->stopped = hl_wd_release(&c->t, l, tid, &r->confirmed_at);
    /* "<client>:e<latch epoch>:<seq>": the engine keeps the answer in the
     * owner's unlock latch, and seq (one counter with the acquires') lets it
     * refuse a late copy of an older release (proto_release.c); the read-write
     * sides get a key per request, unique across clients */
    if (again && strlen(again) < sizeof r->rid) {
        memcpy(r->rid, again, strlen(again) + 1);
    } else {
        uint64_t seq = __atomic_add_fetch(&c->t.request_seq, 1, __ATOMIC_RELAXED);
        if (hl_release_request_id(r->rid, sizeof r->rid, c->t.id,
                                  __atomic_load_n(&c->t.latch_epoch, __ATOMIC_RELAXED),
                                  seq) != 0)
            snprintf(r->rid, sizeof r->rid, "%" PRIu64, seq); /* cannot happen */
    }
    pthread_mutex_lock(&l->mu);
    /* 0: the watchdog lease */
    int64_t lease = r->stopped == HL_WD_STOPPED ? 0 : l->last_lease_ms;
    pthread_mutex_unlock(&l->mu);
    int64_t now = hl_now_mono_ms();
    r->release_sent = now;
    r->rc = hl_release_init(&r->m, l->kind, &l->names, r->owner, lease,
                            c->t.opts.watchdog_lease_ms, r->rid, c->t.opts.command_timeout_ms,
                            timeout_ms, now);
    if (r->rc == 0 && hilock_lock_is_lost_tid(l, tid))
        hl_release_known_lost(&r->m); /* a fair unlock's "released" cannot be trusted */
    return r->rc;
}

int hl_lock_release_next(hilock_lock *l, hl_rel *r)
{
    (void)l;
    if (r->rc || hl_release_next(&r->m, hl_now_mono_ms()) != HL_ACT_SEND)
        return 0;
    r->release_sent = hl_now_mono_ms(); /* holds left: the lease applied again */
    return 1;
}

void hl_lock_release_feed(hilock_lock *l, hl_rel *r, int rc, redisReply *reply,
                          const char *err)
{
    latch_move_on(l->client, &r->m.cmd);
    if (err && *err)
        snprintf(r->err, sizeof r->err, "%s", err);
    if (rc) {
        if (reply)
            freeReplyObject(reply);
        hl_release_on_error(&r->m, rc, hl_now_mono_ms());
        return;
    }
    hl_release_on_reply(&r->m, reply, hl_now_mono_ms());
    if (r->m.refused[0]) /* the engine's words for an error answer */
        snprintf(r->err, sizeof r->err, "%s", r->m.refused);
    freeReplyObject(reply);
}

int hl_lock_release_end(hilock_lock *l, hl_rel *r)
{
    int rc = r->rc;
    if (!r->begun)
        return rc; /* check_lock failed (its message is set) */
    hilock_client *c = l->client;
    if (rc == 0)
        rc = r->m.result;
    int renew = r->m.renew, unconfirmed = r->m.unconfirmed && rc != 0;
    int known_lost = r->m.known_lost;
    int still_held = r->m.still_held;
    hl_release_free(&r->m);
    if ((rc == 0 && !still_held) || rc == HILOCK_ENOTOWNER) /* the hold is over */
        hl_stats_hold_end(&c->t.stats, &l->mu, &l->since, l->kind, l->names.name, r->tid,
                          rc == 0);
    /* holds remain, or the server refused: keep renewing (a fixed lease:
     * keep listening until it ends) */
    if (renew && r->stopped) {
        pthread_mutex_lock(&l->mu);
        int64_t fixed = l->last_lease_ms;
        pthread_mutex_unlock(&l->mu);
        hl_wd_add(&c->t, l, l->kind, &l->names, r->tid, r->stopped == HL_WD_STOPPED, fixed,
                  rc == 0 ? r->release_sent : r->confirmed_at);
    } else if (rc == 0 && still_held && !r->stopped) {
        /* a partial release applied the lease again: a fixed-lease hold
         * listens until its new end */
        pthread_mutex_lock(&l->mu);
        int64_t fixed = l->last_lease_ms;
        pthread_mutex_unlock(&l->mu);
        hl_wd_extended(&c->t, l, r->tid, fixed, r->release_sent);
    }
    if (unconfirmed) {
        /* No answer: the hold may be gone or not. Not renewed any more, it
         * ends at its lease at the latest (counted from the release: no
         * renewal followed it); the thread's next acquire completes the
         * release first (hl_lock_unsettled_next) instead of re-entering. */
        pthread_mutex_lock(&l->mu);
        /* the longest the key can live: taken with the last lease, or
         * renewed with the watchdog's */
        int64_t lease = c->t.opts.watchdog_lease_ms;
        if (l->last_lease_ms > lease)
            lease = l->last_lease_ms;
        pthread_mutex_unlock(&l->mu);
        hl_lock_unsettled_put(l, r->tid, r->rid, r->release_sent + lease);
        char why[HL_ERRMSG_MAX];
        snprintf(why, sizeof why, "%s", r->err[0] ? r->err : hilock_strerror(rc));
        snprintf(r->err, sizeof r->err,
                 "release of '%.60s' not confirmed (%.100s); renewal stopped: it ends at its "
                 "lease (%lld ms) at the latest",
                 l->names.name, why, (long long)lease);
    }
    if (rc == HILOCK_EWRONGTYPE)
        snprintf(r->err, sizeof r->err, "key '%s' holds a value that is not a lock",
                 l->names.name);
    else if (rc == HILOCK_ENOTOWNER && known_lost)
        snprintf(r->err, sizeof r->err,
                 "lock '%s' was lost before this release (found gone or in doubt); "
                 "not held by %s",
                 l->names.name, r->owner);
    else if (rc == HILOCK_ENOTOWNER)
        snprintf(r->err, sizeof r->err, "lock '%s' is not held by %s", l->names.name,
                 r->owner);
    return lock_fail(l, rc, r->err);
}

static int release_as(hilock_lock *l, uint64_t tid, int64_t timeout_ms, const char *again)
{
    hl_rel r;
    memset(&r, 0, sizeof r);
    if (release_begin(l, tid, timeout_ms, again, &r) == 0)
        while (hl_lock_release_next(l, &r)) {
            redisReply *reply = NULL;
            char err[HL_ERRMSG_MAX] = "";
            int acked = 1; /* a release without replica ack is still a release */
            int erc = hl_exec_acked(&l->client->t, &r.m.cmd, &reply, r.m.timeout_ms, err, &acked);
            hl_lock_release_feed(l, &r, erc, reply, err);
        }
    return hl_lock_release_end(l, &r);
}

/* A new release of tid not sent because an earlier one, sent again first,
 * got no answer again (rc): it goes out after that one, before the
 * thread's next acquire (the session's rule), as a release that got no
 * answer: its hold (renewal stopped by the earlier one) ends at its lease
 * at the latest. */
static int release_deferred(hilock_lock *l, uint64_t tid, int rc)
{
    hilock_client *c = l->client;
    char rid[HL_OWNER_MAX + 48];
    uint64_t seq = __atomic_add_fetch(&c->t.request_seq, 1, __ATOMIC_RELAXED);
    if (hl_release_request_id(rid, sizeof rid, c->t.id,
                              __atomic_load_n(&c->t.latch_epoch, __ATOMIC_RELAXED), seq) != 0)
        snprintf(rid, sizeof rid, "%" PRIu64, seq); /* cannot happen */
    pthread_mutex_lock(&l->mu);
    int64_t lease = c->t.opts.watchdog_lease_ms;
    if (l->last_lease_ms > lease)
        lease = l->last_lease_ms;
    pthread_mutex_unlock(&l->mu);
    hl_lock_unsettled_put(l, tid, rid, hl_now_mono_ms() + lease);
    char msg[HL_ERRMSG_MAX];
    snprintf(msg, sizeof msg,
             "release of '%.60s' not sent: an earlier release of this thread got no answer "
             "again; sent after it, before the next acquire; renewal stopped: it ends at its "
             "lease (%lld ms) at the latest",
             l->names.name, (long long)lease);
    return lock_fail(l, rc, msg);
}

static int release(hilock_lock *l, uint64_t tid, int64_t timeout_ms)
{
    /* The thread's earlier releases of l that got no answer go first, each
     * under its own id (the session's rule, hl_lock_unsettled_next): sent
     * after this one, they would find its higher seq in the owner's unlock
     * latch and be refused as late copies (unlock.lua), leaving a hold. */
    char again[HL_OWNER_MAX + 48], why[HL_ERRMSG_MAX];
    while (check_lock(l) == 0 &&
           hl_lock_unsettled_next(l, tid, again, sizeof again, why, sizeof why) == 1) {
        int rc = release_again(l, tid, again);
        hl_lock_unsettled_end(l, tid, again, rc);
        if (rc != 0 && rc != HILOCK_ENOTOWNER)
            return release_deferred(l, tid, rc);
    }
    return release_as(l, tid, timeout_ms, NULL);
}

/* A release that got no answer, sent again under its own request id. */
static int release_again(hilock_lock *l, uint64_t tid, const char *rid)
{
    return release_as(l, tid, 0, rid);
}

int hilock_lock_release(hilock_lock *l)
{
    return release(l, hilock_thread_id(), 0);
}

int hilock_lock_release_tid(hilock_lock *l, uint64_t tid)
{
    return release(l, tid, 0);
}

int hl_lock_release_timeout(hilock_lock *l, uint64_t tid, int64_t timeout_ms)
{
    return release(l, tid, timeout_ms);
}

/* ---- force unlock and queries ---- */

/* decode: hl_decode_flag, hl_decode_hold_count or hl_decode_pttl. */
static int run_int(hilock_lock *l, hl_cmd *cmd, int64_t *out,
                   int (*decode)(const redisReply *, int64_t *))
{
    char err[HL_ERRMSG_MAX] = "";
    redisReply *reply = NULL;
    int rc = hl_exec(&l->client->t, cmd, &reply, 0, err);
    if (rc)
        return lock_fail(l, rc, err);
    rc = decode(reply, out);
    if (rc == HILOCK_EWRONGTYPE)
        snprintf(err, sizeof err, "key '%s' holds a value that is not a lock", l->names.name);
    else if (rc && reply->type == REDIS_REPLY_ERROR)
        snprintf(err, sizeof err, "server error: %s", reply->str);
    freeReplyObject(reply);
    return lock_fail(l, rc, err);
}

int hilock_lock_force_unlock(int *deleted, hilock_lock *l)
{
    int rc = check_lock(l);
    if (rc)
        return rc;
    hl_cmd cmd;
    hl_cmd_force(&cmd, l->kind, &l->names);
    int64_t v = 0;
    rc = run_int(l, &cmd, &v, hl_decode_flag);
    if (rc == 0 && deleted)
        *deleted = v != 0;
    return rc;
}

static int decode_locked_read(const redisReply *r, int64_t *out)
{
    return hl_decode_is_locked(HILOCK_KIND_READ, r, out);
}

static int decode_locked_write(const redisReply *r, int64_t *out)
{
    return hl_decode_is_locked(HILOCK_KIND_WRITE, r, out);
}

int hilock_lock_is_locked(int *out, hilock_lock *l)
{
    int rc = check_lock(l);
    if (rc)
        return rc;
    if (!out)
        return lock_fail(l, HILOCK_EINVAL, "out is NULL");
    hl_cmd cmd;
    hl_cmd_is_locked(&cmd, l->kind, &l->names);
    int64_t v = 0;
    rc = run_int(l, &cmd, &v,
                 l->kind == HILOCK_KIND_READ    ? decode_locked_read
                 : l->kind == HILOCK_KIND_WRITE ? decode_locked_write
                                                : hl_decode_flag);
    if (rc == 0)
        *out = v != 0;
    return rc;
}

int hilock_lock_is_held_tid(int *out, hilock_lock *l, uint64_t tid)
{
    int rc = check_lock(l);
    if (rc)
        return rc;
    if (!out)
        return lock_fail(l, HILOCK_EINVAL, "out is NULL");
    char owner[HL_OWNER_MAX];
    hl_hold_owner(owner, l->kind, l->client->t.id, tid);
    hl_cmd cmd;
    hl_cmd_hexists(&cmd, &l->names, owner);
    int64_t v = 0;
    rc = run_int(l, &cmd, &v, hl_decode_flag);
    if (rc == 0)
        *out = v != 0;
    return rc;
}

int hilock_lock_is_held(int *out, hilock_lock *l)
{
    return hilock_lock_is_held_tid(out, l, hilock_thread_id());
}

int hilock_lock_extend_tid(hilock_lock *l, uint64_t tid, int64_t add_ms)
{
    int rc = check_lock(l);
    if (rc)
        return rc;
    if (l->kind == HILOCK_KIND_READ || l->kind == HILOCK_KIND_WRITE)
        return lock_fail(l, HILOCK_EINVAL, "extend: not for read-write lock sides");
    if (add_ms <= 0 || add_ms > HILOCK_MAX_TIME_MS)
        return lock_fail(l, HILOCK_EINVAL, "extend: the time to add must be > 0 ms");
    char owner[HL_OWNER_MAX], err[HL_ERRMSG_MAX];
    hl_hold_owner(owner, l->kind, l->client->t.id, tid);
    hl_cmd cmd;
    hl_cmd_extend(&cmd, &l->names, owner, add_ms);
    int64_t v = 0;
    rc = run_int(l, &cmd, &v, hl_decode_extend);
    if (rc)
        return rc;
    if (v == 0) {
        snprintf(err, sizeof err, "lock '%s' is not held by %s", l->names.name, owner);
        return lock_fail(l, HILOCK_ENOTOWNER, err);
    }
    if (v < 0) {
        snprintf(err, sizeof err, "lock '%s' has no expiry to extend", l->names.name);
        return lock_fail(l, HILOCK_EINVAL, err);
    }
    return 0;
}

int hilock_lock_extend(hilock_lock *l, int64_t add_ms)
{
    return hilock_lock_extend_tid(l, hilock_thread_id(), add_ms);
}

int hilock_lock_hold_count_tid(int64_t *out, hilock_lock *l, uint64_t tid)
{
    int rc = check_lock(l);
    if (rc)
        return rc;
    if (!out)
        return lock_fail(l, HILOCK_EINVAL, "out is NULL");
    char owner[HL_OWNER_MAX];
    hl_hold_owner(owner, l->kind, l->client->t.id, tid);
    hl_cmd cmd;
    hl_cmd_hget(&cmd, &l->names, owner);
    return run_int(l, &cmd, out, hl_decode_hold_count);
}

int hilock_lock_hold_count(int64_t *out, hilock_lock *l)
{
    return hilock_lock_hold_count_tid(out, l, hilock_thread_id());
}

int hilock_lock_token(int64_t *out, hilock_lock *l)
{
    int rc = check_lock(l);
    if (rc)
        return rc;
    if (!out)
        return lock_fail(l, HILOCK_EINVAL, "out is NULL");
    hl_cmd cmd;
    hl_cmd_token(&cmd, &l->names);
    return run_int(l, &cmd, out, hl_decode_token);
}

int hilock_lock_remaining_ms(int64_t *out, hilock_lock *l)
{
    int rc = check_lock(l);
    if (rc)
        return rc;
    if (!out)
        return lock_fail(l, HILOCK_EINVAL, "out is NULL");
    hl_cmd cmd;
    hl_cmd_pttl(&cmd, &l->names);
    return run_int(l, &cmd, out, hl_decode_pttl);
}
