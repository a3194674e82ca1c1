/*
 * hilock — Redis distributed locks (reentrant, fair, multi-lock, Redlock,
 * watchdog renewal) in Redisson's data layout.
 *
 * Conventions
 *   - Every function that can fail returns 0 or a negative HILOCK_E* code;
 *     out-parameters come first.
 *   - Handles are opaque. Every _new/_open function has a NULL-safe _free/_close.
 *   - Times are int64_t milliseconds. For acquire: wait 0 = one try,
 *     -1 = wait forever, >0 = wait at most that long; lease <= 0 = watchdog
 *     (renewed while held), > 0 = fixed lease. Other negative values are
 *     HILOCK_EINVAL, and so are values above HILOCK_MAX_TIME_MS.
 *   - The "_tid" variants take an explicit thread id (the second half of the
 *     owner string "<client-uuid>:<thread-id>"); the plain ones use the
 *     calling OS thread's id.
 *   - Detail messages (hilock_client_errmsg, hilock_lock_errmsg,
 *     hilock_multilock_errmsg) are per thread, as libgit2's last error: a
 *     failing call records its detail for the calling thread, and errmsg(h)
 *     returns that thread's own last failure when it was on h, else the
 *     handle's latest message (a loss found by the watchdog, another
 *     thread's failure, the listener's connection trouble), copied under
 *     the handle's lock. A successful acquire clears the caller's message
 *     for that handle. The text lives in storage of the calling thread,
 *     valid until that thread's next hilock call; never NULL.
 *
 * Signals
 *   The library never changes the process's signal dispositions, and no
 *   SIGPIPE it causes reaches the host process (a write to a socket whose
 *   server has gone away raises SIGPIPE unless sent with MSG_NOSIGNAL):
 *   - connections (TCP, unix socket, and TLS once its handshake is done)
 *     are written with send(MSG_NOSIGNAL): a blocking call that only
 *     writes on those leaves the thread's signal mask alone (no signal
 *     system calls at all);
 *   - the library's own threads (watchdog, pub/sub listener, settling of
 *     timed-out attempts, sentinel watcher) run with
 *     SIGPIPE blocked in their signal mask for their whole life;
 *   - in the caller's thread, a TLS handshake (OpenSSL writes it with
 *     write(2)), a call of the non-blocking API that may write (hiredis's
 *     own async connections), or any call that writes in a build against
 *     the system's hiredis 0.14,
 *     blocks SIGPIPE for its duration, consumes
 *     a SIGPIPE it raised (sigtimedwait) and restores the thread's mask
 *     before returning. A SIGPIPE already pending on a thread that had it
 *     blocked before the call is left alone; one sent to the process
 *     (kill -PIPE) while such a call runs may be consumed.
 *   Broken connections show up as HILOCK_ECONN (or are reconnected).
 */
#ifndef HILOCK_H
#define HILOCK_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(HILOCK_BUILDING) && (defined(__GNUC__) || defined(__clang__))
#define HILOCK_API __attribute__((visibility("default")))
#else
#define HILOCK_API
#endif

#define HILOCK_VERSION_MAJOR 0
#define HILOCK_VERSION_MINOR 1
#define HILOCK_VERSION_PATCH 0
#define HILOCK_VERSION_NUMBER \
    (HILOCK_VERSION_MAJOR * 10000 + HILOCK_VERSION_MINOR * 100 + HILOCK_VERSION_PATCH)
#define HILOCK_VERSION_STRING "0.1.0"

/* Runtime version: the number as HILOCK_VERSION_NUMBER, and the string
 * (with "+BROKEN-<mode>" after it only in a library built for the safety
 * harness's self-tests, CMake HILOCK_SAFETY_BREAK: docs/safety.md). */
HILOCK_API int hilock_version(void);
HILOCK_API const char *hilock_version_string(void);

/* Error codes. */
enum {
    HILOCK_OK = 0,
    HILOCK_EINVAL = -1,     /* invalid argument (NULL, empty, bad time, bad URL) */
    HILOCK_ETIMEDOUT = -2,  /* the wait elapsed without acquiring */
    HILOCK_ENOTOWNER = -3,  /* unlock/renew by a caller that does not hold it */
    HILOCK_ELOST = -4,      /* the lock was lost while held (watchdog found it gone) */
    HILOCK_ECONN = -5,      /* cannot reach the server, I/O error or command timeout */
    HILOCK_EPROTO = -6,     /* unexpected reply or server error */
    HILOCK_EAUTH = -7,      /* authentication or database selection refused */
    HILOCK_EWRONGTYPE = -8, /* the lock's key holds a value that is not a lock */
    HILOCK_ENOMEM = -9,     /* out of memory */
    HILOCK_ECLOSED = -10,   /* handle closed, or client inherited across fork() */
    HILOCK_ETLS = -11,      /* TLS handshake failed: the server's certificate did not
                               verify (CA, expiry, name), or the server refused ours */
    HILOCK_ECANCELED = -12, /* a pending acquire was cancelled (hilock_lock_cancel,
                               hilock_multilock_cancel); nothing is held or queued */
    HILOCK_EUNACKED = -13   /* replica_ack: the server granted the lock but no
                               replica acknowledged it in time, so it was released
                               again; nothing is held (a waiting acquire tries again
                               while its wait lasts and returns this only when the
                               wait is over) */
};

/* Static description of a code ("not owner", ...); never NULL. */
HILOCK_API const char *hilock_strerror(int code);

/* Longest time accepted, in ms (about 292 years would overflow; we cap at
 * 100 years so that deadlines computed from now never overflow). */
#define HILOCK_MAX_TIME_MS ((int64_t)3153600000000)
#define HILOCK_WAIT_FOREVER ((int64_t)-1)
#define HILOCK_LEASE_WATCHDOG ((int64_t)0)

/* ------------------------------------------------------------------ */
/* Client                                                               */
/* ------------------------------------------------------------------ */

typedef struct hilock_client hilock_client;

#define HILOCK_OPTIONS_VERSION 4

/* Zero-initialisable: a field left at 0 (or NULL) takes its default. Fields
 * after pool_size are read only when version >= 2, the TLS and sentinel ones
 * only when version >= 3, stats_names only when version >= 4. */
typedef struct hilock_options {
    unsigned int version;        /* HILOCK_OPTIONS_VERSION (0 is taken as 1) */
    int64_t connect_timeout_ms;  /* default 1000 */
    int64_t command_timeout_ms;  /* default 1000; hilock_async: counted from
                                    when the command was written and the
                                    ones before it on its connection were
                                    answered, not from when it was queued */
    int64_t watchdog_lease_ms;   /* default 30000; renewed every lease/3 */
    int64_t fair_wait_window_ms; /* default 300000 (fair lock waiter deadline window) */
    int pool_size;               /* connections in the pool, default 8 */
    /* version 2 */
    int replica_ack;             /* WAIT for a replica after acquire/release:
                                    0 = default (on for sentinel, off for one
                                    server), 1 = on, -1 = off */
    int64_t replica_ack_timeout_ms; /* default 1000 */
    /* version 3: TLS, for every connection of the client (server, sentinels,
     * every cluster node). rediss://, rediss+sentinel:// and
     * rediss+cluster:// URLs turn it on, or tls = 1. The strings are copied
     * by hilock_client_open; a URL query parameter of the same name
     * (docs/urls.md) wins over the option. */
    int tls;                     /* 1 = TLS whatever the URL's scheme */
    const char *tls_ca_file;     /* PEM file of trusted CAs; NULL = the system's */
    const char *tls_ca_dir;      /* directory of hashed CA certificates */
    const char *tls_cert_file;   /* client certificate chain, PEM (mutual TLS) */
    const char *tls_key_file;    /* its private key, PEM */
    const char *tls_server_name; /* SNI and the name the server's certificate must
                                    carry; NULL = the host connected to */
    int tls_insecure;            /* 1 = do not verify the server: FOR TESTS ONLY */
    /* version 3: sentinels with their own ACL user/password (NULL = no AUTH) */
    const char *sentinel_user;
    const char *sentinel_password;
    /* version 4: the opt-in per-name counters (hilock_client_name_stats):
     * the most (kind, name) pairs the client tracks, 0 (the default) = off,
     * at most HILOCK_STATS_NAMES_MAX. The first pairs counted are tracked;
     * the counts of every later pair go to its kind's one "other" entry. */
    int stats_names;
} hilock_options;

#define HILOCK_OPTIONS_INIT \
    {HILOCK_OPTIONS_VERSION, 0, 0, 0, 0, 0, 0, 0, 0, NULL, NULL, NULL, NULL, NULL, 0, NULL, NULL, 0}

/* Fill *opts with defaults. */
HILOCK_API int hilock_options_init(hilock_options *opts, unsigned int version);

