/*
 * Protocol layer, the engine: key and channel names, owner strings, the
 * embedded Lua scripts, command (argv) building, reply decoding and the
 * machines (acquire, release, settle, watchdog, router, replica ack). No
 * I/O, no threads, no clock of its own. docs/protocol.md ("The engine")
 * describes each machine's inputs, states and outputs.
 *
 * Installed as <hilock/engine.h>: the ADVANCED API for writing a new driver
 * (an event loop, another language) on the engine. Like zstd's static-linking
 * section it is not part of the stable ABI: define
 * HILOCK_ENGINE_STATIC_LINKING_ONLY, link libhilock.a (and what it needs:
 * the HILOCK_STATIC_LIBS of the build, hiredis among them) and compile with
 * the hiredis headers libhilock was built with (HILOCK_HIREDIS_INCLUDE in
 * the build's CMake cache); names and structs may change between minor
 * versions. tests/install builds and runs such a driver-side program.
 */
#ifndef HILOCK_PROTO_H
#define HILOCK_PROTO_H

#if !defined(HILOCK_BUILDING) && !defined(HILOCK_ENGINE_STATIC_LINKING_ONLY)
#error "<hilock/engine.h> is the advanced engine API: define HILOCK_ENGINE_STATIC_LINKING_ONLY and link libhilock.a"
#endif

#include <stddef.h>
#include <stdint.h>
#include <hiredis/hiredis.h>

#include "hilock.h"

#define HL_HIDDEN __attribute__((visibility("hidden")))

/* ---- server URLs (url.c; the forms are listed there and in docs/urls.md) ---- */
#define HL_URL_ERR_MAX 256 /* err buffers given to hl_endpoint_parse */
struct hl_tls;
typedef struct hl_endpoint {
    int tls;          /* rediss schemes: every connection (sentinels too) is TLS */
    char *host;       /* TCP host, or NULL for unix */
    int port;
    char *path;       /* unix socket path */
    char *user;       /* ACL user or NULL */
    char *password;   /* or NULL; "" for the user-only form "user@" */
    int db;
    /* sentinel mode (master_name set): the master is resolved through the
     * seeds (sentinels) at every connect; cluster mode: the seeds are nodes
     * to learn the slot map from. host/port above are unused in both. */
    int cluster;
    int nseeds;
    char **seed_hosts;
    int *seed_ports;
    char *master_name;
    char *sentinel_user;     /* AUTH for the sentinels themselves, or NULL */
    char *sentinel_password;
    int64_t connect_timeout_ms; /* from the query; -1 when not given */
    int64_t command_timeout_ms;
    char *tls_ca_file;       /* TLS settings from the query (or the options) */
    char *tls_ca_dir;
    char *tls_cert_file;
    char *tls_key_file;
    char *tls_server_name;
    int tls_insecure;
    int delayed_restart;     /* delayed_restart=1: the server, once crashed, stays down
                                longer than any lease (hl_ml_durability) */
    struct hl_tls *tls_ctx;  /* the transport's, built from the above (hl_tls_new);
                                not freed by hl_endpoint_free */
} hl_endpoint;

/* Parse url into *ep (zeroed first). 0, or HILOCK_EINVAL / HILOCK_ENOMEM with
 * a message in err (HL_URL_ERR_MAX bytes) and *ep left empty. */
HL_HIDDEN int hl_endpoint_parse(hl_endpoint *ep, const char *url, char *err);
HL_HIDDEN void hl_endpoint_free(hl_endpoint *ep);

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
    HL_SCRIPT_ACL_CHECK,      /* open-time check: may this user publish/subscribe? */
    HL_SCRIPT_RW_READ_LOCK,   /* read-write lock: read side acquire */
    HL_SCRIPT_RW_READ_UNLOCK, /* read side release */
    HL_SCRIPT_RW_READ_RENEW,  /* read side watchdog renewal */
    HL_SCRIPT_RW_WRITE_LOCK,  /* write side acquire */
    HL_SCRIPT_RW_WRITE_UNLOCK,/* write side release */
    HL_SCRIPT_RW_FORCE,       /* read-write force unlock */
    HL_SCRIPT_FENCED_LOCK,    /* fenced lock acquire (reentrant + token) */
    HL_SCRIPT_EXTEND,         /* owner-guarded PEXPIRE to PTTL + more */
    HL_SCRIPT_ACQUIRE_SETTLE, /* give up an acquire whose reply was lost */
    HL_SCRIPT_SEM_ACQUIRE,    /* semaphore: take k permits (proto_sem.c) */
    HL_SCRIPT_SEM_RELEASE,    /* semaphore: give back k permits */
    HL_SCRIPT_SEM_TRY_SET,    /* semaphore / latch: set the count if none */
    HL_SCRIPT_SEM_ADD,        /* semaphore: add or set permits */
    HL_SCRIPT_SEM_DRAIN,      /* semaphore: take every free permit */
    HL_SCRIPT_PES_ACQUIRE,    /* permit-expirable semaphore: take k leased permits */
    HL_SCRIPT_PES_RELEASE,    /* permit-expirable semaphore: give back one permit */
    HL_SCRIPT_PES_AVAILABLE,  /* permit-expirable semaphore: free permits */
    HL_SCRIPT_LATCH_COUNT_DOWN, /* count-down latch: count down by one */
    HL_SCRIPT_LATCH_DELETE,   /* latch / semaphore: delete and wake waiters */
    HL_SCRIPT_INSPECT,        /* read-only snapshot of a lock (hilock_inspect) */
    HL_SCRIPT_RENEW_MANY,     /* watchdog: owner-guarded PEXPIRE of many holds */
    HL_SCRIPT_PES_UPDATE,     /* permit-expirable semaphore: a new lease for a permit */
    HL_SCRIPT_SEM_SETTLE,     /* semaphore: give up an acquire whose reply was lost */
    HL_SCRIPT_SCAN,           /* one SCAN step on the node of a key (hilock_scan_names) */
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
    char *acquire_latch_prefix; /* hilock_acquire_latch:{N} */
    const char *publish; /* "publish", or "spublish" on Redis Cluster */
    char *rw_channel; /* redisson_rwlock:{N} (read-write lock) */
    char *token;      /* redisson_lock_token:{N} (fenced lock counter) */
    char *rw_prefix;  /* "{N}" (or N when it has a '{'): prefix of the read
                         holds' "<prefix>:<owner>:rwlock_timeout:<k>" keys */
} hl_names;

HL_HIDDEN int hl_names_init(hl_names *n, const char *name); /* 0 or HILOCK_ENOMEM/EINVAL */
HL_HIDDEN void hl_names_free(hl_names *n);

/* Redis Cluster hash slot of a key (CRC16/XMODEM of its hash tag, mod 16384). */
HL_HIDDEN unsigned hl_key_slot(const char *key, size_t len);
/* Random (version 4) UUIDs (uuid.c), for client ids and permit ids: the
 * canonical lowercase form and a NUL into out (37 bytes). 0, or -1 when no
 * random bytes could be read (out is then ""). The engine's one read of the
 * kernel (getrandom(2), else /dev/urandom); no machine calls it, drivers do
 * (the C client, the Lua and Python engine bindings). */
#define HL_UUID_LEN 36
HL_HIDDEN int hl_uuid4(char out[HL_UUID_LEN + 1]);

/* "<uuid>:<tid>" into buf (>= HL_OWNER_MAX). */
#define HL_OWNER_MAX 64
HL_HIDDEN void hl_owner(char *buf, const char *client_id, uint64_t tid);

/* The hash field of a hold: the owner, or "<owner>:write" for the write
 * side of a read-write lock (buf >= HL_OWNER_MAX). */
HL_HIDDEN void hl_hold_owner(char *buf, hilock_kind kind, const char *client_id, uint64_t tid);

/* The channel a waiter listens on: the lock channel (reentrant) or the
 * waiter's own channel "<channel>:<owner>" (fair). malloc'd. */
HL_HIDDEN char *hl_wait_channel(hilock_kind kind, const hl_names *n, const char *owner);

/* A command as argv. Pointers refer to the names/owner strings given to
 * the builder (which must outlive the command) or to the cmd's own storage.
 * argv/argvlen point into the cmd itself (room for HL_CMD_MAXARGS, every
 * command but a watchdog batch), or for hl_cmd_renew_many into a
 * hl_cmd_wide the caller keeps: an hl_cmd is embedded in every machine (one
 * per waiting acquire), so it is not sized for the largest command. A
 * builder sets the pointers: an hl_cmd is not copied by value after that. */
#define HL_CMD_MAXARGS 24 /* the most today: 16 (fair acquire with latch and line) */
/* Holds one hl_cmd_renew_many renews (as Redisson, up to 100 per call:
 * measured server time per renewal 15.9 us one by one, 5.6 us in groups of
 * 30, 4.4 us in groups of 100). */
#define HL_RENEW_MANY_MAX 100
#define HL_CMD_WIDE_MAXARGS (3 + 1 + 2 * HL_RENEW_MANY_MAX) /* hl_cmd_renew_many */
#define HL_CMD_MAXNUM 12 /* numeric arguments of one command (the most today: 6) */
typedef struct hl_cmd {
    int argc;
    int script; /* hl_script, or -1 for a plain command */
    int drained; /* set by the transport: the reply timed out and the
                    connection was kept to settle the late outcome */
    int reply_lost; /* set by the transport: the command was sent and the
                       connection died before its reply (the server may
                       have run it) */
    const char **argv;  /* argc entries: own_argv, or a hl_cmd_wide's */
    size_t *argvlen;
    int cap;            /* room in argv/argvlen */
    int nnum;   /* numbers in num[] */
    char num[HL_CMD_MAXNUM][24];
    const char *own_argv[HL_CMD_MAXARGS];
    size_t own_argvlen[HL_CMD_MAXARGS];
} hl_cmd;
/* Room for a watchdog batch's arguments (hl_cmd_renew_many). */
typedef struct hl_cmd_wide {
    const char *argv[HL_CMD_WIDE_MAXARGS];
    size_t argvlen[HL_CMD_WIDE_MAXARGS];
} hl_cmd_wide;

/* The key a command is routed by (first key of a script, else argv[1]). */
HL_HIDDEN const char *hl_cmd_key(const hl_cmd *cmd, size_t *len);

