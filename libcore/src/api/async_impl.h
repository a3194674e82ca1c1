/*
 * What the non-blocking driver's files share (async.c: operations,
 * connections, channels, the loop; async_route.c: servers, topology,
 * routing, replica acknowledgement; async_multilock.c: multi-lock and
 * Redlock). API layer, like async.c.
 */
#ifndef HILOCK_ASYNC_IMPL_H
#define HILOCK_ASYNC_IMPL_H

#include <hiredis/async.h>

#include "api.h"
#include "proto.h"

#define AS_NAME_MAX 4096

typedef struct as_conn as_conn;
typedef struct as_node as_node;
typedef struct as_link as_link;
typedef struct as_chan as_chan;
typedef struct as_hold as_hold;
typedef struct as_req as_req;
typedef struct as_settle as_settle;

/* One entry of the handle's deadline heap (hilock_async.heap, a binary
 * min-heap on at): a written request's deadline, an operation's wake-up or
 * router pause, a link's next hold deadline (its hold table's next renewal
 * or "in doubt" time). Every
 * object has at most one; the next timer is the heap's top, and adding,
 * moving or removing one is O(log n). */
enum { AS_TMR_REQ = 1, AS_TMR_OP, AS_TMR_HOLD };
typedef struct as_tmr {
    int64_t at;
    size_t pos;         /* index in the heap + 1; 0: not in it */
    int kind;           /* AS_TMR_*: which object it is in */
} as_tmr;

/* One command sent on a connection whose reply is awaited (hiredis's
 * privdata): for an operation, for a settle, or abandoned (its operation
 * gave up on it: the reply is dropped). FIFO per connection. */
struct as_req {
    as_req *next;
    as_conn *conn;
    as_op *op;
    as_settle *settle;
    as_link *probe;   /* a topology question (CLUSTER SLOTS, SENTINEL ...) */
    int ack;          /* op's replica acknowledgement (ROLE, WAIT) */
    int asking;       /* ASKING before op's command: its reply is dropped */
    int64_t timeout_ms; /* > 0: its deadline is this long after it was written */
    int64_t deadline; /* -1: none yet (not written, or not the oldest
                         unanswered request of its connection) */
    uint64_t start_off; /* its first byte's offset in the connection's output */
    as_tmr tmr;       /* the deadline, in the heap once written */
};

/* An acquire attempt whose reply timed out, settled on its own connection
 * (the engine's hl_settle machine): the undo runs after the attempt. */
struct as_settle {
    as_settle *next;
    hilock_async *a;
    as_node *node;    /* its server: a new connection when the machine says */
    unsigned addr_gen; /* node->addr_gen when it started: it counts against
                          that address only (hl_settle_gate) */
    as_conn *conn;
    hl_settle s;
    int pending;      /* its requests awaiting replies */
    int ready;        /* fed: step it */
    int waiting;      /* HL_ACT_WAIT */
    int64_t wait_until;
    char rid[HL_OWNER_MAX + 32];
    hl_unsettled_acq *rec; /* its attempt in a->unsettled (NULL: no memory) */
    int background;   /* started by hl_unsettled_background */
};

struct as_conn {
    as_conn *next;
    hilock_async *a;
    as_node *node;         /* whose connection it is (NULL once detached) */
    redisAsyncContext *ac; /* NULL once hiredis freed it */
    int fd;
    int want;              /* events hiredis asked for */
    int watched;           /* events the loop was told */
    int64_t timer_at;      /* hiredis's timeout, monotonic ms; -1 none */
    int pubsub;
    int connected;         /* the connect completed (a command may have gone) */
    int hs_code;           /* the handshake was refused: its code */
    int draining;          /* a command timed out: no new command; kept
                              while attempts are settled on it */
    int nsettles;
    as_req *reqs, **reqs_tail;
    /* deadlines run from when a request's bytes are written, not queued */
    uint64_t out_written;  /* bytes hiredis wrote to the socket so far */
    as_req *unstamped;     /* the first request none of whose bytes went */
    int64_t write_stall_at; /* output waiting and no byte written since: it
                              times out then (a peer that stopped reading); -1 */
    int64_t cmd_timeout_ms;
    uint64_t read_gen;     /* run_timers pass that last read it all */
    int tls;
    int unwatched;         /* the loop refused to watch it: closed at once */
    int tls_refused;       /* OpenSSL refused the peer (or it us): ETLS */
    char tls_err[128];
};

enum { CH_PENDING = 0, CH_SUBSCRIBED, CH_UNSUBSCRIBING };

