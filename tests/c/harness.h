/*
 * Test harness: throwaway redis-server processes on free loopback ports.
 * Every server started is killed at process exit (atexit + PR_SET_PDEATHSIG),
 * also when a test fails or crashes.
 */
#ifndef HILOCK_TEST_HARNESS_H
#define HILOCK_TEST_HARNESS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <hiredis/hiredis.h>

typedef struct th_redis {
    pid_t pid;
    int port;
    char url[128];      /* redis://127.0.0.1:<port> */
    char extra[512];    /* extra arguments given at start */
    char dir[128];      /* working directory (removed at stop) */
} th_redis;

/* Start a server on a free port. extra: more redis-server arguments split on
 * spaces (e.g. "--requirepass secret"), or NULL. Returns 0 or -1. Waits until
 * the server answers PING (authenticating if --requirepass is given). */
int th_redis_start(th_redis *r, const char *extra);
/* SIGKILL-free stop: SIGTERM, wait, then SIGKILL if needed. NULL/idempotent. */
void th_redis_stop(th_redis *r);
/* Stop (SIGKILL: no save) and start again on the same port, empty. */
int th_redis_restart(th_redis *r);
/* Pause/resume the server process (SIGSTOP/SIGCONT) to simulate a hang. */
void th_redis_pause(th_redis *r);
void th_redis_resume(th_redis *r);
/* 1 once the paused server process is stopped (state T in /proc). */
int th_redis_stopped(const th_redis *r);
/* A plain hiredis connection to inspect keys (caller frees with redisFree). */
redisContext *th_redis_connect(const th_redis *r);
/* Run a command on a fresh connection and return the integer reply (or
 * -1000 on error); for quick checks like EXISTS, PTTL, HGET. */
long long th_redis_int(const th_redis *r, const char *fmt, ...);
/* PUBSUB NUMSUB channel on a fresh connection to r: the channel's
 * subscribers, or -1000 when the server did not answer. */
long long th_redis_numsub(const th_redis *r, const char *channel);
/* INFO clients on a fresh connection to r: connected_clients without the
 * asking connection itself, or -1 when the server did not answer. */
long long th_redis_clients(const th_redis *r);
/* th_wait_for predicate: the replica r (a th_redis *) reports its link to
 * its master up (INFO replication: master_link_status:up). */
int th_replica_linked(void *r);
/* A free loopback TCP port (nothing listening at the moment of the call). */
int th_free_port(void);
/* 1 when nothing listens on the loopback port right now. */
int th_port_is_free(int port);
/* Monotonic milliseconds. */
int64_t th_now_ms(void);
/* Sleep ms milliseconds. */
void th_sleep_ms(int64_t ms);
/* Wait until cond(arg) returns non-zero or timeout_ms passes; polls every
 * 5 ms. Returns 1 when the condition held, 0 on timeout. */
int th_wait_for(int (*cond)(void *), void *arg, int64_t timeout_ms);
/* Wait (th_wait_for) until channel on r has want subscribers (PUBSUB
 * NUMSUB); 1 when it had, 0 on timeout. */
int th_wait_numsub(const th_redis *r, const char *channel, long long want, int64_t timeout_ms);

/* ---- additions (keep the API above stable; only add below) ---- */
/* 1 when the tests run under valgrind (env HILOCK_VALGRIND=1): scale down
 * thread and iteration counts, never the assertions. */
int th_valgrind(void);
/* Threads of this process now (entries in /proc/self/task), or -1. */
int th_thread_count(void);
/* Wait up to timeout_ms until the process has n threads again; 1 if so.
 * (A joined thread can linger in /proc/self/task for a moment after
 * pthread_join returns.) */
int th_wait_thread_count(int n, int64_t timeout_ms);
/* Run a command on a fresh connection; copy a string/status reply into buf.
 * Returns 0 string, 1 nil, -1 error/other. */
int th_redis_str(const th_redis *r, char *buf, size_t len, const char *fmt, ...);
/* Run the CUnit registry already filled by the caller (basic interface,
 * verbose), print the summary, clean up. Returns the process exit code:
 * 0 when every assertion passed, 1 otherwise. Call after CU_initialize_registry
 * and adding suites. */
