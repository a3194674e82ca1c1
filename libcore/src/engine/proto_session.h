/*
 * The session, engine layer (proto_session.c): the first piece of the
 * session issue 31 describes, the holds a client keeps. No I/O, no threads,
 * no clock: every input carries the time (monotonic ms) and the driver asks
 * for what is due. docs/protocol.md ("Session: holds") describes the rules.
 *
 * A hold is the driver's struct hl_hold, embedded in its own record (the
 * table allocates no hold): ref and kind are the driver's; the table never
 * reads ref, and kind only to tell a permit's messages (HL_KIND_PERMIT). The table keeps two binary min-heaps over the holds in
 * it, one of renewal times and one of "in doubt" times, so that adding,
 * removing, rescheduling and finding the next deadline are O(log n), and a
 * FIFO of holds found lost. Not thread-safe: a driver with threads guards it
 * with one mutex.
 *
 * Inputs: a grant (hl_holds_grant, at the time the request was WRITTEN), a
 * renewal sent (hl_holds_renew_next hands it out and marks it sent), a
 * renewal's outcome (hl_holds_outcome), a release or forget
 * (hl_holds_remove), what was heard on a hold's lock channel
 * (hl_holds_heard) and a check's answer (hl_holds_check_outcome), the
 * time. Outputs: the holds to check now (hl_holds_check_next), the next deadline (hl_holds_next*),
 * the holds to renew now (hl_holds_renew_next, one at a time, or
 * hl_holds_renew_due, all of them grouped into renewal commands), the holds to report "in doubt"
 * (hl_holds_doubt_next) and the holds found lost (hl_holds_lost_next). Each
 * output is the hold pointer, so the driver finds its record (ref).
 *
 * The second piece (hl_unsettled_*, at the end): acquire attempts that may
 * have been granted and are not settled, and what the owner's next acquire
 * of that lock must do first.
 */
#ifndef HILOCK_PROTO_SESSION_H
#define HILOCK_PROTO_SESSION_H

/* Included by proto.h, at its end (it uses proto.h's types): include
 * proto.h. */
#ifndef HILOCK_PROTO_H
#error "include proto.h, which includes this header"
#endif

#include <stddef.h>
#include <stdint.h>

/* One hold of the client. Fields are read-only for the driver, except ref,
 * kind, batch and alone (its own; set before the first grant). */
typedef struct hl_hold {
    void *ref;            /* the driver's record (owner, names, callbacks) */
    int kind;             /* the driver's tag (a hilock_kind, say); read
                             only by hl_holds_heard, for which messages
                             ask for a check (hl_hold_check_on_kind: a
                             permit, HL_KIND_PERMIT, checks on every one) */
    unsigned batch;       /* the driver's batch key: holds of one key may
                             share one renewal command (renew_many), e.g.
                             the cluster slot of the lock's key, else 0;
                             the table's lease is the other half of the key */
    int alone;            /* renewed by a command of its own (a read side:
                             its renewal touches more keys than its own) */
    int in_table;         /* granted and neither removed nor lost */
    int watchdog;         /* renewed every period with the watchdog lease;
                             0: a fixed lease, only kept (no renewal, no doubt) */
    int64_t lease_ms;     /* the lease it was taken with (fixed leases) */
    int64_t confirmed_at; /* when the last grant or renewal the server
                             confirmed was sent (its lease runs from no
                             earlier) */
    int64_t tried_at;     /* when the first renewal since confirmed_at was
                             sent; -1: none yet (hl_renew_doubt_at's
                             renew_sent_at) */
    int64_t next_renew;   /* when the next renewal is due */
    int renewing;         /* a renewal of it is in flight */
    int doubt;            /* reported "in doubt" in this silence (a confirmed
                             renewal or a new grant ends the silence) */
    int doubted;          /* reported "in doubt" since the last grant */
    int lost;             /* the server said it is gone (queued or reported) */
    int checking;         /* a check of it is in flight (hl_holds_check_next) */
    int64_t check_at;     /* queued for a check: when the message that asked
                             for it was heard (a renewal or check sent at or
                             after that answers it) */
    /* the table's */
    size_t pos[3];        /* index + 1 in the renewal (0), doubt (1) and
                             fixed-lease end (2) heaps */
    int64_t key[3];
    struct hl_hold *lnext, *lprev; /* the lost FIFO */
    int queued;
    struct hl_hold *cnext, *cprev; /* the check FIFO */
    int check_queued;     /* in the check FIFO */
    int check_again;      /* heard while its check was in flight */
} hl_hold;

