/*
 * What the transport's own files share and the API does not use: helpers
 * one transport file defines for another. Only transport files include it
 * (tests/lint, scripts/layers.py).
 */
#ifndef HILOCK_TRANSPORT_IMPL_H
#define HILOCK_TRANSPORT_IMPL_H

#include <stdint.h>
#include <sys/time.h>

#include "transport.h"

/* conn.c: ms as a struct timeval (hiredis timeouts). */
HL_HIDDEN struct timeval hl_tv_ms(int64_t ms);

/* conn.c: after poll said ctx is readable, read what arrived and hand each
 * complete reply to fn in order; fn owns it (frees or keeps it) and returns
 * 0 to take no more now (ctx is not touched again: fn may have given it
 * back). 0 when every complete reply was taken, 1 when fn stopped, -1 when
 * the read failed (errno says why), -2 when a reply was refused (over
 * HL_REPLY_MAX_BYTES, malformed); on < 0 the caller drops the connection.
 * The one reader loop of the pub/sub listener, the sentinel watcher, the
 * drain and the fan-out. */
HL_HIDDEN int hl_read_replies(redisContext *ctx, int (*fn)(void *arg, redisReply *r), void *arg);

/* nodes.c: copy n's address (cluster nodes; 0 = the client's endpoint);
 * n's index in the node table, or -1. */
HL_HIDDEN int hl_node_addr(hl_node *n, char *host, size_t len, int *port);
/* n's server for messages: "host:port", "unix:path", or with sentinels the
 * master they last named ("host:port"; "master '<name>'" before any). */
HL_HIDDEN void hl_node_where(hl_node *n, char *buf, size_t len);
HL_HIDDEN int hl_node_index(hl_transport *c, const hl_node *n);

/* pool.c: check a connection of n out: an idle one (*reused = 1; idle ones
 * the server has closed meanwhile are dropped on the way, however many) or
 * a new one (connecting within timeout_ms when > 0 and below the connect
 * timeout), waiting while the pool is full (up to command + connect
 * timeout); *gen is the master generation it belongs to. NULL with *code
 * and err set. hl_pool_put gives it back (closed when broken, failed, from
 * an older master generation, or the client is closed); hl_pool_forget
 * counts a checked-out connection as gone for good (handed to the drain). */
HL_HIDDEN redisContext *hl_pool_get(hl_node *n, int64_t timeout_ms, int *reused, int64_t *gen,
                                    int *code, char *err);
HL_HIDDEN void hl_pool_put(hl_node *n, redisContext *ctx, int broken, int64_t gen);
HL_HIDDEN void hl_pool_forget(hl_node *n);
/* pool.c: 1 when n has an idle connection or may open one (fanout.c). */
HL_HIDDEN int hl_pool_has_free(hl_node *n);
/* exec.c: the connection went away while it sat idle (EOF, reset): the
 * command sent on it never ran (fanout.c). */
HL_HIDDEN int hl_conn_stale(const redisContext *ctx);

/* ---- what transport files call in each other (the API does not) ---- */

/* conn.c: every connection we open (servers, sentinels) writes with
 * send(MSG_NOSIGNAL) instead of hiredis's plain send(), so its writes never
 * raise SIGPIPE; call on a fresh plain context, before any TLS handshake
 * (which installs hiredis's TLS functions instead). With the system's
 * hiredis 0.14 (no function table) it does nothing, and
 * hl_transport_nosigpipe_enter masks instead. */
HL_HIDDEN void hl_conn_nosignal(redisContext *ctx);
/* hl_tls_handshake with SIGPIPE blocked for its duration (the handshake
 * writes through OpenSSL's socket BIO). */
HL_HIDDEN int hl_conn_tls_handshake(hl_tls *t, redisContext *ctx, const char *host,
                                    const char *server_name, int64_t timeout_ms,
                                    const char *where, int *code, char *err);

/* hiredis's redisGetReply/redisCommandArgv on our blocking contexts, with
 * the same bound on one reply as hl_command (transport.h). */
HL_HIDDEN int hl_get_reply(redisContext *c, void **reply);
HL_HIDDEN redisReply *hl_command_argv(redisContext *c, int argc, const char **argv,
                                      const size_t *argvlen);

/* TLS handshake on a fresh connection to host, bounded by timeout_ms.
 * 0, or -1 with *code (HILOCK_ETLS: certificate or TLS-level refusal;
 * HILOCK_ECONN: closed or silent peer; HILOCK_ENOMEM) and err set; ctx
 * stays usable only for redisFree then. After the handshake the connection
 * writes with send(MSG_NOSIGNAL) (tls.c); the handshake's own writes may
 * raise SIGPIPE: run it masked (hl_conn_tls_handshake). */
HL_HIDDEN int hl_tls_handshake(hl_tls *t, redisContext *ctx, const char *host,
                               const char *server_name, int64_t timeout_ms, const char *where,
                               int *code, char *err);

/* 1 when the library was built with TLS. */
HL_HIDDEN int hl_tls_available(void);

/* Connect, AUTH, SELECT within timeout_ms (each step). Returns a context or
 * NULL with *code and err set. Sentinel: to the current master; cluster: to
 * the first seed that answers. */
HL_HIDDEN redisContext *hl_connect(const hl_endpoint *ep, int64_t connect_timeout_ms,
                                   int64_t command_timeout_ms, int *code, char *err);

/* Ask sentinel i of ep (a fresh connection) where the master is. 0, or a
 * HILOCK_E* code with err set (EAUTH/ETLS when the sentinel refused us). */
