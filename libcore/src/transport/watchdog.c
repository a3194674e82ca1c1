/*
 * Watchdog: every lock taken without a lease is renewed every lease/3, all
 * of them pipelined on one connection (one round trip per tick). A hold
 * taken with a fixed lease is kept here too, never renewed: it listens on
 * its lock's channel like a watchdog hold (a force unlock is checked and
 * reported at once) until its lease ends (the session's hl_holds_end_next:
 * the renewal thread stops its listening and frees it) or it is released. The
 * renewal is guarded by the owner's field: "gone" means the lock was lost,
 * which is reported once and ends its renewal. Transport errors are retried
 * at the next tick, but a hold whose last confirmed renewal (or grant) was
 * sent lease - margin ago is reported lost "in doubt": cut off from the
 * server, its holder must stop before the lease ends there and another
 * client takes the lock (hl_wd_margin_ms; the engine's hl_renew_doubt_at).
 * When each hold is renewed, when it is in doubt and which were found lost
 * is the engine's session hold table (wd->holds, proto_session.c), guarded
 * by wd->mu; this file does the I/O, the threads and the reports.
 *
 * Two threads per client, so that no I/O can delay a report:
 * - the renewal thread does the renewals' I/O on its own schedule (a
 *   connect, handshake or read stuck on a silent link holds up only it);
 *   it never calls up, it marks what it found (confirmed, lost) and wakes
 * - the watchdog thread: the "in doubt" timer and every report (the lost
 *   callbacks run on it). It does no I/O, so the moment a hold is in doubt
 *   is a timer nothing else delays (a slow lost callback of another hold
 *   aside).
 *
 * Race freedom: a release that ends the last watchdog hold first takes the
 * entry out of the schedule and waits for any renewal of it in flight, and
 * only then sends the unlock; so no renewal can follow the final unlock.
 * Entry ownership: whoever sets `removed` frees the entry once it is no longer
 * `inflight` nor `reporting`; entries found `lost` are freed by the watchdog
 * thread once reported.
 */
#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "transport.h"
#include "transport_impl.h"

/* One watched hold (holder, tid). */
typedef struct hl_wd_entry {
    struct hl_wd_entry *next, *prev; /* wd->entries */
    struct hl_wd_entry *ml, *mr;     /* wd->map, by (holder, tid, address) */
    uint64_t prio;                   /* its treap priority (a hash of its address) */
    hl_hold s;         /* in wd->holds (the session's hold table): its
                          confirmation, renewal due, doubt and loss */
    void *holder;      /* opaque: given back to sinks.lost */
    hilock_kind kind;  /* which renew command */
    const hl_names *names; /* the holder's, valid while the entry lives */
    uint64_t tid;
    char owner[HL_OWNER_MAX];
    int holds;         /* acquisitions not yet released: watchdog ones (a
                          fixed-lease re-entry of a watchdog hold is not
                          counted, as it never was), or for a fixed-lease
                          hold (e->s.watchdog 0) fixed-lease ones */
    int inflight;      /* in the batch being renewed (or its loss waiting to
                          be reported) */
    int reporting;     /* the watchdog thread is reporting it in doubt */
    int removed;       /* claimed by a remover, who frees it once neither
                          inflight nor reporting; out of wd->holds */
    hl_waiter obs;     /* observes the lock's channel (hl_hold_channel):
                          what it hears goes to the session
                          (hl_holds_heard), which may have the hold checked */
    hl_transport *client; /* hold_message's */
    int observing;     /* hl_wd_add is registering obs (mu released): a
                          remover waits for it */
    unsigned followed; /* the follow_moved pass that last looked at obs */
} hl_wd_entry;

/* ---- wd->map: the entries by (holder, tid), then address (one (holder,
 * tid) has one live entry, and may have others on their way out: lost, not
 * reported yet, or claimed). A treap: a binary search tree on the key that
 * is a heap on prio, a hash of the entry's address, so that its expected
 * depth is O(log n) whatever the order of the keys; no state but the tree. */

static int key_cmp(const void *h1, uint64_t t1, uintptr_t a1, const hl_wd_entry *e)
{
    uintptr_t x = (uintptr_t)h1, y = (uintptr_t)e->holder, b = (uintptr_t)e;
    if (x != y)
        return x < y ? -1 : 1;
    if (t1 != e->tid)
        return t1 < e->tid ? -1 : 1;
    return (a1 > b) - (a1 < b);
}

static uint64_t addr_hash(const void *p)
{
    uint64_t z = (uint64_t)(uintptr_t)p + 0x9e3779b97f4a7c15u; /* splitmix64 */
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return z ^ (z >> 31);
}

static hl_wd_entry *map_insert(hl_wd_entry *t, hl_wd_entry *e)
{
    if (!t)
        return e;
    if (key_cmp(e->holder, e->tid, (uintptr_t)e, t) < 0) {
        t->ml = map_insert(t->ml, e);
        if (t->ml->prio > t->prio) { /* rotate right */
            hl_wd_entry *l = t->ml;
            t->ml = l->mr;
            l->mr = t;
            return l;
        }
    } else {
        t->mr = map_insert(t->mr, e);
        if (t->mr->prio > t->prio) { /* rotate left */
            hl_wd_entry *r = t->mr;
            t->mr = r->ml;
            r->ml = t;
            return r;
        }
    }
    return t;
}

