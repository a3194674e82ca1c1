/*
 * Protocol layer, the session: the holds a client keeps (proto_session.h).
 * When each watchdog hold is renewed, when one is reported lost "in doubt",
 * and which were found lost, decided once for every driver. No I/O, no
 * threads, no clock: the time comes with each call.
 */
#include <stdlib.h>
#include <string.h>

#include "proto.h"

enum { RENEW = 0, DOUBT = 1, END = 2, NHEAPS = 3 };

/* ---- the two heaps: binary min-heaps on key[w], pos[w] = index + 1 ---- */

static int before(const hl_hold *a, const hl_hold *b, int w)
{
    return a->key[w] < b->key[w];
}

static void place(hl_holds *t, int w, size_t i, hl_hold *h)
{
    t->heap[w][i] = h;
    h->pos[w] = i + 1;
}

static void sift_up(hl_holds *t, int w, size_t i)
{
    hl_hold *h = t->heap[w][i];
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!before(h, t->heap[w][p], w))
            break;
        place(t, w, i, t->heap[w][p]);
        i = p;
    }
    place(t, w, i, h);
}

static void sift_down(hl_holds *t, int w, size_t i)
{
    hl_hold *h = t->heap[w][i];
    size_t n = t->n[w];
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n)
            break;
        if (c + 1 < n && before(t->heap[w][c + 1], t->heap[w][c], w))
            c++;
        if (!before(t->heap[w][c], h, w))
            break;
        place(t, w, i, t->heap[w][c]);
        i = c;
    }
    place(t, w, i, h);
}

static void heap_out(hl_holds *t, int w, hl_hold *h)
{
    if (!h->pos[w])
        return;
    size_t i = h->pos[w] - 1, last = --t->n[w];
    h->pos[w] = 0;
    if (i == last)
        return;
    hl_hold *m = t->heap[w][last];
    place(t, w, i, m);
    sift_down(t, w, i);
    sift_up(t, w, m->pos[w] - 1);
}

/* h at key (-1: out of heap w). Room is reserved at the grant. */
static void heap_set(hl_holds *t, int w, hl_hold *h, int64_t key)
{
    if (key < 0) {
        heap_out(t, w, h);
        return;
    }
    if (!h->pos[w]) {
        h->key[w] = key;
        place(t, w, t->n[w]++, h);
        sift_up(t, w, t->n[w] - 1);
        return;
    }
    int64_t old = h->key[w];
    h->key[w] = key;
    if (key < old)
        sift_up(t, w, h->pos[w] - 1);
    else if (key > old)
        sift_down(t, w, h->pos[w] - 1);
}

static int64_t top(const hl_holds *t, int w)
{
    return t->n[w] ? t->heap[w][0]->key[w] : -1;
}

/* ---- the rules ---- */

static int64_t period(const hl_holds *t)
{
    return hl_renew_period(t->watchdog_lease_ms);
}

int64_t hl_holds_doubt_at(const hl_holds *t, const hl_hold *h)
{
#ifdef HILOCK_SAFETY_BREAK_NO_DOUBT
    return -1; /* the safety harness's self-test build only: never in doubt */
#endif
    if (!h->in_table || !h->watchdog || h->doubt)
        return -1;
    return hl_renew_doubt_at(h->confirmed_at, t->watchdog_lease_ms, h->tried_at,
                             t->command_timeout_ms);
}

/* When h's fixed lease ends (-1: a watchdog hold, or not in the table). */
static int64_t fixed_end(const hl_hold *h)
{
    if (!h->in_table || h->watchdog || h->lease_ms <= 0)
        return -1;
    return h->confirmed_at + h->lease_ms;
}

/* h's three deadlines follow its state. */
static void sync(hl_holds *t, hl_hold *h)
{
    int live = h->in_table && h->watchdog;
    heap_set(t, RENEW, h, live && !h->renewing ? h->next_renew : -1);
    heap_set(t, DOUBT, h, hl_holds_doubt_at(t, h));
    heap_set(t, END, h, fixed_end(h));
}

