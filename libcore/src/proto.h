/*
 * Protocol layer: key and channel names, owner strings, the embedded Lua
 * scripts, command (argv) building and reply decoding. No I/O, no threads.
 *
 * This header is internal to libcore but stable enough for the bindings
 * that link the static library (the Lua module / OpenResty driver): they do
 * the socket I/O themselves and use these functions for the commands to send
 * and the meaning of each reply.
 */
#ifndef HILOCK_PROTO_H
#define HILOCK_PROTO_H

#include <stddef.h>
#include <stdint.h>
#include <hiredis/hiredis.h>

#include "hilock.h"

#define HL_HIDDEN __attribute__((visibility("hidden")))

/* Embedded scripts (libcore/scripts/<name>.lua). */
typedef enum hl_script {
    HL_SCRIPT_LOCK = 0,       /* reentrant acquire */
    HL_SCRIPT_UNLOCK,         /* reentrant release */
    HL_SCRIPT_FORCE,          /* reentrant force unlock */
    HL_SCRIPT_RENEW,          /* owner-guarded PEXPIRE (both kinds) */
    HL_SCRIPT_FAIR_LOCK,      /* fair acquire (enqueues on failure) */
    HL_SCRIPT_FAIR_UNLOCK,    /* fair release */
    HL_SCRIPT_FAIR_FORCE,     /* fair force unlock */
    HL_SCRIPT_FAIR_CANCEL,    /* fair waiter gives up */
    HL_SCRIPT_COUNT
} hl_script;

HL_HIDDEN const char *hl_script_source(hl_script s);
HL_HIDDEN const char *hl_script_sha1(hl_script s); /* 40 lowercase hex chars */
HL_HIDDEN const char *hl_script_name(hl_script s);

/* Companion name: "prefix:{name}", or "prefix:name" when name has a '{'.
 * Returns a malloc'd string or NULL. */
HL_HIDDEN char *hl_companion(const char *prefix, const char *name);

/* All names for one lock. */
typedef struct hl_names {
    char *name;      /* the HASH key */
    char *channel;   /* redisson_lock__channel:{N} */
    char *queue;     /* redisson_lock_queue:{N}   (fair) */
    char *timeout;   /* redisson_lock_timeout:{N} (fair) */
    char *latch_prefix; /* redisson_unlock_latch:{N} */
    const char *publish; /* "publish", or "spublish" on Redis Cluster */
} hl_names;

HL_HIDDEN int hl_names_init(hl_names *n, const char *name); /* 0 or HILOCK_ENOMEM/EINVAL */
HL_HIDDEN void hl_names_free(hl_names *n);

/* Redis Cluster hash slot of a key (CRC16/XMODEM of its hash tag, mod 16384). */
HL_HIDDEN unsigned hl_key_slot(const char *key, size_t len);
/* "<uuid>:<tid>" into buf (>= HL_OWNER_MAX). */
#define HL_OWNER_MAX 64
HL_HIDDEN void hl_owner(char *buf, const char *client_id, uint64_t tid);

/* The channel a waiter listens on: the lock channel (reentrant) or the
 * waiter's own channel "<channel>:<owner>" (fair). malloc'd. */
HL_HIDDEN char *hl_wait_channel(hilock_kind kind, const hl_names *n, const char *owner);

/* A command as argv. Pointers refer to the names/owner strings given to
 * the builder (which must outlive the command) or to the cmd's own storage. */
#define HL_CMD_MAXARGS 12
typedef struct hl_cmd {
    int argc;
    int script; /* hl_script, or -1 for a plain command */
    int drained; /* set by the transport: the reply timed out and the
                    connection was kept to settle the late outcome */
    const char *argv[HL_CMD_MAXARGS];
    size_t argvlen[HL_CMD_MAXARGS];
    char num[HL_CMD_MAXARGS][24];
} hl_cmd;

/* The key a command is routed by (first key of a script, else argv[1]). */
HL_HIDDEN const char *hl_cmd_key(const hl_cmd *cmd, size_t *len);