struct as_chan {
    as_chan *next;
    as_node *node;    /* whose pub/sub connection carries it */
    hl_wake_rule rule; /* how many waiters a message wakes */
    char *name;
    int refs;
    int state;
    int64_t deadline; /* its (UN)SUBSCRIBE unconfirmed until then; -1 */
    as_op *waiters, *waiters_tail; /* FIFO through op->chan_next and
                                     op->chan_prev: joining and leaving are
                                     O(1), whatever the number of waiters */
    as_hold *observers; /* holds listening on their lock's channel (through
                           h->onext, h->oprev); each counts in refs. What
                           they hear goes to the session (hl_holds_heard) */
};

/* One server of a client: the single server, the sentinel master, a cluster
 * node or a sentinel; its command and pub/sub connections and channels. */
struct as_node {
    as_node *next;
    as_link *link;
    char *host;            /* NULL: the client's endpoint (single server) */
    int port;
    int sentinel;          /* a sentinel: its own credentials, no SELECT */
    as_conn *cmd, *sub;
    as_chan *chans;
    unsigned addr_gen;     /* its address changed (sentinel failover): counts up */
    int replicas;          /* replica acknowledgement: ROLE's count */
    int64_t replicas_at;   /* when read (monotonic ms); -1 never */
    hl_sublive live;       /* its pub/sub connection's liveness (the session's
                              PING and deadline), ticked by its link's timer */
};

/* One client's servers and what is known of its topology (async_route.c). */
struct as_link {
    as_link *next;
    hilock_async *a;
    hilock_client *client;
    hl_mode mode;
    as_node *nodes;        /* single, sentinel: one (the master); cluster: the map's */
    int nnodes;
    as_node *sentinels;
    as_node **slots;       /* cluster: HL_SLOTS entries, NULL unknown */
    int known;             /* the master's address / the slot map was learned */
    int stale;             /* ask again (sentinel: before the next send) */
    int resolving;         /* a topology question is out */
    int probe_next, probe_known;
    redisReply *probe_reply;
    int probe_ready;       /* probe_reply (NULL: failed) waits to be read */
    int probe_timed_out;   /* ... NULL because no reply came in time */
    as_node *probe_node;   /* the node asked (sentinel: for the message) */
    /* sentinel: a sentinel's pub/sub connection follows +switch-master */
    as_node *watch;        /* the sentinel watched (its sub connection) */
    int watch_next;        /* the next sentinel to watch */
    int64_t watch_at;      /* (re)subscribe then when not watching; -1 */
    int watch_ask;         /* the watch (re)subscribed: ask for the master now */
    uint64_t read_gen;     /* run_timers pass that last read its pub/sub
                              connections (a PING's answer may wait there) */
    int64_t observe_at;    /* holds of this link whose channel subscription
                              went (connection lost, slot moved) listen again
                              then; -1: none waits */
    int64_t expire_at;     /* the earliest end of a fixed lease among the
                              holds of this link that listen: they stop
                              listening then (the hold ended as asked); -1 */
    char switch_host[256]; /* a +switch-master to apply (switch_port > 0) */
    int switch_port;
    /* the client's holds (the engine's session table) and its timer: the
     * table's next deadline (a renewal due or a hold in doubt) */
    hl_holds holds;
    as_tmr tmr;
    hl_hold **due;           /* the holds due at a tick (hl_holds_renew_due) */
    hl_renew_group *groups;  /* and their renewal commands; room for due_cap */
    size_t due_cap;
    char errmsg[HL_ERRMSG_MAX];
};

/* The holds of one renewal command (OP_RENEW): one (renew), or a group of
 * the session's (renew_many, hl_holds_renew_due). A hold released while its
 * renewal is in flight is NULL here. The owners are copies (a released
 * hold's record is freed; a resend still needs them). */
struct as_renew {
    hl_cmd_wide *wide; /* the arguments of a group (n > 1) */
    size_t n;
    char (*owners)[HL_OWNER_MAX];
    as_hold *holds[];
};

struct as_hold {
    as_hold *next, *prev;  /* a->holds, in no order */
    as_hold *hnext;        /* its bucket of a->hbuckets (lock, tid) */
    hl_hold s;             /* in link->holds, the session's hold table: lease,
                              confirmation, renewal due, in doubt, lost */
    hilock_lock *lock;
    uint64_t tid;
    as_link *link;
    char owner[HL_OWNER_MAX];
    as_op *renewing;      /* renewal in flight */
    as_op *checking;      /* check in flight (OP_CHECK: "is it still there?") */
    as_chan *chan;        /* the lock's channel it listens on (a force unlock
                             is heard there), or NULL */
    as_hold *onext, *oprev; /* chan->observers */
    int observe;          /* to listen again at link->observe_at */
};