/*
 * Open a client. url (every form, and the query parameters: docs/urls.md):
 *   redis[s]://[user[:password]@]host[:port][/db][?query]  (redis://:pw@h: default
 *       user; redis://user@h: that user, empty password; both percent-decoded)
 *   unix://[user[:password]@]/path/to/socket[?db=N&password=P&user=U]
 *   redis[s]+sentinel://[user[:password]@]s1[:p1][,s2[:p2]...]/mastername[/db]
 *       (the sentinels are asked for the current master at every connect;
 *        user/password are the master's; the sentinels' own are the query's
 *        sentinel_user/sentinel_password or the options')
 *   redis[s]+cluster://[user[:password]@]h1[:p1][,h2[:p2]...]
 *   query: ?db=1&connect_timeout_ms=500&tls_ca_file=/etc/ca.pem&...
 * opts may be NULL (defaults). Connects once to verify the server, the
 * credentials and the database; on failure returns the code and, when errbuf
 * is not NULL, writes a detail message into it (errlen bytes at most).
 * *out is NULL on failure.
 */
HILOCK_API int hilock_client_open(hilock_client **out, const char *url,
                                  const hilock_options *opts, char *errbuf,
                                  size_t errlen);

/* Close: stops the watchdog and listener threads, frees every connection.
 * Locks still held are NOT released; they stop being renewed and expire
 * after their lease. Lock handles of this client must be freed (before or
 * after); any other call on them returns HILOCK_ECLOSED. NULL-safe.
 * May be called from a lost callback (see hilock_lost_cb).
 * In a child process after fork(), only frees memory. */
HILOCK_API void hilock_client_close(hilock_client *c);

/* The client's 36-character UUID (owner prefix). */
HILOCK_API const char *hilock_client_id(const hilock_client *c);

/* Detail message of the last client-level failure (listener or watchdog
 * connection trouble, use after fork). Never NULL. */
HILOCK_API const char *hilock_client_errmsg(const hilock_client *c);

/* The URL as it may be shown: url written into buf (len bytes at most,
 * always NUL-terminated when len > 0) with every secret replaced by "***":
 * the password of the user part (redis://user:PASSWORD@host,
 * redis://:PASSWORD@host) and the value of every query parameter whose
 * name holds "pass" (password, sentinel_password, ...). Text only: a URL
 * that does not parse is redacted the same way. Returns the length of the
 * whole redacted URL (as snprintf: a result >= len means buf holds a cut
 * copy). url NULL: "". Every binding and the CLI show URLs through it. */
HILOCK_API size_t hilock_url_redact(char *buf, size_t len, const char *url);

/* Id of the calling OS thread (gettid), as used in owner strings. Asked of
 * the kernel on every call (nothing is kept), so a child after fork() gets
 * its own id. */
HILOCK_API uint64_t hilock_thread_id(void);

/* Write "<client-uuid>:<tid>" into buf (at least 58 bytes). */
HILOCK_API int hilock_client_owner(const hilock_client *c, uint64_t tid, char *buf,
                                   size_t len);

/* ------------------------------------------------------------------ */
/* Locks (reentrant and fair)                                           */
/* ------------------------------------------------------------------ */

typedef struct hilock_lock hilock_lock;

typedef enum hilock_kind {
    HILOCK_KIND_REENTRANT = 1,
    HILOCK_KIND_FAIR = 2,
    HILOCK_KIND_READ = 3,  /* the read side of a read-write lock */
    HILOCK_KIND_WRITE = 4, /* the write side of a read-write lock */
    HILOCK_KIND_FENCED = 5 /* reentrant lock whose grants carry fencing tokens */
} hilock_kind;

/*
 * Lost callbacks (hilock_lost_cb, hilock_multilock_lost_cb): the rules.
 *   Thread:  the watchdog thread of the client whose renewal found the hold
 *            gone (for a multi-lock: the client of the member that was
 *            lost), never the thread that acquired. Called once per lost
 *            hold, after hilock_lock_is_lost / hilock_multilock_is_lost
 *            already say so; no library lock is held during the call.
 *   When:    the renewal found the hold gone; or no renewal of it was
 *            confirmed by the server for lease - lease/5 (the link is down:
 *            the lease may run out there and another client take the lock;
 *            the handle's message then says "in doubt"). That moment is a
 *            timer of the watchdog thread, which does no I/O: renewals go
 *            out from a renewal thread of their own, so a connect,
 *            handshake or read stuck on a silent link (a load balancer or
 *            half-dead host that accepts connections and never answers,
 *            requests or replies dropped one way) delays neither it nor
 *            the report; nor does a slow callback delay the renewals. A
 *            renewal first sent after that moment (its thread held up by
 *            a loaded machine) is awaited up to the command timeout, and
 *            no later than the lease's end. A watchdog hold also listens
 *            on its lock's channel (the read-write sides: the read-write
 *            lock's): a message there (a force unlock of any kind by
 *            hilock, Redisson's of a reentrant, fenced or read-write lock)
 *            renews at once, so a force unlock is reported within a round
 *            trip instead of at the next tick (on Redis Cluster the
 *            subscription follows the lock's slot when it moves; a
 *            message sent before the subscription is in place, right
 *            after the grant, is found at the next tick). A hold reported in
 *            doubt is still renewed; if a renewal then finds it gone, that is
 *            reported as well (a second call for the same hold).
 *   May call: any hilock function, on any handle. In particular it may
 *            - free the handle it is about (hilock_lock_free,
 *              hilock_multilock_free), or any other handle of that client:
 *              the free completes when the watchdog's current pass of
 *              reports is over; from the call on, the handle must not be
 *              used and no further callback is made for it;
 *            - close the client (hilock_client_close): the handles of the
 *              client answer HILOCK_ECLOSED at once, the close completes
 *              (threads stopped, connections freed) when the callback
 *              returns; the handles still have to be freed.
 *   Should not: block for long (acquire with a long wait, sleep): the
 *            renewals of the client's other locks wait meanwhile, and a
 *            lock not renewed for a whole lease expires.
 *   payload: passed back as given to the set_lost_callback function.
 */
typedef void (*hilock_lost_cb)(hilock_lock *lock, uint64_t thread_id, void *payload);

/* A handle for the lock named `name` (non-empty, at most 4096 bytes) on
 * client c. Creating a handle sends nothing. A handle may be used by
 * several threads; each thread (thread id) has its own hold. */
/* Whether name is one hilock takes for a lock, semaphore or latch: 0, or
 * HILOCK_EINVAL with why written into why (len bytes at most; may be NULL):
 * "the name is empty; a name is 1 to 4096 bytes" or "the name is 5000
 * bytes long; a name is 1 to 4096 bytes". Every binding refuses names in
 * these words; hilock_lock_new and the other _new functions record them for
 * hilock_client_errmsg. */
HILOCK_API int hilock_name_check(const char *name, char *why, size_t len);

HILOCK_API int hilock_lock_new(hilock_lock **out, hilock_client *c, const char *name);
HILOCK_API int hilock_fair_lock_new(hilock_lock **out, hilock_client *c, const char *name);

/* Free the handle. Holds it still has stop being renewed (they expire after
 * their lease); nothing is unlocked. NULL-safe. May be called from a lost
 * callback, also its own (see hilock_lost_cb). */
HILOCK_API void hilock_lock_free(hilock_lock *l);

HILOCK_API const char *hilock_lock_name(const hilock_lock *l);
HILOCK_API hilock_kind hilock_lock_kind(const hilock_lock *l);
HILOCK_API hilock_client *hilock_lock_client(const hilock_lock *l);

/* Acquire. 0 = acquired (or re-entered: hold count + 1, lease re-applied);
 * HILOCK_ETIMEDOUT = not acquired within wait. HILOCK_ECONN when the server
 * could not be reached or did not answer in time; an attempt whose reply
 * timed out is settled later on its own connection (a late grant is
 * released, a fair waiter leaves the line), so no phantom hold remains.
 * While such an attempt on a server is still unsettled, a new attempt there
 * first waits for it (up to the command timeout), then fails with
 * HILOCK_ECONN: a stalled server never collects one connection per attempt
 * (multi-lock and Redlock members fail at once). With replica_ack on,
 * HILOCK_EUNACKED when the wait ended while grants were given back because
 * no replica acknowledged them (nothing held). */
HILOCK_API int hilock_lock_acquire(hilock_lock *l, int64_t wait_ms, int64_t lease_ms);
HILOCK_API int hilock_lock_acquire_tid(hilock_lock *l, uint64_t tid, int64_t wait_ms,
                                       int64_t lease_ms);

/* Add add_ms (> 0) to the remaining lease of the calling thread's (_tid:
 * tid's) hold, atomically on the server (PTTL + add_ms), as redis-py's
 * Lock.extend. For holds with a fixed lease: on a watchdog hold the next
 * renewal sets the watchdog lease again. A later partial unlock re-applies
 * the acquire's lease. HILOCK_ENOTOWNER when that owner does not hold it;
 * HILOCK_EINVAL for add_ms <= 0, a read-write lock side, or a key without
 * expiry. */
HILOCK_API int hilock_lock_extend(hilock_lock *l, int64_t add_ms);
HILOCK_API int hilock_lock_extend_tid(hilock_lock *l, uint64_t tid, int64_t add_ms);