/* Switch an EVALSHA command to EVAL with the script body (after NOSCRIPT). */
HL_HIDDEN void hl_cmd_to_eval(hl_cmd *cmd);
/* r answers cmd: when r is NOSCRIPT and cmd went as EVALSHA, cmd becomes
 * EVAL with the script body and 1 says "send it again"; else 0 (r is the
 * answer). Once per command, whatever came before it in the same call: an
 * EVAL is never answered NOSCRIPT. */
HL_HIDDEN int hl_cmd_eval_fallback(hl_cmd *cmd, const redisReply *r);

/* The RESP bytes of a command (an array of argc bulk strings), for a driver
 * that writes to its own socket: hl_resp_len is their exact count,
 * hl_resp_write puts them at out (room for hl_resp_len bytes) and returns
 * the end. */
HL_HIDDEN size_t hl_resp_len(int argc, const size_t *lens);
HL_HIDDEN char *hl_resp_write(char *out, int argc, const char *const *argv, const size_t *lens);

/* Builders. Times in ms. */
HL_HIDDEN void hl_cmd_acquire(hl_cmd *cmd, hilock_kind kind, const hl_names *n,
                              const char *owner, int64_t lease_ms, int64_t wait_window_ms);
/* As hl_cmd_acquire, idempotent per request: latch_key ("<key>:<seq>" from
 * hl_acquire_latch_arg; sent with latch_ttl_ms as the last two arguments,
 * not as a KEY: acquire_latch.lua) keeps a grant's hold count for
 * latch_ttl_ms, so the same command sent again returns the first answer.
 * latch_key NULL (or not of that shape): no latch (as hl_cmd_acquire).
 * Every kind has it. */
HL_HIDDEN void hl_cmd_acquire_latched(hl_cmd *cmd, hilock_kind kind, const hl_names *n,
                                      const char *owner, int64_t lease_ms,
                                      int64_t wait_window_ms, const char *latch_key,
                                      int64_t latch_ttl_ms);
/* Give up an acquire request whose reply was lost (acquire_settle.lua;
 * latch_key "<key>:<seq>" as for hl_cmd_acquire_latched): the latch becomes
 * "x<answer>" (a late copy then takes nothing) and the reply is what the
 * request had taken; idempotent, so it may be sent again. */
HL_HIDDEN void hl_cmd_acquire_settle(hl_cmd *cmd, const char *latch_key, int64_t latch_ttl_ms);
HL_HIDDEN void hl_cmd_release(hl_cmd *cmd, hilock_kind kind, const hl_names *n,
                              const char *owner, int64_t lease_ms, const char *latch_key,
                              int64_t latch_ttl_ms);
HL_HIDDEN void hl_cmd_force(hl_cmd *cmd, hilock_kind kind, const hl_names *n);
/* Add add_ms to the lease of a hold of owner (reentrant, fair, fenced). */
HL_HIDDEN void hl_cmd_extend(hl_cmd *cmd, const hl_names *n, const char *owner, int64_t add_ms);
/* Its reply: 0 (*out 1 extended, 0 not held by the owner, -1 the key has
 * no expiry) or HILOCK_EPROTO. */
HL_HIDDEN int hl_decode_extend(const redisReply *r, int64_t *out);
HL_HIDDEN void hl_cmd_renew(hl_cmd *cmd, const hl_names *n, const char *owner,
                            int64_t lease_ms);
/* Renewal for any kind (the read side of a read-write lock renews its hold
 * keys too); hl_cmd_renew is the reentrant/fair/write one. */
HL_HIDDEN void hl_cmd_renew_kind(hl_cmd *cmd, hilock_kind kind, const hl_names *n,
                                 const char *owner, int64_t lease_ms);
/* 1 when a hold of kind is renewed by a command of its own, never in a
 * renew_many batch (a read side: its renewal touches more keys than its
 * own; a semaphore permit); the session's hl_hold.alone. */
HL_HIDDEN int hl_renew_alone(hilock_kind kind);
/* "Is it locked": EXISTS, or for a read-write side HGET <name> mode
 * (decoded by hl_decode_is_locked: 1 when the mode is that side's). */
HL_HIDDEN void hl_cmd_is_locked(hl_cmd *cmd, hilock_kind kind, const hl_names *n);
HL_HIDDEN int hl_decode_is_locked(hilock_kind kind, const redisReply *r, int64_t *out);
/* Pieces for builders of other objects (proto_rwlock.c). */
HL_HIDDEN void hl_cmd_begin_script(hl_cmd *cmd, hl_script s, int nkeys);
HL_HIDDEN void hl_cmd_begin_plain(hl_cmd *cmd);
/* Move cmd's arguments so far to wide, and the rest after them (room for
 * HL_CMD_WIDE_MAXARGS); wide must outlive cmd's use. */
HL_HIDDEN void hl_cmd_use_wide(hl_cmd *cmd, hl_cmd_wide *wide);
HL_HIDDEN void hl_cmd_add_str(hl_cmd *cmd, const char *s);
HL_HIDDEN void hl_cmd_add_num(hl_cmd *cmd, int64_t v);
/* v in decimal into buf (room for 21 bytes: sign, 19 digits, NUL), as
 * printf's %lld writes it; returns the length without the NUL. */
HL_HIDDEN size_t hl_fmt_i64(char *buf, int64_t v);
/* A bounded string builder for the per-call names (owners, latch keys,
 * request ids) in place of snprintf: each piece is appended while it fits
 * with its NUL; the first one that does not is cut to fit (buf then holds
 * what snprintf would have written) and marks the builder over. hl_sb_end is 0, or HILOCK_EINVAL when
 * something did not fit. cap must be at least 1. */
typedef struct {
    char *buf;
    size_t cap, len;
    int over;
} hl_sb;
HL_HIDDEN void hl_sb_init(hl_sb *b, char *buf, size_t cap);
HL_HIDDEN void hl_sb_mem(hl_sb *b, const char *s, size_t n);
HL_HIDDEN void hl_sb_str(hl_sb *b, const char *s);
HL_HIDDEN void hl_sb_u64(hl_sb *b, uint64_t v);
HL_HIDDEN int hl_sb_end(const hl_sb *b);
/* "prefix:owner:epoch:seq" into buf; HILOCK_EINVAL when it does not fit. */
HL_HIDDEN int hl_latch_arg(char *buf, size_t len, const char *prefix, const char *owner,
                           uint64_t epoch, uint64_t seq);
/* Read-write builders (proto_rwlock.c); hl_cmd_release/force call them for
 * HILOCK_KIND_READ and HILOCK_KIND_WRITE (hl_cmd_acquire_latched builds
 * every kind's attempt itself: one argument layout, the latch last). */
HL_HIDDEN void hl_rw_cmd_release(hl_cmd *cmd, hilock_kind kind, const hl_names *n,
                                 const char *owner, int64_t lease_ms, const char *latch_key,
                                 int64_t latch_ttl_ms);
HL_HIDDEN void hl_rw_cmd_force(hl_cmd *cmd, const hl_names *n);
HL_HIDDEN void hl_cmd_fair_cancel(hl_cmd *cmd, const hl_names *n, const char *owner,
                                  int64_t wait_window_ms);
HL_HIDDEN void hl_cmd_exists(hl_cmd *cmd, const hl_names *n);
HL_HIDDEN void hl_cmd_hexists(hl_cmd *cmd, const hl_names *n, const char *owner);
HL_HIDDEN void hl_cmd_hget(hl_cmd *cmd, const hl_names *n, const char *owner);
HL_HIDDEN void hl_cmd_pttl(hl_cmd *cmd, const hl_names *n);
/* GET of the fenced lock's token counter; decoded by hl_decode_token. */
HL_HIDDEN void hl_cmd_token(hl_cmd *cmd, const hl_names *n);
/* The counter: missing = 0; not a non-negative integer = HILOCK_EPROTO. */
HL_HIDDEN int hl_decode_token(const redisReply *r, int64_t *out);

/* Inspection (proto_inspect.c): one read-only script that returns
 * everything stored for the lock, and its decoding into a hilock_lock_info
 * allocated here (hl_info_free). hl_decode_inspect: 0, or HILOCK_EPROTO
 * (error reply or wrong shape) / HILOCK_ENOMEM with a message in err
 * (HL_URL_ERR_MAX bytes); every number is checked before use. */
/* leases: a permit-expirable semaphore's ZSET for the name (hl_sem_names'
 * timeout), read too */
HL_HIDDEN void hl_cmd_inspect(hl_cmd *cmd, const hl_names *n, const char *leases);
/* As hl_cmd_inspect, also counting the subscribers of the name's wake-up
 * channels (info->waiting): sharded 1 on a cluster (SHARDNUMSUB);
 * sem_channel, latch_channel: the semaphore's and the latch's channels. */
HL_HIDDEN void hl_cmd_inspect_waiting(hl_cmd *cmd, const hl_names *n, const char *leases,
                                      int sharded, const char *sem_channel,
                                      const char *latch_channel);
/* One SCAN step for hilock_scan_names: on the node that serves route_key,
 * keys matching pattern from cursor (a decimal string). */
HL_HIDDEN void hl_cmd_scan(hl_cmd *cmd, const char *route_key, const char *cursor,
                           const char *pattern);
/* Its reply: 0 with *next (malloc'd decimal cursor, "0" when done) and
 * each key passed to fn (its return non-zero stops: HILOCK_ENOMEM), or
 * HILOCK_EPROTO with err. Companion keys (fair queue and deadlines, fencing
 * counter, latches, permit leases, read holds' timeouts) are left out: only
 * names a lock, semaphore or latch could have are passed. */
HL_HIDDEN int hl_decode_scan(const redisReply *r, char **next,
                             int (*fn)(void *arg, const char *key, size_t len), void *arg,
                             char *err);
HL_HIDDEN int hl_decode_inspect(const redisReply *r, const char *name, hilock_lock_info **out,
                                char *err);
HL_HIDDEN void hl_info_free(hilock_lock_info *info);
HL_HIDDEN const char *hl_info_kind_name(hilock_info_kind kind);

/* Reply classification shared by all decoders: returns 0, or
 * HILOCK_EWRONGTYPE (WRONGTYPE error), HILOCK_EPROTO (other error / shape).
 * hl_reply_is_noscript tells whether an error reply is NOSCRIPT. */
HL_HIDDEN int hl_reply_is_noscript(const redisReply *r);

