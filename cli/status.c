/*
 * hilock status / hilock unlock --force: inspect lock data directly in Redis.
 *
 * The kind is inferred from the data (Redisson's layout):
 *   - key N is a HASH with a "mode" field          -> read-write
 *   - fair queue/timeout companions are non-empty  -> fair
 *   - key N is a HASH of owner -> hold count       -> reentrant
 *   - no key, no queue                             -> none
 *   - anything else (other TYPE, odd fields)       -> unknown
 * A fair lock with nobody waiting is stored exactly like a reentrant lock,
 * so it is reported as reentrant.
 */
#include "cli.h"

#include <getopt.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hilock.h"
#include "proto.h"

const char *kind_name(lock_kind_view k)
{
    switch (k) {
    case KIND_NONE: return "none";
    case KIND_REENTRANT: return "reentrant";
    case KIND_FAIR: return "fair";
    case KIND_READWRITE: return "read-write";
    default: return "unknown";
    }
}

void lock_view_free(lock_view *v)
{
    for (size_t i = 0; i < v->nholders; i++)
        free(v->holders[i].owner);
    for (size_t i = 0; i < v->nqueue; i++)
        free(v->queue[i].owner);
    free(v->holders);
    free(v->queue);
    v->holders = NULL;
    v->queue = NULL;
    v->nholders = v->nqueue = 0;
}

static char *dupn(const char *s, size_t n)
{
    char *p = malloc(n + 1);
    if (p) {
        memcpy(p, s, n);
        p[n] = 0;
    }
    return p;
}

/* Strict decimal int64 from a reply string; -1 on failure. */
static int parse_i64(const char *s, size_t n, int64_t *out)
{
    if (n == 0 || n > 20)
        return -1;
    char buf[24];
    memcpy(buf, s, n);
    buf[n] = 0;
    char *end = NULL;
    long long v = strtoll(buf, &end, 10);
    if (*end)
        return -1;
    *out = (int64_t)v;
    return 0;
}

/* Score strings from ZRANGE WITHSCORES may be "1.7e12" in theory. */
static int64_t parse_score(const char *s)
{
    char *end = NULL;
    double d = strtod(s, &end);
    if (end == s)
        return -1;
    return (int64_t)d;
}

enum { R_TYPE, R_PTTL, R_HGETALL, R_LRANGE, R_ZRANGE, R_TIME, R_N };

