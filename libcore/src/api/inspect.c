/* hilock_inspect: the API over the inspection script (proto_inspect.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"


static int inspect_fail(hilock_client *c, int rc, const char *msg)
{
    const char *m = msg && *msg ? msg : hilock_strerror(rc);
    hl_client_set_err(c, m);
    hl_err_note(c, m);
    return rc;
}

int hilock_inspect(hilock_lock_info **out, hilock_client *c, const char *name)
{
    if (!out)
        return HILOCK_EINVAL;
    *out = NULL;
    if (!c)
        return HILOCK_EINVAL;
    char err[HL_ERRMSG_MAX] = "";
    if (hl_name_check(name, name ? strlen(name) : 0, err, sizeof err))
        return inspect_fail(c, HILOCK_EINVAL, err);
    int rc = hl_client_check(c, err);
    if (rc)
        return inspect_fail(c, rc, err);
    hl_names n;
    if ((rc = hl_names_init(&n, name)) != 0)
        return inspect_fail(c, rc, NULL);
    if (c->t.ep.cluster && !hl_names_one_slot(&n)) {
        hl_names_free(&n);
        return inspect_fail(c, HILOCK_EINVAL,
                            "lock name has an empty or unclosed hash tag ('{}', 'x{y'): "
                            "on a cluster its companion keys are in another slot");
    }
    hl_sem_names sn;
    if ((rc = hl_sem_names_init(&sn, HL_SEM_PERMIT, name)) != 0) {
        hl_names_free(&n);
        return inspect_fail(c, rc, NULL);
    }
    hl_sem_names sem, latch;
    int have = hl_sem_names_init(&sem, HL_SEM_SEMAPHORE, name) == 0;
    if (hl_sem_names_init(&latch, HL_SEM_LATCH, name) != 0) {
        if (have)
            hl_sem_names_free(&sem);
        have = 0;
    }
    if (!have) {
        hl_sem_names_free(&sn);
        hl_names_free(&n);
        return inspect_fail(c, HILOCK_ENOMEM, NULL);
    }
    hl_cmd cmd;
    hl_cmd_inspect_waiting(&cmd, &n, sn.timeout, c->t.ep.cluster, sem.channel, latch.channel);
    redisReply *reply = NULL;
    rc = hl_exec(&c->t, &cmd, &reply, 0, err);
    if (rc == 0) {
        rc = hl_decode_inspect(reply, name, out, err);
        freeReplyObject(reply);
    }
    hl_sem_names_free(&latch);
    hl_sem_names_free(&sem);
    hl_sem_names_free(&sn);
    hl_names_free(&n);
    if (rc)
        return inspect_fail(c, rc, err);
    hl_err_forget(c);
    return 0;
}

/* ---- hilock_scan_names ---- */

typedef struct {
    char **v;
    size_t n, cap, max;
} name_list;

static int add_name(void *arg, const char *key, size_t len)
{
    name_list *l = arg;
    if (l->n >= l->max)
        return 0; /* enough: the rest is not kept */
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 64;
        char **v = realloc(l->v, cap * sizeof *v);
        if (!v)
            return 1;
        l->v = v;
        l->cap = cap;
    }
    if (!(l->v[l->n] = strndup(key, len)))
        return 1;
    l->n++;
    return 0;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* SCAN the node that serves route_key to the end, names into l. */
static int scan_node(hilock_client *c, const char *route_key, const char *pattern, name_list *l,
                     char *err)
{
    char *cursor = strdup("0");
    if (!cursor)
        return HILOCK_ENOMEM;
    int rc = 0;
    do {
        hl_cmd cmd;
        hl_cmd_scan(&cmd, route_key, cursor, pattern);
        redisReply *reply = NULL;
        if ((rc = hl_exec(&c->t, &cmd, &reply, 0, err)) != 0)
            break;
        char *next = NULL;
        rc = hl_decode_scan(reply, &next, add_name, l, err);
        freeReplyObject(reply);
        free(cursor);
        cursor = next;
    } while (!rc && strcmp(cursor, "0") != 0 && l->n < l->max);
    free(cursor);
    return rc;
}

int hilock_scan_names(char ***out, size_t *n, hilock_client *c, const char *pattern, size_t max)
{
    if (!out || !n)
        return HILOCK_EINVAL;
    *out = NULL;
    *n = 0;
    if (!c)
        return HILOCK_EINVAL;
    if (!pattern || !*pattern)
        return inspect_fail(c, HILOCK_EINVAL, "scan: the pattern is empty");
    char err[HL_ERRMSG_MAX] = "";
    int rc = hl_client_check(c, err);
    if (rc)
        return inspect_fail(c, rc, err);
    name_list l = {NULL, 0, 0, max ? max : 10000};
    if (!c->t.ep.cluster) {
        rc = scan_node(c, "hilock:scan", pattern, &l, err);
    } else {
        /* every master once, through a key of one of its slots */
        if ((rc = hl_cluster_refresh(&c->t, err)) == 0) {
            int seen[HL_MAX_NODES] = {0};
            for (unsigned k = 0; !rc && k < 100000 && l.n < l.max; k++) {
                char key[32];
                snprintf(key, sizeof key, "hilock:scan:{%u}", k);
                int idx = c->t.slot_node[hl_key_slot(key, strlen(key))];
                if (idx < 0 || idx >= HL_MAX_NODES || seen[idx])
                    continue;
                seen[idx] = 1;
                rc = scan_node(c, key, pattern, &l, err);
            }
        }
    }
    if (rc) {
        hilock_names_free(l.v, l.n);
        return inspect_fail(c, rc, err[0] ? err : NULL);
    }
    if (l.n > 1) { /* SCAN may give a key twice */
        qsort(l.v, l.n, sizeof *l.v, by_name);
        size_t w = 1;
        for (size_t i = 1; i < l.n; i++) {
            if (strcmp(l.v[i], l.v[w - 1]) == 0)
                free(l.v[i]);
            else
                l.v[w++] = l.v[i];
        }
        l.n = w;
    }
    *out = l.v;
    *n = l.n;
    hl_err_forget(c);
    return 0;
}

void hilock_names_free(char **names, size_t n)
{
    if (!names)
        return;
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
}

void hilock_lock_info_free(hilock_lock_info *info)
{
    hl_info_free(info);
}

const char *hilock_info_kind_name(hilock_info_kind kind)
{
    return hl_info_kind_name(kind);
}
