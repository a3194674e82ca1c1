/* Semaphore, permit-expirable semaphore and count-down latch handles. Every
 * call but the waits is the hilock_async operation of the same name
 * (async_sem.c: the engine's builders and decoders) run to its end on one
 * of the client's private hilock_async instances from the calling thread's
 * poll loop (easy.c); the waits run the engine's wait machine (proto_sem.c)
 * over the pool and the pub/sub listener. No decision is taken here. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api.h"


/* What the three handles share. */
typedef struct hl_obj {
    hilock_client *client;
    hl_sem_kind kind;
    hl_sem_names names;
    pthread_mutex_t mu;  /* guards errmsg and pending */
    hl_pending *pending; /* waiting calls, for _cancel */
    char errmsg[HL_ERRMSG_MAX];
} hl_obj;

struct hilock_semaphore {
    hl_obj o;
};
/* A permit kept by the client's watchdog (hilock_permit_semaphore_keep):
 * the holder of its watchdog entry, (kept, 0). */
typedef struct hl_kept {
    struct hl_kept *next;
    hilock_permit_semaphore *s;
    hl_names names; /* the semaphore's, as the engine's permit hold reads
                       them (HL_KIND_PERMIT); its strings are s's */
    char id[HILOCK_PERMIT_ID_SIZE];
    hilock_permit_lost_cb cb;
    void *payload;
} hl_kept;

struct hilock_permit_semaphore {
    hl_obj o;
    hl_kept *kept; /* under o.mu */
};
struct hilock_latch {
    hl_obj o;
};

static const char *what(const hl_obj *o)
{
    return o->kind == HL_SEM_LATCH ? "latch" : "semaphore";
}

static int obj_fail(hl_obj *o, int rc, const char *detail)
{
    if (!rc || !o)
        return rc;
    const char *msg = detail && *detail ? detail : hilock_strerror(rc);
    pthread_mutex_lock(&o->mu);
    snprintf(o->errmsg, sizeof o->errmsg, "%s", msg);
    pthread_mutex_unlock(&o->mu);
    hl_err_note(o, msg);
    return rc;
}

static int obj_init(hl_obj *o, hilock_client *c, const char *name, hl_sem_kind kind)
{
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
    if ((rc = hl_sem_names_init(&o->names, kind, name)) != 0)
        return rc;
    if (c->t.ep.cluster && !hl_sem_names_one_slot(&o->names)) {
        hl_client_set_err(c, "name has an empty or unclosed hash tag ('{}', 'x{y'): on a "
                             "cluster its companion keys would land in another slot");
        hl_sem_names_free(&o->names);
        return HILOCK_EINVAL;
    }
    if (c->t.ep.cluster)
        o->names.publish = "spublish";
    pthread_mutex_init(&o->mu, NULL);
    o->client = c;
    o->kind = kind;
    hl_client_ref(c);
    hl_err_forget(o);
    return 0;
}

static void obj_free(hl_obj *o)
{
    hl_err_forget(o);
    hilock_client *c = o->client;
    hl_sem_names_free(&o->names);
    if (!hl_transport_forked(&c->t)) /* a child after fork() only frees memory */
        pthread_mutex_destroy(&o->mu);
    hl_client_unref(c);
}

static int obj_check(hl_obj *o)
{
    if (!o)
        return HILOCK_EINVAL;
    char err[HL_ERRMSG_MAX];
    int rc = hl_client_check(o->client, err);
    return obj_fail(o, rc, err);
}

static const char *obj_errmsg(const hl_obj *o)
{
    if (!o)
        return "handle is NULL";
    hl_obj *m = (hl_obj *)o;
    return hl_err_view(o, &m->mu, m->errmsg);
}

/* ---- the blocking calls: hilock_async's operations driven by easy.c ----
 * Every verb but the waits (acquires, await), which still run obj_wait
 * below over the pool and the pub/sub listener (docs/architecture.md, "One
 * C transport": what they need first). */

enum { V_COUNT, V_RELEASE, V_PES_RELEASE, V_PES_UPDATE, V_COUNT_DOWN };