int inspect_lock(redisContext *rc, const char *name, lock_view *v)
{
    hl_names n;
    memset(v, 0, sizeof *v);
    v->name = name;
    v->pttl_ms = -2;
    if (hl_names_init(&n, name) != 0) {
        cli_err("out of memory");
        return HILOCK_ENOMEM;
    }
    redisAppendCommand(rc, "TYPE %s", n.name);
    redisAppendCommand(rc, "PTTL %s", n.name);
    redisAppendCommand(rc, "HGETALL %s", n.name);
    redisAppendCommand(rc, "LRANGE %s 0 -1", n.queue);
    redisAppendCommand(rc, "ZRANGE %s 0 -1 WITHSCORES", n.timeout);
    redisAppendCommand(rc, "TIME");
    redisReply *r[R_N] = {0};
    int rcode = 0;
    for (int i = 0; i < R_N; i++) {
        void *p = NULL;
        if (redisGetReply(rc, &p) != REDIS_OK) {
            cli_err("server connection failed: %s", rc->errstr[0] ? rc->errstr : "I/O error");
            rcode = HILOCK_ECONN;
            break;
        }
        r[i] = p;
    }
    if (rcode)
        goto out;

    /* server time */
    if (r[R_TIME]->type == REDIS_REPLY_ARRAY && r[R_TIME]->elements == 2 &&
        r[R_TIME]->element[0]->type == REDIS_REPLY_STRING &&
        r[R_TIME]->element[1]->type == REDIS_REPLY_STRING) {
        int64_t sec = 0, usec = 0;
        parse_i64(r[R_TIME]->element[0]->str, r[R_TIME]->element[0]->len, &sec);
        parse_i64(r[R_TIME]->element[1]->str, r[R_TIME]->element[1]->len, &usec);
        v->server_time_ms = sec * 1000 + usec / 1000;
    }
    if (r[R_TYPE]->type == REDIS_REPLY_STATUS || r[R_TYPE]->type == REDIS_REPLY_STRING) {
        snprintf(v->key_type, sizeof v->key_type, "%s", r[R_TYPE]->str);
    } else {
        cli_err("unexpected reply to TYPE: %s",
                r[R_TYPE]->type == REDIS_REPLY_ERROR ? r[R_TYPE]->str : "bad shape");
        rcode = HILOCK_EPROTO;
        goto out;
    }
    v->locked = strcmp(v->key_type, "none") != 0;
    if (r[R_PTTL]->type == REDIS_REPLY_INTEGER)
        v->pttl_ms = r[R_PTTL]->integer;

    int odd = 0;
    if (!strcmp(v->key_type, "hash") && r[R_HGETALL]->type == REDIS_REPLY_ARRAY) {
        redisReply *h = r[R_HGETALL];
        size_t pairs = h->elements / 2;
        v->holders = calloc(pairs ? pairs : 1, sizeof *v->holders);
        if (!v->holders) {
            rcode = HILOCK_ENOMEM;
            goto out;
        }
        for (size_t i = 0; i + 1 < h->elements; i += 2) {
            redisReply *k = h->element[i], *val = h->element[i + 1];
            if (k->type != REDIS_REPLY_STRING || val->type != REDIS_REPLY_STRING) {
                odd = 1;
                continue;
            }
            if (k->len == 4 && !memcmp(k->str, "mode", 4)) {
                snprintf(v->mode, sizeof v->mode, "%.*s", (int)val->len, val->str);
                continue;
            }
            holder_view *hv = &v->holders[v->nholders];
            hv->owner = dupn(k->str, k->len);
            if (!hv->owner) {
                rcode = HILOCK_ENOMEM;
                goto out;
            }
            if (parse_i64(val->str, val->len, &hv->holds) != 0 || hv->holds < 0) {
                hv->holds = -1;
                odd = 1;
            }
            v->nholders++;
        }
    }
    /* fair queue: list order, deadlines from the zset */
    redisReply *q = r[R_LRANGE], *z = r[R_ZRANGE];
    int queue_bad = q->type == REDIS_REPLY_ERROR || z->type == REDIS_REPLY_ERROR;
    if (q->type == REDIS_REPLY_ARRAY && q->elements > 0) {
        v->queue = calloc(q->elements, sizeof *v->queue);
        if (!v->queue) {
            rcode = HILOCK_ENOMEM;
            goto out;
        }
        for (size_t i = 0; i < q->elements; i++) {
            redisReply *e = q->element[i];
            if (e->type != REDIS_REPLY_STRING)
                continue;
            waiter_view *w = &v->queue[v->nqueue++];
            w->owner = dupn(e->str, e->len);
            if (!w->owner) {
                rcode = HILOCK_ENOMEM;
                goto out;
            }
            w->deadline_ms = -1;
            if (z->type == REDIS_REPLY_ARRAY) {
                for (size_t j = 0; j + 1 < z->elements; j += 2) {
                    redisReply *m = z->element[j], *s = z->element[j + 1];
                    if (m->type == REDIS_REPLY_STRING && s->type == REDIS_REPLY_STRING &&
                        m->len == e->len && !memcmp(m->str, e->str, e->len)) {
                        w->deadline_ms = parse_score(s->str);
                        break;
                    }
                }
            }
        }
    }
    int zset_nonempty = z->type == REDIS_REPLY_ARRAY && z->elements > 0;

    if (!strcmp(v->key_type, "none")) {
        v->kind = (v->nqueue || zset_nonempty) ? KIND_FAIR : KIND_NONE;
    } else if (strcmp(v->key_type, "hash") != 0) {
        v->kind = KIND_UNKNOWN;
        snprintf(v->note, sizeof v->note, "the key holds a %s, not a lock", v->key_type);
    } else if (v->mode[0]) {
        v->kind = KIND_READWRITE;
    } else if (odd) {
        v->kind = KIND_UNKNOWN;
        snprintf(v->note, sizeof v->note, "the hash has fields that are not hold counts");
    } else if (v->nqueue || zset_nonempty) {
        v->kind = KIND_FAIR;
    } else {
        v->kind = KIND_REENTRANT;
    }
    if (queue_bad && !v->note[0])
        snprintf(v->note, sizeof v->note, "fair queue keys hold unexpected types");
out:
    for (int i = 0; i < R_N; i++)
        if (r[i])
            freeReplyObject(r[i]);
    hl_names_free(&n);
    if (rcode)
        lock_view_free(v);
    return rcode;
}