typedef struct hl_acquire_result {
    int acquired;       /* 1 acquired or re-entered */
    int64_t hold_count; /* when acquired */
    int64_t ttl_ms;     /* when not acquired: holder's PTTL (-1 none) */
    int64_t token;      /* fenced lock grant: its fencing token (>= 1); else 0 */
} hl_acquire_result;
HL_HIDDEN int hl_decode_acquire(const redisReply *r, hl_acquire_result *out);
/* The acquire reply of a lock of that kind: a fenced lock's grant is
 * {1, holds, token >= 1}, every other reply has two elements. */
HL_HIDDEN int hl_decode_acquire_kind(hilock_kind kind, const redisReply *r,
                                     hl_acquire_result *out);
/* Reply of hl_cmd_acquire_settle: *granted 1 when the request had taken a
 * hold (which the caller must now give back), 0 when it took nothing. */
HL_HIDDEN int hl_decode_acquire_settle(const redisReply *r, int *granted);

/* Redis Cluster: 1 when the lock's key and every companion key and channel
 * hash to one slot. Names with an empty or unclosed hash tag ("x{y", "{}",
 * "{}x{y}") do not: their companions carry a tag of their own. */
HL_HIDDEN int hl_names_one_slot(const hl_names *n);

typedef struct hl_release_result {
    int not_owner;      /* 1: caller did not hold it, nothing changed */
    int64_t remaining;  /* hold count left (0 = fully released) */
} hl_release_result;
HL_HIDDEN int hl_decode_release(const redisReply *r, hl_release_result *out);

/* force: *deleted 1/0. renew: *alive 1 (renewed) / 0 (owner field gone). */
HL_HIDDEN int hl_decode_int(const redisReply *r, int64_t *out);
/* HGET: missing = 0; negative = HILOCK_EPROTO. */
HL_HIDDEN int hl_decode_hold_count(const redisReply *r, int64_t *out);
/* An integer that must be 0 or 1 (EXISTS/HEXISTS of one key, force,
 * renew); anything else is HILOCK_EPROTO. */
HL_HIDDEN int hl_decode_flag(const redisReply *r, int64_t *out);
/* PTTL: -2 no key, -1 no expiry, >= 0 ms; below -2 is HILOCK_EPROTO. */
HL_HIDDEN int hl_decode_pttl(const redisReply *r, int64_t *out);

/* Pub/sub frames. */
typedef enum hl_ps_type {
    HL_PS_OTHER = 0,
    HL_PS_MESSAGE,     /* message / smessage */
    HL_PS_SUBSCRIBE,   /* subscribe / ssubscribe confirmation */
    HL_PS_UNSUBSCRIBE, /* unsubscribe / sunsubscribe confirmation */
    HL_PS_UNHEARD      /* no frame (hl_decode_pubsub never gives it): the
                          driver's subscription connection is not known
                          alive (hl_sublive_due's HL_SUBLIVE_CHECK), so a
                          message on the channel may go unheard */
} hl_ps_type;
typedef struct hl_ps_event {
    hl_ps_type type;
    const char *channel; /* points into the reply */
    size_t channel_len;
    int payload; /* for messages: 0 = unlocked (wake one), 1 = wake all, -1 = ignore */
    int64_t value; /* for messages: the payload as a canonical decimal integer
                      >= 0 (semaphores publish permit counts), else -1 */
} hl_ps_event;
HL_HIDDEN void hl_decode_pubsub(const redisReply *r, hl_ps_event *ev);

/* ---- reply bounds and the numbers in replies (reply.c) ---- */

/* Limits of the bounded reader: larger or deeper aggregates are refused
 * (the reader fails with REDIS_ERR_OOM, "Out of memory"). */
#define HL_REPLY_MAX_ELEMENTS ((size_t)1 << 20)
#define HL_REPLY_MAX_DEPTH 8
/* What one reply may bring over the socket (the transport enforces it). */
#define HL_REPLY_MAX_BYTES ((size_t)32 << 20)
/* Bound a hiredis reader (a context's ctx->reader, or one of our own): a
 * header no longer makes it allocate before the elements arrive. Call
 * before the first reply. 0, or -1 when r is not a default reader. */
HL_HIDDEN int hl_reader_bound(redisReader *r);

#ifndef HL_SLOTS
#define HL_SLOTS 16384
#endif
/* A TCP port: decimal digits only, 1..65535; the port or -1. */
HL_HIDDEN int hl_parse_port(const char *s, size_t len);

/* One CLUSTER SLOTS entry; 0 or HILOCK_EPROTO (skip it). */
typedef struct hl_slot_range {
    unsigned lo, hi; /* lo <= hi < HL_SLOTS */
    int port;        /* 1..65535 */
    char host[256];
} hl_slot_range;
HL_HIDDEN int hl_decode_slot_range(const redisReply *e, hl_slot_range *out);

/* SENTINEL get-master-addr-by-name reply: 0 (host, port set) or HILOCK_EPROTO. */
HL_HIDDEN int hl_decode_master_addr(const redisReply *r, char *host, size_t hostlen, int *port);
/* Why a reply to SENTINEL get-master-addr-by-name named no master, into buf
 * (len bytes at most), for an error message: "<where> knows no master named
 * '<name>'" only for a nil reply (the one answer that says so), "<where>:
 * error reply: <text>" for an error, "<where> named no valid address for
 * '<name>'" for a malformed [host, port], else "<where>: unexpected reply to
 * get-master-addr-by-name". where: "sentinel host:port"; r not NULL. */
HL_HIDDEN void hl_msg_master_addr(char *buf, size_t len, const char *where, const char *name,
                                  const redisReply *r);

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
    int64_t line_window_ms; /* a one try (wait 0) that joins a fair lock's
                               line with this window (> 0), for a multi-lock
                               that waits in it (hl_ml_line_window; the
                               multi-lock leaves the line itself); 0: none */
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
    int64_t token;     /* fenced lock: the grant's fencing token */
    int64_t attempts;
    /* idempotent attempts (hl_acquire_set_latch): the latch key of this
     * acquire call, the key of the undo's unlock latch, their lifetime */
    char *latch;
    char *undo_latch;
    int64_t latch_ttl_ms;
    int settle_tries;  /* sends of the settle / undo that failed */
    int settle_eval;   /* send them as EVAL (NOSCRIPT seen) */
    int unsettled;     /* the settle or undo failed every try: a hold the lost
                          attempt took may still stand (hl_acquire_resettle) */
} hl_acquire;

/* 0, HILOCK_ENOMEM. wait_window_ms: the client's fair window (used when
 * wait_ms is not > 0). */
HL_HIDDEN int hl_acquire_init(hl_acquire *a, hilock_kind kind, const hl_names *n,
                              const char *owner, int64_t wait_ms, int64_t lease_ms,
                              int64_t wait_window_ms, int64_t now_ms);
/* The latch argument of one acquire call, "<prefix>:<owner>:<epoch>:<seq>"
 * (lock.lua keeps "<seq>:<holds>" under "<prefix>:<owner>:<epoch>", one key
 * per owner that the owner's calls overwrite). seq: unique per call within
 * the client; epoch: the driver's count of attempts whose reply was lost
 * (a driver bumps it on hl_acquire_on_reply_lost, a resend or a drained
 * attempt, so later calls do not overwrite what a late copy must find).
 * seq also orders the owner's releases (hl_release_request_id): a driver
 * takes both from one increasing counter, so that a grant marks the owner's
 * unlock latch with a number above every release sent before it, and a late
 * copy of those releases changes nothing (proto_release.c).
 * 0, or HILOCK_EINVAL when buf is too short. */
HL_HIDDEN int hl_acquire_latch_arg(char *buf, size_t len, const hl_names *n, const char *owner,
                                   uint64_t epoch, uint64_t seq);
/* Make every attempt of this call idempotent under latch_key (copied; from
 * hl_acquire_latch_arg, see hl_cmd_acquire_latched). An attempt whose reply was
 * lost with its connection (hl_acquire_on_reply_lost) is then settled before
 * the machine finishes: it sends hl_cmd_acquire_settle
 * and, when the lost attempt had taken a hold, a release of that hold.
 * The latch lives latch_ttl_ms, or the machine's lease when that is longer
 * (a settle sent later, hl_acquire_resettle, must still find it).
 * 0, HILOCK_EINVAL (latch_key not "<key>:<seq>") or HILOCK_ENOMEM. */
#define HL_SETTLE_TRIES 3
HL_HIDDEN int hl_acquire_set_latch(hl_acquire *a, const char *latch_key, int64_t latch_ttl_ms);
/* A one-try machine (wait_ms 0) of a multi-lock member: its attempt joins
 * the fair lock's line with window_ms (hl_ml_line_window; < 1: no line, the
 * default). The machine does not leave the line when it finishes: the
 * multi-lock does, once its whole call ends (hl_ml_in_line, hl_cmd_fair_cancel). */
HL_HIDDEN void hl_acquire_set_line(hl_acquire *a, int64_t window_ms);
HL_HIDDEN hl_action hl_acquire_next(hl_acquire *a, int64_t now_ms);
HL_HIDDEN void hl_acquire_on_reply(hl_acquire *a, const redisReply *r, int64_t now_ms);
HL_HIDDEN void hl_acquire_on_error(hl_acquire *a, int code, int64_t now_ms);
/* The attempt was sent and its connection died before the reply (hl_cmd
 * reply_lost): the server may have run it. With a latch the machine settles
 * it (hl_acquire_set_latch) before finishing with code; else as on_error. */
HL_HIDDEN void hl_acquire_on_reply_lost(hl_acquire *a, int code, int64_t now_ms);
/* The attempt's reply never came, but the server may still run it: the
 * driver settles the late outcome itself (releases a late grant, leaves the
 * line), ordered after the attempt on the same connection; the machine ends
 * with code and sends no cancel of its own (it could overtake the attempt). */
HL_HIDDEN void hl_acquire_on_unknown(hl_acquire *a, int code, int64_t now_ms);
HL_HIDDEN void hl_acquire_on_subscribed(hl_acquire *a, int ok, int64_t now_ms);
HL_HIDDEN void hl_acquire_on_wake(hl_acquire *a, int64_t now_ms);
/* The caller gave up (hilock_lock_cancel): call it between actions, never
 * with a command in flight. Unless the machine already has its outcome, it
 * ends with HILOCK_ECANCELED after leaving the fair line and unsubscribing
 * (the same way out as a timeout). */