/* Two treaps, every key of a below every key of b, as one. */
static hl_wd_entry *map_join(hl_wd_entry *a, hl_wd_entry *b)
{
    if (!a)
        return b;
    if (!b)
        return a;
    if (a->prio > b->prio) {
        a->mr = map_join(a->mr, b);
        return a;
    }
    b->ml = map_join(a, b->ml);
    return b;
}

static hl_wd_entry *map_remove(hl_wd_entry *t, const hl_wd_entry *e)
{
    if (!t)
        return NULL;
    if (t == e)
        return map_join(t->ml, t->mr);
    if (key_cmp(e->holder, e->tid, (uintptr_t)e, t) < 0)
        t->ml = map_remove(t->ml, e);
    else
        t->mr = map_remove(t->mr, e);
    return t;
}

/* The first entry whose key is above (holder, tid, after); after 0: the
 * first of (holder, tid) or above. */
static hl_wd_entry *map_next(hl_wd_entry *t, const void *holder, uint64_t tid, uintptr_t after)
{
    hl_wd_entry *best = NULL;
    while (t) {
        if (key_cmp(holder, tid, after, t) < 0) {
            best = t;
            t = t->ml;
        } else {
            t = t->mr;
        }
    }
    return best;
}

static void link_entry(hl_watchdog *wd, hl_wd_entry *e)
{
    e->prev = NULL;
    e->next = wd->entries;
    if (wd->entries)
        wd->entries->prev = e;
    wd->entries = e;
    e->ml = e->mr = NULL;
    e->prio = addr_hash(e);
    wd->map = map_insert(wd->map, e);
}

/* The live entry of (holder, tid): O(log n) plus the entries of the same
 * (holder, tid) on their way out. */
static hl_wd_entry *find_live(hl_watchdog *wd, const void *holder, uint64_t tid)
{
    for (hl_wd_entry *e = map_next(wd->map, holder, tid, 0);
         e && e->holder == holder && e->tid == tid;
         e = map_next(wd->map, holder, tid, (uintptr_t)e))
        if (!e->removed && !e->s.lost)
            return e;
    return NULL;
}

/* An entry of holder not claimed yet (live, or lost and not reported), or
 * NULL: O(log n) plus the claimed ones of holder. */
static hl_wd_entry *find_unclaimed(hl_watchdog *wd, const void *holder)
{
    for (hl_wd_entry *e = map_next(wd->map, holder, 0, 0); e && e->holder == holder;
         e = map_next(wd->map, holder, e->tid, (uintptr_t)e))
        if (!e->removed)
            return e;
    return NULL;
}

/* Stop listening and free e (unlinked, used by nobody). Takes the pubsub
 * mutex, so never with wd->mu held: the two are never held together (the
 * listener's hold_message takes no lock). */
static void entry_free(hl_transport *c, hl_wd_entry *e)
{
    hl_sub_unregister(c, &e->obs);
    free(e);
}

static void unlink_entry(hl_watchdog *wd, hl_wd_entry *e)
{
    if (!e->prev && wd->entries != e)
        return; /* not linked */
    if (e->prev)
        e->prev->next = e->next;
    else
        wd->entries = e->next;
    if (e->next)
        e->next->prev = e->prev;
    e->next = e->prev = NULL;
    wd->map = map_remove(wd->map, e);
}

/* Claim e, wait until no renewal or report uses it, then unlink it: the
 * caller frees it (entry_free) once it has released mu. It leaves the
 * schedule at once (no renewal or doubt of it is handed out again), except
 * a loss found and not yet reported: that report comes first. mu held. */
static void claim(hl_watchdog *wd, hl_wd_entry *e)
{
    e->removed = 1;
    if (!e->s.lost)
        hl_holds_remove(&wd->holds, &e->s);
    while (e->inflight || e->reporting || e->observing)
        pthread_cond_wait(&wd->cv, &wd->mu);
    hl_holds_remove(&wd->holds, &e->s);
    unlink_entry(wd, e);
}

/* The listener heard ev on hold e's lock channel (a force unlock, say):
 * the session decides whether e is to be checked now (only e: no other
 * hold is renewed or checked for it), and the renewal thread sends the
 * check. Runs on the listener thread with the pubsub mutex held; takes mu
 * (nothing takes the pubsub mutex under mu). e lives while it observes. */
static void hold_message(void *arg, const hl_ps_event *ev)
{
    hl_wd_entry *e = arg;
    hl_watchdog *wd = &e->client->wd;
    pthread_mutex_lock(&wd->mu);
    int due = !wd->stop && wd->holds_ready && !e->removed &&
              hl_holds_heard(&wd->holds, &e->s, ev, hl_now_mono_ms());
    if (due)
        hl_worker_wake(&wd->rwk);
    pthread_mutex_unlock(&wd->mu);
}

/* What lost callbacks asked for: nothing of this pass uses an entry any
 * more (none is inflight). mu held; released around each call. */
static void run_deferred(hl_watchdog *wd)
{
    if (!wd->deferred)
        return;
    wd->deferring = 1;
    while (wd->deferred) {
        hl_deferred *d = wd->deferred;
        wd->deferred = d->next;
        if (!wd->deferred)
            wd->deferred_tail = &wd->deferred;
        pthread_mutex_unlock(&wd->mu);
        d->fn(d->arg);
        pthread_mutex_lock(&wd->mu);
    }
    wd->deferring = 0;
    pthread_cond_broadcast(&wd->cv); /* hl_wd_wait_deferred */
}

int64_t hl_wd_margin_ms(const hl_transport *c)
{
    return c->opts.watchdog_lease_ms - hl_renew_doubt_after(c->opts.watchdog_lease_ms);
}

