/* Protocol layer: names, owners, commands and replies. No I/O. */
#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto.h"

/* From the generated scripts.c, in hl_script order. */
extern const size_t hl_embedded_count;
extern const char *const hl_embedded_source[];
extern const char *const hl_embedded_sha1[];
extern const char *const hl_embedded_name[];

#define HL_MSG_UNLOCKED "0"
#define HL_PUBLISH "publish"

const char *hl_script_source(hl_script s)
{
    return (size_t)s < hl_embedded_count ? hl_embedded_source[s] : NULL;
}

const char *hl_script_sha1(hl_script s)
{
    return (size_t)s < hl_embedded_count ? hl_embedded_sha1[s] : NULL;
}

const char *hl_script_name(hl_script s)
{
    return (size_t)s < hl_embedded_count ? hl_embedded_name[s] : NULL;
}

char *hl_companion(const char *prefix, const char *name)
{
    int braced = strchr(name, '{') != NULL;
    size_t len = strlen(prefix) + strlen(name) + 4;
    char *out = malloc(len);
    if (!out)
        return NULL;
    snprintf(out, len, braced ? "%s:%s" : "%s:{%s}", prefix, name);
    return out;
}

int hl_names_init(hl_names *n, const char *name)
{
    memset(n, 0, sizeof *n);
    if (!name || !*name)
        return HILOCK_EINVAL;
    n->name = strdup(name);
    n->channel = hl_companion("redisson_lock__channel", name);
    n->queue = hl_companion("redisson_lock_queue", name);
    n->timeout = hl_companion("redisson_lock_timeout", name);
    n->latch_prefix = hl_companion("redisson_unlock_latch", name);
    n->acquire_latch_prefix = hl_companion("hilock_acquire_latch", name);
    n->publish = HL_PUBLISH;
    n->rw_channel = hl_companion("redisson_rwlock", name);
    n->token = hl_companion("redisson_lock_token", name);
    n->rw_prefix = malloc(strlen(name) + 3);
    if (n->rw_prefix) /* Redisson's suffixName: "{N}", or N when it has a '{' */
        sprintf(n->rw_prefix, strchr(name, '{') ? "%s" : "{%s}", name);
    if (!n->name || !n->channel || !n->queue || !n->timeout || !n->latch_prefix ||
        !n->rw_channel || !n->rw_prefix || !n->token || !n->acquire_latch_prefix) {
        hl_names_free(n);
        return HILOCK_ENOMEM;
    }
    return 0;
}

void hl_names_free(hl_names *n)
{
    if (!n)
        return;
    free(n->name);
    free(n->channel);
    free(n->queue);
    free(n->timeout);
    free(n->latch_prefix);
    free(n->rw_channel);
    free(n->rw_prefix);
    free(n->token);
    free(n->acquire_latch_prefix);
    memset(n, 0, sizeof *n);
}

int hl_names_one_slot(const hl_names *n)
{
    unsigned slot = hl_key_slot(n->name, strlen(n->name));
    const char *other[] = {n->channel, n->queue, n->timeout, n->latch_prefix,
                           n->acquire_latch_prefix};
    for (size_t i = 0; i < sizeof other / sizeof other[0]; i++)
        if (hl_key_slot(other[i], strlen(other[i])) != slot)
            return 0;
    return 1;
}

unsigned hl_key_slot(const char *key, size_t len)
{
    /* hash tag: the part between the first '{' and the next '}', if non-empty */
    const char *open = memchr(key, '{', len);
    if (open) {
        size_t rest = len - (size_t)(open - key) - 1;
        const char *close = memchr(open + 1, '}', rest);
        if (close && close > open + 1) {
            key = open + 1;
            len = (size_t)(close - open - 1);
        }
    }
    unsigned crc = 0; /* CRC16/XMODEM: poly 0x1021, init 0 */
    for (size_t i = 0; i < len; i++) {
        crc ^= (unsigned)(unsigned char)key[i] << 8;
        for (int b = 0; b < 8; b++)
            crc = (crc & 0x8000) ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff;
    }
    return crc & 16383;
}

const char *hl_cmd_key(const hl_cmd *cmd, size_t *len)
{
    int i = 1;
    if (cmd->script >= 0)
        i = (cmd->argc > 3 && !(cmd->argvlen[2] == 1 && cmd->argv[2][0] == '0')) ? 3 : -1;
    if (i < 0 || i >= cmd->argc) {
        *len = 0;
        return "";
    }
    *len = cmd->argvlen[i];
    return cmd->argv[i];
}

void hl_owner(char *buf, const char *client_id, uint64_t tid)
{
    hl_hold_owner(buf, HILOCK_KIND_REENTRANT, client_id, tid);
}

void hl_hold_owner(char *buf, hilock_kind kind, const char *client_id, uint64_t tid)
{
    hl_sb b; /* cut to fit, as snprintf did */
    hl_sb_init(&b, buf, HL_OWNER_MAX);
    hl_sb_str(&b, client_id);
    hl_sb_mem(&b, ":", 1);
    hl_sb_u64(&b, tid);
    if (kind == HILOCK_KIND_WRITE)
        hl_sb_str(&b, ":write");
}

char *hl_wait_channel(hilock_kind kind, const hl_names *n, const char *owner)
{
    if (kind == HILOCK_KIND_READ || kind == HILOCK_KIND_WRITE)
        return strdup(n->rw_channel);
    if (kind != HILOCK_KIND_FAIR)
        return strdup(n->channel);
    size_t len = strlen(n->channel) + strlen(owner) + 2;
    char *out = malloc(len);
    if (out) {
        hl_sb b;
        hl_sb_init(&b, out, len);
        hl_sb_str(&b, n->channel);
        hl_sb_mem(&b, ":", 1);
        hl_sb_str(&b, owner);
    }
    return out;
}