typedef struct hl_holds {
    int64_t watchdog_lease_ms;
    int64_t command_timeout_ms;
    hl_hold **heap[3];    /* 0: renewal due, 1: in doubt at, 2: a fixed
                             lease's end */
    size_t n[3];
    size_t cap;           /* room in each heap: >= count */
    size_t count;         /* holds in the table */
    hl_hold *lost_head, *lost_tail;
    hl_hold *check_head, *check_tail; /* holds to check now, in the order heard */
} hl_holds;

/* An empty table for a client's watchdog lease and command timeout. */
HL_HIDDEN void hl_holds_init(hl_holds *t, int64_t watchdog_lease_ms, int64_t command_timeout_ms);
/* Frees the table's own memory (the holds are the driver's). */
HL_HIDDEN void hl_holds_free(hl_holds *t);
/* A hold not in any table yet, for the driver's record ref. */
HL_HIDDEN void hl_hold_init(hl_hold *h, void *ref, int kind);

/* A grant of h whose request was written at sent_at: watchdog (lease_ms
 * ignored) or a fixed lease_ms. A hold not in the table joins it (its first
 * renewal due at sent_at + period); one in it (a re-entry) takes the newer
 * grant as its confirmation (the lease was applied again), and a hold found
 * lost is live again. Ends "doubted". 0, or -1 (no memory: h is not in the
 * table). */
HL_HIDDEN int hl_holds_grant(hl_holds *t, hl_hold *h, int watchdog, int64_t lease_ms,
                             int64_t sent_at);
/* h leaves the table (released, forgotten, freed): it is never handed out
 * again, whatever it was waiting for (a lost report not taken included). */
HL_HIDDEN void hl_holds_remove(hl_holds *t, hl_hold *h);

/* The next watchdog hold whose renewal is due by now + horizon (0: due
 * now; a driver that renews all its holds in one batch per tick passes its
 * period), or NULL. It is marked as sent at now (its renewal in flight,
 * the next due now + period) and is not handed out again before its
 * outcome. */
HL_HIDDEN hl_hold *hl_holds_renew_next(hl_holds *t, int64_t now, int64_t horizon);
/* A group of the holds hl_holds_renew_due hands out: out[first .. first +
 * size) go in one renewal command. */
typedef struct hl_renew_group {
    size_t first, size;
} hl_renew_group;

/* Every watchdog hold whose renewal is due by now + horizon (as
 * hl_holds_renew_next), at most cap of them, each marked as sent at now,
 * into out[0 .. n), grouped for renew_many: groups[0 .. *ngroups) are runs
 * of out, each of holds with one batch key, at most max_group of them
 * (1 .. HL_RENEW_MANY_MAX); a hold marked alone is a group of its own. A
 * key's holds make as few groups as max_group allows (all full but one).
 * groups has room for cap. Returns n (0: none due). */
HL_HIDDEN size_t hl_holds_renew_due(hl_holds *t, int64_t now, int64_t horizon, size_t max_group,
                                    hl_hold **out, size_t cap, hl_renew_group *groups,
                                    size_t *ngroups);
/* The outcome of h's renewal written at sent_at (hl_renew_classify*;
 * acked: a replica took it, or none is asked for: hl_renew_unacked).
 * RENEWED confirms the hold from sent_at (a later silence is reported
 * again); LOST takes it out of the schedule and queues it for
 * hl_holds_lost_next; anything else (trouble, redirect; EVAL is the
 * driver's to resend, and only its final outcome is fed) ends the renewal,
 * the next one goes out when due. Returns the outcome as applied. A hold
 * not in the table is left alone. */
HL_HIDDEN hl_renew_outcome hl_holds_outcome(hl_holds *t, hl_hold *h, hl_renew_outcome o,
                                            int acked, int64_t sent_at);