/* Holds with no renewal confirmed in time (the session's rule): report
 * them lost "in doubt", once per silence, whatever the renewal thread is
 * doing (a renewal of them may be stuck in flight). They are still renewed:
 * if the link comes back and the lock is still ours, keeping it is harmless
 * (its holder was told to stop and releases it); if it is gone, the renewal
 * reports the loss as usual. Returns the earliest time another hold
 * becomes due (or INT64_MAX); mu held, released around each report. */
static int64_t report_unconfirmed(hl_transport *c)
{
    hl_watchdog *wd = &c->wd;
    for (;;) {
        int64_t now = hl_now_mono_ms();
        hl_hold *s = hl_holds_doubt_next(&wd->holds, now);
        if (!s) {
            int64_t next = hl_holds_next_doubt(&wd->holds);
            return next < 0 ? INT64_MAX : next;
        }
        hl_wd_entry *due = s->ref;
        due->reporting = 1; /* a remover waits for the report */
        int64_t silent = now - s->confirmed_at;
        pthread_mutex_unlock(&wd->mu);
        /* the sink ends the hold's figures, then counts and traces the loss */
        c->sinks.lost(due->holder, (int)due->kind, due->tid, HL_LOSS_DOUBT, silent);
        pthread_mutex_lock(&wd->mu);
        due->reporting = 0;
        pthread_cond_broadcast(&wd->cv);
    }
}

/* Holds the renewal thread found gone: report each once, then free it
 * (or leave it to the remover who claimed it meanwhile). mu held,
 * released around each report. */
static void report_found_lost(hl_transport *c)
{
    hl_watchdog *wd = &c->wd;
    for (;;) {
        hl_hold *s = hl_holds_lost_next(&wd->holds);
        if (!s)
            return;
        hl_wd_entry *e = s->ref; /* inflight until reported */
        e->reporting = 1;
        pthread_mutex_unlock(&wd->mu);
        int cause = s->doubt ? HL_LOSS_EXPIRED : HL_LOSS_GONE;
        /* the sink ends the hold's figures, then counts and traces the loss */
        c->sinks.lost(e->holder, (int)e->kind, e->tid, cause, 0);
        pthread_mutex_lock(&wd->mu);
        e->reporting = 0;
        /* hl_wd_add may still be registering its listener (mu released,
         * found lost at once: a grant answered after its lease); it writes
         * into e when done, so e is freed only after that. inflight stays
         * set meanwhile, so a remover waits for this report too. */
        while (e->observing)
            pthread_cond_wait(&wd->cv, &wd->mu);
        e->inflight = 0;
        pthread_cond_broadcast(&wd->cv);
        if (!e->removed) {
            unlink_entry(wd, e);
            pthread_mutex_unlock(&wd->mu); /* entry_free takes the pubsub mutex */
            entry_free(c, e);
            pthread_mutex_lock(&wd->mu);
        }
    }
}

/* The renewal thread's buffers, kept between ticks and grown as needed
 * (a tick allocates nothing once they are large enough): per hold
 * (ncap: the holds due, their groups, outcomes) and per renewal command
 * (gcap, an hl_cmd is some 3.6 KB: one per group of up to
 * HL_RENEW_MANY_MAX holds, not one per hold). Used by the renewal thread
 * only; freed by hl_wd_shutdown. */
typedef struct hl_wd_scratch {
    int ncap, gcap;
    hl_hold **holds, **again;
    hl_renew_group *groups, *singles;
    hl_renew_outcome *out, *out2;
    int *retry, *unused;
    hl_cmd *cmds;
    hl_cmd_wide *wides; /* one per command: a batch's arguments */
    redisReply **replies;
    int *acked; /* per command: a replica took its writes (hl_exec_pipeline_acked) */
} hl_wd_scratch;

static void scratch_free(hl_wd_scratch *s)
{
    if (!s)
        return;
    free(s->holds);
    free(s->again);
    free(s->groups);
    free(s->singles);
    free(s->out);
    free(s->out2);
    free(s->retry);
    free(s->unused);
    free(s->cmds);
    free(s->wides);
    free(s->replies);
    free(s->acked);
    free(s);
}

/* Room for n holds: 0, or -1 (no memory: try again next tick). */
static int scratch_holds(hl_watchdog *wd, int n)
{
    hl_wd_scratch *s = wd->scratch;
    if (!s && !(s = wd->scratch = calloc(1, sizeof *s)))
        return -1;
    if (n <= s->ncap)
        return 0;
    int cap = n < 2 * s->ncap ? 2 * s->ncap : n;
    size_t k = (size_t)cap;
#define HL_GROW(f) do { free(s->f); s->f = malloc(k * sizeof *s->f); ok = ok && s->f; } while (0)
    int ok = 1;
    HL_GROW(holds);
    HL_GROW(again);
    HL_GROW(groups);
    HL_GROW(singles);
    HL_GROW(out);
    HL_GROW(out2);
    HL_GROW(retry);
    HL_GROW(unused);
#undef HL_GROW
    s->ncap = ok ? cap : 0;
    return ok ? 0 : -1;
}