/* Switch an EVALSHA command to EVAL with the script body (after NOSCRIPT). */
HL_HIDDEN void hl_cmd_to_eval(hl_cmd *cmd);

/* Builders. Times in ms. */
HL_HIDDEN void hl_cmd_acquire(hl_cmd *cmd, hilock_kind kind, const hl_names *n,
                              const char *owner, int64_t lease_ms, int64_t wait_window_ms);
HL_HIDDEN void hl_cmd_release(hl_cmd *cmd, hilock_kind kind, const hl_names *n,
                              const char *owner, int64_t lease_ms, const char *latch_key,
                              int64_t latch_ttl_ms);
HL_HIDDEN void hl_cmd_force(hl_cmd *cmd, hilock_kind kind, const hl_names *n);
HL_HIDDEN void hl_cmd_renew(hl_cmd *cmd, const hl_names *n, const char *owner,
                            int64_t lease_ms);
HL_HIDDEN void hl_cmd_fair_cancel(hl_cmd *cmd, const hl_names *n, const char *owner,
                                  int64_t wait_window_ms);
HL_HIDDEN void hl_cmd_exists(hl_cmd *cmd, const hl_names *n);
HL_HIDDEN void hl_cmd_hexists(hl_cmd *cmd, const hl_names *n, const char *owner);
HL_HIDDEN void hl_cmd_hget(hl_cmd *cmd, const hl_names *n, const char *owner);
HL_HIDDEN void hl_cmd_pttl(hl_cmd *cmd, const hl_names *n);

/* Reply classification shared by all decoders: returns 0, or
 * HILOCK_EWRONGTYPE (WRONGTYPE error), HILOCK_EPROTO (other error / shape).
 * hl_reply_is_noscript tells whether an error reply is NOSCRIPT. */
HL_HIDDEN int hl_reply_is_noscript(const redisReply *r);

typedef struct hl_acquire_result {
    int acquired;       /* 1 acquired or re-entered */
    int64_t hold_count; /* when acquired */
    int64_t ttl_ms;     /* when not acquired: holder's PTTL (-1 none) */
} hl_acquire_result;
HL_HIDDEN int hl_decode_acquire(const redisReply *r, hl_acquire_result *out);

typedef struct hl_release_result {
    int not_owner;      /* 1: caller did not hold it, nothing changed */
    int64_t remaining;  /* hold count left (0 = fully released) */
} hl_release_result;
HL_HIDDEN int hl_decode_release(const redisReply *r, hl_release_result *out);

/* force: *deleted 1/0. renew: *alive 1 (renewed) / 0 (owner field gone). */
HL_HIDDEN int hl_decode_int(const redisReply *r, int64_t *out);
/* HGET: missing = 0. */
HL_HIDDEN int hl_decode_hold_count(const redisReply *r, int64_t *out);

/* Pub/sub frames. */
typedef enum hl_ps_type {
    HL_PS_OTHER = 0,
    HL_PS_MESSAGE,     /* message / smessage */
    HL_PS_SUBSCRIBE,   /* subscribe / ssubscribe confirmation */
    HL_PS_UNSUBSCRIBE  /* unsubscribe / sunsubscribe confirmation */
} hl_ps_type;
typedef struct hl_ps_event {
    hl_ps_type type;
    const char *channel; /* points into the reply */
    size_t channel_len;
    int payload; /* for messages: 0 = unlocked (wake one), 1 = wake all, -1 = ignore */
} hl_ps_event;
HL_HIDDEN void hl_decode_pubsub(const redisReply *r, hl_ps_event *ev);

