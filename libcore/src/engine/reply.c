/*
 * Protocol layer: what a server reply may cost us, and the numbers inside
 * replies that are not lock decisions (redirections, the cluster slot map,
 * the master a sentinel names). No I/O.
 *
 * (MOVED/ASK are parsed by hl_parse_redirect in proto_route.c.)
 *
 * A reply header is a promise the server need not keep: hiredis's own
 * reader callocs an array of N pointers as soon as it reads "*N", so eleven
 * bytes ("*888888880\r\n") cost gigabytes. The bounded reader below refuses
 * aggregates over HL_REPLY_MAX_ELEMENTS or nested deeper than
 * HL_REPLY_MAX_DEPTH at once, and grows each aggregate's element array as
 * its elements arrive instead of up front, so what a reply allocates is
 * proportional to the bytes the server actually sent.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto.h"

#if defined(HIREDIS_MAJOR) && HIREDIS_MAJOR >= 1
#include <hiredis/alloc.h>
#define HL_HIREDIS_1 1
#define hl_reply_realloc hi_realloc
typedef size_t hl_count_t; /* createArray's count parameter */
#else
#define HL_HIREDIS_1 0
#define hl_reply_realloc realloc
typedef int hl_count_t;
#endif

/* The reader's original functions are kept in its privdata (hiredis passes
 * it to every task): a pointer to hiredis's own static table, so nothing
 * needs freeing with the reader and no state lives outside it. */
static const redisReplyObjectFunctions *orig_fns(const redisReadTask *task)
{
    return (const redisReplyObjectFunctions *)task->privdata;
}

/* Make room in the parent aggregate for this task's element. The parent's
 * `elements` counts the elements it holds so far (freeReplyObject frees
 * exactly those, also when the reader gives up half way); its element array
 * has room for the next power of two. 0 or -1. */
static int parent_room(const redisReadTask *task)
{
    if (!task->parent)
        return 0;
    redisReply *p = task->parent->obj;
    size_t idx = (size_t)task->idx;
    if (!p || task->idx < 0 || idx != p->elements)
        return -1;
    if (idx == 0 || (idx & (idx - 1)) == 0) { /* full: 0, 1, 2, 4, ... */
        size_t cap = idx ? idx * 2 : 1;
        redisReply **grown = hl_reply_realloc(p->element, cap * sizeof *grown);
        if (!grown)
            return -1;
        p->element = grown;
    }
    return 0;
}

/* The element was stored by hiredis's function at parent->element[idx]. */
static void *parent_took(const redisReadTask *task, void *obj)
{
    if (obj && task->parent)
        ((redisReply *)task->parent->obj)->elements = (size_t)task->idx + 1;
    return obj;
}

static void *b_string(const redisReadTask *task, char *str, size_t len)
{
    if (parent_room(task))
        return NULL;
    return parent_took(task, orig_fns(task)->createString(task, str, len));
}

static void *b_array(const redisReadTask *task, hl_count_t elements)
{
    int depth = 0;
    for (const redisReadTask *t = task->parent; t; t = t->parent)
        depth++;
    if ((size_t)elements > HL_REPLY_MAX_ELEMENTS || depth >= HL_REPLY_MAX_DEPTH)
        return NULL; /* the reader reports "Out of memory" */
    if (parent_room(task))
        return NULL;
    /* created empty; parent_room grows it as its elements come */
    return parent_took(task, orig_fns(task)->createArray(task, 0));
}

static void *b_integer(const redisReadTask *task, long long value)
{
    if (parent_room(task))
        return NULL;
    return parent_took(task, orig_fns(task)->createInteger(task, value));
}

static void *b_nil(const redisReadTask *task)
{
    if (parent_room(task))
        return NULL;
    return parent_took(task, orig_fns(task)->createNil(task));
}

#if HL_HIREDIS_1
static void *b_double(const redisReadTask *task, double value, char *str, size_t len)
{
    if (parent_room(task))
        return NULL;
    return parent_took(task, orig_fns(task)->createDouble(task, value, str, len));
}

static void *b_bool(const redisReadTask *task, int bval)
{
    if (parent_room(task))
        return NULL;
    return parent_took(task, orig_fns(task)->createBool(task, bval));
}
#endif

static const redisReplyObjectFunctions bounded_fns = {
    .createString = b_string,
    .createArray = b_array,
    .createInteger = b_integer,
    .createNil = b_nil,
#if HL_HIREDIS_1
    .createDouble = b_double,
    .createBool = b_bool,
#endif
    .freeObject = freeReplyObject,
};

