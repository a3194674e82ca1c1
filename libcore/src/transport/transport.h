/*
 * Transport layer (transport.c, conn.c, nodes.c, pool.c, exec.c, fanout.c, tls.c,
 * pubsub.c, drain.c, sentinel.c, watchdog.c): hiredis connections, the node
 * table and its pools, command execution, pub/sub listeners, settling
 * timed-out attempts, sentinel discovery and following, the watchdog thread.
 * What transport files share among themselves only: transport_impl.h.
 * Includes only the layers below (proto.h, util.h); the API (api.h) is
 * above it. Layers and which header each file may include:
 * docs/architecture.md.
 */
#ifndef HILOCK_TRANSPORT_H
#define HILOCK_TRANSPORT_H

#include <pthread.h>
#include <stdint.h>
#include <sys/types.h>
#include <hiredis/hiredis.h>

#include "proto.h"
#include "stats.h"
#include "util.h"

/* Everything the transport keeps for one client (defined at the end). The
 * API's client handle embeds one; transport functions take it and name it c
 * (as they did when they took the client handle). This header declares
 * what the API calls and the structs hl_transport embeds; what transport
 * files call in each other is in transport_impl.h. */
typedef struct hl_transport hl_transport;

/* ---- conn.c: connecting, reading replies; exec.c: running commands ---- */

/* ---- tls.c ---- */
typedef struct hl_tls hl_tls;
/* The client's TLS context from ep's settings; *out stays NULL when ep is
 * not TLS. 0, HILOCK_EINVAL (bad files, built without TLS) or ENOMEM. */
/* ctx's last call failed because the server sent nothing within ms (a
 * read timeout: connected, but silent): 1 with "no reply within <ms> ms
 * from host:port" (hl_msg_no_reply) in err (HL_ERRMSG_MAX), else 0. */
HL_HIDDEN int hl_conn_no_reply(const redisContext *ctx, int64_t ms, char *err);
HL_HIDDEN int hl_tls_new(hl_tls **out, const hl_endpoint *ep, char *err);
/* Start TLS on a fresh non-blocking context (hiredis async) to host: the
 * handshake continues with the context's reads and writes. 0, or -1 with
 * *code and err set. */
HL_HIDDEN int hl_tls_start(hl_tls *t, redisContext *ctx, const char *host,
                           const char *server_name, int *code, char *err);
/* After a failed read or write on a TLS connection: 1 when OpenSSL saw a
 * TLS-level refusal (e.g. the server's "certificate required" alert, which
 * TLS 1.3 delivers after the handshake), its reason in buf; else 0. */
HL_HIDDEN int hl_tls_refused(char *buf, size_t len);

/* hiredis's redisCommand on our blocking contexts, except that one reply
 * may not bring more than HL_REPLY_MAX_BYTES (REDIS_ERR_PROTOCOL on the
 * context); transport_impl.h has the argv form and the reader loops. */
HL_HIDDEN redisReply *hl_command(redisContext *c, const char *fmt, ...);

typedef struct hl_pool {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    redisContext **idle;
    int nidle;
    int size;     /* max connections */
    int inuse;    /* checked out */
    int64_t gen;  /* master generation of the idle connections */
} hl_pool;

/* Run one command on a pooled connection, with EVALSHA->EVAL fallback on
 * NOSCRIPT, one reconnect+retry when a pooled connection turns out broken
 * before anything was sent. timeout_ms <= 0: the client's command timeout.
 * On success *reply is set (caller frees). Errors: HILOCK_ECONN, EAUTH,
 * ECLOSED; a Redis error reply is returned as a reply, not as an error. */
HL_HIDDEN int hl_exec(hl_transport *c, hl_cmd *cmd, redisReply **reply,
                      int64_t timeout_ms, char *err);
/* As hl_exec; when acked is not NULL and the client asks for replica
 * acknowledgement, the command is followed on the same connection by WAIT:
 * *acked = 1 when a replica acknowledged (or none is connected), 0 when
 * replicas exist and none acknowledged within replica_ack_timeout_ms. */
