/* One safety client process on the non-blocking C API (hilock_async): the
 * same loop and the same JSON-lines history as worker.c (README.md here),
 * on one thread whose loop this program owns: poll() over the descriptors
 * and the timer that hilock_async_loop's watch and timer ask for. Waiting
 * between writes is running that loop, so the watchdog renews from it.
 *
 *   worker-async URL LOCK FENCE_PORT PROC_ID SEED SECONDS LOG KEY=VALUE...
 *
 * Given several URLs joined by a vertical bar, a Redlock over them
 * (hilock_async_multilock_*), as worker.c. */
#define _POSIX_C_SOURCE 200809L
#include <poll.h>

#include "worker_common.h"

enum { MAXFD = 64 };

/* the host's loop: what hilock_async asked to be watched, and its timer */
typedef struct {
    struct pollfd fds[MAXFD];
    int nfds;
    int64_t timer_at; /* now_ns() deadline, -1: none */
} ploop;

static int lp_watch(void *data, int fd, int events) {
    ploop *lp = data;
    short ev = (short)(((events & HILOCK_IO_READ) ? POLLIN : 0) |
                       ((events & HILOCK_IO_WRITE) ? POLLOUT : 0));
    for (int i = 0; i < lp->nfds; i++) {
        if (lp->fds[i].fd != fd) continue;
        if (events == 0) lp->fds[i] = lp->fds[--lp->nfds];
        else lp->fds[i].events = ev;
        return 0;
    }
    if (events == 0) return 0;
    if (lp->nfds == MAXFD) return -1;
    lp->fds[lp->nfds].fd = fd;
    lp->fds[lp->nfds].events = ev;
    lp->fds[lp->nfds].revents = 0;
    lp->nfds++;
    return 0;
}

static int lp_timer(void *data, int64_t ms) {
    ploop *lp = data;
    lp->timer_at = ms < 0 ? -1 : now_ns() + ms * 1000000;
    return 0;
}

/* one turn of the loop, waiting until `until` (now_ns) at the latest */
static void lp_turn(ploop *lp, hilock_async *a, int64_t until) {
    int64_t now = now_ns();
    int64_t due = lp->timer_at >= 0 && lp->timer_at < until ? lp->timer_at : until;
    int64_t ms = due > now ? (due - now + 999999) / 1000000 : 0;
    struct pollfd fds[MAXFD];
    int n = lp->nfds;
    memcpy(fds, lp->fds, sizeof fds[0] * (size_t)n);
    int r = poll(fds, (nfds_t)n, (int)(ms > 1000 ? 1000 : ms));
    for (int i = 0; r > 0 && i < n; i++) {
        if (!fds[i].revents) continue;
        /* a callback run for an earlier descriptor may have stopped
         * watching this one (its connection closed) */
        int still = 0;
        for (int k = 0; k < lp->nfds; k++) still |= lp->fds[k].fd == fds[i].fd;
        if (!still) continue;
        int ev = 0;
        if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) ev |= HILOCK_IO_READ;
        if (fds[i].revents & (POLLOUT | POLLHUP | POLLERR)) ev |= HILOCK_IO_WRITE;
        hilock_async_on_io(a, fds[i].fd, ev);
    }
    if (lp->timer_at >= 0 && now_ns() >= lp->timer_at) {
        lp->timer_at = -1;
        hilock_async_on_timer(a);
    }
}

/* run the loop until *done or until `until` */
static void lp_run(ploop *lp, hilock_async *a, const int *done, int64_t until) {
    while (!(done && *done) && now_ns() < until) lp_turn(lp, a, until);
}

typedef struct {
    int done, rc;
    int64_t value;
    char err[400];
} result;

static void on_done(hilock_async *a, int rc, int64_t value, void *payload) {
    result *r = payload;
    r->done = 1;
    r->rc = rc;
    r->value = value;
    if (rc != 0) snprintf(r->err, sizeof r->err, "%s", hilock_async_errmsg(a));
}

typedef struct {
    wlog *lg;
    int lost; /* the current hold was reported */
} lost_state;

static void on_lost(hilock_async *a, hilock_lock *l, uint64_t tid, void *payload) {
    (void)l;
    lost_state *ls = payload;
    ls->lost = 1;
    int doubt = strstr(hilock_async_errmsg(a), "doubt") != NULL;
    log_line(ls->lg,
             "{\"ev\":\"report\",\"op\":\"lost\",\"t\":%" PRId64 ",\"doubt\":%s,\"tid\":%" PRIu64,
             now_ns(), doubt ? "true" : "false", tid);
}

static void on_lost_ml(hilock_async *a, hilock_multilock *m, uint64_t tid, void *payload) {
    (void)m;
    lost_state *ls = payload;
    ls->lost = 1;
    int doubt = strstr(hilock_async_errmsg(a), "doubt") != NULL;
    log_line(ls->lg,
             "{\"ev\":\"report\",\"op\":\"lost\",\"t\":%" PRId64 ",\"doubt\":%s,\"tid\":%" PRIu64,
             now_ns(), doubt ? "true" : "false", tid);
}