int hl_reader_bound(redisReader *r)
{
    if (!r)
        return -1;
    if (r->fn == &bounded_fns)
        return 0;
    const redisReplyObjectFunctions *o = r->fn;
    if (!o || !o->createString || !o->createArray || !o->createInteger || !o->createNil ||
        o->freeObject != freeReplyObject
#if HL_HIREDIS_1
        || !o->createDouble || !o->createBool
#endif
    )
        return -1; /* not hiredis's reply objects: leave it alone */
    r->privdata = (void *)o;
    r->fn = (redisReplyObjectFunctions *)&bounded_fns; /* hiredis never writes through fn */
    return 0;
}

/* ---- numbers inside replies ---- */

/* A decimal in [min, max], digits only (no sign, space or suffix). */
static int parse_num(const char *s, size_t len, long long min, long long max, long long *out)
{
    if (!s || len == 0 || len > 18)
        return -1;
    long long v = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        v = v * 10 + (s[i] - '0');
    }
    if (v < min || v > max)
        return -1;
    *out = v;
    return 0;
}

int hl_parse_port(const char *s, size_t len)
{
    long long v;
    return parse_num(s, len, 1, 65535, &v) ? -1 : (int)v;
}

/* One CLUSTER SLOTS entry: [lo, hi, [host, port, id?, ...], replicas...]. */
int hl_decode_slot_range(const redisReply *e, hl_slot_range *out)
{
    if (!e || e->type != REDIS_REPLY_ARRAY || e->elements < 3 || !e->element)
        return HILOCK_EPROTO;
    const redisReply *lo = e->element[0], *hi = e->element[1], *m = e->element[2];
    if (!lo || !hi || !m || lo->type != REDIS_REPLY_INTEGER || hi->type != REDIS_REPLY_INTEGER ||
        lo->integer < 0 || hi->integer >= HL_SLOTS || lo->integer > hi->integer)
        return HILOCK_EPROTO;
    if (m->type != REDIS_REPLY_ARRAY || m->elements < 2 || !m->element || !m->element[0] ||
        !m->element[1] || m->element[0]->type != REDIS_REPLY_STRING ||
        m->element[1]->type != REDIS_REPLY_INTEGER || m->element[1]->integer < 1 ||
        m->element[1]->integer > 65535 || m->element[0]->len >= sizeof out->host ||
        memchr(m->element[0]->str, '\0', m->element[0]->len))
        return HILOCK_EPROTO;
    memset(out, 0, sizeof *out);
    /* an empty host means "the address you reached me on" */
    if (m->element[0]->len)
        memcpy(out->host, m->element[0]->str, m->element[0]->len);
    else
        snprintf(out->host, sizeof out->host, "127.0.0.1");
    out->port = (int)m->element[1]->integer;
    out->lo = (unsigned)lo->integer;
    out->hi = (unsigned)hi->integer;
    return 0;
}

/* SENTINEL get-master-addr-by-name: [host, port] or nil. */
int hl_decode_master_addr(const redisReply *r, char *host, size_t hostlen, int *port)
{
    if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 2 || !r->element)
        return HILOCK_EPROTO;
    const redisReply *h = r->element[0], *p = r->element[1];
    if (!h || !p || h->type != REDIS_REPLY_STRING || p->type != REDIS_REPLY_STRING ||
        h->len == 0 || h->len >= hostlen || memchr(h->str, '\0', h->len))
        return HILOCK_EPROTO;
    int v = hl_parse_port(p->str, p->len);
    if (v < 0)
        return HILOCK_EPROTO;
    memcpy(host, h->str, h->len);
    host[h->len] = 0;
    *port = v;
    return 0;
}

void hl_msg_master_addr(char *buf, size_t len, const char *where, const char *name,
                        const redisReply *r)
{
    if (!buf || !len)
        return;
    if (r->type == REDIS_REPLY_NIL)
        snprintf(buf, len, "%s knows no master named '%s'", where, name);
    else if (r->type == REDIS_REPLY_ERROR)
        snprintf(buf, len, "%s: error reply: %.*s", where, (int)r->len, r->str ? r->str : "");
    else if (r->type == REDIS_REPLY_ARRAY && r->elements == 2)
        snprintf(buf, len, "%s named no valid address for '%s'", where, name);
    else
        snprintf(buf, len, "%s: unexpected reply to get-master-addr-by-name", where);
}