HL_HIDDEN int hl_exec_acked(hl_transport *c, hl_cmd *cmd, redisReply **reply,
                            int64_t timeout_ms, char *err, int *acked);

/* ---- pubsub.c: one listener connection + thread per client ---- */
typedef struct hl_waiter {
    struct hl_waiter *next;
    struct hl_channel *chan;
    struct hl_node *node; /* whose listener holds the subscription */
    int signaled;
    int moved;           /* the channel's slot moved to another node */
    pthread_cond_t cv;   /* signalled with the pubsub mutex */
    const int *cancel;   /* atomic, may be NULL: set after hl_sub_register;
                            nonzero ends hl_sub_wait (cancel signals cv) */
    int wake_rule;       /* hl_wake_rule: what a message on the channel
                            means (set by hl_sub_register_rule; 0 = a lock's) */
    struct hl_notify *notify; /* may be NULL: also fired on every wake of
                                 this waiter (hl_sub_notify) */
    int cv_live;         /* cv initialised by hl_sub_register_rule, destroyed
                            by hl_sub_unregister (even when not registered) */
    /* an observer (hl_sub_observe): takes no wake; on_message(on_arg, ev)
     * is called, with the pubsub mutex held, for every message on the
     * channel, its subscription's confirmation, an unrequested unsubscribe
     * (the slot moved) and a lost connection (ev NULL) */
    int observer;
    void (*on_message)(void *arg, const hl_ps_event *ev);
    void *on_arg;
} hl_waiter;

/* One wake-up shared by several waiters, possibly on different clients (a
 * multi-lock waits on all its members' channels at once). Fired with the
 * waiters' pubsub mutex held: take no other lock while holding mu. */
typedef struct hl_notify {
    pthread_mutex_t mu;
    pthread_cond_t cv; /* monotonic clock */
    int fired;
} hl_notify;
HL_HIDDEN void hl_notify_init(hl_notify *nt);
HL_HIDDEN void hl_notify_destroy(hl_notify *nt);
HL_HIDDEN void hl_notify_fire(hl_notify *nt);
/* Sleep until fired or ms pass (ms < 0: until fired); clears the flag.
 * 1 when it was fired. */
HL_HIDDEN int hl_notify_wait(hl_notify *nt, int64_t ms);

typedef struct hl_pubsub {
    pthread_mutex_t mu;
    pthread_cond_t cv;  /* subscription state changes */
    hl_worker wk;       /* the listener thread and the pipe that wakes it */
    int stop;
    struct hl_channel *channels; /* pubsub.c */
    int connected;
    int connecting;     /* the listener is connecting (mu released): it
                           reads the node's address meanwhile */
    int conn_failed;    /* the last connection attempt failed */
    redisContext *ctx;  /* owned by the listener thread */
    int64_t conn_gen;   /* master generation ctx was made in */
    int64_t generation; /* bumps on every (re)connect */
    hl_sublive live;    /* the connection's liveness (the session's PING and
                           deadline; the listener thread's) */
    char errmsg[HL_ERRMSG_MAX];
} hl_pubsub;

/* Register w on a channel; subscribes if it is the first waiter. Waits up
 * to timeout_ms for the subscription; returns 0 subscribed, or HILOCK_ECONN /
 * ETIMEDOUT (still registered: waits then fall back to timed retries), or
 * HILOCK_ENOMEM / HILOCK_ECLOSED (not registered: w->chan is NULL, and
 * hl_sub_wait is a plain timed sleep). Whatever it returns, w is usable
 * until hl_sub_unregister, which the caller calls once in every case. */
HL_HIDDEN int hl_sub_register(hl_transport *c, hl_waiter *w, const char *channel,
                              int64_t timeout_ms);
/* As hl_sub_register, for a channel whose messages follow wake_rule
 * (hl_wake_rule: semaphores, latches). */
HL_HIDDEN int hl_sub_register_rule(hl_transport *c, hl_waiter *w, const char *channel,
                                   int64_t timeout_ms, int wake_rule);
/* Sleep until a message wakes w or ms pass (ms < 0: until a message).
 * Returns 1 when the subscription is gone because the channel's slot moved
 * to another node (unregister, register again), else 0. */