/* Room for m commands: 0 or -1. */
static int scratch_cmds(hl_wd_scratch *s, int m)
{
    if (m <= s->gcap)
        return 0;
    free(s->cmds);
    free(s->wides);
    free(s->replies);
    free(s->acked);
    s->cmds = malloc(sizeof *s->cmds * (size_t)m);
    s->wides = malloc(sizeof *s->wides * (size_t)m);
    s->replies = malloc(sizeof *s->replies * (size_t)m);
    s->acked = malloc(sizeof *s->acked * (size_t)m);
    s->gcap = s->cmds && s->wides && s->replies && s->acked ? m : 0;
    return s->gcap ? 0 : -1;
}

/* The renewal command of holds[g.first .. g.first + g.size). */
static void build_group(hl_transport *c, hl_hold *const *holds, hl_renew_group g, hl_cmd *cmd,
                        hl_cmd_wide *wide)
{
    if (g.size == 1) {
        const hl_wd_entry *e = holds[g.first]->ref;
        hl_cmd_renew_kind(cmd, e->kind, e->names, e->owner, c->opts.watchdog_lease_ms);
        return;
    }
    const hl_names *names[HL_RENEW_MANY_MAX];
    const char *owners[HL_RENEW_MANY_MAX];
    for (size_t j = 0; j < g.size; j++) {
        const hl_wd_entry *e = holds[g.first + j]->ref;
        names[j] = e->names;
        owners[j] = e->owner;
    }
    hl_cmd_renew_many(cmd, wide, names, owners, (int)g.size, c->opts.watchdog_lease_ms);
}

/* Send the m groups of holds (as the session grouped them; one pipeline
 * per node) and write each hold's outcome in out (indexed as holds). The
 * holds of a group whose answer was an error for the whole call (a slot
 * moving under a multi-key call, say) are marked in retry, so that the
 * caller renews them one by one. */
static void renew_groups(hl_transport *c, hl_wd_scratch *s, hl_hold *const *holds, int n,
                         const hl_renew_group *groups, int m, hl_renew_outcome *out, int *retry)
{
    if (scratch_cmds(s, m) != 0) {
        for (int i = 0; i < n; i++)
            out[i] = HL_RENEW_TROUBLE; /* try again next tick */
        return;
    }
    redisReply **replies = s->replies;
    for (int g = 0; g < m; g++) {
        build_group(c, holds, groups[g], &s->cmds[g], &s->wides[g]);
        replies[g] = NULL;
    }
    char err[HL_ERRMSG_MAX];
    hl_stats_add(&c->stats.renewal_commands, (uint64_t)m);
    int *acked = s->acked;
    if (hl_exec_pipeline_acked(c, s->cmds, m, replies, acked, err)) {
        char msg[HL_ERRMSG_MAX + 32];
        snprintf(msg, sizeof msg, "watchdog renewal failed: %s", err);
        hl_transport_report(c, msg);
    }
    for (int g = 0; g < m; g++) {
        size_t first = groups[g].first, size = groups[g].size;
        /* the engine says what each answer means */
        if (size == 1)
            out[first] = hl_renew_classify(replies[g]);
        else if (!hl_renew_classify_many(replies[g], (int)size, out + first) && replies[g] &&
                 replies[g]->type == REDIS_REPLY_ERROR)
            for (size_t j = 0; j < size; j++)
                retry[first + j] = 1;
        /* no replica took it: not a confirmation (hl_renew_unacked) */
        for (size_t j = 0; j < size; j++)
            out[first + j] = hl_renew_unacked(out[first + j], acked[g]);
    }
    for (int g = 0; g < m; g++)
        if (replies[g])
            freeReplyObject(replies[g]);
}

/* Holds whose channel's cluster slot moved (hl_sub_moved): observe it
 * again where the slot lives now (the renewal pass just before followed
 * the redirect and marked the slot map stale, so routing reloads it).
 * Renewal thread; mu held, released around each move, since observing
 * takes the pubsub mutex and routing may reload the map. The entry is
 * pinned as inflight meanwhile, as during a renewal. One try per hold and
 * pass: one that lands on a moved channel again is tried at the next. */
static void follow_moved(hl_transport *c)
{
    hl_watchdog *wd = &c->wd;
    unsigned pass = ++wd->follow_pass;
    hl_wd_entry *from = wd->entries;
    for (;;) {
        hl_wd_entry *e = from;
        while (e && (e->removed || e->s.lost || e->inflight || e->followed == pass ||
                     !hl_sub_moved(&e->obs)))
            e = e->next;
        if (!e)
            return;
        e->followed = pass;
        e->inflight = 1;
        pthread_mutex_unlock(&wd->mu);
        hl_sub_unregister(c, &e->obs);
        hl_sub_observe(c, &e->obs, hl_hold_channel(e->kind, e->names), hold_message, e);
        pthread_mutex_lock(&wd->mu);
        e->inflight = 0;
        pthread_cond_broadcast(&wd->cv); /* removers */
        /* e is still listed (a remover waited for inflight): the walk goes
         * on after it, once over the list per pass */
        from = e->next;
    }
}

/* One pass of the renewal thread: renew the holds the session says are
 * due by now + horizon; mu held, released while the renewals are in
 * flight. */
