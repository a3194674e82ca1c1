/* One safety client process on the blocking C API (libhilock): the same loop
 * and the same JSON-lines history as worker.py (see README.md here).
 *
 *   worker-c URL LOCK FENCE_PORT PROC_ID SEED SECONDS LOG KEY=VALUE...
 *
 * Times are CLOCK_MONOTONIC in ns, the clock of time.monotonic_ns(). */
#define _POSIX_C_SOURCE 200809L
#include "worker_common.h"

static void on_lost(hilock_lock *l, uint64_t tid, void *payload) {
    wlog *lg = payload;
    int doubt = strstr(hilock_lock_errmsg(l), "doubt") != NULL;
    log_line(lg, "{\"ev\":\"report\",\"op\":\"lost\",\"t\":%" PRId64 ",\"doubt\":%s,\"tid\":%" PRIu64,
             now_ns(), doubt ? "true" : "false", tid);
}

static void on_lost_ml(hilock_multilock *m, uint64_t tid, void *payload) {
    wlog *lg = payload;
    int doubt = strstr(hilock_multilock_errmsg(m), "doubt") != NULL;
    log_line(lg, "{\"ev\":\"report\",\"op\":\"lost\",\"t\":%" PRId64 ",\"doubt\":%s,\"tid\":%" PRIu64,
             now_ns(), doubt ? "true" : "false", tid);
}

static int may_write(const wopts *o, hilock_lock *l, hilock_multilock *m, uint64_t tid,
                     int64_t acq_inv) {
    if (m ? hilock_multilock_is_lost(m) : hilock_lock_is_lost_tid(l, tid)) return 0;
    if (o->lease_ms && !o->ignore_lease)
        return now_ns() < acq_inv + (o->lease_ms - o->lease_ms / 5) * 1000000;
    return 1;
}

int main(int argc, char **argv) {
    worker wk;
    int rc = worker_open(&wk, argc, argv, "worker-c", "c");
    if (rc != 0) return rc;
    wlog *lg = &wk.lg;
    const wopts o = wk.o;
    hilock_lock *l = wk.ls[0];
    hilock_multilock *ml = wk.ml;
    if (ml) hilock_multilock_set_lost_callback(ml, on_lost_ml, lg);
    else hilock_lock_set_lost_callback(l, on_lost, lg);
    uint64_t tid = hilock_thread_id();
    log_line(lg, "{\"ev\":\"ready\",\"t\":%" PRId64, now_ns());
    int64_t deadline = now_ns() + (int64_t)(wk.secs * 1e9);
    int grants = 0;
    char extra[400];
    while (now_ns() < deadline) {
        snprintf(extra, sizeof extra, ",\"lease_ms\":%" PRId64, o.lease_ms);
        int oid = log_inv(lg, "acq", extra);
        int64_t acq_inv = now_ns();
        int64_t token = 0;
        rc = ml ? hilock_multilock_acquire(ml, o.wait_ms, o.lease_ms)
                : hilock_lock_acquire_token(&token, l, o.wait_ms, o.lease_ms);
        if (rc == HILOCK_ETIMEDOUT) {
            log_ret(lg, "acq", oid, "timeout", "");
            continue;
        }
        if (rc != 0) {
            errmsg_json(extra, sizeof extra, errname(rc),
                        ml ? hilock_multilock_errmsg(ml) : hilock_lock_errmsg(l));
            log_ret(lg, "acq", oid, "error", extra);
            sleep_ns((int64_t)((0.05 + rnd() * 0.05) * 1e9));
            continue;
        }
        grants++;
        static int64_t first_token;
        if (o.reuse_token && first_token) token = first_token;
        else if (!first_token) first_token = token;
        char grant[32];
        snprintf(grant, sizeof grant, "%d.%d", lg->proc, grants);
        if (ml) snprintf(extra, sizeof extra, ",\"token\":null,\"grant\":\"%s\"", grant);
        else snprintf(extra, sizeof extra, ",\"token\":%" PRId64 ",\"grant\":\"%s\"", token, grant);
        log_ret(lg, "acq", oid, "ok", extra);
        for (int64_t w = 0; w < o.writes; w++) {
            sleep_ns((int64_t)((0.2 + 0.8 * rnd()) * (double)o.hold_ms * 1e6));
            if (!may_write(&o, l, ml, tid, acq_inv)) break;
            snprintf(extra, sizeof extra, ",\"token\":%" PRId64 ",\"grant\":\"%s\"", token, grant);
            int wid = log_inv(lg, "write", extra);
            /* a Redlock grant has no token: the write is only a claim (for
             * Porcupine), the store is not asked */
            int ok = ml ? 1 : fence_write(&wk.fc, token, grant);
            log_ret(lg, "write", wid, ok == 1 ? "ok" : ok == 0 ? "refused" : "error", "");
        }
        snprintf(extra, sizeof extra, ",\"grant\":\"%s\"", grant);
        int rid = log_inv(lg, "rel", extra);
        rc = ml ? hilock_multilock_release(ml) : hilock_lock_release(l);
        if (rc == 0) log_ret(lg, "rel", rid, "ok", "");
        else if (rc == HILOCK_ENOTOWNER) log_ret(lg, "rel", rid, "notowner", "");
        else {
            errmsg_json(extra, sizeof extra, errname(rc),
                        ml ? hilock_multilock_errmsg(ml) : hilock_lock_errmsg(l));
            log_ret(lg, "rel", rid, "error", extra);
        }
        sleep_ns((int64_t)(rnd() * 0.05 * 1e9));
    }
    worker_close(&wk);
    return 0;
}