HL_HIDDEN int hl_sub_wait(hl_transport *c, hl_waiter *w, int64_t ms);
/* Register w as an observer of channel (a holder listening on its own
 * lock's channel): fn(arg, ev) runs on the listener thread, with the pubsub
 * mutex held, for every frame of the channel: each message, the
 * confirmation of its subscription (again after every reconnect), an
 * unrequested unsubscribe when the channel's cluster slot moved (then
 * hl_sub_moved says so: unregister and observe again, where the slot lives
 * now), and ev NULL when the connection was lost. What a frame means for
 * the hold is the session's (hl_holds_heard). fn may take only a lock under
 * which nothing takes the pubsub mutex (the watchdog's mu); it takes no
 * waiter's wake. Does not wait for the subscription. 0, or HILOCK_ENOMEM /
 * HILOCK_ECLOSED (not registered); hl_sub_unregister in every case. Call
 * neither with a lock held that fn may take (the watchdog's mu). */
HL_HIDDEN int hl_sub_observe(hl_transport *c, hl_waiter *w, const char *channel,
                             void (*fn)(void *arg, const hl_ps_event *ev), void *arg);
/* An observer w: 1 when its channel's slot moved away (cluster) and it
 * hears nothing more there: unregister it and observe again. Takes no lock
 * (the flag is atomic for observers). */
HL_HIDDEN int hl_sub_moved(const hl_waiter *w);
HL_HIDDEN void hl_sub_unregister(hl_transport *c, hl_waiter *w);
/* Wake w's hl_sub_wait (from another thread) so that it looks at its
 * cancel flag; w must be registered. */
HL_HIDDEN void hl_sub_poke(hl_waiter *w);
/* 1 when w's channel is subscribed (the server confirmed it), after waiting
 * up to ms for that (0: just look). */
HL_HIDDEN int hl_sub_confirmed(hl_waiter *w, int64_t ms);
/* Attach the registered waiter w to nt: every later wake of w fires nt, and
 * a wake that came before fires it at once. */
HL_HIDDEN void hl_sub_notify(hl_waiter *w, hl_notify *nt);
/* Take w's wake (after nt fired): 1 when w was woken (and clears it), with
 * *moved set when its channel's slot moved (unregister, register again).
 * pass: a wake this waiter does not want is handed to the next waiter of
 * the channel not woken yet (as unregistering does), and 0 returned. */
HL_HIDDEN int hl_sub_take(hl_waiter *w, int pass, int *moved);

/* ---- drain.c: settles acquire attempts whose reply timed out ---- */
typedef struct hl_drain_item hl_drain_item;
typedef struct hl_drainer {
    pthread_mutex_t mu;
    pthread_cond_t settled; /* an item ended (waiters of hl_drain_node_ready) */
    hl_worker wk;
    int stop;
    hl_drain_item *items;
    uint64_t seq;
} hl_drainer;

/* How many attempts per node may wait to be settled: the engine's
 * hl_settle_gate (proto.h). */

/* ---- sentinel.c: follows +switch-master (sentinel mode only) ---- */
typedef struct hl_sentinel_watch {
    hl_worker wk;
    int stop;           /* atomic */
    char master[300];   /* "ip port" last seen */
} hl_sentinel_watch;

/* Start watching (sentinel clients); 0 or an error code. */
HL_HIDDEN int hl_sentinel_start(hl_transport *c, char *err);
HL_HIDDEN void hl_sentinel_stop(hl_transport *c);

/* ---- watchdog.c: one renewal thread per client ---- */
/* Work a lost callback asked for that cannot run inside it (freeing a
 * handle the report is using, closing the client whose watchdog thread
 * runs the callback): queued, run by the watchdog thread once the pass's
 * reports are over. Embedded in the handle it frees (no allocation). */
typedef struct hl_deferred {
    struct hl_deferred *next;
    void (*fn)(void *arg);
    void *arg;
} hl_deferred;