/* Cancel the blocking acquire(s) of thread id tid on this handle that are
 * waiting now (any hilock_lock_acquire* with wait != 0; tid is the calling
 * thread's hilock_thread_id() for the calls without _tid). Callable from any
 * thread, including a signal-handling thread (not from a signal handler:
 * it takes a mutex). Does not block on the server. The acquire returns
 * HILOCK_ECANCELED after leaving the fair queue and dropping its
 * subscription, holding nothing; if its grant had already arrived it
 * returns 0 instead and the caller holds the lock (release it). Nothing is
 * remembered for later: an acquire that starts after the call is not
 * cancelled. *cancelled (may be NULL) is 1 when an acquire was waiting,
 * else 0. Returns 0, or HILOCK_EINVAL for a NULL lock. */
HILOCK_API int hilock_lock_cancel(int *cancelled, hilock_lock *l, uint64_t tid);

/* Release one hold. Reentrant lock: HILOCK_ENOTOWNER when the caller does
 * not hold it (never held, expired, lost or forced); nothing changes then.
 * Fair lock (as Redisson's): a lock whose key is already gone (expired or
 * forced) answers 0, "released", and the first waiter is woken; a lock held
 * by someone else answers HILOCK_ENOTOWNER. But a hold this handle already
 * knows lost (hilock_lock_is_lost_tid: its watchdog found it gone or
 * reported it in doubt) answers HILOCK_ENOTOWNER, as every other kind, when
 * the script says "released": the lock may have been someone else's
 * meanwhile (the message says "was lost before this release"). */
HILOCK_API int hilock_lock_release(hilock_lock *l);
HILOCK_API int hilock_lock_release_tid(hilock_lock *l, uint64_t tid);

/* Delete the lock whoever holds it and wake waiters. *deleted (may be NULL)
 * tells whether there was a lock to delete. */
HILOCK_API int hilock_lock_force_unlock(int *deleted, hilock_lock *l);

/* Queries. */
HILOCK_API int hilock_lock_is_locked(int *out, hilock_lock *l);
HILOCK_API int hilock_lock_is_held(int *out, hilock_lock *l);
HILOCK_API int hilock_lock_is_held_tid(int *out, hilock_lock *l, uint64_t tid);
HILOCK_API int hilock_lock_hold_count(int64_t *out, hilock_lock *l);
HILOCK_API int hilock_lock_hold_count_tid(int64_t *out, hilock_lock *l, uint64_t tid);
/* Remaining lease in ms: -2 no such lock, -1 no expiry. */
HILOCK_API int hilock_lock_remaining_ms(int64_t *out, hilock_lock *l);

/* Loss of a hold found by the watchdog. _tid: 1 once the hold of tid was
 * found gone, until tid's next successful acquire on this handle; the
 * handle remembers this for its 1024 most recently lost thread ids (older
 * ones read 0 again). Plain: 1 while any thread id of this handle has a
 * remembered loss. A watchdog hold past its "in doubt" moment reads 1 at
 * once, before the watchdog thread has reported it (the process was
 * stopped past it, say). */
HILOCK_API int hilock_lock_is_lost(const hilock_lock *l);
HILOCK_API int hilock_lock_is_lost_tid(const hilock_lock *l, uint64_t tid);
HILOCK_API void hilock_lock_set_lost_callback(hilock_lock *l, hilock_lost_cb cb,
                                              void *payload);

/* Detail message of the last failure on this handle (per thread, see the
 * conventions at the top). Never NULL. */
HILOCK_API const char *hilock_lock_errmsg(const hilock_lock *l);

/* ------------------------------------------------------------------ */
/* Fenced lock                                                          */
/* ------------------------------------------------------------------ */

/*
 * A reentrant lock (same hash, channel, watchdog and release as
 * hilock_lock_new) whose every grant takes the next value of the counter
 * "redisson_lock_token:{name}" (INCR, as Redisson's RFencedLock; a
 * re-entry takes a new one too), or the server's clock in milliseconds
 * when that is higher, so a counter lost with the data or set back by a
 * failover does not start again from 1. Tokens are strictly increasing per
 * name across all clients, Redisson's included (after a lost counter:
 * hilock's grants, given a server clock that does not step back;
 * docs/c-api.md says exactly when), so a storage layer that
 * remembers the highest token it has seen can refuse a writer whose lock
 * has expired since (its token is lower): docs/c-api.md shows how.
 * Every hilock_lock_* function works on it.
 */
HILOCK_API int hilock_fenced_lock_new(hilock_lock **out, hilock_client *c, const char *name);
/* hilock_lock_acquire that also gives the grant's token (*token, may be
 * NULL; left 0 when not acquired). On other kinds of lock *token is 0. */
HILOCK_API int hilock_lock_acquire_token(int64_t *token, hilock_lock *l, int64_t wait_ms,
                                         int64_t lease_ms);
HILOCK_API int hilock_lock_acquire_token_tid(int64_t *token, hilock_lock *l, uint64_t tid,
                                             int64_t wait_ms, int64_t lease_ms);
/* The latest token issued for the lock's name (GET of the counter, as
 * Redisson's getToken; 0 when none was ever issued). While the caller
 * holds the lock it is the token of the caller's latest grant. */
HILOCK_API int hilock_lock_token(int64_t *out, hilock_lock *l);

/* ------------------------------------------------------------------ */
/* Statistics and trace events (docs/observability.md)                  */
/* ------------------------------------------------------------------ */

/* Counters of one client, kept in the client handle since it was opened
 * (never reset), by lock kind (never by lock name, so their number is
 * bounded). Times go into log2 buckets in milliseconds: bucket 0 counts
 * times under 1 ms, bucket i (1 <= i < HILOCK_STATS_BUCKETS - 1) times in
 * [2^(i-1), 2^i) ms, and the last bucket everything from
 * 2^(HILOCK_STATS_BUCKETS - 2) ms (about 70 minutes) on.
 *
 * The acquire figures count the blocking calls hilock_lock_acquire* (also
 * through a read-write lock's sides); the non-blocking API (hilock_async)
 * and multi-locks do not count in them yet. The transport figures (losses,
 * renewals, settles, reconnects, redirects) count whoever caused them. */
#define HILOCK_STATS_VERSION 1
#define HILOCK_STATS_BUCKETS 24
#define HILOCK_STATS_KINDS 6 /* index: hilock_kind (1..5); index 0 unused */

typedef struct hilock_kind_stats {
    uint64_t granted;           /* acquires that got the lock */
    uint64_t timed_out;         /* acquires whose wait (> 0 or -1) ran out (HILOCK_ETIMEDOUT) */
    uint64_t cancelled;         /* acquires cancelled (HILOCK_ECANCELED) */
    uint64_t busy;              /* tries (wait 0) that found the lock held: not waits, so
                                   neither timed_out nor in wait_ms */
    uint64_t granted_first_try; /* granted by the call's first attempt */
    uint64_t granted_woken;     /* granted by an attempt after an unlock message woke the wait */
    uint64_t granted_retried;   /* granted by an attempt after a timed retry (no message) */
    uint64_t wait_ms[HILOCK_STATS_BUCKETS]; /* acquire call time: granted, timed_out, cancelled */
    uint64_t hold_ms[HILOCK_STATS_BUCKETS]; /* first grant to last release of a thread's hold
                                               (released by the same handle; reentrant holds
                                               count once) */
    uint64_t lost_expired;      /* found gone after it had been reported in doubt (its lease
                                   ran out while renewals were not confirmed) */
    uint64_t lost_gone;         /* found gone while renewals were confirmed: removed by
                                   someone else (force unlock, DEL, a server restart
                                   without persistence) */
    uint64_t lost_in_doubt;     /* reported lost "in doubt" (no renewal confirmed in time) */
} hilock_kind_stats;

typedef struct hilock_stats {
    unsigned int version; /* in: HILOCK_STATS_VERSION (0 is taken as 1); out: what was filled */
    hilock_kind_stats kind[HILOCK_STATS_KINDS];
    uint64_t renewals;             /* holds renewed by the watchdog (confirmed) */
    uint64_t renewal_commands;     /* renewal commands sent (one command renews a batch) */
    uint64_t renewal_failures;     /* holds whose renewal got no usable answer (retried) */
    uint64_t settles;              /* attempts whose reply timed out, handed to the settler */
    uint64_t reconnects;           /* pub/sub listener connections made again after a loss */
    uint64_t redirects;            /* cluster MOVED/ASK answers followed */
    uint64_t replica_ack_failures; /* grants no replica acknowledged (given back) */
} hilock_stats;

/* Copy c's counters into *out (a zero-initialised struct is fine: version
 * 0 is taken as 1; a later library fills only the fields of the version
 * asked for, so a program built against this header keeps working).
 * 0, or HILOCK_EINVAL (c or out NULL, out->version newer than this
 * library). Any thread, while c is open; each counter is read atomically,
 * but the set is not one snapshot (counters may move while it is copied);
 * a loss is counted after its hold's end, and a copy that sees the loss
 * sees that end too. */
HILOCK_API int hilock_client_stats(hilock_client *c, hilock_stats *out);