static void lost_unqueue(hl_holds *t, hl_hold *h)
{
    if (!h->queued)
        return;
    if (h->lprev)
        h->lprev->lnext = h->lnext;
    else
        t->lost_head = h->lnext;
    if (h->lnext)
        h->lnext->lprev = h->lprev;
    else
        t->lost_tail = h->lprev;
    h->lnext = h->lprev = NULL;
    h->queued = 0;
}

static void check_unqueue(hl_holds *t, hl_hold *h)
{
    if (!h->check_queued)
        return;
    if (h->cprev)
        h->cprev->cnext = h->cnext;
    else
        t->check_head = h->cnext;
    if (h->cnext)
        h->cnext->cprev = h->cprev;
    else
        t->check_tail = h->cprev;
    h->cnext = h->cprev = NULL;
    h->check_queued = 0;
}

static void check_queue(hl_holds *t, hl_hold *h, int64_t at)
{
    h->check_at = at;
    h->cnext = NULL;
    h->cprev = t->check_tail;
    h->check_queued = 1;
    if (t->check_tail)
        t->check_tail->cnext = h;
    else
        t->check_head = h;
    t->check_tail = h;
}

/* h is no longer checked: out of the FIFO, its answer in flight ignored */
static void check_end(hl_holds *t, hl_hold *h)
{
    check_unqueue(t, h);
    h->checking = 0;
    h->check_again = 0;
}

/* h found gone (a renewal's LOST, a check's "gone"): out of the table,
 * queued for hl_holds_lost_next. */
static void make_lost(hl_holds *t, hl_hold *h)
{
    for (int w = 0; w < NHEAPS; w++)
        heap_out(t, w, h);
    check_end(t, h);
    h->in_table = 0;
    h->renewing = 0;
    h->lost = 1;
    t->count--;
    h->lnext = NULL;
    h->lprev = t->lost_tail;
    h->queued = 1;
    if (t->lost_tail)
        t->lost_tail->lnext = h;
    else
        t->lost_head = h;
    t->lost_tail = h;
}

void hl_holds_init(hl_holds *t, int64_t watchdog_lease_ms, int64_t command_timeout_ms)
{
    memset(t, 0, sizeof *t);
    t->watchdog_lease_ms = watchdog_lease_ms;
    t->command_timeout_ms = command_timeout_ms;
}

void hl_holds_free(hl_holds *t)
{
    for (int w = 0; w < NHEAPS; w++) {
        free(t->heap[w]);
        t->heap[w] = NULL;
        t->n[w] = 0;
    }
    t->cap = t->count = 0;
    t->lost_head = t->lost_tail = NULL;
    t->check_head = t->check_tail = NULL;
}

void hl_hold_init(hl_hold *h, void *ref, int kind)
{
    memset(h, 0, sizeof *h);
    h->ref = ref;
    h->kind = kind;
    h->tried_at = -1;
}

/* Room in every heap for one more hold: 0 or -1. */
static int reserve(hl_holds *t)
{
    if (t->count < t->cap)
        return 0;
    size_t cap = t->cap ? 2 * t->cap : 16;
    for (int w = 0; w < NHEAPS; w++) {
        hl_hold **a = realloc(t->heap[w], cap * sizeof *a);
        if (!a)
            return -1; /* the other heap may have grown: harmless */
        t->heap[w] = a;
    }
    t->cap = cap;
    return 0;
}

int hl_holds_grant(hl_holds *t, hl_hold *h, int watchdog, int64_t lease_ms, int64_t sent_at)
{
    if (!h->in_table) {
        if (reserve(t) != 0)
            return -1;
        lost_unqueue(t, h); /* a hold found lost, granted again */
        check_end(t, h);
        h->in_table = 1;
        h->renewing = 0;
        h->doubt = 0;
        h->confirmed_at = sent_at;
        h->tried_at = -1;
        h->next_renew = sent_at + period(t);
        t->count++;
    } else if (sent_at > h->confirmed_at) { /* a re-entry applied the lease again */
        h->confirmed_at = sent_at;
        h->tried_at = -1;
        h->doubt = 0;
        if (!h->renewing)
            h->next_renew = sent_at + period(t);
    }
    h->watchdog = watchdog;
    h->lease_ms = lease_ms;
    h->lost = 0;
    h->doubted = 0;
    sync(t, h);
    return 0;
}