static void renew_batch(hl_transport *c, int64_t horizon)
{
    hl_watchdog *wd = &c->wd;
    int64_t sent_at = hl_now_mono_ms();
    hl_hold *s;
    if (!wd->holds.count)
        return;
    if (scratch_holds(wd, (int)wd->holds.count) != 0) {
        /* no memory: these renewals fail; the next ones go out when due */
        while ((s = hl_holds_renew_next(&wd->holds, sent_at, horizon)))
            hl_holds_outcome(&wd->holds, s, HL_RENEW_TROUBLE, 1, sent_at);
        return;
    }
    hl_wd_scratch *sc = wd->scratch;
    hl_hold **holds = sc->holds, **again = sc->again;
    hl_renew_outcome *out = sc->out, *out2 = sc->out2;
    int *retry = sc->retry, *unused = sc->unused;
    /* the session hands out the due holds grouped into renewal commands */
    size_t m = 0;
    int n = (int)hl_holds_renew_due(&wd->holds, sent_at, horizon, HL_RENEW_MANY_MAX, holds,
                                    (size_t)sc->ncap, sc->groups, &m);
    if (n <= 0)
        return;
    for (int i = 0; i < n; i++)
        ((hl_wd_entry *)holds[i]->ref)->inflight = 1;
    memset(retry, 0, sizeof *retry * (size_t)n);
    pthread_mutex_unlock(&wd->mu);
    renew_groups(c, sc, holds, n, sc->groups, (int)m, out, retry);
    int nagain = 0;
    for (int i = 0; i < n; i++)
        if (retry[i]) {
            sc->singles[nagain].first = (size_t)nagain;
            sc->singles[nagain].size = 1;
            again[nagain++] = holds[i];
        }
    if (nagain) { /* one by one, as before batching */
        renew_groups(c, sc, again, nagain, sc->singles, nagain, out2, unused);
        for (int i = 0, k = 0; i < n; i++)
            if (retry[i])
                out[i] = out2[k++];
    }

    pthread_mutex_lock(&wd->mu);
    for (int i = 0; i < n; i++) {
        hl_wd_entry *e = holds[i]->ref;
        /* only "owner field gone" is a loss; no answer or an odd one is
         * retried when the next renewal is due. Decided per hold: a node
         * that failed does not hide the others' losses. */
        hl_renew_outcome o = out[i];
        hl_stats_add(o == HL_RENEW_RENEWED ? &c->stats.renewals : &c->stats.renewal_failures, o != HL_RENEW_LOST);
        /* a removed hold left the table: its outcome changes nothing */
        if (!e->removed &&
            hl_holds_outcome(&wd->holds, &e->s, o, 1, sent_at) == HL_RENEW_LOST)
            continue; /* stays inflight until the watchdog thread reports it */
        e->inflight = 0;
    }
    pthread_cond_broadcast(&wd->cv); /* removers; the watchdog thread reports */
}

/* One check pass of the renewal thread: every hold the session has due
 * for a check (a message on its lock's channel, hl_holds_heard) is asked
 * "is your field still there?" (hl_cmd_hold_check, one pipeline; no
 * renewal), and the session takes each answer (gone: lost, reported by the
 * watchdog thread as a renewal's LOST is). mu held, released while the
 * checks are in flight. */
static void check_batch(hl_transport *c)
{
    hl_watchdog *wd = &c->wd;
    int64_t now = hl_now_mono_ms();
    hl_hold *s;
    if (scratch_holds(wd, (int)wd->holds.count) != 0 || scratch_cmds(wd->scratch, (int)wd->holds.count) != 0) {
        /* no memory: nothing known; the renewals and the doubt timer go on */
        while ((s = hl_holds_check_next(&wd->holds, now)))
            hl_holds_check_outcome(&wd->holds, s, -1);
        return;
    }
    hl_wd_scratch *sc = wd->scratch;
    hl_hold **holds = sc->holds;
    int n = 0;
    while (n < sc->ncap && n < sc->gcap && (s = hl_holds_check_next(&wd->holds, now))) {
        ((hl_wd_entry *)s->ref)->inflight = 1;
        holds[n++] = s;
    }
    if (n == 0)
        return;
    pthread_mutex_unlock(&wd->mu);
    for (int i = 0; i < n; i++) {
        const hl_wd_entry *e = holds[i]->ref;
        hl_cmd_hold_check_kind(&sc->cmds[i], e->kind, e->names, e->owner);
        sc->replies[i] = NULL;
    }
    char err[HL_ERRMSG_MAX];
    if (hl_exec_pipeline(c, sc->cmds, n, sc->replies, err)) {
        char msg[HL_ERRMSG_MAX + 32];
        snprintf(msg, sizeof msg, "watchdog hold check failed: %s", err);
        hl_transport_report(c, msg);
    }
    int *gone = sc->retry;
    for (int i = 0; i < n; i++) {
        gone[i] = -1; /* no usable answer: nothing known */
        int g;
        const hl_wd_entry *e = holds[i]->ref; /* inflight: it lives */
        if (sc->replies[i] && hl_hold_check_gone_kind(e->kind, sc->replies[i], &g) == 0)
            gone[i] = g;
        if (sc->replies[i])
            freeReplyObject(sc->replies[i]);
    }
    pthread_mutex_lock(&wd->mu);
    for (int i = 0; i < n; i++) {
        hl_wd_entry *e = holds[i]->ref;
        /* a removed hold left the table: its answer changes nothing */
        if (!e->removed) {
            hl_holds_check_outcome(&wd->holds, &e->s, gone[i]);
            if (e->s.lost && gone[i] == 1)
                continue; /* stays inflight until the watchdog thread reports it */
        }
        e->inflight = 0;
    }
    pthread_cond_broadcast(&wd->cv); /* removers; the watchdog thread reports */
}

/* Fixed leases that ended (the session's hl_holds_end_next: out of its
 * table already): each entry stops listening and is freed, as a release
 * would. Renewal thread; mu held, released while an entry is freed (and
 * while claim waits for a registration or report using it). */