typedef enum hilock_trace_event {
    HILOCK_TRACE_LOST = 1,      /* a hold was found gone (lost_expired or lost_gone) */
    HILOCK_TRACE_IN_DOUBT = 2,  /* a hold was reported lost in doubt */
    HILOCK_TRACE_RECONNECT = 3, /* a pub/sub listener connected again after losing its link */
    HILOCK_TRACE_SETTLE = 4,    /* an attempt whose reply timed out was handed to the settler */
    HILOCK_TRACE_WARNING = 5    /* a setting that weakens a guarantee: a Redlock member whose
                                   restart can lose its holds (hilock_redlock_new) */
} hilock_trace_event;

typedef struct hilock_trace_info {
    hilock_trace_event event;
    hilock_kind kind;      /* LOST, IN_DOUBT: the lock's kind; else 0 */
    const char *name;      /* LOST, IN_DOUBT: the lock's name; else NULL */
    uint64_t thread_id;    /* LOST, IN_DOUBT: the holding thread; else 0 */
    int64_t ms;            /* IN_DOUBT: ms without a confirmed renewal; else 0 */
    const char *message;   /* one line for a log; never holds a password */
} hilock_trace_info;

/* Called with each event; info and its strings are valid during the call
 * only. */
typedef void (*hilock_trace_cb)(const hilock_trace_info *info, void *userdata);

/* Set (cb NULL: clear) c's trace callback, modelled on libgit2's
 * git_trace_set. Which thread calls it:
 *   LOST, IN_DOUBT  the client's watchdog thread (the one that runs lost
 *                   callbacks), just before the lock's lost callback,
 *                   once the loss and its hold's end are counted;
 *   RECONNECT       the pub/sub listener thread of the server concerned;
 *   SETTLE          the thread whose acquire attempt timed out;
 *   WARNING         the thread calling hilock_redlock_new.
 * No hilock lock is held during the call, but the callback must return
 * quickly and must not call a blocking hilock function (acquire, release,
 * hilock_client_close, ...): on the watchdog thread that would hold up the
 * renewals of every lock of the client; on a listener thread, every wait.
 * It may read hilock_client_stats and copy info for later. userdata must
 * stay valid until the callback is replaced and calls in flight have
 * returned, or until the client is closed. Any thread may call this. */
HILOCK_API void hilock_client_set_trace(hilock_client *c, hilock_trace_cb cb, void *userdata);

/* Per-name counters, opt-in (hilock_options.stats_names > 0): the figures
 * of hilock_kind_stats kept for each (kind, name) pair, so that the
 * counters of a kind are the sum of its pairs' and its "other" entry's.
 * The number of pairs is bounded: the first stats_names pairs the client
 * counts something for (an acquire call, a hold's end, a loss) are tracked
 * until the client is closed; every later pair counts in its kind's one
 * "other" entry (also a pair whose entry could not be allocated). Memory:
 * about 540 bytes plus the name's length per tracked pair, allocated when
 * the pair is first counted, freed by hilock_client_close. The two sides
 * of a read-write lock are two pairs (kinds READ and WRITE). */
#define HILOCK_STATS_NAMES_MAX 65536
#define HILOCK_NAME_STATS_VERSION 1

typedef struct hilock_name_stats {
    unsigned int version;      /* in: HILOCK_NAME_STATS_VERSION (0 is taken as 1);
                                  out: what was filled */
    hilock_kind_stats figures; /* the pair's counts, meanings as in hilock_stats */
} hilock_name_stats;

/* Copy the counters of (kind, name) into *out; name NULL: the kind's
 * "other" entry. Returns 1 when the pair is tracked (or name is NULL),
 * 0 when it is not (*out all zero: the pair was never counted, or its
 * counts are in the "other" entry), HILOCK_EINVAL (c or out NULL, kind
 * not a hilock_kind, out->version newer than this library, or per-name
 * counters off for c). Any thread, while c is open; each counter is read
 * atomically, as hilock_client_stats reads them. */
HILOCK_API int hilock_client_name_stats(hilock_client *c, hilock_kind kind, const char *name,
                                        hilock_name_stats *out);

/* Called by hilock_client_each_name_stats once per entry: name NULL for a
 * kind's "other" entry; name and st are valid during the call only. A
 * nonzero return stops the walk (hilock_client_each_name_stats returns it). */
typedef int (*hilock_name_stats_cb)(hilock_kind kind, const char *name,
                                    const hilock_name_stats *st, void *userdata);

/* Walk c's per-name counters: cb(kind, name, buf, userdata) for every
 * tracked pair, in the order they were first counted, then for each kind
 * whose "other" entry counted something (name NULL); buf (its version set
 * by the caller as for hilock_client_name_stats) is filled before each
 * call. cb runs on the calling thread with no hilock lock held: it may call
 * any hilock function, hilock_client_name_stats and hilock_client_stats
 * included, except hilock_client_close of c; while it runs other threads
 * go on counting (a pair first counted during the walk may be left out).
 * Returns 0, cb's nonzero value, HILOCK_EINVAL (c, buf or cb NULL,
 * buf->version newer than this library, per-name counters off) or
 * HILOCK_ENOMEM. */
HILOCK_API int hilock_client_each_name_stats(hilock_client *c, hilock_name_stats *buf,
                                             hilock_name_stats_cb cb, void *userdata);

/* ------------------------------------------------------------------ */
/* Read-write lock                                                      */
/* ------------------------------------------------------------------ */

/*
 * Many readers or one writer, in Redisson's RReadWriteLock layout (a hash
 * at `name` with a "mode" field, one read counter per owner, the writer's
 * field "<owner>:write", per-hold keys "{name}:<owner>:rwlock_timeout:<k>",
 * channel "redisson_rwlock:{name}"), so it is shared with Redisson.
 * Both sides are reentrant; a writer may also take the read side (its
 * lock turns into a read lock when the write side is released); a reader
 * cannot take the write side (it would wait for itself). Waiters wake on
 * the unlock message, never by polling.
 *
 * The two sides are ordinary lock handles (kinds HILOCK_KIND_READ and
 * HILOCK_KIND_WRITE), owned by the read-write lock: every hilock_lock_*
 * function works on them (acquire with wait and lease, the watchdog and
 * its lost callback, release, force unlock, queries), except
 * hilock_lock_free (hilock_rwlock_free frees them). is_locked tells
 * whether the lock is in that side's mode; hold_count and is_held are the
 * caller's holds of that side. An attempt whose reply timed out is
 * settled as the reentrant lock's (a late grant is released). Difference
 * from Redisson: release of a read hold by a caller that holds none is
 * HILOCK_ENOTOWNER (Redisson answers true when the key is gone).
 */
typedef struct hilock_rwlock hilock_rwlock;

/* A read-write lock named `name` (same rules as hilock_lock_new). */
HILOCK_API int hilock_rwlock_new(hilock_rwlock **out, hilock_client *c, const char *name);
/* Frees both sides (same rules as hilock_lock_free). NULL-safe. */
HILOCK_API void hilock_rwlock_free(hilock_rwlock *rw);
/* The sides; valid until hilock_rwlock_free. NULL when rw is NULL. */
HILOCK_API hilock_lock *hilock_rwlock_read_lock(hilock_rwlock *rw);
HILOCK_API hilock_lock *hilock_rwlock_write_lock(hilock_rwlock *rw);

/* ------------------------------------------------------------------ */
/* Semaphores and count-down latch                                      */
/* ------------------------------------------------------------------ */

/*
 * In Redisson's layouts, shared with Redisson clients (docs/protocol.md):
 *   semaphore N (RSemaphore): string N = free permits, channel
 *     "redisson_sc:{N}" carrying the new count after a release;
 *   permit-expirable semaphore N (RPermitExpirableSemaphore): the same,
 *     plus ZSET "{N}:timeout" holding each taken permit's id and lease end;
 *   count-down latch N (RCountDownLatch): string N = count, channel
 *     "redisson_countdownlatch__channel__{N}".
 * Permits belong to nobody: any client may release them (as Redisson's and
 * java.util.concurrent's); there is no watchdog. Waiters wake on the
 * channel's messages, never by polling (a permit-expirable waiter also
 * looks again when the nearest lease ends). Handles: the rules of
 * hilock_lock_new (name, sends nothing, usable from several threads).
 * Counts are bounded: permits per call 1..2147483647; a count that would
 * leave +-999999999999999 is refused (HILOCK_EINVAL) and nothing changes.
 * A key holding anything else (a lock, a string that is no integer) is
 * HILOCK_EWRONGTYPE, untouched.
 * Waits: wait_ms as for locks (0 one try, -1 forever); a waiting call of
 * thread id tid is cancelled by the handle's _cancel(…, tid), as
 * hilock_lock_cancel. An acquire whose reply was lost with its connection
 * may have taken permits on the server (Redisson has the same gap); it
 * answers HILOCK_ECONN.
 */
typedef struct hilock_semaphore hilock_semaphore;