void hl_holds_remove(hl_holds *t, hl_hold *h)
{
    lost_unqueue(t, h);
    check_end(t, h);
    if (!h->in_table)
        return;
    for (int w = 0; w < NHEAPS; w++)
        heap_out(t, w, h);
    h->in_table = 0;
    h->renewing = 0;
    t->count--;
}

hl_hold *hl_holds_renew_next(hl_holds *t, int64_t now, int64_t horizon)
{
    if (!t->n[RENEW] || t->heap[RENEW][0]->key[RENEW] > now + (horizon > 0 ? horizon : 0))
        return NULL;
    hl_hold *h = t->heap[RENEW][0];
    h->renewing = 1;
    if (h->check_queued && now >= h->check_at)
        check_unqueue(t, h); /* this renewal answers the check's question */
    if (h->tried_at < 0)
        h->tried_at = now; /* the first try since the last confirmation */
    h->next_renew = now + period(t);
    sync(t, h);
    return h;
}

/* Groups: alone ones last, then by batch key (runs of the sorted order). */
static int group_cmp(const void *pa, const void *pb)
{
    const hl_hold *a = *(hl_hold *const *)pa, *b = *(hl_hold *const *)pb;
    if ((a->alone != 0) != (b->alone != 0))
        return (a->alone != 0) - (b->alone != 0);
    return (a->batch > b->batch) - (a->batch < b->batch);
}

size_t hl_holds_renew_due(hl_holds *t, int64_t now, int64_t horizon, size_t max_group,
                          hl_hold **out, size_t cap, hl_renew_group *groups, size_t *ngroups)
{
    size_t n = 0, m = 0;
    hl_hold *h;
    while (n < cap && (h = hl_holds_renew_next(t, now, horizon)))
        out[n++] = h;
    if (max_group < 1)
        max_group = 1;
    if (n > 1) /* out may be NULL when cap is 0: qsort's pointer must not be */
        qsort(out, n, sizeof *out, group_cmp);
    for (size_t i = 0; i < n;) {
        size_t k = 1;
        if (!out[i]->alone)
            while (i + k < n && k < max_group && !out[i + k]->alone &&
                   out[i + k]->batch == out[i]->batch)
                k++;
        groups[m].first = i;
        groups[m].size = k;
        m++;
        i += k;
    }
    *ngroups = m;
    return n;
}

hl_renew_outcome hl_holds_outcome(hl_holds *t, hl_hold *h, hl_renew_outcome o, int acked,
                                  int64_t sent_at)
{
    o = hl_renew_unacked(o, acked);
    if (!h->in_table)
        return o;
    h->renewing = 0;
    if (o == HL_RENEW_LOST) {
        make_lost(t, h);
        return o;
    }
    if (o == HL_RENEW_RENEWED && sent_at > h->confirmed_at) {
        h->confirmed_at = sent_at;
        h->tried_at = -1;
        h->doubt = 0; /* a later silence is reported again */
    }
    sync(t, h);
    return o;
}

hl_hold *hl_holds_doubt_next(hl_holds *t, int64_t now)
{
    if (!t->n[DOUBT] || t->heap[DOUBT][0]->key[DOUBT] > now)
        return NULL;
    hl_hold *h = t->heap[DOUBT][0];
    h->doubt = h->doubted = 1;
    heap_out(t, DOUBT, h);
    return h;
}