static void end_leases(hl_transport *c)
{
    hl_watchdog *wd = &c->wd;
    hl_hold *s;
    while ((s = hl_holds_end_next(&wd->holds, hl_now_mono_ms()))) {
        hl_wd_entry *e = s->ref;
        if (e->removed)
            continue; /* claimed meanwhile: its remover frees it */
        claim(wd, e);
        pthread_mutex_unlock(&wd->mu); /* entry_free takes the pubsub mutex */
        entry_free(c, e);
        pthread_mutex_lock(&wd->mu);
    }
}

/* The renewal thread: a check pass when the session has holds due for a
 * check (hl_holds_heard), a renewal pass when it says a renewal is due
 * (every hold due within the next period goes with it, so the holds share
 * one pass per period); the I/O with mu released. It never calls up. */
static void *renewal_main(void *arg)
{
    hl_transport *c = arg;
    hl_watchdog *wd = &c->wd;
    int64_t period = hl_renew_period(c->opts.watchdog_lease_ms);
    pthread_mutex_lock(&wd->mu);
    while (!wd->stop) {
        int64_t now = hl_now_mono_ms();
        int64_t due = hl_holds_next_renewal(&wd->holds);
        if (due >= 0 && due <= now) {
            /* first: a renewal due answers a check of its hold too */
            renew_batch(c, period);
            follow_moved(c);
            continue;
        }
        if (hl_holds_check_pending(&wd->holds)) {
            check_batch(c);
            follow_moved(c);
            continue;
        }
        int64_t end = hl_holds_next_end(&wd->holds);
        if (end >= 0 && end <= now) {
            end_leases(c);
            continue;
        }
        /* sleep on the pipe: hold_message (a check due), hl_wd_add (a
         * fixed lease ending before wake_at) and hl_wd_shutdown write to
         * it; a watchdog hold added meanwhile is due a period after its
         * grant at the earliest, so a period's sleep when none is due
         * finds it in time */
        int64_t ms = due >= 0 && due - now < period ? due - now : period;
        if (end >= 0 && end - now < ms)
            ms = end - now;
        wd->renewal_wake_at = now + ms;
        pthread_mutex_unlock(&wd->mu);
        struct pollfd pf = {wd->rwk.wake_fd[0], POLLIN, 0};
        if (poll(&pf, 1, (int)(ms > 3600000 ? 3600000 : ms)) > 0)
            hl_wake_drain(wd->rwk.wake_fd[0]);
        pthread_mutex_lock(&wd->mu);
        wd->renewal_wake_at = -1; /* awake: it looks at every deadline next */
    }
    pthread_mutex_unlock(&wd->mu);
    return NULL;
}

/* The watchdog thread: reports losses the renewal thread found and holds in
 * doubt when their time comes; runs what the callbacks deferred. No I/O. */
static void *watchdog_main(void *arg)
{
    hl_transport *c = arg;
    hl_watchdog *wd = &c->wd;
    pthread_mutex_lock(&wd->mu);
    while (!wd->stop && !wd->close_deferred) {
        report_found_lost(c);
        int64_t due = report_unconfirmed(c);
        run_deferred(wd); /* what the callbacks asked for */
        if (wd->stop || wd->close_deferred)
            break;
        int64_t now = hl_now_mono_ms();
        if (due <= now)
            continue;
        struct timespec ts;
        /* an hour at most: a renewal moves every due time later, and a new
         * hold or a loss found wakes the thread */
        hl_abs_timespec(&ts, due - now < 3600000 ? due - now : 3600000);
        pthread_cond_timedwait(&wd->cv, &wd->mu, &ts);
    }
    int close_now = wd->close_deferred && !wd->stop;
    pthread_mutex_unlock(&wd->mu);
    if (close_now) /* a lost callback closed the client: do it now, as the last thing */
        c->sinks.close(c->sinks.ctx);
    return NULL;
}

int hl_wd_on_thread(hl_transport *c)
{
    hl_watchdog *wd = &c->wd;
    pthread_mutex_lock(&wd->mu);
    int on = wd->wk.running && pthread_equal(wd->wk.thread, pthread_self());
    pthread_mutex_unlock(&wd->mu);
    return on;
}

void hl_wd_wait_deferred(hl_transport *c)
{
    hl_watchdog *wd = &c->wd;
    pthread_mutex_lock(&wd->mu);
    if (!(wd->wk.running && pthread_equal(wd->wk.thread, pthread_self())))
        while (wd->deferring || (wd->wk.running && !wd->stop && wd->deferred))
            pthread_cond_wait(&wd->cv, &wd->mu);
    pthread_mutex_unlock(&wd->mu);
}

void hl_wd_defer(hl_transport *c, hl_deferred *d)
{
    hl_watchdog *wd = &c->wd;
    pthread_mutex_lock(&wd->mu);
    if (!wd->deferred_tail)
        wd->deferred_tail = &wd->deferred;
    d->next = NULL;
    *wd->deferred_tail = d;
    wd->deferred_tail = &d->next;
    pthread_mutex_unlock(&wd->mu);
}

void hl_wd_defer_close(hl_transport *c)
{
    hl_watchdog *wd = &c->wd;
    pthread_mutex_lock(&wd->mu);
    wd->close_deferred = 1;
    pthread_mutex_unlock(&wd->mu);
}

/* A fixed lease of a hold in the table ends before the renewal thread
 * wakes: wake it (it stops the hold's listening then). mu held. */