typedef struct hl_watchdog {
    pthread_mutex_t mu;
    pthread_cond_t cv;   /* wakes the watchdog thread (stop, a loss found, a
                            new hold) and waiters of inflight/reporting */
    hl_worker wk;        /* the watchdog thread: the "in doubt" timer and
                            every report (lost callbacks); no I/O. No pipe:
                            it sleeps on cv */
    hl_worker rwk;       /* the renewal thread: the renewals' I/O, on its own
                            schedule; never calls up. Sleeps on its pipe
                            (stop, renew now) */
    unsigned follow_pass; /* watchdog.c's follow_moved; renewal thread only */
    int stop;
    struct hl_wd_entry *entries; /* watchdog.c: every entry, a doubly linked list */
    struct hl_wd_entry *map;     /* the same entries by (holder, tid): a treap
                                    (watchdog.c), so finding, adding and
                                    removing one is O(log n) */
    hl_deferred *deferred, **deferred_tail; /* FIFO */
    int close_deferred;  /* the client's close was asked from a lost callback */
    int deferring;       /* run_deferred is running deferred work (mu released) */
    struct hl_wd_scratch *scratch; /* watchdog.c: the thread's buffers between ticks */
    hl_holds holds;      /* the session's hold table (proto_session.c): when
                            each entry is renewed or in doubt, which were
                            found lost; under mu */
    int holds_ready;     /* holds initialised (at the first hold: the
                            client's options are known by then) */
    int64_t renewal_wake_at; /* when the sleeping renewal thread wakes by
                                itself; -1: awake (it looks at every
                                deadline before it sleeps again) */
} hl_watchdog;

/* An acquisition of (holder, tid): watchdog (renewed, listening on its
 * lock's channel) or a fixed lease_ms (only listening, until the lease ends
 * or it is released): starts keeping it or counts a hold. holder is the
 * caller's handle (compared by address, given back to sinks.lost); kind and
 * names say what to renew and where to listen (names must stay valid until
 * the entry is released or forgotten). sent_at: monotonic ms when the
 * granting command was sent. */
HL_HIDDEN int hl_wd_add(hl_transport *c, void *holder, hilock_kind kind, const hl_names *names,
                        uint64_t tid, int watchdog, int64_t lease_ms, int64_t sent_at);
/* As hl_wd_add with tid 0, for a hold whose owner string is the
 * caller's (a kept semaphore permit: kind HL_KIND_PERMIT, owner its id;
 * at most HL_OWNER_MAX - 1 bytes), not made from the client's id. Released
 * or forgotten as (holder, 0). */
HL_HIDDEN int hl_wd_keep(hl_transport *c, void *holder, hilock_kind kind, const hl_names *names,
                         const char *owner, int watchdog, int64_t lease_ms, int64_t sent_at);
/* hl_wd_release's answers: the last hold of the entry was taken out (its
 * renewal and listening stopped, any renewal or check in flight waited
 * for), a watchdog one or a fixed-lease one. */
enum { HL_WD_STOPPED = 1, HL_WD_STOPPED_FIXED = 2 };
/* Before a release: if this is the last hold of (holder, tid), stop
 * renewing it and listening, and wait for any renewal in flight; returns
 * HL_WD_STOPPED or HL_WD_STOPPED_FIXED when it stopped (the caller adds it
 * again if the release left holds), 0 otherwise. */
HL_HIDDEN int hl_wd_release(hl_transport *c, const void *holder, uint64_t tid,
                            int64_t *confirmed_at);
/* A release that left holds of a fixed-lease hold of (holder, tid) applied
 * its lease_ms again, sent at sent_at: it listens until the new end. */
HL_HIDDEN void hl_wd_extended(hl_transport *c, const void *holder, uint64_t tid,
                              int64_t lease_ms, int64_t sent_at);
HL_HIDDEN void hl_wd_forget_lock(hl_transport *c, const void *holder);
/* 1 when a watchdog hold of (holder, tid) -- of holder, any tid, with
 * any_tid -- is lost or in doubt at now by the session's rule, its report
 * made or not yet (the watchdog thread may not have run since the process
 * was stopped past the hold's doubt deadline). */