int hl_holds_heard(hl_holds *t, hl_hold *h, const hl_ps_event *ev, int64_t now)
{
    if (!ev)
        return 0; /* the connection lost: heard again once subscribed again */
    if (!h->watchdog && h->lease_ms > 0 && now >= h->confirmed_at + h->lease_ms)
        return 0; /* a fixed lease that ran out: it ended as asked, nothing to check */
    if (ev->type != HL_PS_SUBSCRIBE && ev->type != HL_PS_UNSUBSCRIBE &&
        ev->type != HL_PS_UNHEARD && !hl_hold_check_on_kind((hilock_kind)h->kind, ev))
        return 0; /* not a message for this hold, or no frame of the channel */
    return hl_holds_check(t, h, now);
}

int hl_holds_check(hl_holds *t, hl_hold *h, int64_t now)
{
    if (!h->in_table)
        return 0;
    if (h->checking) { /* its answer may predate this: once more after it */
        if (!h->check_again)
            h->check_at = now;
        h->check_again = 1;
        return 0;
    }
    if (h->check_queued)
        return 0; /* the check to come answers both */
    check_queue(t, h, now);
    return 1;
}

hl_hold *hl_holds_check_next(hl_holds *t, int64_t now)
{
    hl_hold *h = t->check_head;
    if (!h || h->check_at > now)
        return NULL;
    check_unqueue(t, h);
    h->checking = 1;
    return h;
}

void hl_holds_check_outcome(hl_holds *t, hl_hold *h, int gone)
{
    if (!h->checking)
        return; /* not handed out, or ended (released, granted anew, lost) */
    h->checking = 0;
    if (!h->in_table) {
        h->check_again = 0;
        return;
    }
    if (gone == 1) {
        make_lost(t, h);
        return;
    }
    if (h->check_again) { /* heard again while this one was in flight */
        h->check_again = 0;
        check_queue(t, h, h->check_at);
    }
}

int hl_holds_check_pending(const hl_holds *t)
{
    return t->check_head != NULL;
}

hl_hold *hl_holds_lost_next(hl_holds *t)
{
    hl_hold *h = t->lost_head;
    if (h)
        lost_unqueue(t, h);
    return h;
}

int64_t hl_holds_next_renewal(const hl_holds *t)
{
    return top(t, RENEW);
}

int64_t hl_holds_next_doubt(const hl_holds *t)
{
    return top(t, DOUBT);
}

int64_t hl_holds_observe_again_at(int64_t now)
{
    return now + HL_OBSERVE_RETRY_MS;
}

int64_t hl_holds_next_end(const hl_holds *t)
{
    return top(t, END);
}

hl_hold *hl_holds_end_next(hl_holds *t, int64_t now)
{
    if (!t->n[END] || t->heap[END][0]->key[END] > now)
        return NULL;
    hl_hold *h = t->heap[END][0];
    hl_holds_remove(t, h);
    return h;
}

static int64_t earlier(int64_t a, int64_t b)
{
    if (a < 0)
        return b;
    if (b < 0)
        return a;
    return a < b ? a : b;
}

int64_t hl_holds_next(const hl_holds *t)
{
    int64_t c = t->check_head ? t->check_head->check_at : -1;
    return earlier(earlier(top(t, RENEW), top(t, DOUBT)), c);
}

int hl_holds_is_lost(const hl_holds *t, const hl_hold *h, int64_t now)
{
    if (h->lost || h->doubted)
        return 1;
    return h->in_table && h->watchdog &&
           hl_renew_in_doubt(h->confirmed_at, t->watchdog_lease_ms, h->tried_at,
                             t->command_timeout_ms, now);
}

/* ---- acquire attempts not settled ---- */

static void rel_free_all(hl_unsettled *t);

void hl_unsettled_init(hl_unsettled *t, size_t max)
{
    memset(t, 0, sizeof *t);
    t->max = max ? max : 1024;
}

static void unsettled_free_one(hl_unsettled_acq *u)
{
    free(u->name);
    free(u->latch);
    free(u);
}

void hl_unsettled_free(hl_unsettled *t)
{
    for (hl_unsettled_acq *u = t->head, *nx; u; u = nx) {
        nx = u->next;
        unsettled_free_one(u);
    }
    t->head = NULL;
    t->count = 0;
    rel_free_all(t);
    t->rel_full_until = 0;
}

