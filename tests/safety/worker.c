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
    if (argc < 8) {
        fprintf(stderr, "usage: worker-c URL LOCK FENCE_PORT PROC_ID SEED SECONDS LOG [K=V...]\n");
        return 2;
    }
    const char *url = argv[1], *lock_name = argv[2];
    int fence_port = atoi(argv[3]);
    wlog lg = {NULL, atoi(argv[4]), 0, PTHREAD_MUTEX_INITIALIZER};
    uint64_t seed = strtoull(argv[5], NULL, 10);
    double secs = atof(argv[6]);
    wopts o;
    if (wopts_parse(&o, argc, argv, 8) != 0) return 2;
    rng_state = seed * 0x9E3779B97F4A7C15ULL + (uint64_t)lg.proc * 0xBF58476D1CE4E5B9ULL + 1;
    lg.f = fopen(argv[7], "a");
    if (!lg.f) return 1;
    fence fc;
    if (fence_open(&fc, fence_port, lock_name) != 0) return 1;

    hilock_options opts;
    hilock_options_init(&opts, HILOCK_OPTIONS_VERSION);
    opts.watchdog_lease_ms = o.watchdog_lease_ms;
    opts.command_timeout_ms = o.command_timeout_ms;
    opts.connect_timeout_ms = o.connect_timeout_ms;
    opts.replica_ack = (int)o.replica_ack;
    log_line(&lg, "{\"ev\":\"start\",\"t\":%" PRId64 ",\"pid\":%d,\"driver\":\"c\"", now_ns(),
             (int)getpid());
    /* URL "u1|u2|...": a Redlock over one lock per server (no fencing token) */
    enum { MAXN = 9 };
    hilock_client *cs[MAXN] = {0};
    hilock_lock *ls[MAXN] = {0};
    hilock_multilock *ml = NULL;
    size_t n = 0;
    char urls[2048];
    snprintf(urls, sizeof urls, "%s", url);
    char err[256];
    int rc = 0;
    for (char *save = NULL, *u = strtok_r(urls, "|", &save); u && n < MAXN;
         u = strtok_r(NULL, "|", &save), n++) {
        /* the open is not what is tested: a fault that hits it (servers and
         * clients start together) is waited out, 30 s at most */
        int64_t open_until = now_ns() + (int64_t)30 * 1000000000;
        while ((rc = hilock_client_open(&cs[n], u, &opts, err, sizeof err)) == HILOCK_ECONN &&
               now_ns() < open_until)
            sleep_ns(100000000);
        if (rc != 0) break;
    }
    if (rc != 0) {
        log_line(&lg, "{\"ev\":\"fatal\",\"t\":%" PRId64 ",\"err\":\"open %s\"", now_ns(),
                 hilock_strerror(rc));
        fclose(lg.f);
        return 1;
    }
    for (size_t i = 0; i < n; i++) {
        if ((n > 1 ? hilock_lock_new(&ls[i], cs[i], lock_name)
                   : hilock_fenced_lock_new(&ls[i], cs[i], lock_name)) != 0)
            return 1;
    }
    hilock_lock *l = ls[0];
    if (n > 1) {
        if (hilock_redlock_new(&ml, ls, n) != 0) return 1;
        hilock_multilock_set_lost_callback(ml, on_lost_ml, &lg);
    } else {
        hilock_lock_set_lost_callback(l, on_lost, &lg);
    }
    uint64_t tid = hilock_thread_id();
    log_line(&lg, "{\"ev\":\"ready\",\"t\":%" PRId64, now_ns());
    int64_t deadline = now_ns() + (int64_t)(secs * 1e9);
    int grants = 0;
    char extra[400];
    while (now_ns() < deadline) {
        snprintf(extra, sizeof extra, ",\"lease_ms\":%" PRId64, o.lease_ms);
        int oid = log_inv(&lg, "acq", extra);
        int64_t acq_inv = now_ns();
        int64_t token = 0;
        rc = ml ? hilock_multilock_acquire(ml, o.wait_ms, o.lease_ms)
                : hilock_lock_acquire_token(&token, l, o.wait_ms, o.lease_ms);
        if (rc == HILOCK_ETIMEDOUT) {
            log_ret(&lg, "acq", oid, "timeout", "");
            continue;
        }
        if (rc != 0) {
            errmsg_json(extra, sizeof extra, errname(rc),
                        ml ? hilock_multilock_errmsg(ml) : hilock_lock_errmsg(l));
            log_ret(&lg, "acq", oid, "error", extra);
            sleep_ns((int64_t)((0.05 + rnd() * 0.05) * 1e9));
            continue;
        }
        grants++;
        static int64_t first_token;
        if (o.reuse_token && first_token) token = first_token;
        else if (!first_token) first_token = token;
        char grant[32];
        snprintf(grant, sizeof grant, "%d.%d", lg.proc, grants);
        if (ml) snprintf(extra, sizeof extra, ",\"token\":null,\"grant\":\"%s\"", grant);
        else snprintf(extra, sizeof extra, ",\"token\":%" PRId64 ",\"grant\":\"%s\"", token, grant);
        log_ret(&lg, "acq", oid, "ok", extra);
        for (int64_t w = 0; w < o.writes; w++) {
            sleep_ns((int64_t)((0.2 + 0.8 * rnd()) * (double)o.hold_ms * 1e6));
            if (!may_write(&o, l, ml, tid, acq_inv)) break;
            snprintf(extra, sizeof extra, ",\"token\":%" PRId64 ",\"grant\":\"%s\"", token, grant);
            int wid = log_inv(&lg, "write", extra);
            /* a Redlock grant has no token: the write is only a claim (for
             * Porcupine), the store is not asked */
            int ok = ml ? 1 : fence_write(&fc, token, grant);
            log_ret(&lg, "write", wid, ok == 1 ? "ok" : ok == 0 ? "refused" : "error", "");
        }
        snprintf(extra, sizeof extra, ",\"grant\":\"%s\"", grant);
        int rid = log_inv(&lg, "rel", extra);
        rc = ml ? hilock_multilock_release(ml) : hilock_lock_release(l);
        if (rc == 0) log_ret(&lg, "rel", rid, "ok", "");
        else if (rc == HILOCK_ENOTOWNER) log_ret(&lg, "rel", rid, "notowner", "");
        else {
            errmsg_json(extra, sizeof extra, errname(rc),
                        ml ? hilock_multilock_errmsg(ml) : hilock_lock_errmsg(l));
            log_ret(&lg, "rel", rid, "error", extra);
        }
        sleep_ns((int64_t)(rnd() * 0.05 * 1e9));
    }
    log_line(&lg, "{\"ev\":\"end\",\"t\":%" PRId64, now_ns());
    hilock_multilock_free(ml);
    for (size_t i = 0; i < n; i++) {
        hilock_lock_free(ls[i]);
        hilock_client_close(cs[i]);
    }
    close(fc.fd);
    fclose(lg.f);
    return 0;
}