/* One blocking call: which hilock_async operation, with its arguments. */
typedef struct verb {
    int what;
    hl_obj *o; /* the handle (it begins with its hl_obj) */
    int64_t permits, lease_ms, arg;
    hilock_count_op op;
    const char *id; /* permit release, lease update */
} verb;

static int verb_start(hilock_async *a, void *arg, hilock_async_cb cb, void *payload)
{
    verb *v = arg;
    void *h = v->o;
    hl_sem_kind kind = v->o->kind;
    switch (v->what) {
    case V_COUNT:
        if (kind == HL_SEM_LATCH)
            return hilock_async_latch_count_op(a, h, v->op, v->arg, cb, payload);
        if (kind == HL_SEM_PERMIT)
            return hilock_async_permit_semaphore_count_op(a, h, v->op, v->arg, cb, payload);
        return hilock_async_semaphore_count_op(a, h, v->op, v->arg, cb, payload);
    case V_RELEASE:
        return hilock_async_semaphore_release(a, h, v->permits, cb, payload);
    case V_PES_RELEASE:
        return hilock_async_permit_semaphore_release(a, h, v->id, cb, payload);
    case V_PES_UPDATE:
        return hilock_async_permit_semaphore_update_lease(a, h, v->id, v->lease_ms, cb,
                                                          payload);
    default:
        return hilock_async_latch_count_down(a, h, cb, payload);
    }
}

/* Run v to its end on a private hilock_async (easy.c); *out (may be NULL):
 * the operation's value. */
static int obj_do(verb *v, int64_t *out)
{
    hl_obj *o = v->o;
    int rc = obj_check(o);
    if (rc)
        return rc;
    char err[HL_ERRMSG_MAX] = "";
    int64_t value = 0;
    rc = hl_easy_run(o->client, verb_start, v, &value, err);
    if (rc)
        return obj_fail(o, rc, err);
    if (out)
        *out = value;
    return 0;
}

static int obj_count_op(hl_obj *o, hilock_count_op op, int64_t arg, int64_t *out)
{
    verb v = {.what = V_COUNT, .o = o, .op = op, .arg = arg};
    return obj_do(&v, out);
}

void hl_sem_view_of(const void *h, hl_sem_view *v)
{
    const hl_obj *o = &((const hilock_semaphore *)h)->o; /* the three begin alike */
    v->client = o->client;
    v->names = &o->names;
}

/* ---- cancellation (as hilock_lock_cancel) ---- */

static int obj_cancel(int *cancelled, hl_obj *o, uint64_t tid)
{
    if (cancelled)
        *cancelled = 0;
    if (!o)
        return HILOCK_EINVAL;
    int n = hl_pending_cancel(&o->mu, &o->pending, tid);
    if (cancelled)
        *cancelled = n > 0;
    return 0;
}

/* ---- the wait (acquire k, acquire with ids, await) ---- */

int hl_sem_wait_latch(hl_semwait *m, hilock_client *c, uint64_t tid)
{
    /* the owner's request latch: a resend after a lost reply takes nothing
     * twice, and a lost acquire is settled (proto_sem.c) */
    char owner[HL_OWNER_MAX], latch[HL_NAME_MAX + HL_OWNER_MAX + 96];
    hl_owner(owner, c->t.id, tid);
    uint64_t seq = __atomic_add_fetch(&c->t.request_seq, 1, __ATOMIC_RELAXED);
    uint64_t epoch = __atomic_load_n(&c->t.latch_epoch, __ATOMIC_RELAXED);
    int rc = hl_sem_latch_arg(latch, sizeof latch, m->names, owner, epoch, seq);
    return rc ? rc
              : hl_semwait_set_latch(m, latch,
                                     hl_acquire_latch_ttl(c->t.opts.command_timeout_ms,
                                                          c->t.opts.connect_timeout_ms));
}