void hl_unsettled_forget(hl_unsettled *t, hl_unsettled_acq *u)
{
    for (hl_unsettled_acq **pp = &t->head; *pp; pp = &(*pp)->next)
        if (*pp == u) {
            *pp = u->next;
            t->count--;
            unsettled_free_one(u);
            return;
        }
}

/* When u, with no settle running from now, is forgotten: a copy of the
 * attempt still on its way may run up to a latch lifetime from now (after
 * that a settle learns nothing more from the latch), and a grant it takes
 * lasts its lease. */
static int64_t unsettled_until(const hl_unsettled_acq *u, int64_t now)
{
    return now + (u->lease_ms > 0 ? u->lease_ms : 0) +
           (u->latch_ttl_ms > 0 ? u->latch_ttl_ms : 0);
}

hl_unsettled_acq *hl_unsettled_put(hl_unsettled *t, const char *name, const char *owner,
                                   const char *latch, int64_t latch_ttl_ms, int64_t lease_ms,
                                   int settling, int64_t now)
{
    if (!name || !owner || strlen(owner) >= HL_OWNER_MAX)
        return NULL;
    if (t->count >= t->max) { /* full: the record not settling that ends first goes */
        hl_unsettled_acq *victim = NULL;
        for (hl_unsettled_acq *u = t->head; u; u = u->next)
            if (!u->settling && (!victim || u->until < victim->until))
                victim = u;
        if (!victim)
            return NULL;
        hl_unsettled_forget(t, victim);
    }
    hl_unsettled_acq *u = calloc(1, sizeof *u);
    if (!u)
        return NULL;
    u->name = strdup(name);
    u->latch = latch ? strdup(latch) : NULL;
    if (!u->name || (latch && !u->latch)) {
        unsettled_free_one(u);
        return NULL;
    }
    memcpy(u->owner, owner, strlen(owner) + 1);
    u->latch_ttl_ms = latch_ttl_ms;
    u->lease_ms = lease_ms;
    u->settling = settling != 0;
    u->until = unsettled_until(u, now);
    u->next = t->head;
    t->head = u;
    t->count++;
    return u;
}

void hl_unsettled_settle_end(hl_unsettled *t, hl_unsettled_acq *u, int settled, int64_t now)
{
    if (settled) {
        hl_unsettled_forget(t, u);
        return;
    }
    u->settling = 0;
    u->until = unsettled_until(u, now);
}

int hl_unsettled_background(hl_unsettled *t, hl_unsettled_acq *u)
{
    (void)t;
    if (!u || u->settling || !u->latch || u->background >= HL_UNSETTLED_BACKGROUND)
        return 0;
    u->background++;
    u->settling = 1;
    return 1;
}

void hl_unsettled_handed_over(hl_unsettled *t, hl_unsettled_acq *u, int background, int64_t now)
{
    if (!u)
        return;
    if (background && u->background > 0)
        u->background--;
    hl_unsettled_settle_end(t, u, 0, now);
}

static int unsettled_is(const hl_unsettled_acq *u, const char *name, const char *owner)
{
    return strcmp(u->owner, owner) == 0 && strcmp(u->name, name) == 0;
}

hl_unsettled_step hl_unsettled_next(hl_unsettled *t, const char *name, const char *owner,
                                    int64_t now, hl_unsettled_acq **out)
{
    hl_unsettled_acq *settle = NULL, *wait = NULL;
    for (hl_unsettled_acq **pp = &t->head; *pp;) {
        hl_unsettled_acq *u = *pp;
        if (!u->settling && u->until <= now) { /* over: its hold has ended */
            *pp = u->next;
            t->count--;
            unsettled_free_one(u);
            continue;
        }
        if (unsettled_is(u, name, owner)) {
            if (u->settling)
                wait = u;
            else if (!settle && u->latch) /* without a latch only its lease ends it */
                settle = u;
        }
        pp = &u->next;
    }
    if (out)
        *out = wait ? wait : settle;
    if (wait)
        return HL_UNSETTLED_WAIT;
    if (!settle)
        return HL_UNSETTLED_NONE;
    settle->settling = 1;
    return HL_UNSETTLED_SETTLE;
}