HILOCK_API int hilock_semaphore_new(hilock_semaphore **out, hilock_client *c, const char *name);
/* NULL-safe; nothing is released. */
HILOCK_API void hilock_semaphore_free(hilock_semaphore *s);
HILOCK_API const char *hilock_semaphore_name(const hilock_semaphore *s);
/* Set the number of permits to `permits` (>= 1) if the semaphore does not
 * exist yet: *set (may be NULL) 1 when set, 0 when it existed (unchanged). */
HILOCK_API int hilock_semaphore_try_set_permits(int *set, hilock_semaphore *s,
                                                int64_t permits);
/* Take `permits` permits: 0 taken, HILOCK_ETIMEDOUT not within wait_ms
 * (a semaphore that does not exist has no permits). */
HILOCK_API int hilock_semaphore_acquire(hilock_semaphore *s, int64_t permits, int64_t wait_ms);
HILOCK_API int hilock_semaphore_acquire_tid(hilock_semaphore *s, uint64_t tid, int64_t permits,
                                            int64_t wait_ms);
/* Give back `permits` permits (creates the count when missing, as
 * Redisson's) and wake as many waiters. */
HILOCK_API int hilock_semaphore_release(hilock_semaphore *s, int64_t permits);
/* Free permits now (0 when the semaphore does not exist). */
HILOCK_API int hilock_semaphore_available(int64_t *out, hilock_semaphore *s);
/* Take every free permit; *drained (may be NULL) how many. */
HILOCK_API int hilock_semaphore_drain(int64_t *drained, hilock_semaphore *s);
/* Add `delta` permits (may be negative: fewer from now on). */
HILOCK_API int hilock_semaphore_add_permits(hilock_semaphore *s, int64_t delta);
/* Make the free count exactly `permits` (>= 0), whatever it was. */
HILOCK_API int hilock_semaphore_set_permits(hilock_semaphore *s, int64_t permits);
/* Delete the semaphore (its count) and wake waiters; *deleted may be NULL. */
HILOCK_API int hilock_semaphore_delete(int *deleted, hilock_semaphore *s);
HILOCK_API int hilock_semaphore_cancel(int *cancelled, hilock_semaphore *s, uint64_t tid);
HILOCK_API const char *hilock_semaphore_errmsg(const hilock_semaphore *s);

/* Permit-expirable semaphore: every permit taken gets an id (32 lowercase
 * hex characters, Redisson's form) and its own lease; a permit whose lease
 * ended goes back to the free count by itself (given back by the next
 * operation on the semaphore, on the server's clock). */
typedef struct hilock_permit_semaphore hilock_permit_semaphore;
#define HILOCK_PERMIT_ID_SIZE 33 /* 32 hex characters and a NUL */

HILOCK_API int hilock_permit_semaphore_new(hilock_permit_semaphore **out, hilock_client *c,
                                           const char *name);
HILOCK_API void hilock_permit_semaphore_free(hilock_permit_semaphore *s);
HILOCK_API const char *hilock_permit_semaphore_name(const hilock_permit_semaphore *s);
HILOCK_API int hilock_permit_semaphore_try_set_permits(int *set, hilock_permit_semaphore *s,
                                                       int64_t permits);
/* Take one permit with a lease of lease_ms (> 0; <= 0: no lease, it is
 * held until released); its id is written into id (HILOCK_PERMIT_ID_SIZE
 * bytes). HILOCK_ETIMEDOUT: none free within wait_ms (id is ""). */
HILOCK_API int hilock_permit_semaphore_acquire(char *id, hilock_permit_semaphore *s,
                                               int64_t wait_ms, int64_t lease_ms);
HILOCK_API int hilock_permit_semaphore_acquire_tid(char *id, hilock_permit_semaphore *s,
                                                   uint64_t tid, int64_t wait_ms,
                                                   int64_t lease_ms);
/* Give back the permit `id`: 0 released; HILOCK_ENOTOWNER when no such
 * permit is taken (released before, never taken) or its lease had ended
 * (it is given back all the same, as Redisson does); HILOCK_EINVAL for an
 * id that is not 32 hex characters. */
HILOCK_API int hilock_permit_semaphore_release(hilock_permit_semaphore *s, const char *id);
/* A new lease of lease_ms (> 0) from now for the taken permit `id`, as
 * Redisson's updateLeaseTime: HILOCK_ENOTOWNER when it is not taken
 * (released, or its lease had ended). Renew before the lease ends to keep
 * a permit while working (hilock run --semaphore does). */
HILOCK_API int hilock_permit_semaphore_update_lease(hilock_permit_semaphore *s, const char *id,
                                                    int64_t lease_ms);
/* Called once when a kept permit (hilock_permit_semaphore_keep) is found
 * gone or in doubt; id is its id (valid during the call). The rules of
 * hilock_lost_cb (thread, timing, "should not") apply, but it must not
 * call hilock_permit_semaphore_release, _forget or _free of s (they wait
 * for this very call): note the loss and act on it from another thread. */
typedef void (*hilock_permit_lost_cb)(hilock_permit_semaphore *s, const char *id,
                                      void *payload);
/* Keep the taken permit `id` while its holder works, as the watchdog keeps
 * a lock (hilock run --semaphore does): a new lease from now of lease_ms
 * (> 0: a fixed lease, not renewed) or of the client's watchdog lease
 * (lease_ms 0: renewed every third of it by the client's watchdog). The
 * client listens on the semaphore's channel meanwhile, so that a permit
 * given back by another client (release with its id, Redisson's
 * release(permitId)) or taken by a deletion of the semaphore is checked and
 * reported within a round trip, not at the next renewal. cb (may be NULL)
 * is called once when the permit is found gone (released by another, the
 * semaphore deleted, its lease ended) or, with the watchdog lease, when no
 * renewal was confirmed for lease - lease/5 ("in doubt", the client cut off
 * from the server); a fixed lease that ends is no loss (not reported).
 * Kept until hilock_permit_semaphore_release of it (which stops keeping it
 * before it gives it back), hilock_permit_semaphore_forget or
 * hilock_permit_semaphore_free. 0; HILOCK_ENOTOWNER when the permit is not
 * taken; HILOCK_EINVAL for a bad id or lease, or a permit kept already. */
HILOCK_API int hilock_permit_semaphore_keep(hilock_permit_semaphore *s, const char *id,
                                            int64_t lease_ms, hilock_permit_lost_cb cb,
                                            void *payload);
/* Stop keeping the permit `id` (not released; its lease goes on): 0, or
 * HILOCK_ENOTOWNER when it is not kept. */
HILOCK_API int hilock_permit_semaphore_forget(hilock_permit_semaphore *s, const char *id);
HILOCK_API int hilock_permit_semaphore_available(int64_t *out, hilock_permit_semaphore *s);
HILOCK_API int hilock_permit_semaphore_add_permits(hilock_permit_semaphore *s, int64_t delta);
/* Deletes the count and every permit's lease; wakes waiters. */
HILOCK_API int hilock_permit_semaphore_delete(int *deleted, hilock_permit_semaphore *s);
HILOCK_API int hilock_permit_semaphore_cancel(int *cancelled, hilock_permit_semaphore *s,
                                              uint64_t tid);
HILOCK_API const char *hilock_permit_semaphore_errmsg(const hilock_permit_semaphore *s);

/* Count-down latch. */
typedef struct hilock_latch hilock_latch;

HILOCK_API int hilock_latch_new(hilock_latch **out, hilock_client *c, const char *name);
HILOCK_API void hilock_latch_free(hilock_latch *l);
HILOCK_API const char *hilock_latch_name(const hilock_latch *l);
/* Set the count (>= 1) if the latch has none: *set (may be NULL) 1 set, 0
 * it existed (unchanged). */
HILOCK_API int hilock_latch_try_set_count(int *set, hilock_latch *l, int64_t count);
/* Count down by one; at zero the latch is deleted and every waiter (of any
 * client) goes. *left (may be NULL): the count after (0 when there was no
 * latch). */
HILOCK_API int hilock_latch_count_down(int64_t *left, hilock_latch *l);
/* The count now (0: open, or no latch). */
HILOCK_API int hilock_latch_count(int64_t *out, hilock_latch *l);
/* Wait until the count is 0: 0, or HILOCK_ETIMEDOUT after wait_ms. */
HILOCK_API int hilock_latch_await(hilock_latch *l, int64_t wait_ms);
HILOCK_API int hilock_latch_await_tid(hilock_latch *l, uint64_t tid, int64_t wait_ms);
/* Delete the latch (force open) and wake waiters; *deleted may be NULL. */
HILOCK_API int hilock_latch_delete(int *deleted, hilock_latch *l);
HILOCK_API int hilock_latch_cancel(int *cancelled, hilock_latch *l, uint64_t tid);
HILOCK_API const char *hilock_latch_errmsg(const hilock_latch *l);
/* Inspection                                                           */
/* ------------------------------------------------------------------ */