int main(int argc, char **argv) {
    worker wk;
    int rc = worker_open(&wk, argc, argv, "worker-async", "async");
    if (rc != 0) return rc;
    wlog *lg = &wk.lg;
    const wopts o = wk.o;
    hilock_lock *l = wk.ls[0];
    hilock_multilock *ml = wk.ml;

    ploop lp = {.nfds = 0, .timer_at = -1};
    hilock_async_loop loop = {HILOCK_ASYNC_LOOP_VERSION, &lp, lp_watch, lp_timer};
    hilock_async *a = NULL;
    if (hilock_async_new(&a, &loop) != 0) return 1;
    lost_state lost = {lg, 0};
    if (ml) hilock_async_set_multilock_lost_callback(a, on_lost_ml, &lost);
    else hilock_async_set_lost_callback(a, on_lost, &lost);
    const uint64_t tid = 1; /* one owner: this process's only thread */
    log_line(lg, "{\"ev\":\"ready\",\"t\":%" PRId64, now_ns());
    int64_t deadline = now_ns() + (int64_t)(wk.secs * 1e9);
    int grants = 0;
    int64_t first_token = 0;
    char extra[520];
    while (now_ns() < deadline) {
        snprintf(extra, sizeof extra, ",\"lease_ms\":%" PRId64, o.lease_ms);
        int oid = log_inv(lg, "acq", extra);
        int64_t acq_inv = now_ns();
        result r = {0};
        lost.lost = 0;
        rc = ml ? hilock_async_multilock_acquire(a, ml, tid, o.wait_ms, o.lease_ms, on_done, &r)
                : hilock_async_acquire(a, l, tid, o.wait_ms, o.lease_ms, on_done, &r);
        if (rc == 0) {
            lp_run(&lp, a, &r.done, INT64_MAX);
            rc = r.rc;
        } else {
            snprintf(r.err, sizeof r.err, "%s", hilock_async_errmsg(a));
        }
        if (rc == HILOCK_ETIMEDOUT) {
            log_ret(lg, "acq", oid, "timeout", "");
            continue;
        }
        if (rc != 0) {
            errmsg_json(extra, sizeof extra, errname(rc), r.err);
            log_ret(lg, "acq", oid, "error", extra);
            lp_run(&lp, a, NULL, now_ns() + (int64_t)((0.05 + rnd() * 0.05) * 1e9));
            continue;
        }
        int64_t token = ml ? 0 : r.value;
        grants++;
        if (o.reuse_token && first_token) token = first_token;
        else if (!first_token) first_token = token;
        char grant[32];
        snprintf(grant, sizeof grant, "%d.%d", lg->proc, grants);
        if (ml) snprintf(extra, sizeof extra, ",\"token\":null,\"grant\":\"%s\"", grant);
        else snprintf(extra, sizeof extra, ",\"token\":%" PRId64 ",\"grant\":\"%s\"", token, grant);
        log_ret(lg, "acq", oid, "ok", extra);
        for (int64_t w = 0; w < o.writes; w++) {
            lp_run(&lp, a, NULL,
                   now_ns() + (int64_t)((0.2 + 0.8 * rnd()) * (double)o.hold_ms * 1e6));
            /* asked before the loop runs again: also says lost once a full
             * lease passed unconfirmed while this process was stopped */
            int gone = lost.lost || (ml ? hilock_async_multilock_is_lost(a, ml, tid)
                                        : hilock_async_is_lost(a, l, tid));
            if (gone) break;
            if (o.lease_ms && !o.ignore_lease &&
                now_ns() >= acq_inv + (o.lease_ms - o.lease_ms / 5) * 1000000)
                break;
            snprintf(extra, sizeof extra, ",\"token\":%" PRId64 ",\"grant\":\"%s\"", token, grant);
            int wid = log_inv(lg, "write", extra);
            int ok = ml ? 1 : fence_write(&wk.fc, token, grant);
            log_ret(lg, "write", wid, ok == 1 ? "ok" : ok == 0 ? "refused" : "error", "");
        }
        snprintf(extra, sizeof extra, ",\"grant\":\"%s\"", grant);
        int rid = log_inv(lg, "rel", extra);
        r = (result){0};
        rc = ml ? hilock_async_multilock_release(a, ml, tid, on_done, &r)
                : hilock_async_release(a, l, tid, on_done, &r);
        if (rc == 0) {
            lp_run(&lp, a, &r.done, INT64_MAX);
            rc = r.rc;
        } else {
            snprintf(r.err, sizeof r.err, "%s", hilock_async_errmsg(a));
        }
        if (rc == 0) log_ret(lg, "rel", rid, "ok", "");
        else if (rc == HILOCK_ENOTOWNER) log_ret(lg, "rel", rid, "notowner", "");
        else {
            errmsg_json(extra, sizeof extra, errname(rc), r.err);
            log_ret(lg, "rel", rid, "error", extra);
        }
        lp_run(&lp, a, NULL, now_ns() + (int64_t)(rnd() * 0.05 * 1e9));
    }
    hilock_async_free(a);
    worker_close(&wk);
    return 0;
}