/* The next hold to report lost "in doubt" at now (no renewal confirmed by
 * the engine's rule, hl_renew_doubt_at), marked doubt and doubted, or
 * NULL. Take the renewals due first (hl_holds_renew_next), so that a
 * renewal that falls due while the driver was held up goes out before its
 * hold can be reported. The hold stays in the table and is still renewed. */
HL_HIDDEN hl_hold *hl_holds_doubt_next(hl_holds *t, int64_t now);
/* The next hold found lost (LOST outcomes, in their order), or NULL. It is
 * no longer in the table. */
HL_HIDDEN hl_hold *hl_holds_lost_next(hl_holds *t);

/* What a driver heard on the lock channel of hold h (hl_hold_channel; a
 * holder listens there so that a force unlock is reported at once), at
 * now: ev a message, a confirmed subscription or an unrequested
 * unsubscribe (the channel's cluster slot moved) on that channel. The
 * session decides whether h is to be checked now ("is its field still
 * there?", hl_cmd_hold_check: no renewal): a lock message
 * (hl_hold_check_on: any unlock or force unlock of the lock; for a permit
 * hold, any message on its semaphore's channel: hl_hold_check_on_kind), a
 * subscription confirmed (a force unlock published before it took effect
 * went unheard), the slot moved (messages go unheard until the driver
 * listens again) or HL_PS_UNHEARD (its subscription connection is not known
 * alive: hl_sublive). Only h is checked, never the client's other holds.
 * Returns 1 when a check of h became due (take it with
 * hl_holds_check_next), else 0 (nothing to do: another frame, h not in the
 * table, a fixed-lease hold whose lease ran out by now (it ended as its
 * caller asked: no loss to report), or already due). A hold whose check is in flight is checked once
 * more after its answer (hl_holds_check_outcome). */
HL_HIDDEN int hl_holds_heard(hl_holds *t, hl_hold *h, const hl_ps_event *ev, int64_t now);
/* h is to be checked now for a reason of the driver's (a check it put off
 * while h's release was in flight, say), as hl_holds_heard with a lock
 * message: 1 when a check became due. */
HL_HIDDEN int hl_holds_check(hl_holds *t, hl_hold *h, int64_t now);
/* The next hold to check now (in the order heard), marked as checking, or
 * NULL. Send hl_cmd_hold_check for it and feed the answer to
 * hl_holds_check_outcome. A renewal of a hold handed out at or after the
 * message was heard answers the same question: such a hold is not handed
 * out here (its renewal's outcome reports a loss). */
HL_HIDDEN hl_hold *hl_holds_check_next(hl_holds *t, int64_t now);
/* The answer to h's check (hl_hold_check_gone): gone 1 (the field is gone:
 * the hold is lost: out of the schedule, queued for hl_holds_lost_next as
 * a renewal's LOST outcome), 0 (still there), -1 (no usable answer:
 * nothing known; the renewals and the doubt timer go on). A hold heard
 * again meanwhile is due for another check. A hold not in the table is
 * left alone. */
HL_HIDDEN void hl_holds_check_outcome(hl_holds *t, hl_hold *h, int gone);
/* 1 when a hold waits for hl_holds_check_next (its check not sent yet). */
HL_HIDDEN int hl_holds_check_pending(const hl_holds *t);

/* The earliest deadline (renewal, doubt, or a check due: the time it was
 * heard), the earliest renewal, the earliest doubt; -1: none. */
HL_HIDDEN int64_t hl_holds_next(const hl_holds *t);
HL_HIDDEN int64_t hl_holds_next_renewal(const hl_holds *t);
HL_HIDDEN int64_t hl_holds_next_doubt(const hl_holds *t);
/* The earliest end of a fixed lease among the holds in the table (-1:
 * none). Not part of hl_holds_next: a driver that stops what it does for a
 * hold when its lease ends (listening on its channel) asks for it. */
HL_HIDDEN int64_t hl_holds_next_end(const hl_holds *t);
/* The next hold whose fixed lease ended by now (granted at confirmed_at
 * with lease_ms: it ended as its caller asked, no loss to report), taken
 * out of the table as hl_holds_remove does, or NULL. The driver stops
 * listening on its channel and forgets it. */
