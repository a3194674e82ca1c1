/* Protocol layer: redirects, topology changes and replica acknowledgement
 * as decisions over replies. No I/O, no threads, no clock. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto.h"

/* Pauses the route machine asks for. */
#define HL_MOVED_PAUSE_MS 25    /* nodes disagree for a moment while a slot moves */
#define HL_TRYAGAIN_PAUSE_MS 50 /* TRYAGAIN / CLUSTERDOWN / LOADING */
#define HL_DEMOTED_PAUSE_MS 100 /* a replica is taking over */
#define HL_RECONNECT_PAUSE_MS 50

static int err_starts(const redisReply *r, const char *word)
{
    size_t n = strlen(word);
    return r && r->type == REDIS_REPLY_ERROR && r->str && r->len >= n &&
           memcmp(r->str, word, n) == 0 && (r->len == n || r->str[n] == ' ');
}

int hl_reply_not_master(const redisReply *r)
{
    return r && r->type == REDIS_REPLY_ERROR && r->str &&
           (strstr(r->str, "READONLY") || strstr(r->str, "MASTERDOWN"));
}

int hl_parse_redirect(const redisReply *r, unsigned *slot, char *host, size_t hostlen,
                      int *port)
{
    int kind = err_starts(r, "MOVED") ? 1 : err_starts(r, "ASK") ? 2 : 0;
    if (!kind || hostlen < 2)
        return 0;
    const char *p = r->str + (kind == 1 ? 6 : 4), *end = r->str + r->len;
    unsigned long s = 0;
    const char *q = p;
    while (q < end && *q >= '0' && *q <= '9' && q - p < 6)
        s = s * 10 + (unsigned long)(*q++ - '0');
    if (q == p || q >= end || *q != ' ' || s >= 16384)
        return 0;
    const char *addr = q + 1, *colon = NULL;
    for (const char *c = addr; c < end; c++)
        if (*c == ':')
            colon = c;
    if (!colon || (size_t)(colon - addr) >= hostlen)
        return 0;
    long pt = 0;
    const char *d = colon + 1;
    if (d == end || end - d > 5)
        return 0;
    for (; d < end; d++) {
        if (*d < '0' || *d > '9')
            return 0;
        pt = pt * 10 + (*d - '0');
    }
    if (pt < 1 || pt > 65535)
        return 0;
    memcpy(host, addr, (size_t)(colon - addr));
    host[colon - addr] = 0;
    if (!host[0]) /* "MOVED 1 :6380": the node we asked, by its own address */
        snprintf(host, hostlen, "127.0.0.1");
    *slot = (unsigned)s;
    *port = (int)pt;
    return kind;
}

void hl_router_init(hl_router *rt, hl_mode mode)
{
    memset(rt, 0, sizeof *rt);
    rt->mode = mode;
}

static hl_route_action give_up(hl_router *rt, int code)
{
    rt->result = code;
    return HL_ROUTE_FAIL;
}

hl_route_action hl_router_on_reply(hl_router *rt, const redisReply *r)
{
    rt->sleep_ms = 0;
    if (!r)
        return give_up(rt, HILOCK_EPROTO);
    if (r->type != REDIS_REPLY_ERROR)
        return HL_ROUTE_DONE;
    if (++rt->hops > HL_ROUTE_MAX_HOPS)
        return give_up(rt, HILOCK_ECONN);
    if (rt->mode == HL_MODE_CLUSTER) {
        int kind = hl_parse_redirect(r, &rt->slot, rt->host, sizeof rt->host, &rt->port);
        if (kind == 1) {
            if (rt->hops > 2)
                rt->sleep_ms = HL_MOVED_PAUSE_MS;
            return HL_ROUTE_MOVED;
        }
        if (kind == 2)
            return HL_ROUTE_ASK;
        if (err_starts(r, "TRYAGAIN") || err_starts(r, "CLUSTERDOWN") ||
            err_starts(r, "LOADING")) {
            rt->sleep_ms = HL_TRYAGAIN_PAUSE_MS;
            return HL_ROUTE_RETRY;
        }
    } else if (err_starts(r, "LOADING")) { /* a restarted server reads its data */
        rt->sleep_ms = HL_TRYAGAIN_PAUSE_MS;
        return HL_ROUTE_RETRY;
    }
    if (hl_reply_not_master(r)) {
        if (rt->demoted)
            return give_up(rt, HILOCK_ECONN);
        /* a failover demoted it: look for the master again (one server:
         * reconnect) and send once more */
        rt->demoted = 1;
        rt->sleep_ms = rt->mode == HL_MODE_CLUSTER ? HL_DEMOTED_PAUSE_MS : 0;
        return HL_ROUTE_REFRESH;
    }
    return HL_ROUTE_DONE;
}

hl_route_action hl_router_on_conn_error(hl_router *rt, int sent)
{
    rt->sleep_ms = 0;
    /* Nothing was sent (the connect failed): the master may have just
     * failed over or the slot moved; looking again once is safe. */
    if (!sent && !rt->reconnected && rt->mode != HL_MODE_SINGLE) {
        rt->reconnected = 1;
        rt->sleep_ms = HL_RECONNECT_PAUSE_MS;
        return HL_ROUTE_REFRESH;
    }
    return give_up(rt, HILOCK_ECONN);
}