HL_HIDDEN void hl_acquire_cancel(hl_acquire *a, int64_t now_ms);
/* The subscription was lost because the channel moved (cluster resharding):
 * the machine unsubscribes, subscribes again, then retries. */
HL_HIDDEN void hl_acquire_on_resubscribe(hl_acquire *a, int64_t now_ms);
/* Settle an earlier call's attempt that ended with unsettled set: a machine
 * given that call's latch (hl_acquire_set_latch, same key and lifetime) and
 * lease only settles (and undoes a grant it finds, under the same undo latch,
 * so an undo that ran already is not applied twice), then ends with result 0,
 * or with unsettled set again when every try failed. The owner's next acquire
 * of the lock runs it first: re-entering a grant nobody accounts for would
 * stack a hold on it that the watchdog then renews for good. */
HL_HIDDEN void hl_acquire_resettle(hl_acquire *a);
HL_HIDDEN void hl_acquire_free(hl_acquire *a);

/* Time validation shared by the API: 0 or HILOCK_EINVAL. */
HL_HIDDEN int hl_check_wait(int64_t wait_ms);
HL_HIDDEN int hl_check_lease(int64_t lease_ms);

/* ================================================================
 * The rest of the engine: release, settling, watchdog, routing and
 * replica acknowledgement. Same contract as the acquire machine: no I/O,
 * no threads, no clock (times are passed in, ms of a monotonic clock).
 * docs/protocol.md describes each machine's inputs, outputs and states.
 * ================================================================ */

/* ---- release (proto_release.c) ----
 *
 *   hl_release_init(&m, ...);
 *   while (hl_release_next(&m, now) == HL_ACT_SEND) {
 *       send m.cmd (bounded by m.timeout_ms when > 0) on the lock's master;
 *       hl_release_on_reply(&m, reply, now) or hl_release_on_error(&m, code, now)
 *   }
 *   m.result: 0 (m.remaining holds left), HILOCK_ENOTOWNER, or an error;
 *   m.still_held: the caller may still hold it.
 *   m.renew: keep renewing it: the server answered and holds remain, or it
 *     refused the release before changing anything. Not after a release
 *     that got no answer (m.unconfirmed): renewing a hold whose release may
 *     or may not have run would keep the lock for the client's whole life
 *     when it did not; unrenewed, it ends at its lease at the latest.
 *
 * Decisions: the lease re-applied on a partial unlock is the one the hold
 * was acquired with (the watchdog lease only for a watchdog hold); the
 * latch key (redisson_unlock_latch:{N}:<request id>) makes one resend after
 * a lost reply answer like the first; NOSCRIPT resends the script body. */
#define HL_RELEASE_TRIES 2
typedef struct hl_release {
    hilock_kind kind;
    int known_lost;        /* hl_release_known_lost */
    const hl_names *names; /* borrowed */
    const char *owner;     /* borrowed */
    int64_t lease_ms;      /* re-applied while holds remain */
    int64_t latch_ttl_ms;
    int64_t deadline;      /* -1: none */
    char *latch;           /* owned */
    int state;
    int tries;
    int eval;              /* send the script body (after NOSCRIPT) */
    /* outputs */
    hl_cmd cmd;
    int64_t timeout_ms;    /* for HL_ACT_SEND: bound of this send, 0 none */
    int result;
    int64_t remaining;
    int still_held;
    int renew;       /* keep renewing (see above) */
    int unconfirmed; /* no answer to any try: the outcome is unknown */
    /* the answer was an error reply (not NOSCRIPT): what that means, for
     * the caller's message: "server refused the release, nothing was
     * released: <error>" (the scripts fail before they change anything:
     * they publish the wake-up first, so an ACL refusing PUBLISH leaves the
     * lock held); "" for any other answer */
    char refused[256];
} hl_release;

/* acquired_lease_ms: the lease the hold was taken with (<= 0: unknown, the
 * watchdog lease is used). request_id: unique per release of this client
 * (e.g. "<client id>:<seq>"). timeout_ms > 0 bounds the whole release. */
HL_HIDDEN int hl_release_init(hl_release *m, hilock_kind kind, const hl_names *n,
                              const char *owner, int64_t acquired_lease_ms,
                              int64_t watchdog_lease_ms, const char *request_id,
                              int64_t command_timeout_ms, int64_t timeout_ms, int64_t now_ms);
HL_HIDDEN hl_action hl_release_next(hl_release *m, int64_t now_ms);
HL_HIDDEN void hl_release_on_reply(hl_release *m, const redisReply *r, int64_t now_ms);
HL_HIDDEN void hl_release_on_error(hl_release *m, int code, int64_t now_ms);
HL_HIDDEN void hl_release_free(hl_release *m);
/* The driver already knows this hold was lost (its watchdog found it gone,
 * or reported it in doubt) when the release begins: call after
 * hl_release_init. A fair unlock answers "released" also when the lock's key
 * is already gone (as Redisson's script does, and ours keeps doing), so for
 * a fair lock known lost that answer is not a release of this hold: the
 * result is HILOCK_ENOTOWNER, as the other kinds answer after a loss. An
 * answer that holds are left (the key is there, still ours) stands. */
HL_HIDDEN void hl_release_known_lost(hl_release *m);
/* A release request id "<client_id>:e<epoch>:<seq>" that opts in to the
 * per-owner unlock latch "redisson_unlock_latch:{N}:<owner>:owner" (see
 * proto_release.c): seq from the same increasing counter as the client's
 * acquire seqs (hl_acquire_latch_arg), so the latch can tell a late copy of
 * an older release (changes nothing, whatever its delay) from a new one;
 * epoch: kept for the id's shape, not part of the key. Any other request id
 * keeps a latch key per request (no late-copy rule). 0, or HILOCK_EINVAL
 * when buf is too short. */
HL_HIDDEN int hl_release_request_id(char *buf, size_t len, const char *client_id,
                                    uint64_t epoch, uint64_t seq);
/* The latch TTL for a client whose commands time out after command_timeout_ms. */
HL_HIDDEN int64_t hl_latch_ttl(int64_t command_timeout_ms);
/* How long an acquire's (or a semaphore acquire's) request latch answers a
 * request sent again: longer than a retry after a lost reply can take
 * (reconnect + command, twice). */
HL_HIDDEN int64_t hl_acquire_latch_ttl(int64_t command_timeout_ms, int64_t connect_timeout_ms);

/* ---- settling an attempt whose reply never came (proto_release.c) ----
 *
 * The acquire attempt cmd was sent on a connection and its reply timed out;
 * the server may still run it. The driver keeps that connection and:
 *   hl_settle_init(&s, &attempt_cmd, publish, request_id, command_timeout_ms, now);
 *   for (;;) switch (hl_settle_next(&s, now)) {
 *     case HL_ACT_WAIT: read the next reply on THAT connection (up to
 *                       s.sleep_ms); hl_settle_on_reply / hl_settle_on_error
 *     case HL_ACT_SEND: write s.cmd on THAT connection (no reply awaited
 *                       yet; the next WAIT reads it)
 *     case HL_ACT_DONE: close the connection; s.outcome says what happened
 *   }
 * The undo goes on the same connection, so the server runs it after the
 * attempt: a late grant is released, a fair waiter leaves the line.
 * When that connection dies first (hl_settle_on_error while waiting for the
 * attempt) and the attempt carried an acquire latch, the machine asks for
 * HL_ACT_SEND with s.reconnect set (after a pause: HL_ACT_WAIT with nothing
 * to read): acquire_settle.lua on a new connection (up to
 * HL_SETTLE_RECONNECTS times) says whether the attempt was granted and
 * stops a late copy of it; a grant is then released, a fair waiter leaves
 * the line, on that new connection. */
#define HL_SETTLE_MAX_MS 60000
#define HL_SETTLE_RECONNECTS 8
/* 1 when cmd is an acquire attempt of any kind (settled when its reply
 * never came; acknowledged by a replica when the client asks for that). */
HL_HIDDEN int hl_cmd_is_attempt(const hl_cmd *cmd);
typedef enum hl_settle_outcome {
    HL_SETTLE_NOTHING = 0, /* the attempt changed nothing (or never came) */
    HL_SETTLE_RELEASED,    /* a late grant was released */
    HL_SETTLE_LEFT_LINE    /* a fair waiter left the line */
} hl_settle_outcome;
typedef struct hl_settle {
    hilock_kind kind;
    int enqueued;          /* fair attempt that may have joined the line */
    int64_t lease_ms, window_ms, latch_ttl_ms;
    hl_names names;        /* owned */
    char owner[HL_OWNER_MAX];
    char *latch;           /* owned */
    char *acq_latch;       /* owned: the attempt's acquire latch argument, or NULL */
    int64_t acq_latch_ttl_ms;
    int tries;             /* sends on a new connection since the last answer */
    int state, after_pause;
    int64_t give_up_at, resume_at;
    int64_t step_ms;       /* how long one reply is awaited on a connection
                              before it counts as dead (command timeout;
                              <= 0: until give_up_at) */
    int64_t step_until;    /* the reply awaited now is given up at */
    /* outputs */
    hl_cmd cmd;            /* for HL_ACT_SEND (script body: no NOSCRIPT round) */
    int reconnect;         /* THAT connection is dead: close it (nothing more to
                              read on it); the next HL_ACT_SEND goes on a new
                              connection to the same server. Set from the
                              failure through that HL_ACT_SEND (and the pause
                              before it); 0 again at the HL_ACT_WAIT for its
                              reply, which comes on the new connection */
    int64_t sleep_ms;      /* for HL_ACT_WAIT */
    int64_t wake_at;       /* for HL_ACT_WAIT: now_ms + sleep_ms */
    hl_settle_outcome outcome;
    int settled;           /* at HL_ACT_DONE: 1 the attempt's outcome is known
                              and applied (nothing of it stands); 0 the
                              machine gave up (the session keeps it
                              unsettled: hl_unsettled_settle_end) */
} hl_settle;
/* 0, HILOCK_EINVAL (cmd is not an acquire attempt), HILOCK_ENOMEM.
 * publish: "publish" or "spublish" (the lock's hl_names.publish).
 * request_id: the undo's unlock latch is the request's own (per request,
 * also for an id of hl_release_request_id's form): the owner's later grants
 * must not make the undo a late copy that releases nothing. */