enum { OP_ACQUIRE = 1, OP_RELEASE, OP_SIMPLE, OP_RENEW, OP_ML_ACQUIRE, OP_ML_RELEASE, OP_LISTEN,
       OP_EXT, OP_CHECK };

typedef struct as_ml as_ml;
typedef struct as_renew as_renew;

struct as_op {
    as_op *next, *prev; /* in a->ops (all live operations), oldest first */
    as_tmr tmr;        /* wake_at or route_at, whichever comes first */
    as_op *qnext;      /* in the ready queue */
    as_op *dnext;      /* in the done queue (completion order) */
    int queued;
    hilock_async *a;
    int type;
    hilock_lock *lock;
    uint64_t tid;
    as_link *link;
    hilock_async_cb cb;
    void *payload;
    char owner[HL_OWNER_MAX];
    char rid[HL_OWNER_MAX + 32];
    char latch[AS_NAME_MAX + HL_OWNER_MAX + 96];
    /* machines */
    hl_acquire acq;
    hl_release rel;
    hl_cmd cmd;  /* OP_SIMPLE, OP_RENEW */
    int (*decode)(const redisReply *, int64_t *);
    hilock_kind decode_kind; /* for hl_decode_is_locked */
    int is_locked;
    int inited;
    /* transport state */
    hl_cmd *sent;      /* command in flight (NULL: none) */
    as_req *req;       /* its request record */
    int resend;        /* NOSCRIPT: send *sent again as EVAL */
    int eval_tried;    /* OP_RENEW: its body was sent after NOSCRIPT */
    int64_t sent_at;
    int attempt;       /* the command in flight is an acquire attempt */
    /* routing (async_route.c) */
    hl_router rt;
    as_node *ask;      /* ASK: the next send goes there, after ASKING */
    int parked;        /* waits for the topology (the send in sent, or a subscribe) */
    int64_t route_at;  /* a resend of sent after the router's pause; -1 none */
    as_node *last_node; /* the server its last command was sent to: a
                           settle of its attempt goes there (NULL: none) */
    as_node *gated;    /* the attempt in sent waits (until route_at) for a
                          settle on this server to end (hl_settle_gate) */
    /* replica acknowledgement of a grant (the engine's hl_ack) */
    hl_ack ack;
    as_conn *ack_conn; /* the connection the attempt was answered on */
    int acking;
    redisReply *ack_reply; /* the attempt's reply, fed once acknowledged */
    int unacked;       /* no replica acknowledged the last attempt */
    int ack_phase;     /* 1: releasing the unacknowledged grant */
    /* before the first attempt: an earlier attempt of this owner on this
     * lock that may have been granted is settled first (the session's rule,
     * hl_unsettled_next) */
    int pre_done;      /* the session said go (HL_UNSETTLED_NONE) */
    int pre_wait;      /* waits for a settle of such an attempt to end */
    int64_t pre_until; /* ... until then at most (-1: no bound) */
    int uns_phase;     /* 1: rs settles rs_rec (hl_acquire_resettle) */
    hl_acquire rs;
    hl_unsettled_acq *rs_rec;
    int64_t wait_ms, deadline;
    uint64_t acq_seq;
    /* before the first attempt: sending again a release of the thread's
     * that got no answer (the session's rule, hl_lock_unsettled_next): its
     * request id is in rid */
    int again;
    int refused; /* the session refused the acquire (op->err says why) */
    /* a release sending the thread's earlier unanswered ones first (again
     * set): its own request id, sent after them */
    char own_rid[HL_OWNER_MAX + 32];
    /* waiting */
    as_chan *chan;
    as_op *chan_next, *chan_prev;
    int sub_pending;
    int waiting;
    int64_t wake_at;   /* -1: only a message */
    int signaled;
    int resub_req;
    int cancel_req;
    /* acquire inputs */
    int64_t lease_ms;  /* the lease sent */
    int watchdog;
    /* renewal: the holds one renewal command renews (as_renew) */
    as_renew *renew;
    /* OP_CHECK: the hold it asks about (NULL once that hold is gone) */
    as_hold *check;
    /* multi-lock: the parent operation and its members' children */
    as_op *parent;       /* a child (member acquire/release, listener) */
    size_t index;        /* its member */
    as_ml *ml;           /* a parent's state */
    int64_t timeout_ms;  /* > 0: this operation's request timeout */
    int confirmed;       /* listener: its subscription is confirmed */
    /* OP_EXT: a kind of async_sem.c (hl_as_kind), its state, its target */
    const hl_as_kind *kind;
    void *self;
    const void *target;
    /* outcome */
    int done;
    int rc;
    int64_t value;
    char err[HL_ERRMSG_MAX];
};