HL_HIDDEN hl_hold *hl_holds_end_next(hl_holds *t, int64_t now);
/* A hold whose subscription to its lock's channel went (its connection was
 * lost, the cluster slot moved, no route to the channel is known now, the
 * subscribe could not be sent) listens again at the time this returns, for
 * a loss of it at now: not at once, so that a server that is down is not
 * asked in a loop; its renewals and doubt timer go on meanwhile, and the
 * subscription's confirmation has it checked (hl_holds_heard). Today
 * now + HL_OBSERVE_RETRY_MS. */
enum { HL_OBSERVE_RETRY_MS = 200 };
HL_HIDDEN int64_t hl_holds_observe_again_at(int64_t now);
/* When h is to be reported in doubt (-1: never: not a watchdog hold in
 * the table, or reported in this silence). */
HL_HIDDEN int64_t hl_holds_doubt_at(const hl_holds *t, const hl_hold *h);
/* 1 when h is lost or was reported in doubt, or would be at now (asked
 * before the driver's timer ran: hl_renew_in_doubt). */
HL_HIDDEN int hl_holds_is_lost(const hl_holds *t, const hl_hold *h, int64_t now);

/* ---- acquire attempts not settled (the "unsettled acquire" rule) ----
 *
 * An acquire attempt that may have been granted on the server (its reply
 * was lost or came too late) and whose settle has not told what it did is
 * recorded here: lock name, owner, the attempt's acquire latch argument
 * and its lifetime, its lease, and whether a settle of it runs (the
 * driver's). The session decides: before that owner's next acquire of
 * that lock, the driver settles the attempt first (hl_acquire_resettle
 * under the recorded latch) or waits for the settle that runs; entering
 * first would stack a new hold on a grant nobody accounts for (the
 * watchdog then renews it for as long as the owner re-enters), and a late
 * copy of the attempt running after the new grant would apply its own
 * lease to it. docs/protocol.md ("Session: unsettled acquires"). No I/O, no threads, no clock; not thread-safe (a driver
 * with threads guards it with one mutex). */
typedef struct hl_unsettled_acq {
    struct hl_unsettled_acq *next;
    char *name;            /* the lock's name */
    char *latch;           /* the attempt's "<latch key>:<seq>"; NULL: none
                              (nothing can settle it but its own reply) */
    char owner[HL_OWNER_MAX];
    int64_t latch_ttl_ms;  /* the latch's lifetime, as the attempt set it */
    int64_t lease_ms;      /* the attempt's lease */
    int64_t until;         /* no settle running: forgotten at this time: a
                              copy of the attempt still on its way may run
                              up to a latch lifetime after the last settle
                              gave up, and its grant lasts its lease */
    int settling;          /* a settle of it runs (hl_unsettled_settle_end
                              reports its end) */
    int background;        /* settles the driver ran for it on its own
                              (hl_unsettled_background) */
} hl_unsettled_acq;

/* Releases of one owner on one lock that got no answer to any try
 * (hl_release.unconfirmed), oldest first (hl_unsettled_rel_*). */
#define HL_UNSETTLED_REL_MAX 8
typedef struct hl_unsettled_rel {
    struct hl_unsettled_rel *next;
    char *name;
    char owner[HL_OWNER_MAX];
    int64_t until;     /* every hold they may have left has ended by then */
    size_t n;          /* request ids kept, rid[0] the oldest */
    char *rid[HL_UNSETTLED_REL_MAX];
    int overflow;      /* more got no answer than are kept: the owner's
                          acquires of the lock are refused until `until` */
} hl_unsettled_rel;

typedef struct hl_unsettled {
    hl_unsettled_acq *head;
    size_t count, max;
    hl_unsettled_rel *rel_head;
    size_t rel_count;  /* records in rel_head (at most max) */
    int64_t rel_full_until; /* a release could not be recorded at all (the
                               table full, no memory): every acquire through
                               the table is refused until then; 0: none */
} hl_unsettled;