HL_HIDDEN int hl_settle_init(hl_settle *s, const hl_cmd *attempt, const char *publish,
                             const char *request_id, int64_t command_timeout_ms,
                             int64_t now_ms);
/* A settle of a recorded attempt (hl_unsettled_background) whose
 * connection is gone: kind and n are the lock's, u the record (owner,
 * lease, acquire latch). The machine starts as one whose connection died
 * before the attempt's reply: acquire_settle.lua on a new connection (its
 * first HL_ACT_SEND has reconnect set), then the release of a grant it
 * finds, or, for a fair lock, leaving the line (the attempt's window is not
 * recorded: nobody behind moves up, hl_acquire_resettle). 0, HILOCK_EINVAL
 * (no latch), HILOCK_ENOMEM. */
struct hl_unsettled_acq;
HL_HIDDEN int hl_settle_init_unsettled(hl_settle *s, hilock_kind kind, const hl_names *n,
                                       const struct hl_unsettled_acq *u, const char *publish,
                                       const char *request_id, int64_t command_timeout_ms,
                                       int64_t now_ms);
HL_HIDDEN hl_action hl_settle_next(hl_settle *s, int64_t now_ms);
HL_HIDDEN void hl_settle_on_reply(hl_settle *s, const redisReply *r, int64_t now_ms);
HL_HIDDEN void hl_settle_on_error(hl_settle *s, int64_t now_ms);
HL_HIDDEN void hl_settle_free(hl_settle *s);
/* 1 while s may be dropped for a settle of the same attempt on another
 * connection (hl_acquire_resettle under the attempt's acquire latch): the
 * attempt carried that latch and s has sent no undo (a release or leaving
 * the line), so nothing but the attempt itself and acquire_settle.lua,
 * which answers a resend the same, can have changed the lock. A driver
 * whose next acquire of the lock would otherwise wait for s
 * (HL_UNSETTLED_WAIT) drops s and settles the attempt itself. */
HL_HIDDEN int hl_settle_can_hand_over(const hl_settle *s);
/* One settling attempt per server: a server on which `settling` earlier
 * attempts still wait to be settled is stalled (or the way to it is), and
 * every new attempt would park one more connection there. What a driver
 * does with a new acquire attempt to that server: -1 send it; else wait at
 * most that many ms (0: not at all) for a settling there to end, then ask
 * again with bounded = 1 and give the attempt up (HILOCK_ECONN, "not
 * answered an earlier attempt yet") unless it says -1. bounded: the call
 * has a time limit of its own (a multi-lock member's one try) and never
 * waits; others wait up to the command timeout. */
#define HL_SETTLE_PER_NODE 1
HL_HIDDEN int64_t hl_settle_gate(int settling, int bounded, int64_t command_timeout_ms);

/* ---- watchdog renewal (proto_watchdog.c) ----
 * One batch: hl_cmd_renew for every watched (lock, owner), pipelined per
 * master. Each reply is classified: */
typedef enum hl_renew_outcome {
    HL_RENEW_RENEWED = 0, /* lease extended */
    HL_RENEW_LOST,        /* owner field gone: stop renewing, tell the holder */
    HL_RENEW_EVAL,        /* NOSCRIPT: send the script body now */
    HL_RENEW_REDIRECT,    /* MOVED/ASK/not master: send again through the routed path */
    HL_RENEW_TROUBLE      /* no reply / other error: retry at the next tick */
} hl_renew_outcome;
HL_HIDDEN hl_renew_outcome hl_renew_classify(const redisReply *r);
/* Many holds in one script call: names[i] held by the field owners[i] (the
 * hold owner: hl_hold_owner's, so a write side's "<owner>:write"); never a
 * read side (hl_cmd_renew_kind for those). 1 <= n <= HL_RENEW_MANY_MAX; on
 * Redis Cluster every name must hash to one slot. The strings must outlive
 * cmd. */
HL_HIDDEN void hl_cmd_renew_many(hl_cmd *cmd, hl_cmd_wide *wide, const hl_names *const *names,
                                 const char *const *owners, int n, int64_t lease_ms);
/* The answer of hl_cmd_renew_many(n): out[i] for hold i. An error reply
 * gives every hold that error's outcome (NOSCRIPT: HL_RENEW_EVAL, a redirect
 * or demotion: HL_RENEW_REDIRECT, else HL_RENEW_TROUBLE); anything but an
 * array of exactly n integers 0/1 is HL_RENEW_TROUBLE for all (retried, never
 * read as a loss). Returns 1 when the answer was per hold, else 0. */
HL_HIDDEN int hl_renew_classify_many(const redisReply *r, int n, hl_renew_outcome *out);
/* A renewal's outcome once replica acknowledgement is known (acked: a
 * replica took the write, or the client does not ask for it): a renewal no
 * replica acknowledged is retried, not a confirmation, since a master cut
 * off from its replicas may be replaced by one that never saw it; so the
 * hold's "in doubt" time runs from its last acknowledged renewal. Every
 * other outcome stands (a "gone" answer is a loss either way). */
HL_HIDDEN hl_renew_outcome hl_renew_unacked(hl_renew_outcome o, int acked);
/* The renewal period for a watchdog lease: lease/3, at least 1 ms. */
HL_HIDDEN int64_t hl_renew_period(int64_t watchdog_lease_ms);
/* In doubt: a watched hold whose latest grant or renewal confirmed by the
 * server was SENT at t (monotonic ms; the lease runs from about then) is
 * reported lost "in doubt" once this many ms have passed since t with no
 * later one confirmed: lease - lease/5, at least 1. The server's copy ends
 * at t + lease at the latest and another client may take the lock then; the
 * margin (lease/5) leaves the holder time to stop, and renewals go out every
 * lease/3, so two of them can fail before the report. The hold stays
 * watched (renewed): if the link comes back and the lock is still its own,
 * keeping it is harmless; if it is gone, the renewal reports that as usual. */
HL_HIDDEN int64_t hl_renew_doubt_after(int64_t watchdog_lease_ms);
/* When a watchdog hold whose last confirmed grant or renewal was sent at
 * confirmed_at is to be reported lost "in doubt": at confirmed_at +
 * hl_renew_doubt_after, unless the first renewal of it since then went out
 * at or after that moment (renew_sent_at; -1: none sent yet). Then the
 * renewer itself was held up past it (its loop blocked: a slow callback, a
 * loaded machine) and that renewal's answer is awaited first: the report
 * comes at renew_sent_at + command_timeout_ms if it is not confirmed by
 * then, and no later than confirmed_at + lease (when the server's copy may
 * end). A renewal sent in time and not answered (a silent link) earns no
 * grace, nor do the retries after it: pass the FIRST renewal sent since
 * confirmed_at. The driver must run this as a timer of its own that no
 * connect, handshake or read can delay (watchdog.c: a thread that does no
 * I/O; hilock_async: its loop's timer). */
HL_HIDDEN int64_t hl_renew_doubt_at(int64_t confirmed_at, int64_t watchdog_lease_ms,
                                    int64_t renew_sent_at, int64_t command_timeout_ms);
/* 1 when that hold is in doubt at now by the rule of hl_renew_doubt_at, for
 * a holder asking between two turns of its timer (its loop blocked: a query
 * made before the loop has run again): a renewal not sent yet counts as sent
 * now, so a hold is in doubt once its lease may have ended on the server
 * (confirmed_at + lease), even though the timer that reports it has not run
 * yet; before that the renewal due goes out first, as the timer's rule. */
HL_HIDDEN int hl_renew_in_doubt(int64_t confirmed_at, int64_t watchdog_lease_ms,
                                int64_t renew_sent_at, int64_t command_timeout_ms, int64_t now);

/* ---- redirects and topology (proto_route.c) ----
 * One routed command: feed each reply (or connection failure) to the route
 * machine; it says what to do next.
 *   hl_router_init(&rt, mode);
 *   send; switch (hl_router_on_reply(&rt, reply)) { ... }
 */
typedef enum hl_mode { HL_MODE_SINGLE = 0, HL_MODE_CLUSTER, HL_MODE_SENTINEL } hl_mode;
typedef enum hl_route_action {
    HL_ROUTE_DONE = 0, /* the reply is the answer (give it to the machine) */
    HL_ROUTE_MOVED,    /* the slot lives at host:port now: patch the map
                          (rt.slot), reload it later, resend there */
    HL_ROUTE_ASK,      /* send ASKING then the command to host:port, once */
    HL_ROUTE_RETRY,    /* sleep rt.sleep_ms, resend to the same master */
    HL_ROUTE_REFRESH,  /* the node is no master (failover, slot moved):
                          close the connection, look the master up again,
                          sleep rt.sleep_ms, resend */
    HL_ROUTE_FAIL      /* give up: rt.result (the reply, if any, is the error) */
} hl_route_action;
#define HL_ROUTE_MAX_HOPS 16
typedef struct hl_router {
    hl_mode mode;
    int hops, demoted, reconnected;
    /* outputs */
    unsigned slot;
    char host[256];
    int port;
    int64_t sleep_ms;
    int result;
} hl_router;
HL_HIDDEN void hl_router_init(hl_router *rt, hl_mode mode);
HL_HIDDEN hl_route_action hl_router_on_reply(hl_router *rt, const redisReply *r);
/* The connection failed. sent: the command may have reached the server
 * (then it is not resent here: only machines know whether that is safe). */
HL_HIDDEN hl_route_action hl_router_on_conn_error(hl_router *rt, int sent);
/* "MOVED <slot> <host>:<port>" / "ASK ...": 1 MOVED, 2 ASK, 0 neither
 * (validated: slot < 16384, port 1..65535, host fits). */
HL_HIDDEN int hl_parse_redirect(const redisReply *r, unsigned *slot, char *host,
                                size_t hostlen, int *port);
/* READONLY / MASTERDOWN anywhere in an error (scripts embed it). */
HL_HIDDEN int hl_reply_not_master(const redisReply *r);