static int obj_wait(hl_obj *o, uint64_t tid, int64_t permits, int64_t lease_ms,
                    const unsigned char *ids, int64_t wait_ms)
{
    hilock_client *c = o->client;
    hl_semwait m;
    char err[HL_ERRMSG_MAX] = "";
    if (hl_semwait_init(&m, o->kind, &o->names, permits, lease_ms, ids, wait_ms,
                        hl_now_mono_ms()) != 0)
        return obj_fail(o, HILOCK_EINVAL,
                        "permits must be 1..2147483647, wait -1, 0 or a positive ms count");
    if (o->kind == HL_SEM_SEMAPHORE) {
        int lrc = hl_sem_wait_latch(&m, c, tid);
        if (lrc)
            return obj_fail(o, lrc == HILOCK_ENOMEM ? lrc : HILOCK_EINVAL, "request latch");
    }
    hl_pending pend, *p = NULL;
    if (wait_ms != 0) {
        p = &pend;
        hl_pending_add(&o->mu, &o->pending, p, tid);
    }
    hl_wait_sub ws;
    hl_wait_sub_init(&ws, &c->t, &o->mu, p);
    for (int done = 0; !done;) {
        if (p && __atomic_load_n(&p->cancelled, __ATOMIC_ACQUIRE))
            hl_semwait_cancel(&m, hl_now_mono_ms());
        switch (hl_semwait_next(&m, hl_now_mono_ms())) {
        case HL_ACT_SEND: {
            redisReply *reply = NULL;
            int erc = hl_exec(&c->t, &m.cmd, &reply, 0, err);
            if (m.cmd.reply_lost || m.cmd.drained) /* a late copy may still come: */
                __atomic_add_fetch(&c->t.latch_epoch, 1, __ATOMIC_RELAXED); /* new latch key */
            if (erc) {
                hl_semwait_on_error(&m, erc, hl_now_mono_ms());
            } else {
                if (reply->type == REDIS_REPLY_ERROR)
                    snprintf(err, sizeof err, "server error: %s", reply->str);
                hl_semwait_on_reply(&m, reply, hl_now_mono_ms());
                freeReplyObject(reply);
            }
            break;
        }
        case HL_ACT_SUBSCRIBE: {
            int ok = hl_wait_sub_subscribe(&ws, m.channel, hl_sem_wake_rule(o->kind),
                                           m.deadline);
            hl_semwait_on_subscribed(&m, ok, hl_now_mono_ms());
            break;
        }
        case HL_ACT_WAIT:
            if (hl_wait_sub_sleep(&ws, m.sleep_ms))
                hl_semwait_on_resubscribe(&m, hl_now_mono_ms());
            else
                hl_semwait_on_wake(&m, hl_now_mono_ms());
            break;
        case HL_ACT_UNSUBSCRIBE:
            hl_wait_sub_unsubscribe(&ws);
            break;
        case HL_ACT_DONE:
            done = 1;
            break;
        }
    }
    /* A subscription the server never confirmed (HILOCK_ETIMEDOUT/ECONN)
     * stays registered, but the machine does not ask to drop it: the waiter
     * must not stay on the channel's list once this frame is gone. */
    hl_wait_sub_unsubscribe(&ws);
    if (p)
        hl_pending_remove(&o->mu, &o->pending, p);
    hl_semwait_free(&m);
    int rc = m.result;
    if (rc == 0) {
        pthread_mutex_lock(&o->mu);
        o->errmsg[0] = 0;
        pthread_mutex_unlock(&o->mu);
        hl_err_forget(o);
        return 0;
    }
    if (rc == HILOCK_ETIMEDOUT && o->kind == HL_SEM_LATCH)
        snprintf(err, sizeof err, "latch '%s' still at %" PRId64 " after %" PRId64 " ms",
                 o->names.name, m.count, wait_ms);
    else if (rc == HILOCK_ETIMEDOUT)
        snprintf(err, sizeof err, "%" PRId64 " permit(s) of semaphore '%s' not free within %" PRId64
                 " ms", permits, o->names.name, wait_ms);
    else if (rc == HILOCK_EWRONGTYPE)
        snprintf(err, sizeof err, "key '%s' holds a value that is not a %s", o->names.name,
                 what(o));
    else if (rc == HILOCK_ECANCELED)
        snprintf(err, sizeof err, "wait on %s '%s' by thread %" PRIu64 " cancelled", what(o),
                 o->names.name, tid);
    return obj_fail(o, rc, err);
}