static void print_duration(FILE *f, int64_t ms)
{
    if (ms < 0)
        fprintf(f, "-");
    if (ms < 0)
        ms = -ms;
    if (ms < 10000)
        fprintf(f, "%" PRId64 ".%03" PRId64 " s", ms / 1000, ms % 1000);
    else if (ms < 3600 * 1000)
        fprintf(f, "%" PRId64 ".%01" PRId64 " s", ms / 1000, (ms % 1000) / 100);
    else
        fprintf(f, "%" PRId64 "h%02" PRId64 "m", ms / 3600000, (ms / 60000) % 60);
}

void print_lock_human(FILE *f, const lock_view *v)
{
    fputs("lock ", f);
    human_string(f, v->name, strlen(v->name));
    fputs(": ", f);
    if (v->kind == KIND_NONE) {
        fputs("not locked\n", f);
        return;
    }
    fprintf(f, "%s, %s", kind_name(v->kind), v->locked ? "locked" : "not locked");
    if (v->kind == KIND_READWRITE && v->mode[0])
        fprintf(f, " (%s mode)", v->mode);
    if (v->locked) {
        if (v->pttl_ms == -1) {
            fputs(", no expiry", f);
        } else if (v->pttl_ms >= 0) {
            fputs(", lease ", f);
            print_duration(f, v->pttl_ms);
            fputs(" left", f);
        }
    }
    fputc('\n', f);
    if (v->note[0])
        fprintf(f, "  note: %s\n", v->note);
    for (size_t i = 0; i < v->nholders; i++) {
        fputs("  holder ", f);
        human_string(f, v->holders[i].owner, strlen(v->holders[i].owner));
        if (v->holders[i].holds >= 0)
            fprintf(f, "  holds %" PRId64 "\n", v->holders[i].holds);
        else
            fputs("  holds ?\n", f);
    }
    for (size_t i = 0; i < v->nqueue; i++) {
        fprintf(f, "  %s %2zu. ", i == 0 ? "queue " : "      ", i + 1);
        human_string(f, v->queue[i].owner, strlen(v->queue[i].owner));
        if (v->queue[i].deadline_ms >= 0 && v->server_time_ms > 0) {
            fputs("  deadline in ", f);
            print_duration(f, v->queue[i].deadline_ms - v->server_time_ms);
        } else {
            fputs("  no deadline", f);
        }
        fputc('\n', f);
    }
}

