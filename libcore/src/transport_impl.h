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
HL_HIDDEN int hl_node_index(hl_transport *c, const hl_node *n);

/* pool.c: check a connection of n out: an idle one (*reused = 1) or a new
 * one (connecting within timeout_ms when > 0 and below the connect
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

#endif