struct hilock_async {
    hilock_async_loop loop;
    as_conn *conns;
    as_link *links;
    as_hold *holds;
    as_hold **hbuckets;   /* holds by (lock, tid): hcap buckets, a power of 2 */
    size_t hcap, nholds;
    as_op *ops, *ops_last;
    as_tmr **heap;        /* the deadline heap; room for every timer's owner */
    size_t nheap, heap_cap, heap_owners;
    uint64_t timer_gen;   /* run_timers passes */
    as_op *ready, **ready_tail;
    as_op *done, **done_tail; /* finished, callbacks not yet run: FIFO */
    as_settle *settles;
    hl_unsettled unsettled; /* the session's acquire attempts not settled */
    struct as_mlhold *mlholds;
    int in_dispatch;
    int free_later;
    int closing;
    int64_t timer_armed; /* absolute ms asked of the loop; -1 none */
    hilock_async_lost_cb lost_cb;
    void *lost_payload;
    hilock_async_multilock_lost_cb ml_lost_cb;
    void *ml_lost_payload;
    /* lost reports to deliver: (lock, tid) or (multi-lock, tid) */
    struct as_lost {
        struct as_lost *next;
        hilock_lock *lock;
        hilock_multilock *m;
        uint64_t tid;
        int64_t silent_ms; /* >= 0: in doubt, no renewal confirmed for that long */
        char member[64];   /* a multi-lock's: the member lost */
    } *lost_q;
    char errmsg[HL_ERRMSG_MAX];
};

/* ---- async.c, for async_route.c ---- */
HL_HIDDEN int64_t hl_as_now(void);
/* node's command (pubsub 0) or pub/sub connection, opened when missing */
HL_HIDDEN as_conn *hl_as_conn_get(hilock_async *a, as_node *n, int pubsub);
/* A request record at the end of k's FIFO (timeout_ms > 0: its deadline). */
HL_HIDDEN as_req *hl_as_req_new(as_conn *k, int64_t timeout_ms);
HL_HIDDEN void hl_as_req_unlink(as_req *q);
HL_HIDDEN void hl_as_reply_cb(redisAsyncContext *ac, void *reply, void *priv);
HL_HIDDEN void hl_as_op_queue(as_op *op);
/* op's command failed before it was sent: tell op's machine. */
HL_HIDDEN void hl_as_feed_error(as_op *op, int code);
/* Stop using k for new commands; it closes once its replies are in (a
 * pub/sub connection takes its subscriptions along). */
HL_HIDDEN void hl_as_conn_detach(as_conn *k);
/* Close k now (its pending requests fail), outside hiredis callbacks. */
HL_HIDDEN void hl_as_conn_close(as_conn *k);
/* Every channel of n moved or is gone: its waiters subscribe again. */
HL_HIDDEN void hl_as_chans_drop(as_node *n);

/* ---- async.c, for async_multilock.c ---- */
/* A new operation, in a->ops; not queued. */
HL_HIDDEN as_op *hl_as_op_new(hilock_async *a, int type, hilock_lock *l, uint64_t tid,
                              hilock_async_cb cb, void *payload);
/* Unlink op from a->ops and free it (never queued, or done with). */
HL_HIDDEN void hl_as_op_drop(as_op *op);
/* Queue op and work the queue (no user callback runs here); 0. */
HL_HIDDEN int hl_as_op_start(as_op *op);
/* op is done: its callback runs with rc and value (op->err, else
 * hilock_strerror(rc)). */
HL_HIDDEN void hl_as_op_finish(as_op *op, int rc, int64_t value);
/* Wake op (a listener: its parent's rule decides). */
HL_HIDDEN void hl_as_op_signal(as_op *op);
/* The link of client c, made when missing; NULL with *rc. */
HL_HIDDEN as_link *hl_as_link_get(hilock_async *a, hilock_client *c, int *rc);
/* How long an acquire latch answers a request sent again (as lock.c). */
HL_HIDDEN int64_t hl_as_latch_ttl(const hilock_client *c);
HL_HIDDEN as_hold *hl_as_hold_find(hilock_async *a, const hilock_lock *l, uint64_t tid);
/* op's wake_at, waiting or route_at changed: its timer follows. */
HL_HIDDEN void hl_as_op_sync(as_op *op);
/* A lost report (lock l, or multi-lock m) queued for delivery; NULL: no memory. */
HL_HIDDEN struct as_lost *hl_as_queue_report(hilock_async *a, hilock_lock *l, hilock_multilock *m,
                                             uint64_t tid, int64_t silent_ms);