/* ---- replica acknowledgement ---- */

enum { AK_ROLE = 1, AK_WAIT, AK_RECHECK, AK_DONE };

int hl_decode_role_replicas(const redisReply *r, int *is_master)
{
    int master = r && r->type == REDIS_REPLY_ARRAY && r->elements >= 1 &&
                 r->element[0]->type == REDIS_REPLY_STRING && r->element[0]->len == 6 &&
                 memcmp(r->element[0]->str, "master", 6) == 0;
    if (is_master)
        *is_master = master;
    if (!master || r->elements < 3 || r->element[2]->type != REDIS_REPLY_ARRAY)
        return 0;
    return r->element[2]->elements > 100000 ? 100000 : (int)r->element[2]->elements;
}

static void ack_cmd(hl_ack *k, const char *a0, const char *a1, int64_t a2)
{
    hl_cmd *c = &k->cmd;
    hl_cmd_begin_plain(c);
    hl_cmd_add_str(c, a0);
    if (a1) {
        hl_cmd_add_str(c, a1);
        hl_cmd_add_num(c, a2);
    }
}

void hl_ack_init(hl_ack *k, int cached_replicas, int64_t cached_age_ms, int64_t ack_timeout_ms)
{
    hl_ack_init_replicated(k, cached_replicas, cached_age_ms, ack_timeout_ms, 0);
}

void hl_ack_init_replicated(hl_ack *k, int cached_replicas, int64_t cached_age_ms,
                            int64_t ack_timeout_ms, int replicated)
{
    memset(k, 0, sizeof *k);
    k->ack_timeout_ms = ack_timeout_ms > 0 ? ack_timeout_ms : 1;
    k->replicas = cached_replicas;
    k->replicated = replicated != 0;
    /* a master of a deployment known to keep replicas needs a replica's
     * acknowledgement even when this node was never seen with one (a new
     * master after a failover, or one whose replicas had not attached yet
     * when it was first asked) */
    k->had = cached_replicas > 0 || k->replicated;
    if (cached_replicas < 0 || cached_age_ms < 0 || cached_age_ms > HL_REPLICAS_CACHE_MS)
        k->state = AK_ROLE;
    else if (cached_replicas > 0)
        k->state = AK_WAIT;
    else /* none a moment ago: fine for an unreplicated master; ask again otherwise */
        k->state = k->replicated ? AK_ROLE : AK_DONE;
    /* a master never seen with a replica (of a deployment not known to
     * keep any) is not asked: WAIT would block the whole timeout, and
     * there is nothing a failover could forget */
    k->acked = k->state == AK_DONE;
}

hl_action hl_ack_next(hl_ack *k)
{
    switch (k->state) {
    case AK_ROLE:
    case AK_RECHECK:
        ack_cmd(k, "ROLE", NULL, 0);
        k->timeout_ms = 0;
        return HL_ACT_SEND;
    case AK_WAIT:
        ack_cmd(k, "WAIT", "1", k->ack_timeout_ms);
        k->timeout_ms = k->ack_timeout_ms; /* on top of the command timeout */
        return HL_ACT_SEND;
    default:
        return HL_ACT_DONE;
    }
}

void hl_ack_on_reply(hl_ack *k, const redisReply *r)
{
    switch (k->state) {
    case AK_ROLE:
    case AK_RECHECK: {
        int n = hl_decode_role_replicas(r, NULL);
        k->refreshed = 1;
        if (n > 0 || k->replicas <= 0)
            k->replicas = n;
        if (n > 0)
            k->had = k->replicated = 1;
        /* else: a master once seen with replicas that lists none now has
         * lost them (killed, or cut off from them: perhaps one of them is
         * the master now). Nothing acknowledges its writes, so nothing is
         * acknowledged; the count is kept, so the next write asks again. */
        if (k->state == AK_RECHECK || n == 0) {
            /* WAIT timed out: that is no acknowledgement, whatever ROLE
             * says now; no replica listed: fine only for a master that
             * never had one */
            k->acked = k->state == AK_ROLE && !k->had;
            k->state = AK_DONE;
        } else {
            k->state = AK_WAIT;
        }
        break;
    }
    case AK_WAIT:
        if (r && r->type == REDIS_REPLY_INTEGER && r->integer >= 1) {
            k->acked = 1;
            k->state = AK_DONE;
        } else {
            k->state = AK_RECHECK; /* are there still replicas at all? */
        }
        break;
    default:
        break;
    }
}

int hl_ack_retry(int64_t wait_ms, int64_t deadline_ms, int64_t now_ms, int64_t *pause_ms)
{
    /* right after a failover the replicas need a moment to resynchronise:
     * pause, then try again if the caller may still wait that long */
    *pause_ms = HL_ACK_RETRY_MS;
    if (wait_ms == 0 || (deadline_ms >= 0 && deadline_ms - now_ms < HL_ACK_RETRY_MS))
        return 0;
    return 1;
}