/* ---- command building ---- */

static void cmd_start(hl_cmd *c, int script)
{
    c->argv = c->own_argv;
    c->argvlen = c->own_argvlen;
    c->cap = HL_CMD_MAXARGS;
    c->argc = 0;
    c->nnum = 0;
    c->script = script;
    c->drained = 0;
    c->reply_lost = 0;
}

static void cmd_str(hl_cmd *c, const char *s)
{
    assert(c->argc < c->cap); /* a builder with more: raise HL_CMD_MAXARGS */
    if (c->argc >= c->cap)
        return;
    c->argv[c->argc] = s;
    c->argvlen[c->argc] = strlen(s);
    c->argc++;
}

size_t hl_fmt_i64(char *buf, int64_t v)
{
    char tmp[20];
    uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v; /* INT64_MIN too */
    size_t n = 0;
    do {
        tmp[n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    size_t len = 0;
    if (v < 0)
        buf[len++] = '-';
    while (n)
        buf[len++] = tmp[--n];
    buf[len] = 0;
    return len;
}

void hl_sb_init(hl_sb *b, char *buf, size_t cap)
{
    b->buf = buf;
    b->cap = cap;
    b->len = 0;
    b->over = cap == 0;
    if (cap)
        buf[0] = 0;
}

void hl_sb_mem(hl_sb *b, const char *s, size_t n)
{
    if (b->over)
        return;
    if (n >= b->cap - b->len) { /* keep what fits, as snprintf does */
        n = b->cap - b->len - 1;
        b->over = 1;
    }
    memcpy(b->buf + b->len, s, n);
    b->len += n;
    b->buf[b->len] = 0;
}

void hl_sb_str(hl_sb *b, const char *s)
{
    hl_sb_mem(b, s, strlen(s));
}

void hl_sb_u64(hl_sb *b, uint64_t v)
{
    char tmp[20];
    size_t n = sizeof tmp;
    do {
        tmp[--n] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    hl_sb_mem(b, tmp + n, sizeof tmp - n);
}

int hl_sb_end(const hl_sb *b)
{
    return b->over ? HILOCK_EINVAL : 0;
}

static void cmd_num(hl_cmd *c, int64_t v)
{
    /* every builder adds far fewer numbers than HL_CMD_MAXNUM; a number
     * per argument is written here rather than by snprintf, which was a
     * visible part of making a machine (perf: printf's machinery about a
     * quarter of an acquire machine's construction) */
    char *buf = c->num[c->nnum < HL_CMD_MAXNUM ? c->nnum++ : HL_CMD_MAXNUM - 1];
    size_t len = hl_fmt_i64(buf, v);
    assert(c->argc < c->cap);
    if (c->argc >= c->cap)
        return;
    c->argv[c->argc] = buf;
    c->argvlen[c->argc] = (size_t)len;
    c->argc++;
}

static void cmd_script(hl_cmd *c, hl_script s, int nkeys)
{
    cmd_start(c, (int)s);
    cmd_str(c, "EVALSHA");
    cmd_str(c, hl_script_sha1(s));
    cmd_num(c, nkeys);
}

/* The rest of c's arguments go to wide (hl_cmd_renew_many). */
void hl_cmd_use_wide(hl_cmd *c, hl_cmd_wide *wide)
{
    for (int i = 0; i < c->argc; i++) {
        wide->argv[i] = c->argv[i];
        wide->argvlen[i] = c->argvlen[i];
    }
    c->argv = wide->argv;
    c->argvlen = wide->argvlen;
    c->cap = HL_CMD_WIDE_MAXARGS;
}

/* For the builders of other objects (proto_rwlock.c). */
void hl_cmd_begin_script(hl_cmd *c, hl_script s, int nkeys)
{
    cmd_script(c, s, nkeys);
}

void hl_cmd_add_str(hl_cmd *c, const char *s)
{
    cmd_str(c, s);
}

void hl_cmd_add_num(hl_cmd *c, int64_t v)
{
    cmd_num(c, v);
}

void hl_cmd_begin_plain(hl_cmd *c)
{
    cmd_start(c, -1);
}

/* KEYS of the fair release, force and cancel scripts: lock, line,
 * deadlines, channel base. */
static void cmd_fair_keys(hl_cmd *c, const hl_names *n)
{
    cmd_str(c, n->name);
    cmd_str(c, n->queue);
    cmd_str(c, n->timeout);
    cmd_str(c, n->channel);
}

void hl_cmd_to_eval(hl_cmd *cmd)
{
    if (cmd->script < 0 || cmd->argc < 2)
        return;
    cmd->argv[0] = "EVAL";
    cmd->argvlen[0] = 4;
    cmd->argv[1] = hl_script_source((hl_script)cmd->script);
    cmd->argvlen[1] = strlen(cmd->argv[1]);
}

int hl_cmd_eval_fallback(hl_cmd *cmd, const redisReply *r)
{
    if (!cmd || cmd->script < 0 || cmd->argc < 2 || !hl_reply_is_noscript(r) ||
        cmd->argvlen[0] != 7 || memcmp(cmd->argv[0], "EVALSHA", 7) != 0)
        return 0;
    hl_cmd_to_eval(cmd);
    return 1;
}

static size_t dec_len(size_t n)
{
    size_t k = 1;
    while (n >= 10) {
        n /= 10;
        k++;
    }
    return k;
}

/* "<c><n>\r\n" at p (a RESP length line); returns the end. Digits by hand:
 * snprintf per argument was a visible part of building a command. */
static char *put_len(char *p, char c, size_t n)
{
    char digits[24];
    int k = 0;
    do {
        digits[k++] = (char)('0' + n % 10);
        n /= 10;
    } while (n);
    *p++ = c;
    while (k)
        *p++ = digits[--k];
    *p++ = '\r';
    *p++ = '\n';
    return p;
}

size_t hl_resp_len(int argc, const size_t *lens)
{
    size_t n = 1 + dec_len((size_t)argc) + 2;
    for (int i = 0; i < argc; i++)
        n += 1 + dec_len(lens[i]) + 2 + lens[i] + 2;
    return n;
}

char *hl_resp_write(char *out, int argc, const char *const *argv, const size_t *lens)
{
    char *p = put_len(out, '*', (size_t)argc);
    for (int i = 0; i < argc; i++) {
        p = put_len(p, '$', lens[i]);
        memcpy(p, argv[i], lens[i]);
        p += lens[i];
        *p++ = '\r';
        *p++ = '\n';
    }
    return p;
}

void hl_cmd_acquire(hl_cmd *cmd, hilock_kind kind, const hl_names *n, const char *owner,
                    int64_t lease_ms, int64_t wait_window_ms)
{
    hl_cmd_acquire_latched(cmd, kind, n, owner, lease_ms, wait_window_ms, NULL, 0);
}

/* "<latch key>:<seq>" (hl_acquire_latch_arg): the key's length and the seq,
 * or 0 when arg is not of that shape. */
static int latch_split(const char *arg, size_t *key_len, const char **seq)
{
    const char *colon = arg ? strrchr(arg, ':') : NULL;
    if (!colon || colon == arg || !colon[1] || strspn(colon + 1, "0123456789") != strlen(colon + 1))
        return 0;
    *key_len = (size_t)(colon - arg);
    *seq = colon + 1;
    return 1;
}

static void cmd_strn(hl_cmd *c, const char *s, size_t len)
{
    assert(c->argc < c->cap);
    if (c->argc >= c->cap)
        return;
    c->argv[c->argc] = s;
    c->argvlen[c->argc] = len;
    c->argc++;
}

void hl_cmd_acquire_latched(hl_cmd *cmd, hilock_kind kind, const hl_names *n,
                            const char *owner, int64_t lease_ms, int64_t wait_window_ms,
                            const char *latch_key, int64_t latch_ttl_ms)
{
    /* The latch "<key>:<seq>" and its lifetime are the last two arguments
     * (acquire_latch.lua: an argument, not a KEY, so that a cluster slot
     * migration does not turn every attempt into TRYAGAIN). */
    size_t klen = 0;
    const char *seq = NULL;
    int latched = latch_ttl_ms > 0 && latch_split(latch_key, &klen, &seq);
    if (kind == HILOCK_KIND_FAIR) {
        /* wait_window_ms < 0 means: one try, do not queue up */
        cmd_script(cmd, HL_SCRIPT_FAIR_LOCK, 3);
        cmd_str(cmd, n->name);
        cmd_str(cmd, n->queue);
        cmd_str(cmd, n->timeout);
    } else if (kind == HILOCK_KIND_FENCED) {
        cmd_script(cmd, HL_SCRIPT_FENCED_LOCK, 2);
        cmd_str(cmd, n->name);
        cmd_str(cmd, n->token);
    } else if (kind == HILOCK_KIND_WRITE) {
        cmd_script(cmd, HL_SCRIPT_RW_WRITE_LOCK, 1);
        cmd_str(cmd, n->name);
    } else if (kind == HILOCK_KIND_READ) {
        cmd_script(cmd, HL_SCRIPT_RW_READ_LOCK, 2);
        cmd_str(cmd, n->name);
        cmd_str(cmd, n->rw_prefix);
    } else {
        cmd_script(cmd, HL_SCRIPT_LOCK, 1);
        cmd_str(cmd, n->name);
    }
    cmd_num(cmd, lease_ms);
    cmd_str(cmd, owner);
    if (kind == HILOCK_KIND_FAIR) {
        cmd_num(cmd, wait_window_ms < 0 ? 0 : wait_window_ms);
        cmd_str(cmd, wait_window_ms < 0 ? "0" : "1");
    }
    if (latched) {
        cmd_num(cmd, latch_ttl_ms);
        cmd_str(cmd, latch_key);
    }
}

void hl_cmd_acquire_settle(hl_cmd *cmd, const char *latch_key, int64_t latch_ttl_ms)
{
    /* the mark "given up" outlives the attempt's latch: a copy of the
     * attempt can still be on its way (a server paused with it in its
     * socket buffer) and must find the mark, not an expired latch, for as
     * long as a late reply is awaited at all (HL_SETTLE_MAX_MS) */
    if (latch_ttl_ms < HL_SETTLE_MAX_MS)
        latch_ttl_ms = HL_SETTLE_MAX_MS;
    size_t klen = 0;
    const char *seq = NULL;
    cmd_script(cmd, HL_SCRIPT_ACQUIRE_SETTLE, 1);
    if (latch_split(latch_key, &klen, &seq)) {
        cmd_strn(cmd, latch_key, klen);
        cmd_num(cmd, latch_ttl_ms > 0 ? latch_ttl_ms : 1);
        cmd_str(cmd, seq);
    } else { /* the script refuses it: "bad acquire latch argument" */
        cmd_str(cmd, latch_key ? latch_key : "");
        cmd_num(cmd, latch_ttl_ms > 0 ? latch_ttl_ms : 1);
    }
}

/* A latch "<key>|<seq>" (seq all digits; the release machine's per-owner
 * latch): the key as KEYS, the seq as the last argument. Else the whole
 * string is the key and no seq is sent. */
static void cmd_latch(hl_cmd *c, const char *latch_key, const char **seq, size_t *seq_len)
{
    const char *bar = strrchr(latch_key, '|');
    *seq = NULL;
    *seq_len = 0;
    if (bar && bar[1] && strspn(bar + 1, "0123456789") == strlen(bar + 1)) {
        cmd_strn(c, latch_key, (size_t)(bar - latch_key));
        *seq = bar + 1;
        *seq_len = strlen(bar + 1);
        return;
    }
    cmd_str(c, latch_key);
}

static void cmd_seq(hl_cmd *c, const char *seq, size_t len)
{
    if (!seq)
        return;
    cmd_strn(c, seq, len);
}

void hl_cmd_release(hl_cmd *cmd, hilock_kind kind, const hl_names *n, const char *owner,
                    int64_t lease_ms, const char *latch_key, int64_t latch_ttl_ms)
{
    if (kind == HILOCK_KIND_READ || kind == HILOCK_KIND_WRITE) {
        hl_rw_cmd_release(cmd, kind, n, owner, lease_ms, latch_key, latch_ttl_ms);
        return;
    }
    const char *seq;
    size_t seq_len;
    if (kind == HILOCK_KIND_FAIR) {
        /* one KEY: queue, deadlines, channel base and latch are arguments */
        cmd_script(cmd, HL_SCRIPT_FAIR_UNLOCK, 1);
        cmd_fair_keys(cmd, n);
        cmd_latch(cmd, latch_key, &seq, &seq_len);
        cmd_str(cmd, HL_MSG_UNLOCKED);
        cmd_num(cmd, lease_ms);
        cmd_str(cmd, owner);
        cmd_str(cmd, n->publish);
        cmd_num(cmd, latch_ttl_ms);
        cmd_seq(cmd, seq, seq_len);
        return;
    }
    /* one KEY: the channel and the latch are the first arguments (unlock.lua) */
    cmd_script(cmd, HL_SCRIPT_UNLOCK, 1);
    cmd_str(cmd, n->name);
    cmd_str(cmd, n->channel);
    cmd_latch(cmd, latch_key, &seq, &seq_len);
    cmd_str(cmd, HL_MSG_UNLOCKED);
    cmd_num(cmd, lease_ms);
    cmd_str(cmd, owner);
    cmd_num(cmd, latch_ttl_ms);
    cmd_str(cmd, n->publish);
    cmd_seq(cmd, seq, seq_len);
}

void hl_cmd_force(hl_cmd *cmd, hilock_kind kind, const hl_names *n)
{
    if (kind == HILOCK_KIND_READ || kind == HILOCK_KIND_WRITE) {
        hl_rw_cmd_force(cmd, n);
        return;
    }
    if (kind == HILOCK_KIND_FAIR) {
        cmd_script(cmd, HL_SCRIPT_FAIR_FORCE, 4);
        cmd_fair_keys(cmd, n);
        cmd_str(cmd, HL_MSG_UNLOCKED);
        cmd_str(cmd, n->publish);
        return;
    }
    cmd_script(cmd, HL_SCRIPT_FORCE, 2);
    cmd_str(cmd, n->name);
    cmd_str(cmd, n->channel);
    cmd_str(cmd, HL_MSG_UNLOCKED);
    cmd_str(cmd, n->publish);
}

void hl_cmd_renew(hl_cmd *cmd, const hl_names *n, const char *owner, int64_t lease_ms)
{
    cmd_script(cmd, HL_SCRIPT_RENEW, 1);
    cmd_str(cmd, n->name);
    cmd_num(cmd, lease_ms);
    cmd_str(cmd, owner);
}

void hl_cmd_extend(hl_cmd *cmd, const hl_names *n, const char *owner, int64_t add_ms)
{
    cmd_script(cmd, HL_SCRIPT_EXTEND, 1);
    cmd_str(cmd, n->name);
    cmd_num(cmd, add_ms);
    cmd_str(cmd, owner);
}

int hl_decode_extend(const redisReply *r, int64_t *out)
{
    if (!r || r->type != REDIS_REPLY_INTEGER || r->integer < -1 || r->integer > 1)
        return HILOCK_EPROTO;
    *out = r->integer;
    return 0;
}

void hl_cmd_fair_cancel(hl_cmd *cmd, const hl_names *n, const char *owner,
                        int64_t wait_window_ms)
{
    cmd_script(cmd, HL_SCRIPT_FAIR_CANCEL, 4);
    cmd_fair_keys(cmd, n);
    cmd_str(cmd, owner);
    cmd_num(cmd, wait_window_ms);
    cmd_str(cmd, HL_MSG_UNLOCKED);
    cmd_str(cmd, n->publish);
}

void hl_cmd_exists(hl_cmd *cmd, const hl_names *n)
{
    cmd_start(cmd, -1);
    cmd_str(cmd, "EXISTS");
    cmd_str(cmd, n->name);
}

void hl_cmd_hexists(hl_cmd *cmd, const hl_names *n, const char *owner)
{
    cmd_start(cmd, -1);
    cmd_str(cmd, "HEXISTS");
    cmd_str(cmd, n->name);
    cmd_str(cmd, owner);
}

void hl_cmd_config_append(hl_cmd *cmd)
{
    /* a pattern: CONFIG GET takes one parameter before Redis 7 */
    cmd_start(cmd, -1);
    cmd_str(cmd, "CONFIG");
    cmd_str(cmd, "GET");
    cmd_str(cmd, "append*");
}

void hl_cmd_hget(hl_cmd *cmd, const hl_names *n, const char *owner)
{
    cmd_start(cmd, -1);
    cmd_str(cmd, "HGET");
    cmd_str(cmd, n->name);
    cmd_str(cmd, owner);
}

void hl_cmd_pttl(hl_cmd *cmd, const hl_names *n)
{
    cmd_start(cmd, -1);
    cmd_str(cmd, "PTTL");
    cmd_str(cmd, n->name);
}

void hl_cmd_token(hl_cmd *cmd, const hl_names *n)
{
    cmd_start(cmd, -1);
    cmd_str(cmd, "GET");
    cmd_str(cmd, n->token);
}

/* ---- replies ---- */

int hl_reply_is_noscript(const redisReply *r)
{
    return r && r->type == REDIS_REPLY_ERROR && r->str && strncmp(r->str, "NOSCRIPT", 8) == 0;
}

static int reply_error(const redisReply *r)
{
    if (!r)
        return HILOCK_EPROTO;
    if (r->type != REDIS_REPLY_ERROR)
        return 0;
    /* Script errors embed the command's error: look for WRONGTYPE anywhere. */
    if (r->str && strstr(r->str, "WRONGTYPE"))
        return HILOCK_EWRONGTYPE;
    return HILOCK_EPROTO;
}

static int parse_i64(const char *s, size_t len, int64_t *out)
{
    if (!s || len == 0 || len > 20)
        return -1;
    char buf[24];
    memcpy(buf, s, len);
    buf[len] = 0;
    char *end;
    errno = 0;
    long long v = strtoll(buf, &end, 10);
    if (errno || *end || end == buf)
        return -1;
    *out = v;
    return 0;
}

int hl_decode_int(const redisReply *r, int64_t *out)
{
    int rc = reply_error(r);
    if (rc)
        return rc;
    if (r->type != REDIS_REPLY_INTEGER)
        return HILOCK_EPROTO;
    *out = r->integer;
    return 0;
}

int hl_decode_acquire(const redisReply *r, hl_acquire_result *out)
{
    return hl_decode_acquire_kind(HILOCK_KIND_REENTRANT, r, out);
}

int hl_decode_acquire_kind(hilock_kind kind, const redisReply *r, hl_acquire_result *out)
{
    int rc = reply_error(r);
    if (rc)
        return rc;
    if (r->type != REDIS_REPLY_ARRAY || (r->elements != 2 && r->elements != 3) ||
        !r->element || !r->element[0] || !r->element[1] ||
        r->element[0]->type != REDIS_REPLY_INTEGER || r->element[1]->type != REDIS_REPLY_INTEGER)
        return HILOCK_EPROTO;
    long long flag = r->element[0]->integer, v = r->element[1]->integer;
    /* a fenced lock's grant, and only that, carries a third element: its
     * token (>= 1) */
    long long token = 0;
    int fenced_grant = kind == HILOCK_KIND_FENCED && flag == 1;
    if ((r->elements == 3) != fenced_grant)
        return HILOCK_EPROTO;
    if (fenced_grant) {
        if (!r->element[2] || r->element[2]->type != REDIS_REPLY_INTEGER ||
            r->element[2]->integer < 1)
            return HILOCK_EPROTO;
        token = r->element[2]->integer;
    }
    /* {1, holds >= 1} or {0, the holder's PTTL: -2 gone, -1 no expiry, >= 0} */
    if ((flag != 0 && flag != 1) || (flag == 1 && v < 1) || (flag == 0 && v < -2))
        return HILOCK_EPROTO;
    memset(out, 0, sizeof *out);
    out->acquired = flag == 1;
    out->token = token;
    if (out->acquired)
        out->hold_count = v;
    else /* a hint for how long to wait: no longer than any wait we accept */
        out->ttl_ms = v > HILOCK_MAX_TIME_MS ? HILOCK_MAX_TIME_MS : v;
    return 0;
}

int hl_decode_acquire_settle(const redisReply *r, int *granted)
{
    int rc = reply_error(r);
    if (rc)
        return rc;
    *granted = 0;
    if (r->type == REDIS_REPLY_NIL)
        return 0;
    if (r->type != REDIS_REPLY_STRING && r->type != REDIS_REPLY_STATUS)
        return HILOCK_EPROTO;
    if (r->len == 0)
        return 0; /* the request took nothing (or its latch expired) */
    int64_t holds;
    if (parse_i64(r->str, r->len, &holds) != 0 || holds < 1)
        return HILOCK_EPROTO;
    *granted = 1;
    return 0;
}

int hl_decode_release(const redisReply *r, hl_release_result *out)
{
    int64_t v;
    int rc = hl_decode_int(r, &v);
    if (rc)
        return rc;
    if (v < -1) /* -1 not owner, 0 released, > 0 holds left */
        return HILOCK_EPROTO;
    out->not_owner = v < 0;
    out->remaining = v < 0 ? 0 : v;
    return 0;
}

int hl_decode_hold_count(const redisReply *r, int64_t *out)
{
    int rc = reply_error(r);
    if (rc)
        return rc;
    if (r->type == REDIS_REPLY_NIL) {
        *out = 0;
        return 0;
    }
    int64_t v;
    if (r->type == REDIS_REPLY_INTEGER)
        v = r->integer;
    else if (r->type != REDIS_REPLY_STRING || parse_i64(r->str, r->len, &v) != 0)
        return HILOCK_EPROTO;
    if (v < 0) /* a hold count is never negative */
        return HILOCK_EPROTO;
    *out = v;
    return 0;
}

int hl_decode_token(const redisReply *r, int64_t *out)
{
    /* GET of a counter: nil (never issued) reads 0, like a missing hold */
    return hl_decode_hold_count(r, out);
}

int hl_decode_flag(const redisReply *r, int64_t *out)
{
    int64_t v;
    int rc = hl_decode_int(r, &v);
    if (rc)
        return rc;
    if (v != 0 && v != 1)
        return HILOCK_EPROTO;
    *out = v;
    return 0;
}

int hl_decode_pttl(const redisReply *r, int64_t *out)
{
    int64_t v;
    int rc = hl_decode_int(r, &v);
    if (rc)
        return rc;
    if (v < -2) /* -2 no key, -1 no expiry */
        return HILOCK_EPROTO;
    *out = v;
    return 0;
}

static int elem_is(const redisReply *e, const char *s)
{
    size_t n = strlen(s);
    return e && (e->type == REDIS_REPLY_STRING || e->type == REDIS_REPLY_STATUS) &&
           e->len == n && memcmp(e->str, s, n) == 0;
}

void hl_decode_pubsub(const redisReply *r, hl_ps_event *ev)
{
    memset(ev, 0, sizeof *ev);
    ev->payload = -1;
    ev->value = -1;
#ifdef REDIS_REPLY_PUSH
    if (!r || (r->type != REDIS_REPLY_ARRAY && r->type != REDIS_REPLY_PUSH) || r->elements < 3)
        return;
#else
    if (!r || r->type != REDIS_REPLY_ARRAY || r->elements < 3)
        return;
#endif
    const redisReply *kind = r->element[0], *chan = r->element[1], *data = r->element[2];
    if (!chan || chan->type != REDIS_REPLY_STRING)
        return;
    if (elem_is(kind, "message") || elem_is(kind, "smessage")) {
        ev->type = HL_PS_MESSAGE;
        int64_t v;
        if (data && data->type == REDIS_REPLY_STRING &&
            parse_i64(data->str, data->len, &v) == 0 && (v == 0 || v == 1) &&
            data->len == 1)
            ev->payload = (int)v;
        /* a count (semaphores): canonical digits only, no sign, no leading 0 */
        if (data && data->type == REDIS_REPLY_STRING && data->len >= 1 && data->len <= 18 &&
            (data->len == 1 || data->str[0] != '0') &&
            strspn(data->str, "0123456789") == data->len &&
            parse_i64(data->str, data->len, &v) == 0)
            ev->value = v;
    } else if (elem_is(kind, "subscribe") || elem_is(kind, "ssubscribe")) {
        ev->type = HL_PS_SUBSCRIBE;
    } else if (elem_is(kind, "unsubscribe") || elem_is(kind, "sunsubscribe")) {
        ev->type = HL_PS_UNSUBSCRIBE;
    } else {
        return;
    }
    ev->channel = chan->str;
    ev->channel_len = chan->len;
}

int hl_check_wait(int64_t wait_ms)
{
    return (wait_ms == -1 || (wait_ms >= 0 && wait_ms <= HILOCK_MAX_TIME_MS)) ? 0
                                                                              : HILOCK_EINVAL;
}

int hl_check_lease(int64_t lease_ms)
{
    return (lease_ms == -1 || (lease_ms >= 0 && lease_ms <= HILOCK_MAX_TIME_MS)) ? 0
                                                                                : HILOCK_EINVAL;
}

/* ---- the acquire state machine ---- */

enum { ST_TRY = 1, ST_SUBSCRIBE, ST_WAIT, ST_CANCEL, ST_UNSUB, ST_DONE, ST_SETTLE, ST_UNDO };

/* Shortest pause when the server's hint says "now" but we could not take it. */
#define HL_MIN_PAUSE_MS 10
/* Pause between retries when no subscription could be made. */
#define HL_POLL_MS 50

int hl_acquire_init(hl_acquire *a, hilock_kind kind, const hl_names *n, const char *owner,
                    int64_t wait_ms, int64_t lease_ms, int64_t wait_window_ms, int64_t now_ms)
{
    memset(a, 0, sizeof *a);
    a->kind = kind;
    a->names = n;
    a->owner = owner;
    a->lease_ms = lease_ms;
    a->wait_ms = wait_ms;
    a->window_ms = wait_ms > 0 ? wait_ms : wait_window_ms;
    a->deadline = wait_ms < 0 ? -1 : now_ms + wait_ms;
    a->state = ST_TRY;
    a->result = HILOCK_ETIMEDOUT;
    a->channel = NULL; /* built when a wait first needs it */
    return 0;
}

int hl_latch_arg(char *buf, size_t len, const char *prefix, const char *owner, uint64_t epoch,
                 uint64_t seq)
{
    hl_sb b;
    if (!len)
        return HILOCK_EINVAL;
    hl_sb_init(&b, buf, len);
    hl_sb_str(&b, prefix);
    hl_sb_mem(&b, ":", 1);
    hl_sb_str(&b, owner);
    hl_sb_mem(&b, ":", 1);
    hl_sb_u64(&b, epoch);
    hl_sb_mem(&b, ":", 1);
    hl_sb_u64(&b, seq);
    return hl_sb_end(&b);
}

int hl_acquire_latch_arg(char *buf, size_t len, const hl_names *n, const char *owner,
                         uint64_t epoch, uint64_t seq)
{
    return hl_latch_arg(buf, len, n->acquire_latch_prefix, owner, epoch, seq);
}

int hl_acquire_set_latch(hl_acquire *a, const char *latch_key, int64_t latch_ttl_ms)
{
    free(a->latch);
    free(a->undo_latch);
    a->latch = a->undo_latch = NULL;
    if (!latch_key || latch_ttl_ms <= 0)
        return 0; /* every acquire script keeps an acquire latch (lock.lua) */
    size_t klen;
    const char *seq;
    if (!latch_split(latch_key, &klen, &seq))
        return HILOCK_EINVAL;
    size_t len = strlen(latch_key) + 3;
    a->latch = strdup(latch_key);
    a->undo_latch = malloc(len);
    if (!a->latch || !a->undo_latch) {
        free(a->latch);
        free(a->undo_latch);
        a->latch = a->undo_latch = NULL;
        return HILOCK_ENOMEM;
    }
    memcpy(a->undo_latch, latch_key, len - 3);
    memcpy(a->undo_latch + len - 3, ":u", 3);
    /* at least the lease: a settle sent after the call gave up on the
     * attempt (hl_acquire_resettle, before the owner's next acquire) still
     * learns what it took, for as long as a hold it took can stand */
    a->latch_ttl_ms = latch_ttl_ms > a->lease_ms ? latch_ttl_ms : a->lease_ms;
    return 0;
}

void hl_acquire_set_line(hl_acquire *a, int64_t window_ms)
{
    a->line_window_ms = window_ms > 0 && a->wait_ms == 0 ? window_ms : 0;
}

void hl_acquire_free(hl_acquire *a)
{
    if (!a)
        return;
    free(a->channel);
    free(a->latch);
    free(a->undo_latch);
    a->channel = a->latch = a->undo_latch = NULL;
}

static void finish(hl_acquire *a, int result)
{
    a->result = result;
    a->state = (a->kind == HILOCK_KIND_FAIR && a->queued) ? ST_CANCEL : ST_UNSUB;
}

hl_action hl_acquire_next(hl_acquire *a, int64_t now_ms)
{
    for (;;) {
        switch (a->state) {
        case ST_TRY:
            a->attempts++;
            if (a->kind == HILOCK_KIND_FAIR && a->wait_ms != 0)
                a->queued = 1; /* the script may put us in line */
            hl_cmd_acquire_latched(&a->cmd, a->kind, a->names, a->owner, a->lease_ms,
                                   a->wait_ms != 0         ? a->window_ms
                                   : a->line_window_ms > 0 ? a->line_window_ms
                                                           : -1,
                                   a->latch,
                                   a->latch_ttl_ms);
            return HL_ACT_SEND;
        case ST_SETTLE:
            hl_cmd_acquire_settle(&a->cmd, a->latch, a->latch_ttl_ms);
            if (a->settle_eval)
                hl_cmd_to_eval(&a->cmd);
            return HL_ACT_SEND;
        case ST_UNDO:
            /* its latch outlives any copy of it still on its way (as the
             * settle machine's undo) */
            hl_cmd_release(&a->cmd, a->kind, a->names, a->owner, a->lease_ms, a->undo_latch,
                           a->latch_ttl_ms > HL_SETTLE_MAX_MS ? a->latch_ttl_ms
                                                              : HL_SETTLE_MAX_MS);
            if (a->settle_eval)
                hl_cmd_to_eval(&a->cmd);
            return HL_ACT_SEND;
        case ST_SUBSCRIBE:
            if (!a->channel && !(a->channel = hl_wait_channel(a->kind, a->names, a->owner))) {
                finish(a, HILOCK_ENOMEM);
                continue;
            }
            return HL_ACT_SUBSCRIBE;
        case ST_WAIT: {
            int64_t left = a->deadline < 0 ? -1 : a->deadline - now_ms;
            if (a->deadline >= 0 && left <= 0) {
                finish(a, HILOCK_ETIMEDOUT);
                continue;
            }
            int64_t ttl = a->last_ttl, s;
            if (ttl > 0)
                s = ttl;
            else if (ttl == -1)
                s = -1; /* held without expiry: only a message can help */
            else
                s = HL_MIN_PAUSE_MS;
            if (a->sub_failed && (s < 0 || s > HL_POLL_MS))
                s = HL_POLL_MS;
            /* A fair waiter's hint ("the one ahead is due then") goes stale
             * when grants move every deadline earlier by a window; nobody
             * wakes a waiter behind a dead one. Checking at least every half
             * window lets it take its turn before its own deadline, instead
             * of being dropped from the line as silent. */
            if (a->kind == HILOCK_KIND_FAIR && a->window_ms > 1 &&
                (s < 0 || s > a->window_ms / 2))
                s = a->window_ms / 2;
            if (left >= 0 && (s < 0 || s > left))
                s = left;
            a->sleep_ms = s;
            return HL_ACT_WAIT;
        }
        case ST_CANCEL:
            hl_cmd_fair_cancel(&a->cmd, a->names, a->owner, a->window_ms);
            return HL_ACT_SEND;
        case ST_UNSUB:
            a->state = a->resub ? ST_SUBSCRIBE : ST_DONE;
            a->resub = 0;
            if (a->subscribed) {
                a->subscribed = 0;
                return HL_ACT_UNSUBSCRIBE;
            }
            continue;
        default:
            return HL_ACT_DONE;
        }
    }
}

void hl_acquire_on_reply(hl_acquire *a, const redisReply *r, int64_t now_ms)
{
    if ((a->state == ST_SETTLE || a->state == ST_UNDO) && hl_reply_is_noscript(r) &&
        !a->settle_eval) {
        a->settle_eval = 1; /* the server forgot the script: its body next */
        return;
    }
    if (a->state == ST_SETTLE) {
        int granted = 0;
        if (hl_decode_acquire_settle(r, &granted) == 0 && granted) {
            a->queued = 0; /* the grant took us out of line */
            a->state = ST_UNDO;
            a->settle_tries = 0;
        } else {
            finish(a, a->result);
        }
        return;
    }
    if (a->state == ST_UNDO) {
        finish(a, a->result);
        return;
    }
    if (a->state == ST_CANCEL) {
        a->queued = 0;
        a->state = ST_UNSUB;
        return;
    }
    if (a->state != ST_TRY)
        return;
    hl_acquire_result res;
    int rc = hl_decode_acquire_kind(a->kind, r, &res);
    if (rc) {
        finish(a, rc);
        return;
    }
    if (res.acquired) {
        a->queued = 0; /* the script took us out of line */
        a->hold_count = res.hold_count;
        a->token = res.token;
        finish(a, 0);
        return;
    }
    a->last_ttl = res.ttl_ms;
    if (a->wait_ms == 0 || (a->deadline >= 0 && now_ms >= a->deadline)) {
        finish(a, HILOCK_ETIMEDOUT);
        return;
    }
    a->state = (a->subscribed || a->sub_failed) ? ST_WAIT : ST_SUBSCRIBE;
}

void hl_acquire_on_error(hl_acquire *a, int code, int64_t now_ms)
{
    (void)now_ms;
    if (a->state == ST_SETTLE || a->state == ST_UNDO) {
        /* both are idempotent (settle script, unlock latch): sent again a
         * few times; then best effort, a hold the lost attempt took ends
         * with its lease */
        if (++a->settle_tries >= HL_SETTLE_TRIES) {
            a->unsettled = 1; /* the driver settles it later (hl_acquire_resettle) */
            finish(a, a->result);
        }
        return;
    }
    if (a->state == ST_CANCEL) {
        a->queued = 0;
        /* the entry stays until its deadline (the window: 5 minutes by
         * default), holding up every waiter behind it. With a latch the
         * attempt can be settled later (acquire_settle.lua answers a resend
         * the same) and then leave the line (hl_acquire_resettle): the
         * driver keeps it unsettled */
        if (a->latch)
            a->unsettled = 1;
        a->state = ST_UNSUB;
        return;
    }
    if (a->state == ST_TRY)
        finish(a, code);
}

void hl_acquire_on_reply_lost(hl_acquire *a, int code, int64_t now_ms)
{
    if (a->state == ST_TRY && a->latch) {
        /* the attempt may have run and its reply been lost: settle it */
        a->result = code;
        a->state = ST_SETTLE;
        return;
    }
    hl_acquire_on_error(a, code, now_ms);
}

void hl_acquire_resettle(hl_acquire *a)
{
    a->result = 0;
    /* a fair attempt may have joined the line (a copy that ran before the
     * settle marked its latch): a settle that finds no grant leaves it.
     * Its window is not known here: leaving shifts nobody behind it (their
     * deadlines stay later than they need be; none is evicted early) */
    a->queued = a->kind == HILOCK_KIND_FAIR;
    a->window_ms = 0;
    a->unsettled = 0;
    a->settle_tries = 0;
    a->state = a->latch ? ST_SETTLE : ST_DONE;
}

void hl_acquire_on_resubscribe(hl_acquire *a, int64_t now_ms)
{
    (void)now_ms;
    if (a->state != ST_WAIT)
        return;
    a->resub = 1;
    a->state = ST_UNSUB;
}

void hl_acquire_on_unknown(hl_acquire *a, int code, int64_t now_ms)
{
    (void)now_ms;
    if (a->state != ST_TRY) {
        hl_acquire_on_error(a, code, now_ms);
        return;
    }
    a->queued = 0;
    a->result = code;
    a->state = ST_UNSUB;
}

void hl_acquire_on_subscribed(hl_acquire *a, int ok, int64_t now_ms)
{
    (void)now_ms;
    if (a->state != ST_SUBSCRIBE)
        return;
    a->subscribed = 1;
    a->sub_failed = !ok;
    a->state = ST_TRY; /* retry at once: the unlock may have come before we listened */
}

void hl_acquire_cancel(hl_acquire *a, int64_t now_ms)
{
    (void)now_ms;
    /* Only before the machine has an outcome: a grant already decoded
     * stands (the caller holds the lock and learns it from result 0). A
     * fair waiter that may be in line leaves it (ST_CANCEL) first. */
    if (a->state == ST_TRY || a->state == ST_SUBSCRIBE || a->state == ST_WAIT)
        finish(a, HILOCK_ECANCELED);
}

void hl_acquire_on_wake(hl_acquire *a, int64_t now_ms)
{
    (void)now_ms;
    if (a->state == ST_WAIT)
        a->state = ST_TRY;
}

/* ---- messages every driver shows the same way ---- */

int hl_name_check(const char *name, size_t len, char *err, size_t errlen)
{
    const char *why = NULL;
    char buf[128];
    if (!name || len == 0) {
        snprintf(buf, sizeof buf, "the name is empty; a name is 1 to %d bytes", HL_NAME_MAX);
        why = buf;
    } else if (len > HL_NAME_MAX) {
        snprintf(buf, sizeof buf, "the name is %zu bytes long; a name is 1 to %d bytes", len,
                 HL_NAME_MAX);
        why = buf;
    } else if (memchr(name, 0, len)) {
        why = "the name contains a NUL byte";
    }
    if (!why)
        return 0;
    if (err && errlen)
        snprintf(err, errlen, "%s", why);
    return HILOCK_EINVAL;
}

void hl_msg_no_reply(char *buf, size_t len, int64_t ms, const char *where)
{
    if (buf && len)
        snprintf(buf, len, "no reply within %lld ms from %s", (long long)ms,
                 where && *where ? where : "the server");
}