/* ---- replica acknowledgement (proto_route.c) ----
 * After a write the caller wants acknowledged, on the same connection:
 *   hl_ack_init(&k, cached_replicas, cached_age_ms, ack_timeout_ms);
 *   while (hl_ack_next(&k) == HL_ACT_SEND) {
 *       send k.cmd (bounded by k.timeout_ms), hl_ack_on_reply / hl_ack_on_error
 *   }
 *   k.acked: 1 a replica acknowledged the write (WAIT said >= 1), or the
 *              master has no replica and was never seen with one (the
 *              cached count given is 0 or unknown) and the deployment is
 *              not known to keep replicas (hl_ack_init_replicated);
 *            0 otherwise (a grant is given back): a WAIT that timed out is
 *              no acknowledgement, whatever ROLE says afterwards, and a
 *              master that lists no replica now although the cached count
 *              had some has lost them (killed, or cut off: one of them may
 *              be the master now)
 *   k.failed: the connection failed (close it; certainty is lost: acked 0)
 *   k.replicas / k.refreshed: the replica count to cache (when refreshed);
 *     it does not fall to 0 once positive (the loss is remembered until the
 *     driver forgets the node: a new master after a failover starts at -1).
 *   k.replicated: the deployment keeps replicas (given, or ROLE listed one
 *     now): a Sentinel driver keeps it per client, for every master of the
 *     name, and passes it to hl_ack_init_replicated. A node's count starts
 *     unknown (a new master after a failover) or 0 (its replicas had not
 *     attached yet when it was asked), and a master cut off with some
 *     clients may list none once its replicas are gone; "never seen with a
 *     replica" then is no reason to count a grant acknowledged, since the
 *     sentinels may promote one of those replicas. */
#define HL_REPLICAS_CACHE_MS 2000
typedef struct hl_ack {
    int state;
    int64_t ack_timeout_ms;
    /* outputs */
    hl_cmd cmd;
    int64_t timeout_ms;
    int acked, failed, replicas, refreshed;
    int had; /* the master had replicas (cached or seen): it needs a WAIT */
    int replicated; /* the deployment keeps replicas (given, or seen now) */
} hl_ack;
/* cached_replicas < 0 or cached_age_ms > HL_REPLICAS_CACHE_MS: ask ROLE. */
HL_HIDDEN void hl_ack_init(hl_ack *k, int cached_replicas, int64_t cached_age_ms,
                           int64_t ack_timeout_ms);
/* The same, for a master of a deployment known to keep replicas
 * (replicated 1: Sentinel, a master of this name was seen with one): a
 * master that lists none acknowledges nothing, whatever its node's cache. */
HL_HIDDEN void hl_ack_init_replicated(hl_ack *k, int cached_replicas, int64_t cached_age_ms,
                                      int64_t ack_timeout_ms, int replicated);
HL_HIDDEN hl_action hl_ack_next(hl_ack *k);
HL_HIDDEN void hl_ack_on_reply(hl_ack *k, const redisReply *r);
HL_HIDDEN void hl_ack_on_error(hl_ack *k);
/* A grant no replica acknowledged was given back (released): try again?
 * 1 with *pause_ms: sleep that long, then run the acquire again with what
 * is left of the wait; 0: give up (HILOCK_EUNACKED, "released again: no
 * replica acknowledged it"). wait_ms as given to the acquire (-1 forever,
 * 0 one try); deadline_ms: when the wait ends (-1 none). */
#define HL_ACK_RETRY_MS 100
HL_HIDDEN int hl_ack_retry(int64_t wait_ms, int64_t deadline_ms, int64_t now_ms,
                           int64_t *pause_ms);
/* ROLE reply -> connected replicas (0 for a replica or anything odd). */
HL_HIDDEN int hl_decode_role_replicas(const redisReply *r, int *is_master);

/* ---- multi-lock and Redlock rules (proto_multilock.c) ---- */
/* Members that must be taken: all n for a multi-lock, n/2+1 for a Redlock. */
HL_HIDDEN size_t hl_ml_quorum(int redlock, size_t n);
/* The clock-drift allowance of a lease: lease/100 + 2 ms. */
HL_HIDDEN int64_t hl_ml_drift(int64_t lease_ms);
/* What is left of a lease after an attempt that ran from t0 to t1 (monotonic
 * ms): lease - (t1 - t0) - drift; a Redlock grant needs it > 0. */
HL_HIDDEN int64_t hl_ml_validity(int64_t lease_ms, int64_t t0_ms, int64_t t1_ms);
/* Did an attempt succeed: no fatal member error, and ok == n (multi-lock) or
 * ok >= quorum with validity > 0 (Redlock). */
HL_HIDDEN int hl_ml_success(int redlock, size_t n, size_t ok, int fatal, int64_t validity_ms);
/* After a failed attempt, is member i (its acquire answered rc) released?
 * Taken ones always; on a re-entry nothing else (an unanswered member may
 * still carry the outer hold); else a Redlock every node but a closed
 * client's, a multi-lock the members in doubt (not timed out/closed/
 * invalid/out of memory). */
HL_HIDDEN int hl_ml_take_back(int redlock, int reentry, int rc);
/* Is a hold lost once nlost of its nacquired members were: a multi-lock at
 * the first, a Redlock when fewer than the quorum remain. */
HL_HIDDEN int hl_ml_hold_lost(int redlock, size_t n, size_t nacquired, size_t nlost);
/* The time limit of one member's request: the one configured (> 0), else
 * 50 ms for a Redlock (a node that does not answer fast is a node that
 * failed), else 0 = the member client's own timeouts (a multi-lock needs
 * every member, so it waits for each as long as a single lock would). */
#define HL_ML_REDLOCK_MEMBER_TIMEOUT_MS 50
HL_HIDDEN int64_t hl_ml_member_timeout(int redlock, int64_t configured_ms);
/* One member's part in an attempt that failed, for the wait before the next. */
typedef struct hl_ml_member {
    int rc;         /* its acquire's answer: 0 taken, HILOCK_ETIMEDOUT held by
                       another owner, else an error */
    int64_t ttl_ms; /* held: the holder's PTTL (-1 no expiry) */
    int wakeable;   /* its unlock message reaches the waiter: subscribed
                       and confirmed (a fair member: to the waiter's own
                       channel, which its unlock uses once the waiter heads
                       its line, see hl_ml_line_window) */
    int64_t line_window_ms; /* > 0: it may be in the member's line with this
                               window (0 or -1: in no line) */
} hl_ml_member;
/* A fair member's line. A multi-lock or Redlock that may wait joins the
 * line of each fair member found held, as a single fair waiter does, and
 * listens on its own waiter channel "<channel>:<owner>": the member's unlock
 * wakes only the head of its line, so a waiter not in line would have to
 * poll. hl_ml_line_window: the wait window each attempt on the member
 * passes (hl_cmd_acquire's wait_window_ms, the same for every attempt of a
 * call): -1 = joins no line (not a fair lock, or a single try, wait 0, which
 * leaves no trace), else the wait when > 0, else the client's fair window.
 * hl_ml_in_line: after an attempt that answered rc, may the call have an
 * entry in the member's line (taken: no; held by another or an error: yes).
 * A call that ends (granted, timed out, cancelled, failed) with entries
 * left sends hl_cmd_fair_cancel (owner, the same window) for each. */
HL_HIDDEN int64_t hl_ml_line_window(hilock_kind kind, int64_t wait_ms, int64_t client_window_ms);
HL_HIDDEN int hl_ml_in_line(int64_t window_ms, int rc);
/* Does a message on member mb's channel call for a new attempt: it was held
 * by another owner and we listen to it. A wake on any other member's channel
 * is not ours to use (our own take-back publishes there too): pass it on. */
HL_HIDDEN int hl_ml_wakes_on(const hl_ml_member *mb);
/* How long a failed multi-lock or Redlock attempt sleeps before the next one,
 * waking earlier on a message of a member hl_ml_wakes_on names; -1: until
 * such a message. Bounded by the shortest PTTL of the members held (a fair
 * member in line: its hint, and half its window, as a single fair waiter,
 * so that a silent waiter is not dropped from the line), and by
 * left_ms (what is left of the wait, -1 none). Only when messages cannot
 * tell us (a member held without a subscription, one whose hold just ended,
 * errors leaving fewer than the quorum to wait for, or a Redlock whose
 * validity ran out) by backoff_ms, the driver's random pause. */
/* Errors of one member's acquire after which trying again cannot help: a
 * multi-lock gives up on any but "held by another owner" (HILOCK_ETIMEDOUT)
 * and a connection failure; a Redlock only on local ones (closed client,
 * invalid argument, no memory): a node answering badly is a node that failed. */
HL_HIDDEN int hl_ml_fatal(int redlock, int rc);
/* What a failed acquire returns once its wait is over: the first error when
 * no member was held by another owner (busy 0) and a Redlock did not reach
 * its quorum, else HILOCK_ETIMEDOUT. */
HL_HIDDEN int hl_ml_fail_code(int redlock, size_t n, size_t ok, size_t busy, int first_err);
/* What a release of every member returns: 0 when the quorum (n, or n/2+1)
 * was released, else HILOCK_ENOTOWNER when a member was not held, else the
 * first error. */
HL_HIDDEN int hl_ml_release_code(int redlock, size_t n, size_t ok, size_t notowner,
                                 int first_err);
/* The random pause (ms) before the next attempt when no message can tell
 * (hl_ml_wait_ms's backoff_ms): 1 + r mod a cap growing with the attempt
 * number from 6 to 50 ms; r: a random number of the driver's. */
HL_HIDDEN int64_t hl_ml_backoff(unsigned attempt, uint64_t r);
HL_HIDDEN int64_t hl_ml_wait_ms(int redlock, const hl_ml_member *mb, size_t n,
                                int validity_failed, int64_t backoff_ms, int64_t left_ms);
/* Redlock member durability (docs/safety.md, "Redlock"). A member that
 * comes back from a crash without the holds it granted lets another client
 * win a majority while those holds last, unless it stays down longer than
 * the longest lease first (a delayed restart). hl_cmd_config_append asks a
 * member for its AOF settings (CONFIG GET append*, every Redis version);
 * hl_ml_durability reads the answer: r the reply (NULL when none came, err
 * then says why), delayed_restart the member URL's delayed_restart=1 (the
 * operator's word that a crashed member stays down for longer than any
 * lease). 0 when the member keeps every grant over a restart (appendonly
 * yes and appendfsync always) or restarts delayed; 1 when it may not, with
 * why (len bytes) saying what was seen: no AOF, an AOF not synced at every
 * write, or settings that could not be read (refused by an ACL or a renamed
 * CONFIG, no reply). */