static void end_moved(hl_watchdog *wd, const hl_hold *s)
{
    if (s->in_table && !s->watchdog && s->lease_ms > 0 && wd->renewal_wake_at >= 0 &&
        s->confirmed_at + s->lease_ms < wd->renewal_wake_at) {
        wd->renewal_wake_at = -1; /* once: it is awake now */
        hl_worker_wake(&wd->rwk);
    }
}

/* A new hold of (holder, tid), or one more of it (count 1), or its fixed
 * lease applied again by a partial release (count 0): mu held. 1 when it
 * was taken by an existing entry. A grant's mode follows the entry's: a
 * fixed-lease re-entry of a watchdog hold changes nothing (the watchdog
 * renews it; it already listens); a watchdog re-entry of a fixed-lease
 * hold makes it a watchdog hold with one watchdog acquisition (its release
 * then stops the renewal, and a hold left is renewed again, as before
 * fixed-lease holds were kept here). */
static int add_hold(hl_watchdog *wd, const void *holder, uint64_t tid, int watchdog,
                    int64_t lease_ms, int count, int64_t sent_at)
{
    hl_wd_entry *e = find_live(wd, holder, tid);
    if (!e)
        return 0;
    if (e->s.watchdog && !watchdog)
        return 1;
    if (!e->s.watchdog && watchdog)
        e->holds = 0;
    e->holds += count;
    /* a re-entry applied the lease again: the session takes it as the
     * confirmation when it was sent after the last one (cannot fail: the
     * hold is in the table) */
    int64_t before = e->s.confirmed_at;
    int was = e->s.watchdog;
    hl_holds_grant(&wd->holds, &e->s, watchdog, watchdog ? 0 : lease_ms, sent_at);
    if (e->s.confirmed_at != before || was != watchdog)
        pthread_cond_broadcast(&wd->cv); /* its doubt timer moved */
    end_moved(wd, &e->s);
    return 1;
}

static int wd_add(hl_transport *c, void *holder, hilock_kind kind, const hl_names *names,
                  uint64_t tid, const char *owner, int watchdog, int64_t lease_ms,
                  int64_t sent_at)
{
    hl_watchdog *wd = &c->wd;
    pthread_mutex_lock(&wd->mu);
    if (!wd->holds_ready) { /* the options are set by now */
        hl_holds_init(&wd->holds, c->opts.watchdog_lease_ms, c->opts.command_timeout_ms);
        wd->holds_ready = 1;
        wd->renewal_wake_at = -1;
    }
    int counted = add_hold(wd, holder, tid, watchdog, lease_ms, 1, sent_at);
    /* a new hold: the threads first, so that the renewal thread's pipe,
     * which the listener writes to for this hold's channel, exists before
     * the channel is observed */
    int started = counted ||
                  ((wd->wk.running || wd->stop ||
                    hl_worker_start(&wd->wk, 0, watchdog_main, c) == 0) &&
                   (wd->rwk.running || wd->stop ||
                    hl_worker_start(&wd->rwk, 1, renewal_main, c) == 0));
    pthread_mutex_unlock(&wd->mu);
    if (counted)
        return 0;
    if (!started)
        return HILOCK_ENOMEM;
    hl_wd_entry *e = calloc(1, sizeof *e);
    if (!e)
        return HILOCK_ENOMEM;
    hl_hold_init(&e->s, e, (int)kind);
    /* its renewal command: alone (the engine says which kinds: a read
     * side), or with the holds on the same node (one slot on Redis Cluster) */
    e->s.alone = hl_renew_alone(kind);
    e->s.batch = c->ep.cluster ? hl_key_slot(names->name, strlen(names->name)) : 0;
    e->holder = holder;
    e->kind = kind;
    e->names = names;
    e->tid = tid;
    e->holds = 1;
    e->client = c;
    if (owner)
        snprintf(e->owner, sizeof e->owner, "%s", owner);
    else
        hl_hold_owner(e->owner, kind, c->id, tid);
    pthread_mutex_lock(&wd->mu);
    if (add_hold(wd, holder, tid, watchdog, lease_ms, 1, sent_at)) { /* added meanwhile */
        pthread_mutex_unlock(&wd->mu);
        entry_free(c, e);
        return 0;
    }
    /* the session schedules its renewals and its doubt, or a fixed
     * lease's end */
    if (hl_holds_grant(&wd->holds, &e->s, watchdog, watchdog ? 0 : lease_ms, sent_at) != 0) {
        pthread_mutex_unlock(&wd->mu);
        entry_free(c, e);
        return HILOCK_ENOMEM;
    }
    link_entry(wd, e);
    e->observing = 1; /* a remover waits until obs is registered */
    pthread_cond_broadcast(&wd->cv); /* the watchdog thread times its doubt */
    end_moved(wd, &e->s);
    pthread_mutex_unlock(&wd->mu);
    /* listen on the lock's own channel, so that a force unlock is checked
     * at once; in the table first, so that what is heard (the subscription
     * confirmed, say) applies to it. Not under mu (routing may refresh a
     * cluster's slot map; the listener takes mu). No subscription (closing,
     * no memory) only means the next renewal finds a loss. */
    hl_sub_observe(c, &e->obs, hl_hold_channel(kind, names), hold_message, e);
    pthread_mutex_lock(&wd->mu);
    e->observing = 0;
    pthread_cond_broadcast(&wd->cv); /* removers */
    pthread_mutex_unlock(&wd->mu);
    return 0;
}