/* What hl_unsettled_next tells the driver before an acquire. */
typedef enum hl_unsettled_step {
    HL_UNSETTLED_NONE = 0, /* nothing of this owner on this lock: send the attempt */
    HL_UNSETTLED_SETTLE,   /* settle *out first (hl_acquire_resettle with its
                              latch, latch_ttl_ms and lease_ms), then report
                              the end (hl_unsettled_settle_end) and ask again */
    HL_UNSETTLED_WAIT,     /* a settle of *out runs: ask again after its end */
    HL_UNSETTLED_REFUSE    /* releases that may still be pending could not all
                              be kept: fail the acquire (hl_unsettled_rel_next) */
} hl_unsettled_step;

/* An empty table keeping at most max records (0: 1024); when all are
 * taken, the one not settling that is forgotten first makes room. */
HL_HIDDEN void hl_unsettled_init(hl_unsettled *t, size_t max);
/* Frees every record (a settle the driver still runs reports to nobody). */
HL_HIDDEN void hl_unsettled_free(hl_unsettled *t);
/* Record owner's attempt on name that may have been granted and is not
 * settled, at now: latch (may be NULL) and latch_ttl_ms as the attempt
 * carried them, lease_ms its lease; settling 1 when the driver runs a
 * settle of it now (end it with hl_unsettled_settle_end), 0 when every
 * settle try failed; with no settle running it is forgotten at now + its
 * lease + its latch lifetime (a copy of the attempt may still be on its
 * way and run up to a latch lifetime later; its grant lasts its lease).
 * Strings are copied. The record, or NULL (no memory, or
 * the table is full of settling records: nothing then stops the owner's
 * next acquire from re-entering a grant the attempt may have taken; no
 * driver can tell such a re-entry from its hold count, since none knows
 * every hold an owner has: multi-lock members, other handles). */
HL_HIDDEN hl_unsettled_acq *hl_unsettled_put(hl_unsettled *t, const char *name,
                                             const char *owner, const char *latch,
                                             int64_t latch_ttl_ms, int64_t lease_ms,
                                             int settling, int64_t now);
/* The settle of u (put settling, or handed out by hl_unsettled_next) ended
 * at now: settled 1 (its outcome is known and applied: u is freed), 0 (it
 * gave up: u stays, not settling, until now + its lease + its latch
 * lifetime). */
HL_HIDDEN void hl_unsettled_settle_end(hl_unsettled *t, hl_unsettled_acq *u, int settled,
                                       int64_t now);
/* A record whose settle gave up (not settling) is settled once more by
 * the driver on its own, without waiting for the owner's next acquire of
 * the lock, which may never come: a place in a fair line the attempt took
 * would otherwise hold up every later waiter until its deadline (the window:
 * 5 minutes by default), and its keys would stay. The driver asks at the end
 * of every settle that gave up (hl_unsettled_put with settling 0,
 * hl_unsettled_settle_end with settled 0): 1 when it is to start one now
 * (hl_settle_init_unsettled, with reconnects and pauses): u is then marked
 * settling (end it with hl_unsettled_settle_end); 0 when not (no latch to
 * settle it by, a settle runs, or HL_UNSETTLED_BACKGROUND of them ran). */
#define HL_UNSETTLED_BACKGROUND 2
HL_HIDDEN int hl_unsettled_background(hl_unsettled *t, hl_unsettled_acq *u);
/* The driver dropped u's settle at now so that the owner's acquire settles
 * the attempt itself (hl_settle_can_hand_over): u is not settling any more.
 * background: that settle was one hl_unsettled_background started; it does
 * not count against HL_UNSETTLED_BACKGROUND then. The acquire's own try
 * gives up at once while the server refuses connections, and each of the
 * owner's acquires during an outage would otherwise use one up: after two,
 * nothing settled the attempt, and a fair line entry it took held every
 * later waiter up until its window ended (simulator seed 2004974). */
HL_HIDDEN void hl_unsettled_handed_over(hl_unsettled *t, hl_unsettled_acq *u, int background,
                                        int64_t now);
/* u leaves the table (freed), whatever its state. */
HL_HIDDEN void hl_unsettled_forget(hl_unsettled *t, hl_unsettled_acq *u);
/* Before owner's acquire of name, at now: records past their time are
 * forgotten; then WAIT (a settle of an attempt of theirs runs: *out is it),
 * SETTLE (*out, now marked settling: settle it first) or NONE. */