/* Stable JSON schema (version 1), see docs/cli.md. */
void print_lock_json(FILE *f, const lock_view *v)
{
    fputs("{\"name\":", f);
    json_string(f, v->name, strlen(v->name));
    fprintf(f, ",\"kind\":\"%s\",\"locked\":%s,\"key_type\":", kind_name(v->kind),
            v->locked ? "true" : "false");
    json_string(f, v->key_type, strlen(v->key_type));
    fputs(",\"mode\":", f);
    if (v->mode[0])
        json_string(f, v->mode, strlen(v->mode));
    else
        fputs("null", f);
    fputs(",\"lease_ms\":", f);
    if (v->locked && v->pttl_ms >= -1)
        fprintf(f, "%" PRId64, v->pttl_ms);
    else
        fputs("null", f);
    fputs(",\"holders\":[", f);
    for (size_t i = 0; i < v->nholders; i++) {
        const holder_view *h = &v->holders[i];
        size_t ol = strlen(h->owner);
        const char *role = "exclusive";
        if (v->kind == KIND_READWRITE)
            role = (ol > 6 && !strcmp(h->owner + ol - 6, ":write")) ? "write" : "read";
        fputs(i ? ",{\"owner\":" : "{\"owner\":", f);
        json_string(f, h->owner, ol);
        fputs(",\"holds\":", f);
        if (h->holds >= 0)
            fprintf(f, "%" PRId64, h->holds);
        else
            fputs("null", f);
        fprintf(f, ",\"role\":\"%s\"}", role);
    }
    fputs("],\"queue\":[", f);
    for (size_t i = 0; i < v->nqueue; i++) {
        const waiter_view *w = &v->queue[i];
        fprintf(f, "%s{\"position\":%zu,\"owner\":", i ? "," : "", i + 1);
        json_string(f, w->owner, strlen(w->owner));
        if (w->deadline_ms >= 0)
            fprintf(f, ",\"deadline_ms\":%" PRId64 ",\"deadline_in_ms\":%" PRId64 "}",
                    w->deadline_ms, w->deadline_ms - v->server_time_ms);
        else
            fputs(",\"deadline_ms\":null,\"deadline_in_ms\":null}", f);
    }
    fprintf(f, "],\"server_time_ms\":%" PRId64 ",\"note\":", v->server_time_ms);
    if (v->note[0])
        json_string(f, v->note, strlen(v->note));
    else
        fputs("null", f);
    fputc('}', f);
}

static void status_usage(FILE *f)
{
    fputs("Usage: hilock status [--url URL] [--json] NAME...\n"
          "\n"
          "Show each lock's kind (reentrant, fair, read-write, unknown, or none when\n"
          "there is no lock data), holders with hold counts, remaining lease and the\n"
          "fair queue with each waiter's deadline. Works for locks taken by Redisson\n"
          "or any hilock binding.\n"
          "\n"
          "  --url URL   server (default: $HILOCK_URL, else " DEFAULT_URL ")\n"
          CLI_TLS_USAGE
          "  --json      one JSON document: {\"version\":1,\"locks\":[...]}\n"
          "  -h, --help  this help\n"
          "\n"
          "Exit status: 0 ok, 2 usage error, 69 server unreachable or error.\n",
          f);
}

int cmd_status(int argc, char **argv)
{
    static const struct option opts[] = {{"url", required_argument, 0, 'u'},
                                         {"json", no_argument, 0, 'j'},
                                         {"help", no_argument, 0, 'h'},
                                         CLI_TLS_OPTIONS,
                                         {0, 0, 0, 0}};
    const char *url = NULL;
    int json = 0, c;
    opterr = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, "+h", opts, NULL)) != -1) {
        int t = cli_tls_option(c, optarg);
        if (t < 0)
            return EXIT_USAGE;
        if (t)
            continue;
        switch (c) {
        case 'u': url = optarg; break;
        case 'j': json = 1; break;
        case 'h': status_usage(stdout); return 0;
        default:
            cli_err("status: bad option '%s' (try: hilock status --help)", argv[optind - 1]);
            return EXIT_USAGE;
        }
    }
    if (optind >= argc) {
        cli_err("status: missing lock NAME (try: hilock status --help)");
        return EXIT_USAGE;
    }
    for (int i = optind; i < argc; i++) {
        if (!argv[i][0]) {
            cli_err("status: lock name must not be empty");
            return EXIT_USAGE;
        }
    }
    int code = 0;
    /* one connection per name: on a cluster each lives on its slot's master */
    redisContext *rc = NULL;
    int status = 0;
    if (json)
        fputs("{\"version\":1,\"locks\":[", stdout);
    for (int i = optind; i < argc; i++) {
        lock_view v;
        if (rc)
            redisFree(rc);
        rc = cli_connect_key(cli_url(url), argv[i], &code);
        if (!rc) {
            status = code == HILOCK_EINVAL ? EXIT_USAGE : EXIT_UNAVAILABLE;
            break;
        }
        if (inspect_lock(rc, argv[i], &v) != 0) {
            status = EXIT_UNAVAILABLE;
            break;
        }
        if (json) {
            if (i > optind)
                fputc(',', stdout);
            print_lock_json(stdout, &v);
        } else {
            print_lock_human(stdout, &v);
        }
        lock_view_free(&v);
    }
    if (json && status == 0)
        fputs("]}\n", stdout);
    else if (json)
        fputc('\n', stdout);
    if (rc)
        redisFree(rc);
    if (fflush(stdout) != 0 && status == 0)
        status = 1;
    return status;
}