/*
 * The acquire loop as a state machine without I/O. The blocking C transport
 * and the OpenResty driver both run it; they only move bytes and sleep.
 *
 *   hl_acquire_init(&a, ...);
 *   for (;;) switch (hl_acquire_next(&a, now_ms())) {
 *     case HL_ACT_SEND:        send a.cmd; feed the reply with
 *                              hl_acquire_on_reply (or hl_acquire_on_error)
 *     case HL_ACT_SUBSCRIBE:   subscribe to a.channel; then
 *                              hl_acquire_on_subscribed(&a, ok)
 *     case HL_ACT_WAIT:        sleep up to a.sleep_ms or until a message on
 *                              a.channel (payload 0 or 1); then hl_acquire_on_wake
 *     case HL_ACT_UNSUBSCRIBE: drop the subscription to a.channel; the
 *                              machine moves on by itself
 *     case HL_ACT_DONE:        a.result is 0 (acquired, a.hold_count set),
 *                              HILOCK_ETIMEDOUT, or the error that stopped it
 *   }
 * Times are milliseconds of a monotonic clock chosen by the driver.
 */
typedef enum hl_action {
    HL_ACT_SEND = 1,
    HL_ACT_SUBSCRIBE,
    HL_ACT_WAIT,
    HL_ACT_UNSUBSCRIBE,
    HL_ACT_DONE
} hl_action;

typedef struct hl_acquire {
    /* inputs (borrowed; must outlive the machine) */
    hilock_kind kind;
    const hl_names *names;
    const char *owner;
    int64_t lease_ms;
    int64_t wait_ms;   /* 0 one try, -1 forever */
    int64_t window_ms; /* fair: this waiter's window */
    /* state */
    int state;
    int subscribed;    /* 1 while the driver holds a subscription for us */
    int sub_failed;    /* subscribing failed: fall back to timed retries */
    int queued;        /* fair: we may have an entry in the line */
    int resub;         /* subscribe again after unsubscribing */
    int64_t deadline;  /* monotonic ms; -1 none */
    int64_t last_ttl;
    /* outputs */
    hl_cmd cmd;        /* for HL_ACT_SEND */
    char *channel;     /* for (UN)SUBSCRIBE/WAIT (NULL before the first
                          SUBSCRIBE); owned by the machine */
    int64_t sleep_ms;  /* for HL_ACT_WAIT; -1 = until a message */
    int result;
    int64_t hold_count;
    int64_t attempts;
} hl_acquire;

/* 0, HILOCK_ENOMEM. wait_window_ms: the client's fair window (used when
 * wait_ms is not > 0). */
HL_HIDDEN int hl_acquire_init(hl_acquire *a, hilock_kind kind, const hl_names *n,
                              const char *owner, int64_t wait_ms, int64_t lease_ms,
                              int64_t wait_window_ms, int64_t now_ms);
HL_HIDDEN hl_action hl_acquire_next(hl_acquire *a, int64_t now_ms);
HL_HIDDEN void hl_acquire_on_reply(hl_acquire *a, const redisReply *r, int64_t now_ms);
HL_HIDDEN void hl_acquire_on_error(hl_acquire *a, int code, int64_t now_ms);
/* The attempt's reply never came, but the server may still run it: the
 * driver settles the late outcome itself (releases a late grant, leaves the
 * line), ordered after the attempt on the same connection; the machine ends
 * with code and sends no cancel of its own (it could overtake the attempt). */
HL_HIDDEN void hl_acquire_on_unknown(hl_acquire *a, int code, int64_t now_ms);
HL_HIDDEN void hl_acquire_on_subscribed(hl_acquire *a, int ok, int64_t now_ms);
HL_HIDDEN void hl_acquire_on_wake(hl_acquire *a, int64_t now_ms);
/* The subscription was lost because the channel moved (cluster resharding):
 * the machine unsubscribes, subscribes again, then retries. */
HL_HIDDEN void hl_acquire_on_resubscribe(hl_acquire *a, int64_t now_ms);
HL_HIDDEN void hl_acquire_free(hl_acquire *a);

/* Time validation shared by the API: 0 or HILOCK_EINVAL. */
HL_HIDDEN int hl_check_wait(int64_t wait_ms);
HL_HIDDEN int hl_check_lease(int64_t lease_ms);

#endif