/*
 * What is stored under a lock name, whoever holds it and whatever kind of
 * lock it is (Redisson's included): holders with hold counts, the lease
 * left, the fair queue with each waiter's deadline, the fencing token. Read
 * in one atomic step on the server that serves the name (on a cluster, the
 * master of its slot); nothing is changed. For tools (`hilock status`),
 * dashboards and tests; a program deciding whether to go ahead uses acquire.
 *
 * The kind is inferred from the data:
 *   NONE       no lock key and no fair queue (a fencing counter may exist)
 *   REENTRANT  a hash of owner -> hold count, no fair queue, no counter
 *   FAIR       a fair queue or deadline set exists (with or without the key);
 *              a fair lock with nobody waiting is stored exactly like a
 *              reentrant lock and reads REENTRANT (or FENCED)
 *   READWRITE  the hash has a "mode" field (Redisson RReadWriteLock)
 *   FENCED     a reentrant hash whose name has a fencing token counter
 *   COUNT      the key is a string holding a whole number: a semaphore's
 *              free permits or a count-down latch's count (Redisson's
 *              RSemaphore and RCountDownLatch store both the same way, so
 *              the data cannot tell them apart; a count below 1 is a
 *              semaphore's, a latch at zero is deleted). The number is in
 *              count. A permit-expirable semaphore with no permit taken
 *              reads COUNT too.
 *   PERMIT_SEMAPHORE  the name has a permit-expirable semaphore's leases
 *              (ZSET "{N}:timeout"): count holds the free permits, permits
 *              the permits taken with their ids and lease ends
 *   UNKNOWN    the key is not a hash or a count, or the hash has fields that
 *              are not hold counts (note says which)
 * Values may be added for later lock kinds: treat a value you do not know
 * as UNKNOWN.
 */
typedef enum hilock_info_kind {
    HILOCK_INFO_UNKNOWN = -1,
    HILOCK_INFO_NONE = 0,
    HILOCK_INFO_REENTRANT = 1,
    HILOCK_INFO_FAIR = 2,
    HILOCK_INFO_READWRITE = 3,
    HILOCK_INFO_FENCED = 4,
    HILOCK_INFO_COUNT = 5,
    HILOCK_INFO_PERMIT_SEMAPHORE = 6
} hilock_info_kind;

typedef enum hilock_holder_role {
    HILOCK_ROLE_EXCLUSIVE = 0, /* reentrant, fair, fenced */
    HILOCK_ROLE_READ = 1,      /* read-write lock, a reader */
    HILOCK_ROLE_WRITE = 2      /* read-write lock, the writer ("<owner>:write") */
} hilock_holder_role;

typedef struct hilock_holder_info {
    const char *owner;  /* the hash field: "<client-uuid>:<thread-id>", a
                           writer's with ":write"; NUL-terminated, but Redis
                           strings may hold NUL bytes: owner_len is exact */
    size_t owner_len;
    int64_t holds;      /* hold count; -1 when the value is not a whole
                           number >= 0 (kind is then UNKNOWN) */
    hilock_holder_role role;
} hilock_holder_info;

typedef struct hilock_waiter_info {
    const char *owner;   /* the waiter's owner id, as owner above */
    size_t owner_len;
    int64_t deadline_ms; /* epoch ms on the server's clock after which a silent
                            waiter is dropped; -1 when it has none */
} hilock_waiter_info;

typedef struct hilock_permit_info {
    const char *id;      /* a permit-expirable semaphore's permit id as
                            Redisson prints it: 32 lowercase hex digits (an id
                            that is not 16 bytes is shown in hex all the same,
                            up to 64 bytes, and the note says so) */
    int64_t lease_end_ms; /* epoch ms on the server's clock when the permit's
                            lease ends (compare with server_time_ms; an ended
                            one is given back at the semaphore's next use);
                            -1 no lease */
} hilock_permit_info;

/* Allocated by the library and read-only for the caller. Later versions
 * add fields at the end only (never allocate or copy this struct). */
typedef struct hilock_lock_info {
    const char *name;          /* the name given */
    hilock_info_kind kind;
    int locked;                /* 1 when the lock key exists */
    const char *key_type;      /* Redis TYPE of the key: "none", "hash", ... */
    int64_t lease_ms;          /* remaining lease: -2 no key, -1 no expiry */
    const char *mode;          /* read-write: "read" or "write"; else "" */
    const hilock_holder_info *holders; /* one per hash field but "mode" */
    size_t nholders;
    const hilock_waiter_info *queue;   /* fair waiters, next in line first */
    size_t nqueue;
    int64_t server_time_ms;    /* the server's clock (TIME) when read, epoch ms */
    int64_t token;             /* the latest fencing token issued for the name
                                  (its counter), 0 when none was */
    const char *note;          /* a remark ("the key holds a string, not a
                                  lock"), or "" */
    /* added with semaphores and latches (kinds COUNT, PERMIT_SEMAPHORE) */
    int64_t count;             /* the whole number at the name: free permits,
                                  or a latch's count; 0 for other kinds */
    const hilock_permit_info *permits; /* permit-expirable: permits taken,
                                  soonest lease end first, at most 1000 */
    size_t npermits;
    size_t permits_taken;      /* every permit taken (>= npermits) */
    /* added with `hilock status`'s waiting clients */
    int64_t waiting;           /* clients subscribed to the name's wake-up
                                  channel(s) (PUBSUB NUMSUB, SHARDNUMSUB on a
                                  cluster): blocked waiters of this kind (a
                                  fair lock: its queued waiters still
                                  listening); a hilock client holding a
                                  reentrant, fenced or read-write lock with
                                  the watchdog listens there too and is
                                  counted; -1 when not counted */
} hilock_lock_info;

/* Inspect the lock `name` (same rules as hilock_lock_new) through client c.
 * On success *out is set (free it with hilock_lock_info_free). Errors:
 * HILOCK_EINVAL (NULL, bad name), HILOCK_ECONN, HILOCK_EPROTO (a reply
 * that does not have the expected shape, a server error), HILOCK_ENOMEM,
 * HILOCK_ECLOSED; the detail is in hilock_client_errmsg(c). A key that is
 * not a lock is not an error: kind UNKNOWN and a note. *out is NULL on
 * failure. */
HILOCK_API int hilock_inspect(hilock_lock_info **out, hilock_client *c, const char *name);
/* NULL-safe. */
HILOCK_API void hilock_lock_info_free(hilock_lock_info *info);

/* The names matching a glob pattern (Redis SCAN MATCH: *, ?, [abc], \x;
 * on a cluster every master is scanned), without the companion keys the
 * lock kinds keep next to a name (fair queues, fencing counters, latches,
 * permit leases): at most max names (0: 10000), sorted, each once. On
 * success *out is an array of *n strings (free with hilock_names_free; NULL
 * when none matched). Errors as hilock_inspect; HILOCK_EINVAL for an empty
 * pattern. The names found may hold any data: hilock_inspect says what. */
HILOCK_API int hilock_scan_names(char ***out, size_t *n, hilock_client *c, const char *pattern,
                                 size_t max);
/* Free what hilock_scan_names gave. NULL-safe. */
HILOCK_API void hilock_names_free(char **names, size_t n);
/* "none", "reentrant", "fair", "read-write", "fenced", "count",
 * "permit-semaphore", "unknown"; never NULL. */
HILOCK_API const char *hilock_info_kind_name(hilock_info_kind kind);

/* ------------------------------------------------------------------ */
/* Multi-lock and Redlock                                               */
/* ------------------------------------------------------------------ */

typedef struct hilock_multilock hilock_multilock;

/* Same rules as hilock_lost_cb: runs on the watchdog thread of the lost
 * member's client, may free m itself (deferred) or close a client. */
typedef void (*hilock_multilock_lost_cb)(hilock_multilock *m, uint64_t thread_id,
                                         void *payload);

/* All-or-nothing over n lock handles (any kinds, any clients). The handles
 * must outlive the multi-lock; they are not freed with it. */
HILOCK_API int hilock_multilock_new(hilock_multilock **out, hilock_lock *const *locks,
                                    size_t n);
/* Redlock: a majority (n/2+1) of n locks, each on an independent server.
 * Each member server is asked for its AOF settings (CONFIG GET append*, in
 * parallel, within a second): one that can restart
 * without the holds it granted (appendonly no, appendfsync everysec or no,
 * or settings it would not tell) lets another client win a majority while
 * a hold lasts, unless it stays down for longer than the longest lease after
 * a crash (a delayed restart). For each such member a HILOCK_TRACE_WARNING
 * goes to its client's trace callback and hilock_multilock_warning keeps
 * the messages; the Redlock is made all the same. delayed_restart=1 in a
 * member's URL (docs/urls.md) says its restarts are delayed: no check.
 * docs/safety.md, "Redlock". */
HILOCK_API int hilock_redlock_new(hilock_multilock **out, hilock_lock *const *locks,
                                  size_t n);
/* The warnings hilock_redlock_new found about m's members, one line each,
 * or NULL when none (also for a multi-lock). Valid until m is freed. */
HILOCK_API const char *hilock_multilock_warning(const hilock_multilock *m);
/* Free the multi-lock (not its members). NULL-safe; may be called from a
 * lost callback, also its own (see hilock_lost_cb). */
HILOCK_API void hilock_multilock_free(hilock_multilock *m);