/* ---- unlock --force ---------------------------------------------------- */

static void unlock_usage(FILE *f)
{
    fputs("Usage: hilock unlock --force [--yes] [--url URL] NAME\n"
          "\n"
          "Delete the lock NAME whoever holds it and wake its waiters (the next fair\n"
          "waiter, or every waiter of a read-write lock). The holder is not told: its\n"
          "watchdog finds the lock gone at its next renewal (hilock run then stops its\n"
          "command). Asks for confirmation when stdin is a terminal.\n"
          "\n"
          "  --force     required: a lock is normally released by its holder\n"
          "  -y, --yes   do not ask for confirmation\n"
          "  --url URL   server (default: $HILOCK_URL, else " DEFAULT_URL ")\n"
          CLI_TLS_USAGE
          "  -h, --help  this help\n"
          "\n"
          "Exit status: 0 unlocked or nothing to unlock, 1 declined or the key is not\n"
          "a lock, 2 usage error, 69 server unreachable or error.\n",
          f);
}

/* Read-write locks are not modelled by the library: delete and tell every
 * waiter on the read-write channel ("1" = wake all). */
static const char RW_FORCE_SCRIPT[] =
    "if redis.call('type', KEYS[1])['ok'] ~= 'hash' then return 0 end\n"
    "redis.call('del', KEYS[1])\n"
    "redis.call('publish', KEYS[2], ARGV[1])\n"
    "return 1\n";