HL_HIDDEN void hl_cmd_config_append(hl_cmd *cmd);
HL_HIDDEN int hl_ml_durability(const redisReply *r, const char *err, int delayed_restart,
                               char *why, size_t len);

/* ---- pub/sub and topology commands and answers (proto_route.c) ---- */
/* SUBSCRIBE/UNSUBSCRIBE channel, or SSUBSCRIBE/SUNSUBSCRIBE when sharded
 * (Redis Cluster: what sees the scripts' SPUBLISH). */
HL_HIDDEN void hl_cmd_subscribe(hl_cmd *cmd, const char *channel, int sharded, int unsubscribe);
/* PING on a pub/sub connection: the session's liveness test (hl_sublive);
 * answered ["pong", ""] in subscribed mode (RESP2), +PONG otherwise. */
HL_HIDDEN void hl_cmd_ping(hl_cmd *cmd);
HL_HIDDEN void hl_cmd_cluster_slots(hl_cmd *cmd);
HL_HIDDEN void hl_cmd_role(hl_cmd *cmd);
HL_HIDDEN void hl_cmd_asking(hl_cmd *cmd);
HL_HIDDEN void hl_cmd_sentinel_master(hl_cmd *cmd, const char *master_name);
HL_HIDDEN void hl_cmd_sentinel_watch(hl_cmd *cmd); /* SUBSCRIBE +switch-master */
/* The connection handshake a fresh connection sends before anything else:
 * AUTH [user] password when a password is given (a user alone sends
 * nothing), then SELECT db when db is not 0. Fills cmds (HL_HANDSHAKE_MAX)
 * and returns how many; the strings must outlive the commands. */
#define HL_HANDSHAKE_MAX 2
HL_HIDDEN int hl_cmd_handshake(hl_cmd *cmds, const char *user, const char *password, int db);
/* What a handshake reply means: 0 accepted (+OK), HILOCK_EAUTH refused (an
 * error reply: wrong password, unknown user, no such database), HILOCK_EPROTO
 * anything else (not a Redis server speaking the protocol we expect). */
HL_HIDDEN int hl_decode_handshake(const redisReply *r);
/* CLUSTER SLOTS entries: hl_decode_slot_range; SENTINEL get-master-addr-by-name:
 * hl_decode_master_addr (both above, reply.c). */
/* A +switch-master message for master_name: 1 with the new master's host and
 * port, 0 when the message is about something else. */
HL_HIDDEN int hl_decode_switch_master(const redisReply *r, const char *master_name, char *host,
                                      size_t hostlen, int *port);

/* ================================================================
 * Semaphores and count-down latch (proto_sem.c), in Redisson's layouts:
 *   semaphore N:        string N = free permits; channel redisson_sc:{N},
 *                       whose messages are the new count.
 *   permit-expirable N: the same, plus ZSET "{N}:timeout" (member: a permit
 *                       id's 16 raw bytes, score: its lease end in epoch ms;
 *                       922337203685477 = no lease).
 *   latch N:            string N = count; channel
 *                       "redisson_countdownlatch__channel__{N}" (always
 *                       braced, as Redisson's): "0" = reached zero (wake
 *                       all), "1" = a new count was set.
 * ================================================================ */
typedef enum hl_sem_kind {
    HL_SEM_SEMAPHORE = 1, /* RSemaphore */
    HL_SEM_PERMIT = 2,    /* RPermitExpirableSemaphore */
    HL_SEM_LATCH = 3      /* RCountDownLatch */
} hl_sem_kind;
typedef struct hl_sem_names {
    char *name;          /* the count's key */
    char *channel;
    char *timeout;       /* permit-expirable: the leases ZSET; else = name */
    char *latch_prefix;  /* semaphore: "hilock_sem_latch:{N}" (request latches) */
    char *gone;          /* permit-expirable: "hilock_pes_gone:{N}", the ids
                            given back lately (pes_gone.lua); else NULL */
    const char *publish; /* "publish", or "spublish" on Redis Cluster */
} hl_sem_names;
HL_HIDDEN int hl_sem_names_init(hl_sem_names *n, hl_sem_kind kind, const char *name);
HL_HIDDEN void hl_sem_names_free(hl_sem_names *n);
/* Redis Cluster: 1 when the key, ZSET and channel hash to one slot. */
HL_HIDDEN int hl_sem_names_one_slot(const hl_sem_names *n);

/* Bounds: permits per call 1..HL_SEM_PERMITS_MAX (Redisson's int), counts
 * kept by the scripts within +-HL_SEM_COUNT_MAX (exact in Lua's doubles),
 * at most HL_PES_IDS_MAX permit ids per permit-expirable acquire. */
#define HL_SEM_PERMITS_MAX ((int64_t)2147483647)
#define HL_SEM_COUNT_MAX ((int64_t)999999999999999)
#define HL_PES_IDS_MAX 1024
#define HL_PES_ID_BYTES 16
/* How long a permit-expirable id given back stays refused to a late copy of
 * its acquire (the given-back set's entries, pes_gone.lua): as long as the
 * settle machine waits for a late reply. */
#define HL_PES_GONE_MS HL_SETTLE_MAX_MS
/* Validation shared by every driver: 0 or HILOCK_EINVAL. */
HL_HIDDEN int hl_sem_check_permits(int64_t permits); /* 1..HL_SEM_PERMITS_MAX */
HL_HIDDEN int hl_sem_check_count(int64_t count);     /* 1..HL_SEM_COUNT_MAX */

/* Builders (kind picks the script/keys where both kinds share a verb). */
HL_HIDDEN void hl_sem_cmd_try_set(hl_cmd *cmd, hl_sem_kind kind, const hl_sem_names *n,
                                  int64_t count);
HL_HIDDEN void hl_sem_cmd_acquire(hl_cmd *cmd, const hl_sem_names *n, int64_t permits);
/* The same, idempotent per request: latch is the owner's request latch key
 * (hl_sem_latch_arg's key part), seq this request's number, latch_ttl_ms its
 * lifetime (sem_acquire.lua). latch NULL: as hl_sem_cmd_acquire. */
HL_HIDDEN void hl_sem_cmd_acquire_latched(hl_cmd *cmd, const hl_sem_names *n, int64_t permits,
                                          const char *latch, const char *seq,
                                          int64_t latch_ttl_ms);
/* Give up the request (latch, seq) whose reply was lost: its permits, if it
 * took any, are given back once (sem_settle.lua; idempotent). */
HL_HIDDEN void hl_sem_cmd_settle(hl_cmd *cmd, const hl_sem_names *n, const char *latch,
                                 const char *seq, int64_t latch_ttl_ms);
/* The request latch argument of one semaphore acquire call,
 * "hilock_sem_latch:{N}:<owner>:<epoch>:<seq>" (as hl_acquire_latch_arg:
 * one key per owner and epoch, seq unique per call within the client).
 * 0, or HILOCK_EINVAL when buf is too short. */
HL_HIDDEN int hl_sem_latch_arg(char *buf, size_t len, const hl_sem_names *n, const char *owner,
                               uint64_t epoch, uint64_t seq);
HL_HIDDEN void hl_sem_cmd_release(hl_cmd *cmd, const hl_sem_names *n, int64_t permits);
/* set 0: add permits (may be negative); set 1: make the count exactly permits */
HL_HIDDEN void hl_sem_cmd_add(hl_cmd *cmd, const hl_sem_names *n, int64_t permits, int set);
HL_HIDDEN void hl_sem_cmd_drain(hl_cmd *cmd, const hl_sem_names *n);
/* Free permits (GET; the permit-expirable one first gives back expired
 * permits), or a latch's count (GET). Decoded by hl_sem_decode_count. */
HL_HIDDEN void hl_sem_cmd_count(hl_cmd *cmd, hl_sem_kind kind, const hl_sem_names *n);
/* ids: permits * HL_PES_ID_BYTES raw bytes (must outlive cmd); lease_ms <= 0: none.
 * A late copy of it takes nothing once its first id was given back
 * (hl_pes_cmd_release files every id in the given-back set). */
HL_HIDDEN void hl_pes_cmd_acquire(hl_cmd *cmd, const hl_sem_names *n, int64_t permits,
                                  int64_t lease_ms, const unsigned char *ids);
HL_HIDDEN void hl_pes_cmd_release(hl_cmd *cmd, const hl_sem_names *n,
                                  const unsigned char id[HL_PES_ID_BYTES]);
/* A new lease (> 0 ms from now) for a taken permit; reply 1 renewed, 0 gone. */
HL_HIDDEN void hl_pes_cmd_update(hl_cmd *cmd, const hl_sem_names *n,
                                 const unsigned char id[HL_PES_ID_BYTES], int64_t lease_ms);
HL_HIDDEN void hl_latch_cmd_count_down(hl_cmd *cmd, const hl_sem_names *n);
/* Delete a latch or semaphore (both keys) and wake its waiters. */
HL_HIDDEN void hl_sem_cmd_delete(hl_cmd *cmd, hl_sem_kind kind, const hl_sem_names *n);

/* Replies. Errors: HILOCK_EWRONGTYPE (the key is not a count: a lock's
 * hash, a string that is no integer), HILOCK_EINVAL (the count would leave
 * +-HL_SEM_COUNT_MAX; nothing changed), HILOCK_EPROTO (anything else). */
HL_HIDDEN int hl_sem_decode_error(const redisReply *r);
/* A count: GET's string (missing = 0), or an integer reply. */
HL_HIDDEN int hl_sem_decode_count(const redisReply *r, int64_t *out);
/* An integer reply within +-HL_SEM_COUNT_MAX (release, add, drain, try_set,
 * pes_release, delete). */
HL_HIDDEN int hl_sem_decode_int(const redisReply *r, int64_t *out);
/* What a permit-expirable release's answer (1 given back, 0 not taken,
 * -1 given back but its lease had ended) and a lease update's (1 renewed,
 * 0 not taken) mean for the caller: 0 or HILOCK_ENOTOWNER. */
HL_HIDDEN int hl_pes_release_code(int64_t answer);
HL_HIDDEN int hl_pes_update_code(int64_t answer);
/* Permit ids as text: 32 lowercase hex chars (Redisson's), both ways.
 * hex -> bytes: 0, or HILOCK_EINVAL for anything but 32 hex digits. */