/* ---- shared verbs ---- */

static int obj_try_set(int *set, hl_obj *o, int64_t count)
{
    if (set)
        *set = 0;
    int64_t v = 0;
    int rc = obj_count_op(o, HILOCK_COUNT_TRY_SET, count, &v);
    if (rc == 0 && set)
        *set = v == 1;
    return rc;
}

static int obj_count(int64_t *out, hl_obj *o)
{
    if (o && !out)
        return obj_fail(o, HILOCK_EINVAL, "out is NULL");
    return obj_count_op(o, HILOCK_COUNT_GET, 0, out);
}

static int obj_delete(int *deleted, hl_obj *o)
{
    if (deleted)
        *deleted = 0;
    int64_t v = 0;
    int rc = obj_count_op(o, HILOCK_COUNT_DELETE, 0, &v);
    if (rc == 0 && deleted)
        *deleted = v == 1;
    return rc;
}

/* ---- semaphore ---- */

int hilock_semaphore_new(hilock_semaphore **out, hilock_client *c, const char *name)
{
    if (!out)
        return HILOCK_EINVAL;
    *out = NULL;
    hilock_semaphore *s = calloc(1, sizeof *s);
    if (!s)
        return HILOCK_ENOMEM;
    int rc = obj_init(&s->o, c, name, HL_SEM_SEMAPHORE);
    if (rc) {
        free(s);
        return rc;
    }
    *out = s;
    return 0;
}

void hilock_semaphore_free(hilock_semaphore *s)
{
    if (!s)
        return;
    obj_free(&s->o);
    free(s);
}

const char *hilock_semaphore_name(const hilock_semaphore *s)
{
    return s ? s->o.names.name : NULL;
}

int hilock_semaphore_try_set_permits(int *set, hilock_semaphore *s, int64_t permits)
{
    return obj_try_set(set, s ? &s->o : NULL, permits);
}

int hilock_semaphore_acquire_tid(hilock_semaphore *s, uint64_t tid, int64_t permits,
                                 int64_t wait_ms)
{
    int rc = obj_check(s ? &s->o : NULL);
    return rc ? rc : obj_wait(&s->o, tid, permits, 0, NULL, wait_ms);
}

int hilock_semaphore_acquire(hilock_semaphore *s, int64_t permits, int64_t wait_ms)
{
    return hilock_semaphore_acquire_tid(s, hilock_thread_id(), permits, wait_ms);
}

int hilock_semaphore_release(hilock_semaphore *s, int64_t permits)
{
    verb v = {.what = V_RELEASE, .o = s ? &s->o : NULL, .permits = permits};
    return obj_do(&v, NULL);
}

int hilock_semaphore_available(int64_t *out, hilock_semaphore *s)
{
    return obj_count(out, s ? &s->o : NULL);
}

int hilock_semaphore_drain(int64_t *drained, hilock_semaphore *s)
{
    if (drained)
        *drained = 0;
    return obj_count_op(s ? &s->o : NULL, HILOCK_COUNT_DRAIN, 0, drained);
}

int hilock_semaphore_add_permits(hilock_semaphore *s, int64_t delta)
{
    return obj_count_op(s ? &s->o : NULL, HILOCK_COUNT_ADD, delta, NULL);
}

int hilock_semaphore_set_permits(hilock_semaphore *s, int64_t permits)
{
    return obj_count_op(s ? &s->o : NULL, HILOCK_COUNT_SET, permits, NULL);
}

int hilock_semaphore_delete(int *deleted, hilock_semaphore *s)
{
    return obj_delete(deleted, s ? &s->o : NULL);
}