static int force_readwrite(redisContext *rc, const char *name, int *deleted)
{
    char *chan = hl_companion("redisson_rwlock", name);
    if (!chan) {
        cli_err("out of memory");
        return HILOCK_ENOMEM;
    }
    redisReply *r = redisCommand(rc, "EVAL %s 2 %s %s 1", RW_FORCE_SCRIPT, name, chan);
    free(chan);
    if (!r) {
        cli_err("server connection failed: %s", rc->errstr[0] ? rc->errstr : "I/O error");
        return HILOCK_ECONN;
    }
    int code = 0;
    if (r->type == REDIS_REPLY_INTEGER) {
        *deleted = r->integer == 1;
    } else {
        cli_err("force unlock refused: %s", r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
        code = HILOCK_EPROTO;
    }
    freeReplyObject(r);
    return code;
}

static void say_lock(const char *name, const char *what)
{
    fputs("lock ", stdout);
    human_string(stdout, name, strlen(name));
    fputs(what, stdout);
}

static int confirm(const lock_view *v)
{
    fputs("Force-unlock ", stderr);
    human_string(stderr, v->name, strlen(v->name));
    if (v->nholders) {
        fputs(" held by ", stderr);
        for (size_t i = 0; i < v->nholders; i++) {
            if (i)
                fputs(", ", stderr);
            human_string(stderr, v->holders[i].owner, strlen(v->holders[i].owner));
        }
    }
    if (v->nqueue)
        fprintf(stderr, " (%zu waiting)", v->nqueue);
    fputs("? [y/N] ", stderr);
    fflush(stderr);
    char line[64];
    if (!fgets(line, sizeof line, stdin))
        return 0;
    return line[0] == 'y' || line[0] == 'Y';
}

int cmd_unlock(int argc, char **argv)
{
    static const struct option opts[] = {{"url", required_argument, 0, 'u'},
                                         {"force", no_argument, 0, 'f'},
                                         {"yes", no_argument, 0, 'y'},
                                         {"help", no_argument, 0, 'h'},
                                         CLI_TLS_OPTIONS,
                                         {0, 0, 0, 0}};
    const char *url = NULL;
    int force = 0, yes = 0, c;
    opterr = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, "+hy", opts, NULL)) != -1) {
        int t = cli_tls_option(c, optarg);
        if (t < 0)
            return EXIT_USAGE;
        if (t)
            continue;
        switch (c) {
        case 'u': url = optarg; break;
        case 'f': force = 1; break;
        case 'y': yes = 1; break;
        case 'h': unlock_usage(stdout); return 0;
        default:
            cli_err("unlock: bad option '%s' (try: hilock unlock --help)", argv[optind - 1]);
            return EXIT_USAGE;
        }
    }
    if (optind != argc - 1 || !argv[optind][0]) {
        cli_err("unlock: expected exactly one lock NAME (try: hilock unlock --help)");
        return EXIT_USAGE;
    }
    if (!force) {
        cli_err("unlock: only --force is supported (a lock is released by its holder)");
        return EXIT_USAGE;
    }
    const char *name = argv[optind];
    url = cli_url(url);
    int code = 0;
    redisContext *rc = cli_connect_key(url, name, &code);
    if (!rc)
        return code == HILOCK_EINVAL ? EXIT_USAGE : EXIT_UNAVAILABLE;
    lock_view v;
    if (inspect_lock(rc, name, &v) != 0) {
        redisFree(rc);
        return EXIT_UNAVAILABLE;
    }
    int status = 0;
    if (v.kind == KIND_NONE) {
        say_lock(name, " was not locked\n");
        goto done;
    }
    if (v.kind == KIND_UNKNOWN) {
        cli_err("%s: %s; not touching it", name, v.note);
        status = 1;
        goto done;
    }
    if (!yes && isatty(STDIN_FILENO) && !confirm(&v)) {
        cli_err("not unlocked");
        status = 1;
        goto done;
    }
    int deleted = 0;
    if (v.kind == KIND_READWRITE) {
        if (force_readwrite(rc, name, &deleted) != 0) {
            status = EXIT_UNAVAILABLE;
            goto done;
        }
    } else {
        hilock_client *cl = NULL;
        hilock_lock *l = NULL;
        char err[256] = "";
        int r = hilock_client_open(&cl, url, NULL, err, sizeof err);
        if (r == 0)
            r = v.kind == KIND_FAIR ? hilock_fair_lock_new(&l, cl, name)
                                    : hilock_lock_new(&l, cl, name);
        if (r == 0) {
            r = hilock_lock_force_unlock(&deleted, l);
            if (r != 0)
                snprintf(err, sizeof err, "%s", hilock_lock_errmsg(l));
        }
        hilock_lock_free(l);
        hilock_client_close(cl);
        if (r != 0) {
            cli_err("force unlock of %s failed: %s%s%s", name, hilock_strerror(r),
                    err[0] ? ": " : "", err);
            status = r == HILOCK_EWRONGTYPE ? 1 : EXIT_UNAVAILABLE;
            goto done;
        }
    }
    if (deleted)
        say_lock(name, " force-unlocked\n");
    else
        say_lock(name, v.nqueue ? " was not locked (woke the next waiter)\n" : " was not locked\n");
done:
    lock_view_free(&v);
    redisFree(rc);
    return status;
}