HL_HIDDEN hl_unsettled_step hl_unsettled_next(hl_unsettled *t, const char *name,
                                              const char *owner, int64_t now,
                                              hl_unsettled_acq **out);
/* 1 when a settle of an attempt of owner on name runs. */
HL_HIDDEN int hl_unsettled_settling(const hl_unsettled *t, const char *name, const char *owner);

/* ---- releases that got no answer (the "unsettled release" rule) ----
 *
 * A release that got no answer to any try may have run or not: its hold is
 * renewed no more (hl_release.renew 0) and has ended by its lease at the
 * latest. Until then the owner's next acquire of that lock must not
 * re-enter a hold that may still be there (the server would count one more
 * hold than the caller; the caller's last release then leaves one, and the
 * watchdog renews it for as long as the owner re-enters). The rule, one
 * for every driver:
 * - remembered: every such release of an owner on a lock, by its request
 *   id, oldest first, up to HL_UNSETTLED_REL_MAX per owner and lock and
 *   the table's max (hl_unsettled_init) owner-lock records;
 * - re-sent: before that owner's next acquire or release of the lock, each
 *   under its own request id, oldest first, one at a time
 *   (hl_unsettled_rel_next, then hl_unsettled_rel_end with what it
 *   answered): one that ran answers its first answer from the owner's
 *   unlock latch and changes nothing, one that never arrived runs now. The
 *   owner's releases thus run in the order they were asked for: a newer
 *   one that ran first would leave its higher seq in the owner's unlock
 *   latch, which then refuses the older one as a late copy (unlock.lua),
 *   and a hold would be left. A new release whose earlier one got no
 *   answer again is not sent: the driver puts it too (it goes after); a
 *   release ignores HL_UNSETTLED_REFUSE (what was not kept cannot be sent);
 * - dropped: one that answered (ran now or before); all of the owner's on
 *   the lock on "not owner" (it holds none of it: nothing left to
 *   release); all of them once `until` (the latest lease end) has passed;
 * - full: more than HL_UNSETTLED_REL_MAX for one owner and lock, or a
 *   request id that cannot be copied: the record keeps what it has and is
 *   marked overflow: the owner's acquires of the lock are refused
 *   (HL_UNSETTLED_REFUSE) until the last lease has run out. A release that
 *   cannot be recorded at all (the table full of live records, no memory)
 *   refuses every acquire through the table until its lease has run out.
 *   Nothing that may still be pending is forgotten before its hold ends.
 * docs/protocol.md ("Session: unsettled releases"). No I/O, no threads, no
 * clock; not thread-safe. */

/* Record owner's release of name, request id rid, that got no answer at
 * now; every hold it may have left has ended by until (its sending time +
 * the hold's lease). A rid already kept only moves until. 0: kept;
 * 1: not kept, the owner's acquires of name refused until then (overflow);
 * -1: not kept, every acquire refused until then (table full, no memory,
 * bad argument: an owner too long). */
HL_HIDDEN int hl_unsettled_rel_put(hl_unsettled *t, const char *name, const char *owner,
                                   const char *rid, int64_t until, int64_t now);
/* Before owner's acquire or release of name, at now (records past their
 * until are dropped first): NONE (send it), SETTLE (send the release again
 * under *rid, then hl_unsettled_rel_end and ask again) or
 * HL_UNSETTLED_REFUSE (fail the acquire, nothing sent: releases of it that
 * could not all be kept may still be pending; *until says when that ends).
 * *rid stays valid until the next call on the table: copy it. */
HL_HIDDEN hl_unsettled_step hl_unsettled_rel_next(hl_unsettled *t, const char *name,
                                                  const char *owner, int64_t now,
                                                  const char **rid, int64_t *until);
/* What the release of name by owner under rid, sent again, answered:
 * ran 1 (released, or answered from the latch: it ran before): dropped;
 * ran 0 ("not owner": the owner holds none of name): every release of the
 * owner on name dropped; ran -1 (no usable answer): all kept (the acquire
 * fails with that error; the driver's hl_unsettled_rel_put for the
 * re-sent one moves its until). */
HL_HIDDEN void hl_unsettled_rel_end(hl_unsettled *t, const char *name, const char *owner,
                                    const char *rid, int ran, int64_t now);