int th_cu_run(void);
/* The server binary the harness starts: $HILOCK_REDIS_SERVER (e.g.
 * valkey-server), else redis-server. */
const char *th_server_bin(void);
/* Start a sentinel from the config file conf (it rewrites the file), killed
 * with the test process. Returns its pid, or -1. */
pid_t th_sentinel_spawn(const char *conf);

/* Run prog (no arguments) in a child with its stdout and stderr captured
 * into out (at most len - 1 bytes, NUL-terminated). env: pairs of name and
 * value set in the child, a NULL value unsets the name, a NULL name ends the
 * list; env itself may be NULL. Returns the exit status, 128 + the signal
 * when it was killed, or -1 when it could not be started. */
int th_run_capture(const char *prog, const char *const *env, char *out, size_t len);
/* One server for a test program's CUnit suites: th_srv, started by
 * th_srv_init (give it as the suite's init function) and stopped by
 * th_srv_clean (its cleanup function). */
extern th_redis th_srv;
int th_srv_init(void);
int th_srv_clean(void);
/* The same server with a client open on it (default options): th_cl, opened
 * by th_srv_client_init and closed by th_srv_client_clean. */
struct hilock_client;
extern struct hilock_client *th_cl;
int th_srv_client_init(void);
int th_srv_client_clean(void);
/* A Redis Cluster of the n servers in nodes, started by the caller with
 * "--cluster-enabled yes --cluster-config-file nodes.conf" (and their own
 * options): redis-cli --cluster create over their plain ports (replicas per
 * master, 0 for masters only), then up to 20 s until every node says
 * cluster_state:ok. Returns 0 or -1. */
int th_cluster_create(th_redis *nodes, int n, int replicas);
/* Stops the n nodes and removes their nodes.conf and directories. */
void th_cluster_stop(th_redis *nodes, int n);
/* Script calls the server has run (EVALSHA + EVAL), from INFO
 * commandstats; -1 when it did not answer. */
long long th_script_calls(const th_redis *r);
/* hilock_client_open(url) with the default options; on failure prints the
 * code and its detail to stderr and returns NULL. */
struct hilock_client;
struct hilock_client *th_client_open(const char *url);
/* The same with options o (NULL: the defaults). */
struct hilock_options;
struct hilock_client *th_client_open_opts(const char *url, const struct hilock_options *o);
/* Shuts the write side of every idle pooled connection of c's first node:
 * the next write on one fails with EPIPE, which raises SIGPIPE unless
 * written with MSG_NOSIGNAL. The connection still looks open to the pool
 * (its socket is swapped for one end of a socket pair whose write side is
 * shut; the harness keeps the other end open till exit), so the write is
 * made. Returns how many. */
int th_pool_shut_writes(struct hilock_client *c);
/* Idle connections in the pool of c's first node now. */
int th_pool_idle(struct hilock_client *c);
/* One RESP reply parsed from bytes with hiredis's reader (no socket); NULL
 * when the bytes are not one whole reply. Free with freeReplyObject.
 * TH_RESP("literal") for string literals (NUL bytes allowed). */
redisReply *th_resp(const char *bytes, size_t len);
#define TH_RESP(s) th_resp(s, sizeof(s) - 1)
/* Feeds the RESP literal b (NUL bytes allowed) to an engine machine's reply
 * step, on_reply(m, reply, now), and frees the reply; a literal that is not
 * one whole reply fails the CUnit test. */
#define TH_FEED(on_reply, m, b, now)                \
    do {                                            \
        redisReply *th_feed_r_ = TH_RESP(b);        \
        CU_ASSERT_PTR_NOT_NULL_FATAL(th_feed_r_);   \
        on_reply(m, th_feed_r_, now);               \
        freeReplyObject(th_feed_r_);                \
    } while (0)
/* Failed-check counter for test programs that do not use CUnit: prints
 * "FAIL file:line: <message>" and adds one to counter when cond is false. */
#define TH_CHECK(counter, cond, ...)                               \
    do {                                                           \
        if (!(cond)) {                                             \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);   \
            fprintf(stderr, __VA_ARGS__);                          \
            fprintf(stderr, "\n");                                 \
            (counter)++;                                           \
        }                                                          \
    } while (0)

#endif