int hl_unsettled_settling(const hl_unsettled *t, const char *name, const char *owner)
{
    for (const hl_unsettled_acq *u = t->head; u; u = u->next)
        if (u->settling && unsettled_is(u, name, owner))
            return 1;
    return 0;
}

/* ---- releases that got no answer ---- */

static void rel_free_one(hl_unsettled_rel *r)
{
    for (size_t i = 0; i < r->n; i++)
        free(r->rid[i]);
    free(r->name);
    free(r);
}

static void rel_free_all(hl_unsettled *t)
{
    for (hl_unsettled_rel *r = t->rel_head, *nx; r; r = nx) {
        nx = r->next;
        rel_free_one(r);
    }
    t->rel_head = NULL;
    t->rel_count = 0;
}

/* Drops the records whose holds have all ended by now; returns owner's
 * record on name, or NULL. */
static hl_unsettled_rel *rel_find(hl_unsettled *t, const char *name, const char *owner,
                                  int64_t now)
{
    if (t->rel_full_until && t->rel_full_until <= now)
        t->rel_full_until = 0;
    hl_unsettled_rel *found = NULL;
    for (hl_unsettled_rel **pp = &t->rel_head; *pp;) {
        hl_unsettled_rel *r = *pp;
        if (r->until <= now) {
            *pp = r->next;
            t->rel_count--;
            rel_free_one(r);
            continue;
        }
        if (!found && strcmp(r->owner, owner) == 0 && strcmp(r->name, name) == 0)
            found = r;
        pp = &r->next;
    }
    return found;
}

static void rel_drop(hl_unsettled *t, hl_unsettled_rel *x)
{
    for (hl_unsettled_rel **pp = &t->rel_head; *pp; pp = &(*pp)->next)
        if (*pp == x) {
            *pp = x->next;
            t->rel_count--;
            rel_free_one(x);
            return;
        }
}

static void rel_refuse_all(hl_unsettled *t, int64_t until)
{
    if (until > t->rel_full_until)
        t->rel_full_until = until;
}

int hl_unsettled_rel_put(hl_unsettled *t, const char *name, const char *owner, const char *rid,
                         int64_t until, int64_t now)
{
    if (!name || !owner || !rid || strlen(owner) >= HL_OWNER_MAX) {
        rel_refuse_all(t, until);
        return -1;
    }
    if (until <= now)
        return 0; /* its hold has ended already: nothing to re-send */
    hl_unsettled_rel *r = rel_find(t, name, owner, now);
    if (!r) {
        if (t->rel_count >= t->max || !(r = calloc(1, sizeof *r)) ||
            !(r->name = strdup(name))) {
            free(r);
            rel_refuse_all(t, until);
            return -1;
        }
        memcpy(r->owner, owner, strlen(owner) + 1);
        r->next = t->rel_head;
        t->rel_head = r;
        t->rel_count++;
    }
    if (until > r->until)
        r->until = until;
    for (size_t i = 0; i < r->n; i++)
        if (strcmp(r->rid[i], rid) == 0)
            return 0; /* sent again and still unanswered: it keeps its place */
    char *copy = r->n < HL_UNSETTLED_REL_MAX ? strdup(rid) : NULL;
    if (!copy) {
        r->overflow = 1;
        return 1;
    }
    r->rid[r->n++] = copy;
    return 0;
}

hl_unsettled_step hl_unsettled_rel_next(hl_unsettled *t, const char *name, const char *owner,
                                        int64_t now, const char **rid, int64_t *until)
{
    hl_unsettled_rel *r = rel_find(t, name, owner, now);
    if (rid)
        *rid = NULL;
    if (until)
        *until = 0;
    if (r && r->n > 0) {
        if (rid)
            *rid = r->rid[0];
        return HL_UNSETTLED_SETTLE;
    }
    int64_t end = r && r->overflow ? r->until : 0;
    if (t->rel_full_until > end)
        end = t->rel_full_until;
    if (end > now) {
        if (until)
            *until = end;
        return HL_UNSETTLED_REFUSE;
    }
    return HL_UNSETTLED_NONE;
}