int hilock_semaphore_cancel(int *cancelled, hilock_semaphore *s, uint64_t tid)
{
    return obj_cancel(cancelled, s ? &s->o : NULL, tid);
}

const char *hilock_semaphore_errmsg(const hilock_semaphore *s)
{
    return obj_errmsg(s ? &s->o : NULL);
}

/* ---- permit-expirable semaphore ---- */

int hilock_permit_semaphore_new(hilock_permit_semaphore **out, hilock_client *c,
                                const char *name)
{
    if (!out)
        return HILOCK_EINVAL;
    *out = NULL;
    hilock_permit_semaphore *s = calloc(1, sizeof *s);
    if (!s)
        return HILOCK_ENOMEM;
    int rc = obj_init(&s->o, c, name, HL_SEM_PERMIT);
    if (rc) {
        free(s);
        return rc;
    }
    *out = s;
    return 0;
}

/* Stop keeping k (its renewal, listening, and a loss report about it
 * still to come or running) and free it; k is unlinked already. */
static void kept_free(hilock_permit_semaphore *s, hl_kept *k)
{
    hl_transport *t = &s->o.client->t;
    if (!hl_transport_forked(t) && !__atomic_load_n(&t->closed, __ATOMIC_ACQUIRE))
        hl_wd_forget_lock(t, k);
    free(k);
}

/* The kept record of id, unlinked, or NULL. */
static hl_kept *kept_take(hilock_permit_semaphore *s, const char *id)
{
    pthread_mutex_lock(&s->o.mu);
    hl_kept *found = NULL;
    for (hl_kept **pp = &s->kept; *pp; pp = &(*pp)->next) {
        if (strcmp((*pp)->id, id) == 0) {
            found = *pp;
            *pp = found->next;
            break;
        }
    }
    pthread_mutex_unlock(&s->o.mu);
    return found;
}

void hl_permit_lost_sink(void *holder)
{
    hl_kept *k = holder; /* lives until its report is over (kept_free waits) */
    if (k->cb)
        k->cb(k->s, k->id, k->payload);
}

void hilock_permit_semaphore_free(hilock_permit_semaphore *s)
{
    if (!s)
        return;
    while (s->kept) {
        hl_kept *k = s->kept;
        s->kept = k->next;
        kept_free(s, k);
    }
    obj_free(&s->o);
    free(s);
}

const char *hilock_permit_semaphore_name(const hilock_permit_semaphore *s)
{
    return s ? s->o.names.name : NULL;
}

int hilock_permit_semaphore_try_set_permits(int *set, hilock_permit_semaphore *s,
                                            int64_t permits)
{
    return obj_try_set(set, s ? &s->o : NULL, permits);
}

/* 16 random bytes (the kernel's), as Redisson's generateId. */
int hl_pes_random_id(unsigned char id[HL_PES_ID_BYTES])
{
    char u[HL_UUID_LEN + 1];
    if (hl_uuid4(u) != 0)
        return -1;
    /* the uuid's 32 hex digits without dashes: 122 random bits */
    char hex[2 * HL_PES_ID_BYTES + 1];
    size_t k = 0;
    for (size_t i = 0; u[i] && k < sizeof hex - 1; i++)
        if (u[i] != '-')
            hex[k++] = u[i];
    hex[k] = 0;
    return hl_pes_id_parse(id, hex) == 0 ? 0 : -1;
}

int hilock_permit_semaphore_acquire_tid(char *id, hilock_permit_semaphore *s, uint64_t tid,
                                        int64_t wait_ms, int64_t lease_ms)
{
    if (id)
        id[0] = 0;
    int rc = obj_check(s ? &s->o : NULL);
    if (rc)
        return rc;
    if (!id)
        return obj_fail(&s->o, HILOCK_EINVAL, "id is NULL");
    if (lease_ms < 0)
        lease_ms = 0;
    if (hl_check_lease(lease_ms))
        return obj_fail(&s->o, HILOCK_EINVAL, "lease must be at most HILOCK_MAX_TIME_MS");
    unsigned char raw[HL_PES_ID_BYTES];
    if (hl_pes_random_id(raw) != 0)
        return obj_fail(&s->o, HILOCK_EPROTO, "no random bytes for a permit id");
    rc = obj_wait(&s->o, tid, 1, lease_ms, raw, wait_ms);
    if (rc == 0)
        hl_pes_id_hex(id, raw);
    return rc;
}