/* op joins the channel (its messages wake by rule); 1 subscribed already,
 * 0 pending, -1 failed, 2 parked until the topology is known. */
HL_HIDDEN int hl_as_chan_join(as_op *op, const char *name, hl_wake_rule rule);
/* Cancel the pending acquires of type (OP_ACQUIRE: op->lock; OP_ML_ACQUIRE,
 * OP_EXT: op->target) on target for tid. */
HL_HIDDEN int hl_as_cancel_ops(int *cancelled, hilock_async *a, int type, const void *target,
                               uint64_t tid);

/* ---- async_multilock.c, for async.c ---- */
HL_HIDDEN void hl_as_ml_step_acquire(as_op *op);
HL_HIDDEN void hl_as_ml_step_release(as_op *op);
/* A member's child (acquire, release, line leave) is done: its parent counts it. */
HL_HIDDEN void hl_as_ml_child_done(as_op *child);
/* A listener's channel message, or its subscription answered (ok) or dropped. */
HL_HIDDEN void hl_as_ml_listener_signal(as_op *listener);
HL_HIDDEN void hl_as_ml_listener_subscribed(as_op *listener, int ok);
/* Member l of tid's holds was lost (silent_ms < 0) or is in doubt. */
HL_HIDDEN void hl_as_ml_member_lost(hilock_async *a, hilock_lock *l, uint64_t tid,
                                    int64_t silent_ms);
HL_HIDDEN void hl_as_ml_free(as_ml *ml);
/* Free every multi-lock hold of a (hilock_async_free). */
HL_HIDDEN void hl_as_mlholds_free(hilock_async *a);

/* ---- async_route.c ---- */
/* The link of client c (created with its topology unknown); NULL with *rc. */
HL_HIDDEN as_link *hl_as_link_new(hilock_async *a, hilock_client *c, int *rc);
HL_HIDDEN void hl_as_link_free(as_link *lk);
/* Where op's cmd goes: 0 with *out (and op->ask used up), 1 parked until
 * the topology is known (op->parked set), or an error code. */
HL_HIDDEN int hl_as_route(as_op *op, const hl_cmd *cmd, as_node **out);
/* Where channel goes (pub/sub): 0 with *out, 1 parked (op->parked), or an
 * error code. */
HL_HIDDEN int hl_as_route_channel(as_op *op, const char *channel, as_node **out);
/* Where a hold of lk listens on channel (pub/sub), with no operation to
 * park: the node, or NULL when the topology is not known now. */
HL_HIDDEN as_node *hl_as_route_hold_channel(as_link *lk, const char *channel);
/* A reply r to op's cmd from k: 0 it is the answer; 1 the router took it
 * (r freed; op resends after a pause, or waits for the topology); -1 give
 * up (r freed, op->err set): the operation fails with HILOCK_ECONN. */
HL_HIDDEN int hl_as_route_reply(as_op *op, as_conn *k, redisReply *r);
/* op's command got no reply from k (connection failed): 1 resent (nothing
 * reached the server), 0 an error for the machine. */
HL_HIDDEN int hl_as_route_conn_error(as_op *op, as_conn *k);
/* k went away unasked: what it says of the topology. */
HL_HIDDEN void hl_as_route_conn_lost(as_conn *k);
/* A pub/sub channel of n was dropped by the server (cluster: its slot moved). */
HL_HIDDEN void hl_as_route_chan_moved(as_node *n);
/* Reply to a topology question (NULL: failed); from a hiredis callback. */
HL_HIDDEN void hl_as_probe_reply(as_link *lk, redisReply *r, int timed_out);
/* Outside hiredis: read answered topology questions, unpark operations. */
HL_HIDDEN void hl_as_route_work(hilock_async *a);
/* The next deadline of the topology questions (-1 none); their expiry. */
HL_HIDDEN int64_t hl_as_route_next_at(hilock_async *a);
/* Replica acknowledgement of op's attempt reply r on k: 1 started (r kept
 * until it ends), 0 not wanted (feed r now). */
HL_HIDDEN int hl_as_ack_start(as_op *op, as_conn *k, redisReply *r);
/* An acknowledgement reply (NULL: failed); 1 when it ended: the kept
 * reply is op->ack_reply (to feed and free), op->unacked set. */
HL_HIDDEN int hl_as_ack_feed(as_op *op, redisReply *r);

#endif