HL_HIDDEN int hl_wd_is_lost(hl_transport *c, const void *holder, uint64_t tid, int any_tid,
                            int64_t now);
/* 1 when the calling thread is c's watchdog thread (so: inside a lost
 * callback of one of c's handles). */
HL_HIDDEN int hl_wd_on_thread(hl_transport *c);
/* On c's watchdog thread: run d->fn(d->arg) when the current pass's reports
 * are over (FIFO). */
HL_HIDDEN void hl_wd_defer(hl_transport *c, hl_deferred *d);
/* Off c's watchdog thread: wait until the work deferred by lost callbacks
 * (hl_wd_defer) has run, so that a handle freed from a callback (a
 * multi-lock) is done with the handles it uses (its members) before the
 * caller frees those. Returns at once on the watchdog thread. */
HL_HIDDEN void hl_wd_wait_deferred(hl_transport *c);
/* On c's watchdog thread: call sinks.close once the current pass is over. */
HL_HIDDEN void hl_wd_defer_close(hl_transport *c);

/* ---- nodes: one server's pool and pub/sub listener ---- */
#define HL_MAX_NODES 128
#define HL_SLOTS 16384
typedef struct hl_node {
    hl_transport *client; /* the transport it belongs to */
    char *host;         /* cluster node; NULL = the client's endpoint. host and
                           port change when a retired entry is reused: read
                           them under the client's nodes_mu */
    int port;
    int retired;        /* cluster: the last slot map named it not (nodes_mu) */
    hl_pool pool;
    hl_pubsub ps;
    int settling;             /* attempts waiting to be settled (drain.mu) */
    int replicas;             /* connected replicas, from ROLE (atomic) */
    int64_t replicas_seen_at; /* monotonic ms of that reading, 0 = never (atomic) */
} hl_node;

/* Cluster: reload the slot map from any node. 0 or HILOCK_ECONN. */
HL_HIDDEN int hl_cluster_refresh(hl_transport *c, char *err);
/* Create the client's node(s): one outside cluster mode, none in it (the
 * slot map brings them). 0 or HILOCK_ENOMEM. */
HL_HIDDEN int hl_nodes_init(hl_transport *c, char *err);

/* ---- fanout.c: several commands in flight at once from one thread ----
 *
 * hl_exec_fan sends every request's command on a connection of its node
 * (from that node's pool), then collects the replies with poll() as they
 * come, each bounded by its own timeout; it returns once every request has
 * its outcome. Each outcome is what hl_exec would give for that command
 * alone: NOSCRIPT is answered with EVAL on the same connection, an acquire
 * attempt whose reply times out is handed to the settler (cmd->drained), a
 * reply lost with its connection sets cmd->reply_lost. The uncommon paths
 * (cluster redirections and retries, a failover, a stale pooled connection,
 * replica acknowledgement, a pool with no free connection left, a node with
 * an attempt still being settled) run through hl_exec_acked after the
 * others are in, one after another. */
typedef struct hl_fan {
    /* in */
    hl_transport *client;
    hl_cmd *cmd;
    int64_t timeout_ms; /* > 0 bounds connect + reply; <= 0: the client's timeouts */
    int want_ack;       /* replica acknowledgement as hl_exec_acked (acked below) */
    /* out */
    int rc;             /* 0 (reply set, caller frees) or a HILOCK_E* code (err set) */
    redisReply *reply;
    int acked;
    char err[HL_ERRMSG_MAX];
    /* the driver's */
    struct hl_node *node;
    redisContext *ctx;
    int64_t gen;
    int reused;
    int state;
    int pass;
    int64_t deadline;
} hl_fan;
HL_HIDDEN void hl_exec_fan(hl_fan *reqs, size_t n);

/* How the transport reports to the layer above, which sets these before
 * the first thread starts. The transport never calls up otherwise. */