HL_HIDDEN int hl_sentinel_master(const hl_endpoint *ep, int i, int64_t timeout_ms, char *host,
                                 size_t hostlen, int *port, char *err);

/* A connection to sentinel i of ep (TLS and the sentinels' own AUTH as ep
 * says), or NULL with *code and err set. */
HL_HIDDEN redisContext *hl_sentinel_connect(const hl_endpoint *ep, int i, int64_t timeout_ms,
                                            int *code, char *err);

/* Connect to one given server with ep's credentials. */
HL_HIDDEN redisContext *hl_connect_addr(const hl_endpoint *ep, const char *host, int port,
                                        int64_t connect_timeout_ms,
                                        int64_t command_timeout_ms, int *code, char *err);

/* Run several commands pipelined, one connection per node (watchdog
 * batches). replies[i] NULL where that command got no reply. HILOCK_ECONN
 * (err set) when any node failed; the others' replies are still filled. */
HL_HIDDEN int hl_exec_pipeline(hl_transport *c, hl_cmd *cmds, int n,
                               redisReply **replies, char *err);
/* As hl_exec_pipeline; when the client asks for replica acknowledgement,
 * each node's batch is followed by WAIT on its connection and acked[i]
 * (room for n) is 1 when a replica took command i's writes (or the master
 * has none), 0 when not (or the WAIT failed): an answer, not a
 * confirmation. Without replica acknowledgement every acked[i] is 1. */
HL_HIDDEN int hl_exec_pipeline_acked(hl_transport *c, hl_cmd *cmds, int n,
                                     redisReply **replies, int *acked, char *err);

/* Take over ctx, on which the acquire attempt cmd was sent and timed out:
 * wait (up to HL_SETTLE_MAX_MS) for its late reply on that same connection
 * and undo its effect (release a grant, leave the fair line). Returns 0, or
 * -1 when it could not (ctx is then freed by the caller). */
HL_HIDDEN int hl_drain_add(hl_transport *c, struct hl_node *node, redisContext *ctx,
                           const hl_cmd *cmd);

/* 1 when a new attempt may go to node (the engine's hl_settle_gate over
 * its attempts waiting to be settled), after waiting as long as the gate
 * says for one to end. bounded: the call has a time limit of its own. */
HL_HIDDEN int hl_drain_node_ready(hl_transport *c, struct hl_node *node, int bounded);

/* Stop the drain thread; attempts still waiting are given up. */
HL_HIDDEN void hl_drain_shutdown(hl_transport *c);

/* The master changed: drop every connection to the old one. */
HL_HIDDEN void hl_master_switched(hl_transport *c);

/* Wake the pub/sub listener so it notices a master switch. */
HL_HIDDEN void hl_pubsub_poke(hl_transport *c);

/* Stop every node's listener and wake its waiters. */
/* A child after fork(): frees a node's channel records, memory only. */
HL_HIDDEN void hl_pubsub_free_forked(hl_pubsub *ps);
HL_HIDDEN void hl_pubsub_shutdown(hl_transport *c);
/* n's pub/sub mutex held: 1 when n's listener listens to nothing and is not
 * connecting, and then its connection (if any) is closed and the listener
 * sleeps until a channel is registered, so that the node entry may take
 * another address (nodes.c's node_reuse); else 0, nothing changed. */
HL_HIDDEN int hl_pubsub_unused(hl_node *n);

/* A hold whose renewals go unconfirmed for lease - margin since the last
 * confirmed one is reported lost (the server's copy ends at lease at the
 * latest, and another client may take it then). margin = lease / 5: renewals
 * go out every lease / 3, so two of them can fail before the report. The
 * report is timed by the watchdog thread, which does no I/O: a renewal
 * stuck on a dead link (connect, handshake or read) does not delay it. */
HL_HIDDEN int64_t hl_wd_margin_ms(const hl_transport *c);

/* Stop renewing (holder, tid) at once, whatever its hold count. */
HL_HIDDEN void hl_wd_forget(hl_transport *c, const void *holder, uint64_t tid);

/* A child after fork(): frees the watchdog's entries and buffers, memory only. */
HL_HIDDEN void hl_wd_free_forked(hl_transport *c);
/* Stop the watchdog thread (from_watchdog: it is the caller, detached
 * instead of joined) and drop every entry. */
HL_HIDDEN void hl_wd_shutdown(hl_transport *c, int from_watchdog);

/* The node for a key (cluster: by its hash slot), never NULL. */
HL_HIDDEN hl_node *hl_route(hl_transport *c, const char *key, size_t len);

/* Cluster: node for host:port, added when new (reusing a retired entry
 * nobody uses when the table holds max_nodes); NULL when full/no memory. */
HL_HIDDEN hl_node *hl_node_get(hl_transport *c, const char *host, int port);

/* forked: in a child after fork(), free memory only (no destroy calls). */
HL_HIDDEN void hl_node_free(hl_node *n, int forked);

/* Hand msg to sinks.error (when set). */
HL_HIDDEN void hl_transport_report(hl_transport *c, const char *msg);

/* NULL-safe. */
HL_HIDDEN void hl_tls_free(hl_tls *t);

/* A fresh connection to n (its address, the endpoint's credentials). */
HL_HIDDEN redisContext *hl_node_connect(hl_node *n, int64_t connect_timeout_ms, int *code,
                                        char *err);

/* Hand a fresh connection to n's pool. */
HL_HIDDEN void hl_pool_add_idle(hl_node *n, redisContext *ctx);

#endif