void hl_unsettled_rel_end(hl_unsettled *t, const char *name, const char *owner, const char *rid,
                          int ran, int64_t now)
{
    hl_unsettled_rel *r = rel_find(t, name, owner, now);
    if (!r || ran < 0)
        return;
    if (ran == 0) { /* not owner: it holds none of name, nothing to release */
        rel_drop(t, r);
        return;
    }
    for (size_t i = 0; rid && i < r->n; i++)
        if (strcmp(r->rid[i], rid) == 0) {
            free(r->rid[i]);
            memmove(r->rid + i, r->rid + i + 1, (r->n - i - 1) * sizeof r->rid[0]);
            r->n--;
            break;
        }
    if (r->n == 0 && !r->overflow)
        rel_drop(t, r);
}

size_t hl_unsettled_rel_count(hl_unsettled *t, const char *name, const char *owner, int64_t now)
{
    hl_unsettled_rel *r = rel_find(t, name, owner, now);
    return r ? r->n : 0;
}

/* ---- subscription liveness ---- */

int64_t hl_sublive_interval(int64_t command_timeout_ms)
{
    if (command_timeout_ms <= 0)
        return 500;
    int64_t i = command_timeout_ms / 2;
    return i < 100 ? 100 : i > 500 ? 500 : i;
}

void hl_sublive_init(hl_sublive *s, int64_t command_timeout_ms)
{
    s->interval_ms = s->timeout_ms = hl_sublive_interval(command_timeout_ms);
    hl_sublive_idle(s);
}

void hl_sublive_idle(hl_sublive *s)
{
    s->open = s->alive = 0;
    s->heard_at = 0;
    s->ping_at = s->check_at = -1;
}

void hl_sublive_opened(hl_sublive *s, int64_t now)
{
    s->open = 1;
    s->alive = 0;
    s->heard_at = now;
    s->ping_at = -1;
    if (s->check_at < 0) /* checked every interval until heard */
        s->check_at = now + s->interval_ms;
}

void hl_sublive_heard(hl_sublive *s, int64_t now)
{
    if (!s->open)
        return;
    s->alive = 1;
    s->heard_at = now;
    s->ping_at = s->check_at = -1;
}

void hl_sublive_closed(hl_sublive *s, int64_t now)
{
    /* given up by hl_sublive_due (its checks already paced) or idle: as is */
    if (s->open && (s->check_at < 0 || s->check_at > now))
        s->check_at = now;
    s->open = s->alive = 0;
    s->ping_at = -1;
}

int hl_sublive_due(hl_sublive *s, int64_t now)
{
    int due = 0;
    if (s->open && s->ping_at >= 0 && now >= s->ping_at + s->timeout_ms) {
        /* unanswered: not alive; its holds checked now and every interval */
        s->open = s->alive = 0;
        s->ping_at = -1;
        s->check_at = now;
        due |= HL_SUBLIVE_RESET;
    }
    if (s->open && s->ping_at < 0 && now >= s->heard_at + s->interval_ms) {
        s->ping_at = now;
        due |= HL_SUBLIVE_PING;
    }
    if (!s->alive && s->check_at >= 0 && now >= s->check_at) {
        s->check_at = now + s->interval_ms;
        due |= HL_SUBLIVE_CHECK;
    }
    return due;
}

int64_t hl_sublive_next(const hl_sublive *s)
{
    int64_t next = -1;
    if (s->open)
        next = s->ping_at >= 0 ? s->ping_at + s->timeout_ms : s->heard_at + s->interval_ms;
    if (!s->alive && s->check_at >= 0 && (next < 0 || s->check_at < next))
        next = s->check_at;
    return next;
}

int hl_sublive_alive(const hl_sublive *s)
{
    return s->open && s->alive;
}