/* Per-member request timeout (Redlock default 50 ms; multi-lock default: the
 * clients' command timeout). */
HILOCK_API int hilock_multilock_set_member_timeout(hilock_multilock *m, int64_t ms);

HILOCK_API int hilock_multilock_acquire(hilock_multilock *m, int64_t wait_ms,
                                        int64_t lease_ms);
HILOCK_API int hilock_multilock_acquire_tid(hilock_multilock *m, uint64_t tid,
                                            int64_t wait_ms, int64_t lease_ms);
/* Cancel the waiting hilock_multilock_acquire* of thread id tid, as
 * hilock_lock_cancel: it returns HILOCK_ECANCELED having given back every
 * member it took, or 0 if the grant came first. Any thread; no blocking on
 * a server. *cancelled (may be NULL): 1 when an acquire was waiting. */
HILOCK_API int hilock_multilock_cancel(int *cancelled, hilock_multilock *m, uint64_t tid);
/* Release every member (all are tried). Multi-lock: 0 when every member was
 * released, else HILOCK_ENOTOWNER when a member was not held (or the first
 * other error). Redlock: 0 when a majority was released. */
HILOCK_API int hilock_multilock_release(hilock_multilock *m);
HILOCK_API int hilock_multilock_release_tid(hilock_multilock *m, uint64_t tid);
HILOCK_API int hilock_multilock_is_held(int *out, hilock_multilock *m);
HILOCK_API int hilock_multilock_is_held_tid(int *out, hilock_multilock *m, uint64_t tid);
/* Validity left in ms of the hold of the calling thread (_tid: of tid),
 * from its last successful acquire: Redlock: lease - elapsed - drift,
 * counting down on the monotonic clock; watchdog: -1; 0 when that thread id
 * holds nothing (never acquired, or released). */
HILOCK_API int hilock_multilock_validity_ms(int64_t *out, hilock_multilock *m);
HILOCK_API int hilock_multilock_validity_ms_tid(int64_t *out, hilock_multilock *m,
                                                uint64_t tid);
HILOCK_API int hilock_multilock_is_lost(const hilock_multilock *m);
HILOCK_API void hilock_multilock_set_lost_callback(hilock_multilock *m,
                                                   hilock_multilock_lost_cb cb,
                                                   void *payload);
HILOCK_API const char *hilock_multilock_errmsg(const hilock_multilock *m);

/* ------------------------------------------------------------------ */
/* Non-blocking API (event loops)                                       */
/* ------------------------------------------------------------------ */

/*
 * hilock_async runs acquires, releases, force unlocks and queries of any
 * lock handle (reentrant, fair, read-write sides, fenced), and multi-lock
 * and Redlock acquires and releases, and the operations of semaphores and
 * count-down latches, without blocking: each call returns at once and the outcome
 * comes later through a completion callback. The application's event loop
 * does the waiting, in the shape of libcurl's multi_socket API: the library
 * says which descriptors it needs watched (hilock_async_loop.watch) and when
 * it next needs the time (hilock_async_loop.timer); the loop calls
 * hilock_async_on_io when a watched descriptor is ready and
 * hilock_async_on_timer when the timer is due. Ready-made adapters:
 * <hilock/adapters/epoll.h> and <hilock/adapters/libuv.h>.
 *
 * One hilock_async has its own non-blocking connections (one for commands
 * and one for pub/sub per server used: the server, the sentinel master,
 * each cluster node) and its own watchdog, driven by the loop's timer: no
 * thread is started. It serves the lock handles of clients opened on every
 * URL form (TLS: the handshake runs on the loop); on sentinel and cluster
 * URLs it learns the master or the slot map on the loop too, and follows
 * failovers and slot moves; with replica_ack on, a grant completes once a
 * replica acknowledged it (docs/c-api.md).
 *
 * Callback rules (hilock_async_cb, hilock_async_lost_cb, and the loop's
 * watch and timer functions):
 *   Thread:  every callback runs on the thread that called into the
 *            hilock_async: completion and lost callbacks only from inside
 *            hilock_async_on_io, hilock_async_on_timer or hilock_async_free,
 *            never from inside the call that started the operation; watch
 *            and timer from inside any hilock_async_* call.
 *   Threads: a hilock_async is not thread-safe: use it from one thread (the
 *            loop's). Its lock handles may be used meanwhile by the blocking
 *            API from other threads.
 *   May call (completion and lost callbacks): any hilock_async_* function
 *            on the same or another hilock_async, including starting new
 *            operations and hilock_async_free of this one (it completes
 *            when the callback returns; the remaining operations are
 *            completed with HILOCK_ECLOSED). The blocking hilock_* functions
 *            are allowed but stall the loop. The lock handle must not be
 *            freed while an operation on it is pending.
 *   May not (watch and timer): call back into the hilock_async.
 *   Memory:  payload is passed back as given; the library never frees it.
 *            Every accepted operation gets exactly one completion call (with
 *            HILOCK_ECLOSED at hilock_async_free at the latest).
 *   Order:   a hilock_async keeps the holds it took (and renews them) and
 *            connections of the clients it served: free it before freeing
 *            those lock handles or closing those clients.
 */
typedef struct hilock_async hilock_async;

#define HILOCK_IO_READ 1
#define HILOCK_IO_WRITE 2

#define HILOCK_ASYNC_LOOP_VERSION 1
typedef struct hilock_async_loop {
    unsigned int version; /* HILOCK_ASYNC_LOOP_VERSION */
    void *data;           /* passed to watch and timer */
    /* Watch fd for events (HILOCK_IO_READ | HILOCK_IO_WRITE), replacing what
     * was asked for it before; events 0: stop watching it (it is about to
     * be closed). Return 0, or -1 when the loop cannot watch it (that
     * connection is then closed: its operations fail with HILOCK_ECONN). */
    int (*watch)(void *data, int fd, int events);
    /* Call hilock_async_on_timer once, after ms milliseconds (0: as soon as
     * possible), replacing the timer asked for before; ms -1: no timer. */
    int (*timer)(void *data, int64_t ms);
} hilock_async_loop;

/* Completion of an operation: rc is 0 or a negative HILOCK_E* code (as the
 * blocking function would return); value is what the operation gives:
 * acquire: the hold count (fenced lock: the fencing token); release: the
 * holds left; force unlock: 1 when a lock was deleted; query: the answer. */
typedef void (*hilock_async_cb)(hilock_async *a, int rc, int64_t value, void *payload);
/* A watchdog renewal found the hold of (lock, tid) gone (expired, forced,
 * taken): it is no longer renewed; or no renewal of it was confirmed for
 * lease - lease/5: lost "in doubt" (see hilock_async_is_lost). When the
 * loop itself was held up past that point (a slow callback, a loaded
 * machine), the renewal that fell due goes out first and the hold is
 * reported only if that renewal is not confirmed within the command timeout
 * (and never later than the lease). Rules as for hilock_async_cb. */
typedef void (*hilock_async_lost_cb)(hilock_async *a, hilock_lock *lock, uint64_t tid,
                                     void *payload);

/* A new non-blocking driver on the given loop (copied). Sends nothing yet. */
HILOCK_API int hilock_async_new(hilock_async **out, const hilock_async_loop *loop);
/* Close its connections, complete every pending operation with
 * HILOCK_ECLOSED, stop its watchdog (holds are not released: they expire
 * after their lease). NULL-safe; from a callback it completes when the
 * callback returns. */
HILOCK_API void hilock_async_free(hilock_async *a);
/* The loop reports that fd is ready for events (HILOCK_IO_*; an error or
 * hang-up on fd counts as both). Runs the callbacks that are due. */
HILOCK_API int hilock_async_on_io(hilock_async *a, int fd, int events);
/* The loop's timer is due. Runs the callbacks that are due. */
HILOCK_API int hilock_async_on_timer(hilock_async *a);
/* Detail of the failure being reported, for use inside a completion
 * callback (else: the latest failure). Never NULL. */
HILOCK_API const char *hilock_async_errmsg(const hilock_async *a);
HILOCK_API void hilock_async_set_lost_callback(hilock_async *a, hilock_async_lost_cb cb,
                                               void *payload);

/* Acquire l for thread id tid, as hilock_lock_acquire_tid (wait and lease
 * alike): the waiter sleeps on the unlock message, never polls. Watchdog
 * holds (lease 0 or -1) are renewed from the loop's timer. Returns 0 when
 * started (cb follows), or an error at once (no callback): HILOCK_EINVAL,
 * HILOCK_ENOMEM, HILOCK_ECLOSED. */
HILOCK_API int hilock_async_acquire(hilock_async *a, hilock_lock *l, uint64_t tid,
                                    int64_t wait_ms, int64_t lease_ms, hilock_async_cb cb,
                                    void *payload);
/* Cancel the pending acquire(s) of (l, tid) started on a: they complete with
 * HILOCK_ECANCELED leaving no hold and no fair-queue entry (or with 0 when
 * the grant came first: the caller then holds the lock). *cancelled (may be
 * NULL): 1 when one was pending. */