HL_HIDDEN void hl_pes_id_hex(char out[2 * HL_PES_ID_BYTES + 1],
                             const unsigned char id[HL_PES_ID_BYTES]);
HL_HIDDEN int hl_pes_id_parse(unsigned char id[HL_PES_ID_BYTES], const char *hex);

/* How many waiters on a channel a message wakes: -1 all, 0 none, n the n
 * longest waiting that are not woken yet. A lock channel: "0" one, "1" all;
 * a semaphore channel: the published count (permits free); a latch
 * channel: every message (they look at the count again). Anything that is
 * not a plain integer wakes nobody. */
typedef enum hl_wake_rule { HL_WAKE_LOCK = 0, HL_WAKE_PERMITS, HL_WAKE_LATCH } hl_wake_rule;
HL_HIDDEN int64_t hl_ps_wakes(hl_wake_rule rule, const hl_ps_event *ev);
HL_HIDDEN hl_wake_rule hl_sem_wake_rule(hl_sem_kind kind);
/* A holder listens on its own lock's channel: the one its kind's force
 * unlock publishes on (the read-write sides: redisson_rwlock:{N}; every
 * other kind: redisson_lock__channel:{N}; fair_force.lua publishes there
 * too, besides waking the head waiter). A message there while the hold is
 * kept (hl_hold_check_on: "0" or "1", any unlock or force unlock) means
 * "check the hold now": the driver renews it at once instead of at the next
 * tick, so a force unlock is reported within a round trip. Messages that
 * are not a lock's (anything but a plain integer) are ignored. */
HL_HIDDEN const char *hl_hold_channel(hilock_kind kind, const hl_names *n);
HL_HIDDEN int hl_hold_check_on(const hl_ps_event *ev);
/* "Is this owner's hold still there?" without renewing it (a hold with a
 * fixed lease, or any hold whose driver checks instead of renewing): every
 * lock kind keeps its holder's field in the lock hash while it holds
 * (owner as hl_hold_owner makes it; the write side's ":write" included).
 * hl_hold_check_gone: 0 and *gone 1 (field gone: the hold was lost) or 0
 * (still there); an error code when the reply says neither (a transport
 * or server error: nothing is known, as for a failed renewal). */
HL_HIDDEN void hl_cmd_hold_check(hl_cmd *cmd, const hl_names *n, const char *owner);
HL_HIDDEN int hl_hold_check_gone(const redisReply *r, int *gone);

/* A permit of a permit-expirable semaphore kept as a hold (the blocking
 * API's hilock_permit_semaphore_keep): a hold kind of the engine's own,
 * outside hilock_kind's values. Its hl_names are the semaphore's: name =
 * the count's key, channel = the semaphore's channel, timeout = the leases
 * ZSET, publish; its "owner" is the permit id (32 hex characters). Every
 * rule above that takes a kind knows it: hl_hold_channel (the semaphore's
 * channel), hl_cmd_renew_kind (pes_update.lua: a new lease; answers 1/0 as
 * renew.lua, so hl_renew_classify reads it), hl_renew_alone (1), and the
 * three below. */
#define HL_KIND_PERMIT ((hilock_kind)64)
/* Whether a message heard on the channel of a hold of kind means "check
 * it now": for a lock, hl_hold_check_on; for a permit, every message on
 * the semaphore's channel (a permit given back by anyone publishes the new
 * count there, a deletion publishes too; taking a permit publishes
 * nothing), since the count says nothing about which permit went. */
HL_HIDDEN int hl_hold_check_on_kind(hilock_kind kind, const hl_ps_event *ev);
/* hl_cmd_hold_check for a hold of kind: a permit asks ZSCORE of its id in
 * the leases ZSET (no new lease); hl_hold_check_gone_kind reads the answer
 * (a permit: nil = gone, a score = still taken). */
HL_HIDDEN void hl_cmd_hold_check_kind(hl_cmd *cmd, hilock_kind kind, const hl_names *n,
                                      const char *owner);
HL_HIDDEN int hl_hold_check_gone_kind(hilock_kind kind, const redisReply *r, int *gone);
/* The permit's own builders and decoder behind those (proto_sem.c): id
 * is the 32 hex characters. */
HL_HIDDEN void hl_permit_cmd_renew(hl_cmd *cmd, const hl_names *n, const char *id,
                                   int64_t lease_ms);
HL_HIDDEN void hl_permit_cmd_check(hl_cmd *cmd, const hl_names *n, const char *id);
HL_HIDDEN int hl_permit_check_gone(const redisReply *r, int *gone);

/*
 * The wait machine of the three: semaphore acquire k, permit-expirable
 * acquire k (with lease), latch await. Same driver contract as hl_acquire:
 *
 *   hl_semwait_init(&m, ...);
 *   for (;;) switch (hl_semwait_next(&m, now_ms())) {
 *     case HL_ACT_SEND:        send m.cmd; hl_semwait_on_reply / _on_error
 *     case HL_ACT_SUBSCRIBE:   subscribe to m.channel (wake rule
 *                              hl_sem_wake_rule(kind)); hl_semwait_on_subscribed
 *     case HL_ACT_WAIT:        sleep up to m.sleep_ms (-1: until a message)
 *                              or until woken; hl_semwait_on_wake
 *     case HL_ACT_UNSUBSCRIBE: drop the subscription; the machine moves on
 *     case HL_ACT_DONE:        m.result: 0 (taken / the latch is open),
 *                              HILOCK_ETIMEDOUT, HILOCK_ECANCELED or an error
 *   }
 * Decisions: try first; subscribe only when that fails and a wait is left;
 * try again once subscribed (a release between the try and the SUBSCRIBE
 * would be missed otherwise) and after every wake-up; a permit-expirable
 * try that failed says when the nearest lease ends, and the wait is cut
 * there (expired permits are given back by the next try, with no message);
 * without a subscription, retry every HL_SEMWAIT_POLL_MS. A
 * permit-expirable acquire whose reply was lost (the driver's transport set
 * cmd.reply_lost before hl_semwait_on_error) sends one release per permit
 * id before ending with the error, so a failed acquire keeps nothing (a
 * resend of the acquire itself is harmless: pes_acquire.lua takes an id
 * only once). A plain semaphore's acquire is idempotent under a request
 * latch when the driver gives one (hl_semwait_set_latch): a resend answers
 * the first copy's grant, and an acquire whose reply was lost is settled
 * (hl_sem_cmd_settle: its permits given back, a late copy takes nothing)
 * before the machine ends with the error. Without a latch it is not.
 */
#define HL_SEMWAIT_POLL_MS 100
typedef struct hl_semwait {
    hl_sem_kind kind;
    const hl_sem_names *names;  /* borrowed */
    int64_t permits;
    int64_t lease_ms;
    const unsigned char *ids;   /* permit-expirable: borrowed */
    int64_t wait_ms;
    int64_t deadline;           /* -1 none */
    int state;
    int subscribed, sub_failed, resub;
    int64_t hint_ms;            /* permit-expirable: nearest lease end, -1 none */
    /* outputs */
    hl_cmd cmd;
    const char *channel;        /* for (UN)SUBSCRIBE / WAIT */
    int64_t sleep_ms;
    int result;
    int64_t attempts;
    int64_t count;              /* latch: the count last seen */
    /* permit-expirable: an acquire whose reply was lost with its connection
     * (cmd.reply_lost) is settled by giving back each of its ids (the
     * server may have taken them), then ends with the error */
    int settle_code;
    int64_t settle_next;        /* next id to give back */
    /* semaphore: the request latch (hl_semwait_set_latch), or NULL */
    char *latch;                /* the key */
    char latch_seq[24];
    int64_t latch_ttl_ms;
    int settle_tries;
} hl_semwait;
/* 0 or HILOCK_EINVAL (bad kind, permits or wait). permits: 1 for a latch. */
HL_HIDDEN int hl_semwait_init(hl_semwait *m, hl_sem_kind kind, const hl_sem_names *n,
                              int64_t permits, int64_t lease_ms, const unsigned char *ids,
                              int64_t wait_ms, int64_t now_ms);
/* Semaphore only: make every try of this call idempotent under latch_arg
 * (from hl_sem_latch_arg; copied). 0, HILOCK_EINVAL (not a semaphore, or a
 * malformed argument) or HILOCK_ENOMEM. hl_semwait_free releases it. */
HL_HIDDEN int hl_semwait_set_latch(hl_semwait *m, const char *latch_arg, int64_t latch_ttl_ms);
HL_HIDDEN void hl_semwait_free(hl_semwait *m);
HL_HIDDEN hl_action hl_semwait_next(hl_semwait *m, int64_t now_ms);
HL_HIDDEN void hl_semwait_on_reply(hl_semwait *m, const redisReply *r, int64_t now_ms);
HL_HIDDEN void hl_semwait_on_error(hl_semwait *m, int code, int64_t now_ms);
HL_HIDDEN void hl_semwait_on_subscribed(hl_semwait *m, int ok, int64_t now_ms);
HL_HIDDEN void hl_semwait_on_wake(hl_semwait *m, int64_t now_ms);
/* The channel moved (cluster): unsubscribe, subscribe again, retry. */
HL_HIDDEN void hl_semwait_on_resubscribe(hl_semwait *m, int64_t now_ms);
/* Between actions: end with HILOCK_ECANCELED (unless already done). */
HL_HIDDEN void hl_semwait_cancel(hl_semwait *m, int64_t now_ms);

/* ---- messages every driver shows the same way ---- */

/* Longest lock, semaphore or latch name, in bytes. */
#define HL_NAME_MAX 4096

/* A name as every binding takes it: 0, or HILOCK_EINVAL with why in err
 * (errlen bytes at most): "the name is empty; a name is 1 to 4096 bytes",
 * "the name is 5000 bytes long; a name is 1 to 4096 bytes", "the name
 * contains a NUL byte". len: the name's length (bindings that know it;
 * C strings pass strlen). */
HL_HIDDEN int hl_name_check(const char *name, size_t len, char *err, size_t errlen);

/* A server that took the connection and sent nothing back in time:
 * "no reply within <ms> ms from <where>" into buf (len bytes at most).
 * where: "host:port" or the unix socket path. */
HL_HIDDEN void hl_msg_no_reply(char *buf, size_t len, int64_t ms, const char *where);

/* The session (proto_session.c): the hold table, for every driver, the
 * bindings' included (installed next to this header). */
#include "proto_session.h"

#endif