int hilock_permit_semaphore_acquire(char *id, hilock_permit_semaphore *s, int64_t wait_ms,
                                    int64_t lease_ms)
{
    return hilock_permit_semaphore_acquire_tid(id, s, hilock_thread_id(), wait_ms, lease_ms);
}

int hilock_permit_semaphore_release(hilock_permit_semaphore *s, const char *id)
{
    int rc = obj_check(s ? &s->o : NULL);
    if (rc)
        return rc;
    unsigned char raw[HL_PES_ID_BYTES];
    if (hl_pes_id_parse(raw, id) != 0)
        return obj_fail(&s->o, HILOCK_EINVAL, "a permit id is 32 hex characters");
    /* kept: its renewal stops first (one in flight is waited for), so that
     * no renewal follows the release */
    char hex[HILOCK_PERMIT_ID_SIZE];
    hl_pes_id_hex(hex, raw);
    hl_kept *k = kept_take(s, hex);
    if (k)
        kept_free(s, k);
    verb v = {.what = V_PES_RELEASE, .o = &s->o, .id = id};
    return obj_do(&v, NULL);
}

int hilock_permit_semaphore_update_lease(hilock_permit_semaphore *s, const char *id,
                                         int64_t lease_ms)
{
    verb v = {.what = V_PES_UPDATE, .o = s ? &s->o : NULL, .id = id, .lease_ms = lease_ms};
    return obj_do(&v, NULL);
}

int hilock_permit_semaphore_keep(hilock_permit_semaphore *s, const char *id, int64_t lease_ms,
                                 hilock_permit_lost_cb cb, void *payload)
{
    int rc = obj_check(s ? &s->o : NULL);
    if (rc)
        return rc;
    unsigned char raw[HL_PES_ID_BYTES];
    if (!id || hl_pes_id_parse(raw, id) != 0)
        return obj_fail(&s->o, HILOCK_EINVAL, "a permit id is 32 hex characters");
    if (lease_ms < 0 || hl_check_lease(lease_ms))
        return obj_fail(&s->o, HILOCK_EINVAL, "lease must be 0 (the watchdog's) or > 0 ms");
    hl_transport *t = &s->o.client->t;
    int watchdog = lease_ms == 0;
    int64_t lease = watchdog ? t->opts.watchdog_lease_ms : lease_ms;
    hl_kept *k = calloc(1, sizeof *k);
    if (!k)
        return obj_fail(&s->o, HILOCK_ENOMEM, "out of memory");
    k->s = s;
    hl_pes_id_hex(k->id, raw); /* lowercase, as the list compares */
    k->cb = cb;
    k->payload = payload;
    k->names.name = s->o.names.name;
    k->names.channel = s->o.names.channel;
    k->names.timeout = s->o.names.timeout;
    k->names.publish = s->o.names.publish;
    pthread_mutex_lock(&s->o.mu);
    int dup = 0;
    for (hl_kept *o = s->kept; o && !dup; o = o->next)
        dup = strcmp(o->id, k->id) == 0;
    if (!dup) { /* listed first, so that a second keep of the id is refused */
        k->next = s->kept;
        s->kept = k;
    }
    pthread_mutex_unlock(&s->o.mu);
    if (dup) {
        free(k);
        return obj_fail(&s->o, HILOCK_EINVAL, "that permit is kept already");
    }
    /* a new lease from now: the session's confirmation, sent at sent_at */
    int64_t sent_at = hl_now_mono_ms();
    rc = hilock_permit_semaphore_update_lease(s, k->id, lease);
    if (rc == 0)
        rc = hl_wd_keep(t, k, HL_KIND_PERMIT, &k->names, k->id, watchdog, lease, sent_at);
    if (rc) {
        kept_free(s, kept_take(s, k->id));
        return rc == HILOCK_ENOMEM ? obj_fail(&s->o, rc, "out of memory") : rc;
    }
    return 0;
}