/* How many releases of owner on name are kept (0: none), at now. */
HL_HIDDEN size_t hl_unsettled_rel_count(hl_unsettled *t, const char *name, const char *owner,
                                        int64_t now);

/* ---- subscription liveness (hl_sublive: one per pub/sub connection) ----
 *
 * A holder listens on its lock's channel so that a force unlock is
 * reported at once; that only works while its pub/sub connection delivers.
 * A connection whose server bytes are lost (or one accepted and never
 * answered) says nothing, so the session asks for a PING on it whenever
 * nothing was heard for interval_ms (in subscribed mode RESP2 answers
 * ["pong", ""], or +PONG once nothing is subscribed: any frame counts as
 * heard) and gives it up when the PING is unanswered timeout_ms after it
 * was written. While the connection is not known alive (opened and not
 * heard yet, PING overdue, closed), the holds that listen on it are
 * checked on the command connection (HL_PS_UNHEARD to hl_holds_heard, the
 * hold check) at once and every interval_ms after, until a frame is heard
 * again. One PING per connection per interval at most (none while frames
 * come); no per-hold traffic while it is alive. docs/protocol.md
 * ("Session: subscription liveness"). No I/O, no threads, no clock. */
enum {
    HL_SUBLIVE_PING = 1,  /* write a PING on the connection now */
    HL_SUBLIVE_RESET = 2, /* give the connection up (close it, then
                             hl_sublive_closed) and open another, which
                             subscribes every channel again */
    HL_SUBLIVE_CHECK = 4  /* check every hold listening on it now
                             (hl_holds_heard with HL_PS_UNHEARD) */
};

typedef struct hl_sublive {
    int64_t interval_ms; /* PING when nothing was heard for this long */
    int64_t timeout_ms;  /* a PING unanswered this long: not alive */
    int open;            /* a connection is up (hl_sublive_opened) */
    int alive;           /* a frame was heard on it since its last PING was due */
    int64_t heard_at;    /* the last frame heard (or when it was opened) */
    int64_t ping_at;     /* when the unanswered PING was written; -1: none */
    int64_t check_at;    /* not alive: the next check of its holds; -1: none */
} hl_sublive;

/* The interval and PING deadline for a client's command timeout: half of
 * it, between 100 and 500 ms (500 for none, <= 0), so that a silent
 * connection is found within interval + timeout (1 s by default). */
HL_HIDDEN int64_t hl_sublive_interval(int64_t command_timeout_ms);
/* Idle (no connection, nothing due), with hl_sublive_interval's interval
 * and PING deadline. */
HL_HIDDEN void hl_sublive_init(hl_sublive *s, int64_t command_timeout_ms);
/* A connection was opened at now (its SUBSCRIBEs written): not known alive
 * until a frame is heard; its holds stay checked every interval. */
HL_HIDDEN void hl_sublive_opened(hl_sublive *s, int64_t now);
/* A frame (message, confirmation, pong, anything) was read on it at now:
 * alive; no PING is due before now + interval, no check is due. */
HL_HIDDEN void hl_sublive_heard(hl_sublive *s, int64_t now);
/* The open connection was closed at now (reset, error): its holds are
 * checked at once (a message may have been lost with it) unless a check is
 * already due, and every interval until a new one is heard. After
 * HL_SUBLIVE_RESET, or when idle, nothing changes. */
HL_HIDDEN void hl_sublive_closed(hl_sublive *s, int64_t now);
/* Nothing listens any more (every channel unsubscribed, the client
 * closing): idle, nothing due. */
HL_HIDDEN void hl_sublive_idle(hl_sublive *s);
/* What is due at now: HL_SUBLIVE_* flags (0: nothing). PING marks the PING
 * written at now; RESET marks the connection closed (no need to call
 * hl_sublive_closed for it; hl_sublive_opened for the next). */
HL_HIDDEN int hl_sublive_due(hl_sublive *s, int64_t now);
/* When hl_sublive_due has something next; -1: nothing (idle). */
HL_HIDDEN int64_t hl_sublive_next(const hl_sublive *s);
/* 1 when the connection is open and heard from within its deadline. */
HL_HIDDEN int hl_sublive_alive(const hl_sublive *s);

#endif