int hl_wd_add(hl_transport *c, void *holder, hilock_kind kind, const hl_names *names,
              uint64_t tid, int watchdog, int64_t lease_ms, int64_t sent_at)
{
    return wd_add(c, holder, kind, names, tid, NULL, watchdog, lease_ms, sent_at);
}

int hl_wd_keep(hl_transport *c, void *holder, hilock_kind kind, const hl_names *names,
               const char *owner, int watchdog, int64_t lease_ms, int64_t sent_at)
{
    return wd_add(c, holder, kind, names, 0, owner, watchdog, lease_ms, sent_at);
}

int hl_wd_release(hl_transport *c, const void *holder, uint64_t tid, int64_t *confirmed_at)
{
    hl_watchdog *wd = &c->wd;
    pthread_mutex_lock(&wd->mu);
    hl_wd_entry *e = find_live(wd, holder, tid);
    int stopped = 0;
    *confirmed_at = e ? e->s.confirmed_at : hl_now_mono_ms();
    if (e && e->holds > 1) {
        e->holds--;
    } else if (e) {
        stopped = e->s.watchdog ? HL_WD_STOPPED : HL_WD_STOPPED_FIXED;
        claim(wd, e);
    }
    pthread_mutex_unlock(&wd->mu);
    if (stopped)
        entry_free(c, e);
    return stopped;
}

void hl_wd_extended(hl_transport *c, const void *holder, uint64_t tid, int64_t lease_ms,
                    int64_t sent_at)
{
    hl_watchdog *wd = &c->wd;
    pthread_mutex_lock(&wd->mu);
    if (wd->holds_ready && lease_ms > 0)
        add_hold(wd, holder, tid, 0, lease_ms, 0, sent_at);
    pthread_mutex_unlock(&wd->mu);
}

int hl_wd_is_lost(hl_transport *c, const void *holder, uint64_t tid, int any_tid, int64_t now)
{
    hl_watchdog *wd = &c->wd;
    int lost = 0;
    pthread_mutex_lock(&wd->mu);
    if (wd->holds_ready)
        for (hl_wd_entry *e = map_next(wd->map, holder, any_tid ? 0 : tid, 0);
             e && e->holder == holder && (any_tid || e->tid == tid) && !lost;
             e = map_next(wd->map, holder, e->tid, (uintptr_t)e))
            lost = !e->removed && hl_holds_is_lost(&wd->holds, &e->s, now);
    pthread_mutex_unlock(&wd->mu);
    return lost;
}

void hl_wd_forget(hl_transport *c, const void *holder, uint64_t tid)
{
    hl_watchdog *wd = &c->wd;
    pthread_mutex_lock(&wd->mu);
    hl_wd_entry *e = find_live(wd, holder, tid);
    if (e)
        claim(wd, e);
    pthread_mutex_unlock(&wd->mu);
    if (e)
        entry_free(c, e);
}

void hl_wd_forget_lock(hl_transport *c, const void *holder)
{
    hl_watchdog *wd = &c->wd;
    pthread_mutex_lock(&wd->mu);
    for (;;) {
        hl_wd_entry *e = find_unclaimed(wd, holder);
        if (!e)
            break;
        /* also waits for a loss report about holder still running */
        claim(wd, e);
        pthread_mutex_unlock(&wd->mu);
        entry_free(c, e);
        pthread_mutex_lock(&wd->mu);
    }
    pthread_mutex_unlock(&wd->mu);
}

void hl_wd_free_forked(hl_transport *c)
{
    /* a child after fork(): no watchdog thread runs here and the parent's
     * mutexes may be held by threads that do not exist; the entries and
     * the renewal buffers are this process's memory only (their listeners
     * are the pub/sub lists hl_node_free frees) */
    hl_watchdog *wd = &c->wd;
    hl_wd_entry *left = wd->entries;
    wd->entries = NULL;
    wd->map = NULL;
    while (left) {
        hl_wd_entry *e = left;
        left = e->next;
        free(e);
    }
    scratch_free(wd->scratch);
    wd->scratch = NULL;
}

void hl_wd_shutdown(hl_transport *c, int from_watchdog)
{
    hl_watchdog *wd = &c->wd;
    pthread_mutex_lock(&wd->mu);
    int running = wd->wk.running, renewing = wd->rwk.running;
    wd->stop = 1;
    pthread_cond_broadcast(&wd->cv);
    hl_worker_wake(&wd->rwk);
    pthread_mutex_unlock(&wd->mu);
    if (running && from_watchdog)
        pthread_detach(wd->wk.thread); /* we are it: it ends right after the close */
    else if (running)
        hl_worker_join(&wd->wk);
    if (renewing) /* its I/O in flight ends within the client's timeouts */
        hl_worker_join(&wd->rwk);
    /* under the lock: a lock handle freed meanwhile asks hl_wd_on_thread */
    pthread_mutex_lock(&wd->mu);
    wd->wk.running = 0;
    wd->rwk.running = 0;
    hl_wd_entry *left = wd->entries;
    wd->entries = NULL;
    wd->map = NULL;
    scratch_free(wd->scratch); /* the renewal thread has ended */
    wd->scratch = NULL;
    hl_holds_free(&wd->holds); /* its holds are the entries freed below */
    wd->holds_ready = 0;
    pthread_mutex_unlock(&wd->mu);
    while (left) { /* entry_free takes the pubsub mutex: not under mu */
        hl_wd_entry *e = left;
        left = e->next;
        entry_free(c, e);
    }
}