void hl_ack_on_error(hl_ack *k)
{
    k->failed = 1;
    k->acked = 0;
    k->state = AK_DONE;
}

/* ---- pub/sub and topology commands and answers ---- */

static void plain(hl_cmd *c, int argc, const char *const *argv)
{
    hl_cmd_begin_plain(c);
    for (int i = 0; i < argc; i++)
        hl_cmd_add_str(c, argv[i]);
}

void hl_cmd_subscribe(hl_cmd *cmd, const char *channel, int sharded, int unsubscribe)
{
    const char *verb = unsubscribe ? (sharded ? "SUNSUBSCRIBE" : "UNSUBSCRIBE")
                                   : (sharded ? "SSUBSCRIBE" : "SUBSCRIBE");
    const char *argv[] = {verb, channel};
    plain(cmd, 2, argv);
}

void hl_cmd_ping(hl_cmd *cmd)
{
    const char *argv[] = {"PING"};
    plain(cmd, 1, argv);
}

void hl_cmd_cluster_slots(hl_cmd *cmd)
{
    const char *argv[] = {"CLUSTER", "SLOTS"};
    plain(cmd, 2, argv);
}

void hl_cmd_role(hl_cmd *cmd)
{
    const char *argv[] = {"ROLE"};
    plain(cmd, 1, argv);
}

void hl_cmd_asking(hl_cmd *cmd)
{
    const char *argv[] = {"ASKING"};
    plain(cmd, 1, argv);
}

int hl_cmd_handshake(hl_cmd *cmds, const char *user, const char *password, int db)
{
    int n = 0;
    if (password) {
        hl_cmd_begin_plain(&cmds[n]);
        hl_cmd_add_str(&cmds[n], "AUTH");
        if (user)
            hl_cmd_add_str(&cmds[n], user);
        hl_cmd_add_str(&cmds[n], password);
        n++;
    }
    if (db) {
        hl_cmd_begin_plain(&cmds[n]);
        hl_cmd_add_str(&cmds[n], "SELECT");
        hl_cmd_add_num(&cmds[n], db);
        n++;
    }
    return n;
}

int hl_decode_handshake(const redisReply *r)
{
    if (r && r->type == REDIS_REPLY_STATUS && r->len == 2 && !memcmp(r->str, "OK", 2))
        return 0;
    if (r && r->type == REDIS_REPLY_ERROR)
        return HILOCK_EAUTH;
    return HILOCK_EPROTO;
}

void hl_cmd_sentinel_master(hl_cmd *cmd, const char *master_name)
{
    const char *argv[] = {"SENTINEL", "get-master-addr-by-name", master_name};
    plain(cmd, 3, argv);
}

void hl_cmd_sentinel_watch(hl_cmd *cmd)
{
    const char *argv[] = {"SUBSCRIBE", "+switch-master"};
    plain(cmd, 2, argv);
}

int hl_decode_switch_master(const redisReply *r, const char *master_name, char *host,
                            size_t hostlen, int *port)
{
    /* ["message", "+switch-master", "<name> <old-ip> <old-port> <new-ip> <new-port>"] */
    if (!r || r->type != REDIS_REPLY_ARRAY || r->elements < 3 ||
        r->element[2]->type != REDIS_REPLY_STRING)
        return 0;
    const redisReply *m = r->element[2];
    size_t nl = strlen(master_name);
    if (m->len <= nl || memcmp(m->str, master_name, nl) != 0 || m->str[nl] != ' ' ||
        m->len > 1024)
        return 0;
    /* "<old-ip> <old-port> <new-ip> <new-port>": exactly four tokens, the
     * ports plain decimals in 1..65535 (no sign, no overflow wrapping). */
    const char *tok[4];
    size_t tlen[4];
    const char *p = m->str + nl, *end = m->str + m->len;
    for (int i = 0; i < 4; i++) {
        while (p < end && *p == ' ')
            p++;
        tok[i] = p;
        while (p < end && *p != ' ')
            p++;
        tlen[i] = (size_t)(p - tok[i]);
        if (tlen[i] == 0)
            return 0;
    }
    while (p < end && *p == ' ')
        p++;
    if (p != end)
        return 0;
    int ports[2];
    for (int i = 0; i < 2; i++) {
        const char *d = tok[2 * i + 1];
        size_t dl = tlen[2 * i + 1];
        long v = 0;
        if (dl > 5)
            return 0;
        for (size_t k = 0; k < dl; k++) {
            if (d[k] < '0' || d[k] > '9')
                return 0;
            v = v * 10 + (d[k] - '0');
        }
        if (v < 1 || v > 65535)
            return 0;
        ports[i] = (int)v;
    }
    char h1[256];
    if (tlen[2] >= sizeof h1 || tlen[2] >= hostlen || memchr(tok[2], 0, tlen[2]))
        return 0;
    memcpy(h1, tok[2], tlen[2]);
    h1[tlen[2]] = 0;
    int p1 = ports[1];
    snprintf(host, hostlen, "%s", h1);
    *port = p1;
    return 1;
}