HILOCK_API int hilock_async_cancel(int *cancelled, hilock_async *a, hilock_lock *l,
                                   uint64_t tid);
/* Release one hold of (l, tid), as hilock_lock_release_tid; a hold taken
 * through a is released through a (it knows its lease and watchdog). */
HILOCK_API int hilock_async_release(hilock_async *a, hilock_lock *l, uint64_t tid,
                                    hilock_async_cb cb, void *payload);
HILOCK_API int hilock_async_force_unlock(hilock_async *a, hilock_lock *l, hilock_async_cb cb,
                                         void *payload);

typedef enum hilock_query {
    HILOCK_QUERY_IS_LOCKED = 1,  /* 1/0, as hilock_lock_is_locked */
    HILOCK_QUERY_IS_HELD = 2,    /* 1/0 for (l, tid), as hilock_lock_is_held_tid */
    HILOCK_QUERY_HOLD_COUNT = 3, /* as hilock_lock_hold_count_tid */
    HILOCK_QUERY_REMAINING_MS = 4, /* as hilock_lock_remaining_ms */
    HILOCK_QUERY_TOKEN = 5       /* fenced lock: as hilock_lock_token */
} hilock_query;
/* Ask q about l (tid: for IS_HELD and HOLD_COUNT; ignored otherwise). */
HILOCK_API int hilock_async_query(hilock_async *a, hilock_lock *l, hilock_query q,
                                  uint64_t tid, hilock_async_cb cb, void *payload);
/* Multi-lock and Redlock (hilock_multilock_new / hilock_redlock_new), as
 * hilock_multilock_acquire_tid / _release_tid / _cancel: every member's
 * request in flight at once, a waiting acquire sleeping on its members'
 * unlock messages. acquire's value: the validity left (ms) of a fixed
 * lease, -1 under the watchdog; release's: the members released. Member
 * holds are ordinary holds of a (renewed by its watchdog, lost callback per
 * member lock). */
HILOCK_API int hilock_async_multilock_acquire(hilock_async *a, hilock_multilock *m,
                                              uint64_t tid, int64_t wait_ms, int64_t lease_ms,
                                              hilock_async_cb cb, void *payload);
HILOCK_API int hilock_async_multilock_release(hilock_async *a, hilock_multilock *m,
                                              uint64_t tid, hilock_async_cb cb, void *payload);
HILOCK_API int hilock_async_multilock_cancel(int *cancelled, hilock_async *a,
                                             hilock_multilock *m, uint64_t tid);
/*
 * Semaphores, permit-expirable semaphores and count-down latches
 * (hilock_semaphore_new & co.) on a hilock_async: the same conventions and
 * callback rules as the lock calls above. The start call checks its
 * arguments and returns at once (0: cb follows; an error: no callback);
 * the outcome is cb's rc (the code the blocking function returns) and
 * value. A waiting acquire or await subscribes to the object's channel and
 * sleeps until a message (a release, the latch reaching zero) or its wait
 * ends on the loop's timer (a permit-expirable waiter also looks again when
 * the nearest lease ends): no polling. Its cancel (thread id tid, as
 * hilock_async_cancel) completes it with HILOCK_ECANCELED having taken
 * nothing (or with 0 when the permits came first: they are then the
 * caller's). The handle must outlive its pending operations.
 */
/* Take `permits` permits: value = permits taken; HILOCK_ETIMEDOUT when
 * they were not free within wait_ms (0: one try, -1: forever). */
HILOCK_API int hilock_async_semaphore_acquire(hilock_async *a, hilock_semaphore *s,
                                              uint64_t tid, int64_t permits, int64_t wait_ms,
                                              hilock_async_cb cb, void *payload);
HILOCK_API int hilock_async_semaphore_release(hilock_async *a, hilock_semaphore *s,
                                              int64_t permits, hilock_async_cb cb,
                                              void *payload);
HILOCK_API int hilock_async_semaphore_cancel(int *cancelled, hilock_async *a,
                                             hilock_semaphore *s, uint64_t tid);
/* Take one permit with a lease of lease_ms (<= 0: none). Its id is written
 * into id (HILOCK_PERMIT_ID_SIZE bytes, which must stay valid until cb)
 * before cb runs with rc 0 and value 1; on failure id is "". */
HILOCK_API int hilock_async_permit_semaphore_acquire(char *id, hilock_async *a,
                                                     hilock_permit_semaphore *s, uint64_t tid,
                                                     int64_t wait_ms, int64_t lease_ms,
                                                     hilock_async_cb cb, void *payload);
/* Give back permit id (copied): as hilock_permit_semaphore_release. */
HILOCK_API int hilock_async_permit_semaphore_release(hilock_async *a,
                                                     hilock_permit_semaphore *s,
                                                     const char *id, hilock_async_cb cb,
                                                     void *payload);
HILOCK_API int hilock_async_permit_semaphore_update_lease(hilock_async *a,
                                                          hilock_permit_semaphore *s,
                                                          const char *id, int64_t lease_ms,
                                                          hilock_async_cb cb, void *payload);
HILOCK_API int hilock_async_permit_semaphore_cancel(int *cancelled, hilock_async *a,
                                                    hilock_permit_semaphore *s, uint64_t tid);
/* Wait until the latch's count is 0: value 0; HILOCK_ETIMEDOUT after
 * wait_ms. */
HILOCK_API int hilock_async_latch_await(hilock_async *a, hilock_latch *l, uint64_t tid,
                                        int64_t wait_ms, hilock_async_cb cb, void *payload);
/* Count down by one: value = the count left (0: the latch opened). */
HILOCK_API int hilock_async_latch_count_down(hilock_async *a, hilock_latch *l,
                                             hilock_async_cb cb, void *payload);
HILOCK_API int hilock_async_latch_cancel(int *cancelled, hilock_async *a, hilock_latch *l,
                                         uint64_t tid);
/* The other operations on the count, as the blocking functions of the same
 * name (which kinds take which is said per line; others: HILOCK_EINVAL). */
typedef enum hilock_count_op {
    HILOCK_COUNT_TRY_SET = 1, /* all: arg = permits / count if none; value 1 set, 0 kept */
    HILOCK_COUNT_GET = 2,     /* all: value = free permits / the latch's count */
    HILOCK_COUNT_ADD = 3,     /* semaphores: add arg permits (may be negative) */
    HILOCK_COUNT_SET = 4,     /* semaphore: make the free count exactly arg (>= 0) */
    HILOCK_COUNT_DRAIN = 5,   /* semaphore: take every free permit; value = how many */
    HILOCK_COUNT_DELETE = 6   /* all: delete and wake waiters; value 1 when deleted */
} hilock_count_op;
HILOCK_API int hilock_async_semaphore_count_op(hilock_async *a, hilock_semaphore *s,
                                               hilock_count_op op, int64_t arg,
                                               hilock_async_cb cb, void *payload);
HILOCK_API int hilock_async_permit_semaphore_count_op(hilock_async *a,
                                                      hilock_permit_semaphore *s,
                                                      hilock_count_op op, int64_t arg,
                                                      hilock_async_cb cb, void *payload);
HILOCK_API int hilock_async_latch_count_op(hilock_async *a, hilock_latch *l, hilock_count_op op,
                                           int64_t arg, hilock_async_cb cb, void *payload);

/* A multi-lock or Redlock hold of tid taken through a is lost: enough of
 * its members were found gone, or in doubt, that it no longer holds (a
 * multi-lock: any member; a Redlock: fewer than a majority left). Called
 * once per hold (after the members' own lost callbacks), after
 * hilock_async_multilock_is_lost says 1. Rules as for hilock_async_cb. */
typedef void (*hilock_async_multilock_lost_cb)(hilock_async *a, hilock_multilock *m,
                                               uint64_t tid, void *payload);
HILOCK_API void hilock_async_set_multilock_lost_callback(hilock_async *a,
                                                         hilock_async_multilock_lost_cb cb,
                                                         void *payload);
/* 1 once that hold was reported lost; asked while the loop is held up, also
 * when members whose loss is overdue (hilock_async_is_lost) would lose it. */
HILOCK_API int hilock_async_multilock_is_lost(const hilock_async *a, const hilock_multilock *m,
                                              uint64_t tid);
/* 1 when a watchdog renewal of a found the hold of (l, tid) gone, or when it
 * was reported lost "in doubt": no renewal confirmed by the server for
 * lease - lease/5 (the link is down; the lease may end there and another
 * client take the lock; the lost callback's hilock_async_errmsg says "in
 * doubt"). A hold in doubt is still renewed; if a renewal then finds it
 * gone, that is reported too (a second call). Asked while the loop is held
 * up (from a long callback, or before calling into the loop again after a
 * pause), it also says 1 once a full lease has passed since the last
 * renewal the server confirmed, before the loop has run the timer that
 * reports it: the lease may have ended there and another client may hold
 * the lock. */
HILOCK_API int hilock_async_is_lost(const hilock_async *a, const hilock_lock *l,
                                    uint64_t tid);

#ifdef __cplusplus
}
#endif
#endif /* HILOCK_H */