int hilock_permit_semaphore_forget(hilock_permit_semaphore *s, const char *id)
{
    if (!s)
        return HILOCK_EINVAL;
    unsigned char raw[HL_PES_ID_BYTES];
    char hex[HILOCK_PERMIT_ID_SIZE];
    if (!id || hl_pes_id_parse(raw, id) != 0)
        return obj_fail(&s->o, HILOCK_EINVAL, "a permit id is 32 hex characters");
    hl_pes_id_hex(hex, raw);
    hl_kept *k = kept_take(s, hex);
    if (!k)
        return obj_fail(&s->o, HILOCK_ENOTOWNER, "that permit is not kept");
    kept_free(s, k);
    return 0;
}

int hilock_permit_semaphore_available(int64_t *out, hilock_permit_semaphore *s)
{
    return obj_count(out, s ? &s->o : NULL);
}

int hilock_permit_semaphore_add_permits(hilock_permit_semaphore *s, int64_t delta)
{
    return obj_count_op(s ? &s->o : NULL, HILOCK_COUNT_ADD, delta, NULL);
}

int hilock_permit_semaphore_delete(int *deleted, hilock_permit_semaphore *s)
{
    return obj_delete(deleted, s ? &s->o : NULL);
}

int hilock_permit_semaphore_cancel(int *cancelled, hilock_permit_semaphore *s, uint64_t tid)
{
    return obj_cancel(cancelled, s ? &s->o : NULL, tid);
}

const char *hilock_permit_semaphore_errmsg(const hilock_permit_semaphore *s)
{
    return obj_errmsg(s ? &s->o : NULL);
}

/* ---- count-down latch ---- */

int hilock_latch_new(hilock_latch **out, hilock_client *c, const char *name)
{
    if (!out)
        return HILOCK_EINVAL;
    *out = NULL;
    hilock_latch *l = calloc(1, sizeof *l);
    if (!l)
        return HILOCK_ENOMEM;
    int rc = obj_init(&l->o, c, name, HL_SEM_LATCH);
    if (rc) {
        free(l);
        return rc;
    }
    *out = l;
    return 0;
}

void hilock_latch_free(hilock_latch *l)
{
    if (!l)
        return;
    obj_free(&l->o);
    free(l);
}

const char *hilock_latch_name(const hilock_latch *l)
{
    return l ? l->o.names.name : NULL;
}

int hilock_latch_try_set_count(int *set, hilock_latch *l, int64_t count)
{
    return obj_try_set(set, l ? &l->o : NULL, count);
}

int hilock_latch_count_down(int64_t *left, hilock_latch *l)
{
    if (left)
        *left = 0;
    verb v = {.what = V_COUNT_DOWN, .o = l ? &l->o : NULL};
    return obj_do(&v, left);
}

int hilock_latch_count(int64_t *out, hilock_latch *l)
{
    return obj_count(out, l ? &l->o : NULL);
}

int hilock_latch_await_tid(hilock_latch *l, uint64_t tid, int64_t wait_ms)
{
    int rc = obj_check(l ? &l->o : NULL);
    return rc ? rc : obj_wait(&l->o, tid, 1, 0, NULL, wait_ms);
}

int hilock_latch_await(hilock_latch *l, int64_t wait_ms)
{
    return hilock_latch_await_tid(l, hilock_thread_id(), wait_ms);
}

int hilock_latch_delete(int *deleted, hilock_latch *l)
{
    return obj_delete(deleted, l ? &l->o : NULL);
}

int hilock_latch_cancel(int *cancelled, hilock_latch *l, uint64_t tid)
{
    return obj_cancel(cancelled, l ? &l->o : NULL, tid);
}

const char *hilock_latch_errmsg(const hilock_latch *l)
{
    return obj_errmsg(l ? &l->o : NULL);
}
