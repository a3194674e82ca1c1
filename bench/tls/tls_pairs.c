/*
 * Uncontended acquire+release pairs per second from one thread, through the
 * library, over a plain and a TLS connection to the same server, in
 * interleaved rounds (machine noise hits both alike).
 *
 *   tls_pairs [-n pairs] [-r rounds] PLAIN_URL TLS_URL
 *
 * Both clients are opened first (the TLS handshake is paid once per pooled
 * connection, not per pair). Prints "name=value" lines: the median over
 * rounds of plain and TLS pairs/s, and the median of the per-round
 * TLS/plain ratios.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "hilock.h"
#include "../c/bench_util.h"

static double pairs(hilock_lock *l, int n)
{
    double t0 = now_s();
    for (int i = 0; i < n; i++) {
        if (hilock_lock_acquire(l, 0, 30000) != HILOCK_OK ||
            hilock_lock_release(l) != HILOCK_OK) {
            fprintf(stderr, "pair failed: %s\n", hilock_lock_errmsg(l));
            exit(1);
        }
    }
    return n / (now_s() - t0);
}

int main(int argc, char **argv)
{
    int n = 500, rounds = 8;
    if (bench_args(argc, argv, &n, &rounds, 2, "tls_pairs [-n pairs] [-r rounds] PLAIN_URL TLS_URL"))
        return 2;
    hilock_client *c[2] = {NULL, NULL};
    hilock_lock *l[2] = {NULL, NULL};
    char err[256];
    for (int k = 0; k < 2; k++) {
        if (hilock_client_open(&c[k], argv[optind + k], NULL, err, sizeof err) != HILOCK_OK) {
            fprintf(stderr, "open %s: %s\n", argv[optind + k], err);
            return 1;
        }
        if (hilock_lock_new(&l[k], c[k], k ? "bench:tls:tls" : "bench:tls:plain") != HILOCK_OK)
            return 1;
        pairs(l[k], n / 4 + 1); /* warm: connection, scripts cached */
    }
    double *p = calloc((size_t)rounds, sizeof *p), *t = calloc((size_t)rounds, sizeof *t);
    double *q = calloc((size_t)rounds, sizeof *q);
    if (!p || !t || !q)
        return 1;
    for (int r = 0; r < rounds; r++) {
        if (r % 2) { /* alternate the order too */
            t[r] = pairs(l[1], n);
            p[r] = pairs(l[0], n);
        } else {
            p[r] = pairs(l[0], n);
            t[r] = pairs(l[1], n);
        }
        q[r] = t[r] / p[r];
    }
    printf("plain_pairs_per_s=%.0f\ntls_pairs_per_s=%.0f\ntls_over_plain=%.3f\n",
           median(p, rounds), median(t, rounds), median(q, rounds));
    for (int k = 0; k < 2; k++) {
        hilock_lock_free(l[k]);
        hilock_client_close(c[k]);
    }
    free(p);
    free(t);
    free(q);
    return 0;
}