typedef struct hl_sinks {
    void *ctx; /* given back to error and close */
    /* A background failure (pub/sub listener, watchdog renewal) to show as
     * the client's message. Any transport thread, no transport lock held. */
    void (*error)(void *ctx, const char *msg);
    /* The watchdog found holder's hold of tid gone (kind as given to
     * hl_wd_add or hl_wd_keep; cause HL_LOSS_GONE or,
     * after an in-doubt report, HL_LOSS_EXPIRED), or no renewal confirmed
     * for silent_ms (HL_LOSS_DOUBT). The sink ends the hold's figures, then
     * counts the loss (hl_stats_lost_count) and traces it
     * (hl_stats_lost_trace). On the watchdog thread, no transport lock
     * held; may call hl_wd_defer and hl_wd_defer_close, must not wait for
     * the watchdog. */
    void (*lost)(void *holder, int kind, uint64_t tid, int cause, int64_t silent_ms);
    /* hl_wd_defer_close was asked: close the client, as the watchdog
     * thread's last act (hl_transport_shutdown with from_watchdog = 1). */
    void (*close)(void *ctx);
} hl_sinks;

struct hl_transport {
    hl_endpoint ep;
    hilock_options opts;
    char id[37];          /* the client's id (owner strings) */
    hl_forkguard fork;    /* fork detection: hl_transport_forked */
    int closed;           /* atomic */
    hl_node *nodes[HL_MAX_NODES]; /* [0] = the only node outside cluster mode */
    int nnodes;           /* atomic; entries are only added (or reused for a
                             new address, see hl_node_get), freed at close */
    int max_nodes;        /* table bound, HL_MAX_NODES (tests lower it) */
    pthread_mutex_t nodes_mu;
    pthread_mutex_t refresh_mu;
    int map_stale;        /* atomic: a slot moved, reload before routing */
    int16_t slot_node[HL_SLOTS]; /* cluster: node index per slot, -1 unknown */
    hl_watchdog wd;
    uint64_t request_seq;  /* unlock request ids (atomic) */
    uint64_t latch_epoch;  /* acquire latch generation, bumped when an
                              attempt's reply is lost (atomic; lock.c) */
    int replica_ack;       /* resolved: 1 WAIT after acquire/release */
    int64_t master_gen;    /* bumped on every master switch (atomic) */
    int replicated;        /* Sentinel: a master of the name was seen with a
                              replica; from then on every master of it needs
                              a replica's acknowledgement (atomic) */
    hl_drainer drain;
    hl_sentinel_watch sw;
    hl_sinks sinks;
    hl_stats stats;        /* counters and trace callback (stats.h) */
};

/* Set up c's locks and fields (before anything else); hl_transport_free
 * undoes it and frees the nodes, TLS context and endpoint (forked: in a
 * child after fork(), memory only). */
HL_HIDDEN void hl_transport_init(hl_transport *c);
HL_HIDDEN void hl_transport_free(hl_transport *c, int forked);
/* Stop every thread (from_watchdog: called by the watchdog thread itself,
 * which is detached instead of joined) and drop the idle connections. */
HL_HIDDEN void hl_transport_shutdown(hl_transport *c, int from_watchdog);
/* 0, or HILOCK_ECLOSED with a message when closed or used after fork(). */
HL_HIDDEN int hl_transport_check(hl_transport *c, char *err);
/* 1 in a child process after fork() (no system call: hl_forkguard). */
HL_HIDDEN int hl_transport_forked(const hl_transport *c);
/* hl_nosigpipe_enter for a stretch of a caller's thread that writes on
 * connections, when those writes can raise SIGPIPE (built with the
 * system's hiredis 0.14); else hl_nosigpipe_skip: every connection, plain
 * or TLS, writes with send(MSG_NOSIGNAL) (conn.c, tls.c), and a TLS
 * handshake masks itself. Ends with hl_nosigpipe_leave either way. */
HL_HIDDEN void hl_transport_nosigpipe_enter(hl_nosigpipe *s);
/* The open check's connection: to the first node (the server, the current
 * master, or in cluster mode the first master of the slot map: call
 * hl_cluster_refresh first); NULL with *code and err set.
 * hl_transport_keep_first puts it in that node's pool. */
HL_HIDDEN redisContext *hl_transport_connect_first(hl_transport *c, int *code, char *err);
HL_HIDDEN void hl_transport_keep_first(hl_transport *c, redisContext *ctx);

#endif
